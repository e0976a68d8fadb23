package htsim

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/cm"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ringScenario is the lab's examples/allreduce-ring.yaml with UET: a
// ring all-reduce over 8 hosts, 128 KiB a flow, on 2 leaves and 2
// spines, hosts at 50 Mbit/s and spines at 100, MTU 9000, the lab's
// default port (limit 2 MB, WRED from 50 kB, slope-matched to htsim's).
func ringScenario(t *testing.T) MatrixScenario {
	t.Helper()
	m, err := cm.Generate(cm.Gen{Kind: "allreduce-ring", Nodes: 8, Size: 128 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return MatrixScenario{
		Matrix:    m,
		Fabric:    LeafSpine{Hosts: 8, Leaves: 2, Spines: 2, HostRate: 50 * units.Mbit, SpineRate: 100 * units.Mbit},
		MTUBytes:  9000,
		PortQueue: PortQueue{LimitBytes: 2 * units.MiB, MinThBytes: 50 * units.KiB, MaxThBytes: 1000 * units.KiB},
		CC:        pds.CCNSCC,
		Seed:      1,
	}
}

func TestMatrixPlanOfTheRing(t *testing.T) {
	p, err := NewMatrixPlan(ringScenario(t))
	if err != nil {
		t.Fatal(err)
	}
	// 50 Mbit/s × 1000 = 50 Gbit/s, whole and ≥ 10; 100 Mbit/s spines are
	// bundles of 2; the delay 0 is htsim's least, 1 ns.
	if p.Scale != 1000 || p.LinkGbps != 50 || p.Bundle != 2 || p.LatencyNs != 1 {
		t.Errorf("scale %g, %d Gbit/s, bundle %d, %d ns; want 1000, 50, 2, 1", p.Scale, p.LinkGbps, p.Bundle, p.LatencyNs)
	}
	// 2 MiB / 9014 = 232 packets; 50 KiB → 6, 1000 KiB → 114.
	if p.QueuePackets != 232 || p.MinThPackets != 6 || p.MaxThPackets != 114 || p.SACKThresholdBytes != 9014 || p.Paths != 1 {
		t.Errorf("q %d, ecn %d %d, sack %d, paths %d; want 232, 6 114, 9014, 1", p.QueuePackets, p.MinThPackets, p.MaxThPackets, p.SACKThresholdBytes, p.Paths)
	}
	wantTopo := `Nodes 8
Tiers 2
Podsize 8

Tier 0
Downlink_speed_Gbps 50
Radix_Down 4
Radix_Up 4
Oversubscribed 1
Downlink_Latency_ns 1
Switch_Latency_ns 0

Tier 1
Downlink_speed_Gbps 50
Radix_Down 4
Bundle 2
Downlink_Latency_ns 1
Switch_Latency_ns 0
`
	if got := p.Topology(); got != wantTopo {
		t.Errorf("topology:\n%s\nwant\n%s", got, wantTopo)
	}
	cmText := p.ConnectionMatrix()
	if !strings.HasPrefix(cmText, "Nodes 8\nConnections 120\nTriggers 112\n0->1 id 1 start 0 size 131072 send_done_trigger 1\n1->2 id 2 trigger 1 size 131072 send_done_trigger 2\n") {
		t.Errorf("matrix starts\n%s", cmText[:200])
	}
	back, err := cm.Parse(strings.NewReader(cmText))
	if err != nil || len(back.Conns) != 120 {
		t.Fatalf("the matrix written does not read back: %v", err)
	}
	args := strings.Join(p.MatrixArgs("t", "c", 5_000_000), " ")
	want := "-tm c -topo t -sender_cc_only -linkspeed 50000 -mtu 9014 -q 232 -ecn 6 114 -disable_trim -sack_threshold 9014 -paths 1 -end 5 -seed 1"
	if args != want {
		t.Errorf("args\n%s\nwant\n%s", args, want)
	}
	// The lab's loss: sleek is htsim's -sleek.
	s := ringScenario(t)
	s.SLEEK = true
	ps, err := NewMatrixPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(ps.MatrixArgs("t", "c", 5_000_000), " "); !strings.Contains(args, " -sleek -paths ") {
		t.Errorf("sleek: args %s", args)
	}
	// The flows' target_qdelay, 4 ms of the lab's time, is 4 µs of
	// htsim's at scale 1000.
	s = ringScenario(t)
	s.TargetQDelay = 4 * time.Millisecond
	if ps, err = NewMatrixPlan(s); err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(ps.MatrixArgs("t", "c", 5_000_000), " "); !strings.Contains(args, " -target_q_delay 4.0000005 -paths ") {
		t.Errorf("target_qdelay: args %s", args)
	}
	// 131 072 B at 160 ps a byte, then the last packet (9014 B) stored
	// and forwarded at each further hop and a 64-B ACK at each hop, 1 ns
	// a link both ways; × 1000.
	for _, tc := range []struct {
		conn int
		want time.Duration
	}{
		{0, time.Duration((131072+9014+2*64)*160+4*1000) * 1000 / 1000},   // 0->1: one leaf, 2 links
		{3, time.Duration((131072+3*9014+4*64)*160+8*1000) * 1000 / 1000}, // 3->4: across, 4 links
	} {
		if got := p.IdealFCT(tc.conn); got != tc.want {
			t.Errorf("IdealFCT(%d) = %v, want %v", tc.conn, got, tc.want)
		}
	}
}

func TestMatrixScenarioRefusesWhatHtsimCannotBuild(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*MatrixScenario)
		field string
	}{
		{"spine rate not a multiple", func(s *MatrixScenario) { s.Fabric.SpineRate = 75 * units.Mbit }, "fabric.spine_rate"},
		{"uplinks not dividing a leaf", func(s *MatrixScenario) { s.Fabric.Spines = 3 }, "fabric.spines"},
		{"one leaf", func(s *MatrixScenario) { s.Fabric.Leaves, s.Fabric.Spines = 1, 0 }, "fabric.leaves"},
		{"dcqcn", func(s *MatrixScenario) { s.CC = pds.CCNone }, "cc"},
		{"sleek without NSCC", func(s *MatrixScenario) { s.CC, s.SLEEK = pds.CCRCCC, true }, "sleek"},
		{"target_qdelay without NSCC", func(s *MatrixScenario) { s.CC, s.TargetQDelay = pds.CCRCCC, time.Millisecond }, "target_qdelay"},
		{"thresholds above the limit", func(s *MatrixScenario) { s.MaxThBytes = 3 * units.MiB }, "max_th"},
		{"more nodes than hosts", func(s *MatrixScenario) { s.Matrix.Nodes = 9 }, "matrix"},
	} {
		s := ringScenario(t)
		tc.edit(&s)
		_, err := NewMatrixPlan(s)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v; want a *FieldError on %s", tc.name, err, tc.field)
		}
	}
}

const matrixOutput = `Parsed args
network_max_unloaded_rtt 5.81792
Flow Uec_0_1 flowId 1 uecSrc 0 starting at 0
Flow Uec_1_2 flowId 2 uecSrc 1 starting at 0
Flow Uec_0_1 flowId 1 uecSrc 0 finished at 25.1 total messages 1 total packets 15
..Flow Uec_1_2 flowId 2 uecSrc 1 finished at 30.25 total messages 1
New: 30 Rtx: 0 RTS: 0 Bounced: 0 ACKs: 30 NACKs: 0 Pulls: 0 sleek_pkts: 0
`

func twoFlows() MatrixScenario {
	return MatrixScenario{
		Matrix:    &cm.Matrix{Nodes: 4, Conns: []cm.Conn{{Src: 0, Dst: 1, Size: 1000}, {Src: 1, Dst: 2, Size: 1000}}},
		Fabric:    LeafSpine{Hosts: 4, Leaves: 2, Spines: 2, HostRate: 10 * units.Gbit, SpineRate: 10 * units.Gbit},
		MTUBytes:  4096,
		PortQueue: PortQueue{LimitBytes: units.MiB, MinThBytes: 20 * units.KiB, MaxThBytes: 80 * units.KiB},
		CC:        pds.CCRCCC,
	}
}

func TestParseMatrixOutput(t *testing.T) {
	p, err := NewMatrixPlan(twoFlows())
	if err != nil {
		t.Fatal(err)
	}
	if p.Scale != 1 {
		t.Fatalf("scale %g, want 1 at 10 Gbit/s", p.Scale)
	}
	r, err := p.parseMatrixOutput([]byte(matrixOutput))
	if err != nil {
		t.Fatal(err)
	}
	if r.Finished() != 2 || r.Flows[0].End != 25100*time.Nanosecond || r.Flows[1].End != 30250*time.Nanosecond ||
		r.UnloadedRTT != 5817920*time.Nanosecond/1000 || r.Counters.ACKs != 30 {
		t.Errorf("result %+v", r)
	}
	for _, bad := range []string{
		"Flow Uec_0_1 flowId 3 uecSrc 0 starting at 0\n",    // no such flow
		"Flow Uec_0_1 flowId 1 uecSrc 0 finished at 25.1\n", // never started
		"Flow Uec_0_1 flowId 1 uecSrc 0 starting at zero\n", // not a time
		"New: 30 Rtx: 0\n", // counters cut
	} {
		if _, err := p.parseMatrixOutput([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRunMatrixWithoutHtsimWritesTheFiles(t *testing.T) {
	work := t.TempDir()
	r, err := Runner{Dir: t.TempDir(), WorkDir: work}.RunMatrix(context.Background(), twoFlows())
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("RunMatrix without htsim = %v", err)
	}
	for _, f := range []string{MatrixTopoFile, MatrixCMFile, MatrixScriptFile} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.HasPrefix(r.Command, "htsim_uec -tm htsim.cm -topo htsim.topo -receiver_cc_only ") {
		t.Errorf("command %q", r.Command)
	}
}

func TestRunMatrixWithAFakeBuild(t *testing.T) {
	dir, work := t.TempDir(), t.TempDir()
	writeExec(t, filepath.Join(dir, "htsim_uec"), "#!/bin/sh\necho \"$@\" >> args.txt\ncat <<'EOF'\n"+matrixOutput+"EOF\n")
	r, err := Runner{Dir: dir, WorkDir: work}.RunMatrix(context.Background(), twoFlows())
	if err != nil {
		t.Fatal(err)
	}
	if r.Finished() != 2 {
		t.Errorf("%d finished", r.Finished())
	}
	args, _ := os.ReadFile(filepath.Join(work, "args.txt"))
	if want := strings.Join(r.Plan.MatrixArgs(MatrixTopoFile, MatrixCMFile, r.Plan.EndPs), " ") + "\n"; string(args) != want {
		t.Errorf("ran with %q, want %q", args, want)
	}
}

// TestHtsimMatrix runs the ring all-reduce in the real htsim of $HTSIM:
// every flow finishes, and the collective takes what htsim took for it
// when this was written (deterministic for a seed).
func TestHtsimMatrix(t *testing.T) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		t.Skipf("needs htsim: set $%s to its build directory (docs/htsim.md)", EnvDir)
	}
	for _, cc := range []pds.CCMode{pds.CCNSCC, pds.CCRCCC} {
		s := ringScenario(t)
		s.CC = cc
		r, err := Runner{Dir: dir}.RunMatrix(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		var last time.Duration
		for _, f := range r.Flows {
			last = max(last, f.End)
		}
		t.Logf("%s: %d of %d finished, last at %v (lab time), unloaded RTT %v, in %v", cc, r.Finished(), len(r.Flows), last, r.UnloadedRTT, r.Wall)
		if r.Finished() != 120 || last < 314*time.Millisecond || last > 500*time.Millisecond {
			t.Errorf("%s: want 120 flows done between the ideal 314.6 ms and 500 ms", cc)
		}
	}
	// The fat tree's topology file is one htsim builds and runs, full
	// bisection and oversubscribed 2:1 at its ToRs.
	for _, over := range []int{1, 2} {
		r, err := Runner{Dir: dir}.RunMatrix(context.Background(), fatTreeScenario(t, over))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("fat tree k=4 %d:1: %d of %d finished, unloaded RTT %v", over, r.Finished(), len(r.Flows), r.UnloadedRTT)
		if r.Finished() != 16 {
			t.Errorf("fat tree %d:1: %d of 16 flows finished", over, r.Finished())
		}
	}
}

// fatTreeScenario is a permutation of 1 MiB flows (seed 1) on a fat tree
// of radix 4 with 4 pods at 50 Mbit/s, oversubscribed over:1 at its
// ToRs, MTU 9000, a 2-MB queue marking from 50 kB.
func fatTreeScenario(t *testing.T, over int) MatrixScenario {
	t.Helper()
	m, err := cm.Generate(cm.Gen{Kind: "permutation", Nodes: 16, Size: 1 << 20, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return MatrixScenario{Matrix: m, FatTree: &FatTreeFabric{K: 4, Pods: 4, Rate: 50 * units.Mbit, Oversubscription: over},
		MTUBytes: 9000, PortQueue: PortQueue{LimitBytes: 2 * units.MiB, MinThBytes: 50 * units.KiB, MaxThBytes: 2 * units.MiB}, CC: pds.CCNSCC, Seed: 1}
}

// TestMatrixPlanOfAFatTree: a fat tree of radix 4 with 4 pods is htsim's
// three tiers of 16 hosts (Podsize 4, 2 down and 2 up at ToR and
// aggregation, 4 pods under each core), and a flow's ideal counts 2, 4
// or 6 links as it stays under a ToR, in a pod, or crosses pods.
func TestMatrixPlanOfAFatTree(t *testing.T) {
	s := fatTreeScenario(t, 1)
	p, err := NewMatrixPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `Nodes 16
Tiers 3
Podsize 4

Tier 0
Downlink_speed_Gbps 50
Radix_Down 2
Radix_Up 2
Oversubscribed 1
Downlink_Latency_ns 1
Switch_Latency_ns 0

Tier 1
Downlink_speed_Gbps 50
Radix_Down 2
Radix_Up 2
Oversubscribed 1
Downlink_Latency_ns 1
Switch_Latency_ns 0

Tier 2
Downlink_speed_Gbps 50
Radix_Down 4
Downlink_Latency_ns 1
Switch_Latency_ns 0
`
	if got := p.Topology(); got != want {
		t.Errorf("topology:\n%s\nwant\n%s", got, want)
	}
	// htsim printed "Setting min RTO to 2022.6" (µs) for this queue: 232
	// packets of 9014 bytes.
	if got := p.MinRTO(); p.QueuePackets != 232 || got < 2022598*time.Microsecond || got > 2022599*time.Microsecond {
		t.Errorf("min RTO %v with %d packets of queue, want htsim's 2022.6 µs × 1000", got, p.QueuePackets)
	}
	for _, c := range []struct{ a, b, hops int }{{0, 1, 2}, {0, 2, 4}, {0, 3, 4}, {0, 4, 6}, {15, 12, 4}, {13, 12, 2}} {
		if got := p.hops(c.a, c.b); got != c.hops {
			t.Errorf("hops(%d, %d) = %d, want %d", c.a, c.b, got, c.hops)
		}
	}
	if !strings.HasPrefix(p.ConnectionMatrix(), "Nodes 16\nConnections 16\n") {
		t.Errorf("matrix %q", p.ConnectionMatrix()[:40])
	}
	// Oversubscribed 2:1 at the ToRs: one uplink per ToR, htsim derives
	// one aggregation switch per pod and two cores.
	s2 := fatTreeScenario(t, 2)
	p2, err := NewMatrixPlan(s2)
	if err != nil {
		t.Fatal(err)
	}
	want2 := strings.Replace(want, "Radix_Up 2\nOversubscribed 1\n", "Radix_Up 1\nOversubscribed 2\n", 1)
	if p.Oversubscription() != 1 || p2.Oversubscription() != 2 {
		t.Errorf("oversubscription %d and %d, want 1 and 2", p.Oversubscription(), p2.Oversubscription())
	}
	if got := p2.Topology(); got != want2 {
		t.Errorf("topology 2:1:\n%s\nwant\n%s", got, want2)
	}
	for _, bad := range []int{3, 4, -1} {
		s2.FatTree.Oversubscription = bad
		var fe *FieldError
		if _, err := NewMatrixPlan(s2); !errors.As(err, &fe) || fe.Field != "fat_tree.oversubscription" {
			t.Errorf("oversubscription %d: %v, want fat_tree.oversubscription's error", bad, err)
		}
	}
	// Core links at twice the rate: an aggregation switch has one
	// (radix up 1), the tier's capacity the same; htsim derives 2 cores.
	s3 := fatTreeScenario(t, 1)
	s3.FatTree.CoreRate = 100 * units.Mbit
	p3, err := NewMatrixPlan(s3)
	if err != nil {
		t.Fatal(err)
	}
	want3 := strings.Replace(want, "Tier 1\nDownlink_speed_Gbps 50\nRadix_Down 2\nRadix_Up 2\n", "Tier 1\nDownlink_speed_Gbps 50\nRadix_Down 2\nRadix_Up 1\n", 1)
	want3 = strings.Replace(want3, "Tier 2\nDownlink_speed_Gbps 50\n", "Tier 2\nDownlink_speed_Gbps 100\n", 1)
	if got := p3.Topology(); got != want3 {
		t.Errorf("topology, core links at 100 Mbit/s:\n%s\nwant\n%s", got, want3)
	}
	for _, bad := range []units.Rate{75 * units.Mbit, 25 * units.Mbit, 150 * units.Mbit, 200 * units.Mbit} {
		s3.FatTree.CoreRate = bad
		var fe *FieldError
		if _, err := NewMatrixPlan(s3); !errors.As(err, &fe) || fe.Field != "fat_tree.core_rate" {
			t.Errorf("core rate %s: %v, want fat_tree.core_rate's error", bad, err)
		}
	}
	s.Fabric = LeafSpine{Hosts: 16, Leaves: 4, Spines: 4, HostRate: 50 * units.Mbit, SpineRate: 50 * units.Mbit}
	if _, err := NewMatrixPlan(s); err == nil {
		t.Error("a leaf-spine and a fat tree at once: no error")
	}
}

// TestMatrixStartsInHtsimTime: a connection that starts 50 ms into the
// lab's fabric starts 50 µs into htsim's, which runs it 1000 times
// faster (a .cm of the lab's own with a start ran it 1000 times too late,
// past htsim's end), rounded to htsim's whole microsecond; the run's end
// leaves room after the last start.
func TestMatrixStartsInHtsimTime(t *testing.T) {
	s := ringScenario(t)
	s.Matrix = &cm.Matrix{Nodes: 8, Conns: []cm.Conn{
		{Src: 0, Dst: 1, Size: 131072},
		{Src: 2, Dst: 5, Size: 131072, Start: 50 * time.Millisecond},
		{Src: 3, Dst: 6, Size: 131072, Start: 70400 * time.Microsecond},
	}}
	p, err := NewMatrixPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	want := "Nodes 8\nConnections 3\n0->1 id 1 start 0 size 131072\n2->5 id 2 start 50 size 131072\n3->6 id 3 start 70 size 131072\n"
	if got := p.ConnectionMatrix(); got != want {
		t.Errorf("matrix\n%s\nwant\n%s", got, want)
	}
	if p.EndPs < 70e6 {
		t.Errorf("htsim ends at %d ps, before the last start (70 µs)", p.EndPs)
	}
}
