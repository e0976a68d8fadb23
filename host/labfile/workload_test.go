//go:build linux

package labfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// star is four hosts on one switch, with a workload appended.
const star = `name: w
nodes:
  - {name: h0, kind: host}
  - {name: h1, kind: host}
  - {name: h2, kind: host}
  - {name: h3, kind: host}
  - {name: sw, kind: switch}
links:
  - {a: h0, b: sw, rate: 100mbit}
  - {a: h1, b: sw, rate: 100mbit}
  - {a: h2, b: sw, rate: 100mbit}
  - {a: h3, b: sw, rate: 100mbit}
`

// TestWorkloadCM: a .cm file next to the lab file becomes a flow per
// connection, its nodes the hosts in file order, its starts and sizes
// kept, the flow template applied.
func TestWorkloadCM(t *testing.T) {
	dir := t.TempDir()
	cmText := `Nodes 4
Connections 3
Triggers 1
0->3 id 1 start 20 size 100000 send_done_trigger 1
1->3 id 2 start 0 size 200000
3->2 id 3 trigger 1 size 300000
trigger id 1 oneshot
`
	if err := os.WriteFile(filepath.Join(dir, "m.cm"), []byte(cmText), 0o644); err != nil {
		t.Fatal(err)
	}
	lab := filepath.Join(dir, "lab.yaml")
	text := star + "flows:\n  - {name: bg, from: h1, to: h2, duration: 1s}\nworkload: {cm: m.cm, flow: {transport: rocev2, line_rate: 50mbit, verify: true}}\n"
	if err := os.WriteFile(lab, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Load(lab)
	if err != nil {
		t.Fatal(err)
	}
	if m := f.Matrix(); m == nil || len(m.Conns) != 3 {
		t.Fatalf("matrix %+v", m)
	}
	if len(f.Flows) != 4 || f.MatrixFlow(0) != 1 {
		t.Fatalf("%d flows, matrix from %d: want bg then c1..c3", len(f.Flows), f.MatrixFlow(0))
	}
	for i, want := range []struct {
		name, from, to string
		size           uint64
		start          time.Duration
	}{{"c1", "h0", "h3", 100000, 20 * time.Microsecond}, {"c2", "h1", "h3", 200000, 0}, {"c3", "h3", "h2", 300000, 0}} {
		fl := f.Flows[f.MatrixFlow(i)]
		if fl.Name != want.name || fl.From != want.from || fl.To != want.to || uint64(fl.Size) != want.size || fl.Start != want.start ||
			fl.Group != MatrixGroup || !fl.Verify || fl.LineRate != 50e6 || fl.conn != i+1 {
			t.Errorf("connection %d: %+v", i+1, fl)
		}
	}
}

func TestWorkloadGenerate(t *testing.T) {
	f, err := Parse("w.yaml", []byte(star+"workload: {kind: allreduce-ring, size: 64kb, hosts: [h3, h2, h1, h0], flow: {group: ring}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := f.Matrix()
	if m == nil || len(m.Conns) != 4*7 || len(m.Triggers) != 4*6 {
		t.Fatalf("ring over 4: %d connections, %d triggers; want 28, 24", len(m.Conns), len(m.Triggers))
	}
	// Matrix node 0 is h3 (hosts' order).
	c := m.Conns[0]
	if fl := f.Flows[0]; fl.From != []string{"h3", "h2", "h1", "h0"}[c.Src] || fl.Group != "ring" || fl.Size != 64<<10 {
		t.Errorf("first flow %+v for connection %+v", fl, c)
	}
}

func TestWorkloadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.cm")
	if err := os.WriteFile(bad, []byte("Nodes 4\nConnections 1\n0->1 start 0 size 10 colour red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	six := filepath.Join(dir, "six.cm")
	if err := os.WriteFile(six, []byte("Nodes 6\nConnections 1\n0->5 start 0 size 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ workload, want string }{
		{"{}", "workload: want one of cm (an htsim .cm file) or kind"},
		{"{cm: " + bad + ", kind: incast}", "want one of cm"},
		{"{cm: " + bad + "}", `workload.cm: "` + bad + `": cm: line 3: "colour": unknown word`},
		{"{cm: " + six + "}", "workload.hosts: \"4\": the matrix has 6 nodes; name as many hosts"},
		{"{cm: " + six + ", size: 1mb}", "group, fanout, size, seed and spread are the generators'"},
		{"{kind: ring, size: 1kb}", `workload.kind: "ring"`},
		{"{kind: allreduce-ring, size: 1kb, hosts: [h0, sw]}", `workload.hosts[1]: "sw": is a switch`},
		{"{kind: allreduce-ring, size: 1kb, hosts: [h0, h0]}", `workload.hosts[1]: "h0": given twice`},
		{"{kind: allreduce-ring, size: 1kb, hosts: [h0, hx]}", `workload.hosts[1]: "hx": no such node`},
		{"{kind: allreduce-ring, size: 1kb, flow: {from: h0}}", "workload.flow.from: the matrix gives every connection's ends"},
		{"{kind: allreduce-ring, size: 1kb, flow: {size: 1mb}}", "workload.flow.size"},
	} {
		_, err := Parse(filepath.Join(dir, "w.yaml"), []byte(star+"workload: "+tc.workload+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.workload, err, tc.want)
		}
	}
}

// TestFabric: a leaf-spine's nodes, links and ports, the spine rate
// from the oversubscription, and its errors.
func TestFabric(t *testing.T) {
	f, err := Parse("f.yaml", []byte(`name: f
fabric: {kind: leaf-spine, hosts: 8, leaves: 2, spines: 2, host_rate: 100mbit, oversubscription: 2, delay: 10us,
  up: {tc: ["3:wred:min=20kb,max=80kb,p=0.2"]}}
flows:
  - {from: h0, to: h7, size: 1mb}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Nodes) != 12 || len(f.Links) != 12 {
		t.Fatalf("%d nodes, %d links: want 8 hosts + 4 switches, 8 + 4 links", len(f.Nodes), len(f.Links))
	}
	// 4 hosts × 100 Mbit/s over 2 spines at oversubscription 2: 100 Mbit/s each.
	if l := f.Links[8]; l.A != "leaf1" || l.B != "sp1" || l.Rate != 100e6 || l.Delay != 10*time.Microsecond {
		t.Errorf("first uplink %+v", l)
	}
	if l := f.Links[4]; l.A != "h4" || l.B != "leaf2" || l.Rate != 100e6 {
		t.Errorf("h4's link %+v", l)
	}
	if len(f.Ports) != 4 || f.Ports[0].Port != "leaf1:sp1" || f.Ports[3].Port != "leaf2:sp2" {
		t.Errorf("ports %+v: want the 4 leaf uplinks", f.Ports)
	}
	for _, tc := range []struct{ fabric, want string }{
		{"{kind: fat-tree, k: 4, leaves: 2, spines: 2, host_rate: 1gbit}", `fabric.leaves: "2": leaves and spines are a leaf-spine's`},
		{"{kind: fat-tree, k: 5, host_rate: 1gbit}", `fabric.k: "5": want an even radix, 4..8`},
		{"{kind: fat-tree, k: 4, pods: 5, host_rate: 1gbit}", `fabric.pods: "5": want 1..k (4)`},
		{"{kind: fat-tree, k: 4, hosts: 8, host_rate: 1gbit}", `fabric.hosts: "8": a fat tree of radix 4 with 4 pods has 16 hosts`},
		{"{kind: fat-tree, k: 8, host_rate: 1gbit}", `fabric.pods: "8": at most 64 hosts`},
		{"{kind: fat-tree, k: 4, host_rate: 1gbit, spine_rate: 2gbit}", `ToR uplinks run at host_rate`},
		{"{kind: fat-tree, k: 4, host_rate: 1gbit, oversubscription: 3}", `fabric.oversubscription: "3": a fat tree's is a whole number dividing k/2 (2)`},
		{"{kind: fat-tree, k: 8, pods: 2, host_rate: 1gbit, oversubscription: 1.5}", `fabric.oversubscription: "1.5": a fat tree's is a whole number dividing k/2 (4)`},
		{"{kind: fat-tree, k: 8, pods: 3, host_rate: 1gbit, oversubscription: 2}", `fabric.pods: "3": at most 24 switches: 12 ToRs, 6 aggregation and 8 core switches`},
		{"{kind: leaf-spine, k: 4, hosts: 8, leaves: 2, spines: 2, host_rate: 1gbit}", `fabric.k: "4": k and pods are a fat tree's`},
		{"{kind: torus, hosts: 8, host_rate: 1gbit}", `fabric.kind: "torus": want leaf-spine or fat-tree`},
		{"{kind: leaf-spine, hosts: 8, leaves: 3, spines: 2, host_rate: 1gbit}", `fabric.leaves: "3": must divide hosts 8`},
		{"{kind: leaf-spine, hosts: 1, leaves: 1, host_rate: 1gbit}", `fabric.hosts: "1": want 2..64`},
		{"{kind: leaf-spine, hosts: 8, leaves: 2, spines: 0, host_rate: 1gbit}", `fabric.spines: "0"`},
		{"{kind: leaf-spine, hosts: 8, leaves: 2, spines: 2}", "fabric.host_rate"},
		{"{kind: leaf-spine, hosts: 8, leaves: 2, spines: 2, host_rate: 1gbit, spine_rate: 1gbit, oversubscription: 2}", "give spine_rate or oversubscription, not both"},
	} {
		_, err := Parse("f.yaml", []byte("name: f\nfabric: "+tc.fabric+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.fabric, err, tc.want)
		}
	}
}

// TestFatTree: a fat tree of radix 4 with 4 pods: 16 hosts, 8 ToRs, 8
// aggregation and 4 core switches, every link at the host rate, each
// core under one aggregation switch of every pod, the tiers' ports, and
// a flow across pods crossing ToR, aggregation and core in ECMP groups.
func TestFatTree(t *testing.T) {
	f, err := Parse("f.yaml", []byte(`name: f
fabric: {kind: fat-tree, k: 4, host_rate: 50mbit, down: {tc: ["3:step:k=20kb"]}, up: {tc: ["3:step:k=30kb"]}, spine: {tc: ["3:step:k=40kb"]}}
flows:
  - {from: h0, to: h15, size: 1mb}
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Fabric.Hosts != 16 || len(f.Nodes) != 36 || len(f.Links) != 16+16+16 {
		t.Fatalf("%d hosts, %d nodes, %d links: want 16, 16 + 20 switches, 48 links", f.Fabric.Hosts, len(f.Nodes), len(f.Links))
	}
	for i, want := range map[int]string{0: "h0-tor1", 3: "h3-tor2", 16: "tor1-agg1", 17: "tor1-agg2", 19: "tor2-agg2", 32: "agg1-core1", 33: "agg3-core1", 36: "agg1-core2", 40: "agg2-core3", 47: "agg8-core4"} {
		if l := f.Links[i]; l.A+"-"+l.B != want || l.Rate != 50e6 {
			t.Errorf("link %d: %s-%s at %v, want %s at 50mbit", i, l.A, l.B, l.Rate, want)
		}
	}
	// 16 host ports, then each ToR-agg and agg-core link's two ports.
	if len(f.Ports) != 16+2*32 || f.Ports[0].Port != "tor1:h0" || f.Ports[16].Port != "tor1:agg1" || f.Ports[17].Port != "agg1:tor1" {
		t.Errorf("%d ports, first %s %s %s", len(f.Ports), f.Ports[0].Port, f.Ports[16].Port, f.Ports[17].Port)
	}
	want := "tor1:agg1 tor1:agg2 agg1:core1 agg1:core2 agg2:core3 agg2:core4 core1:agg7 core2:agg7 core3:agg8 core4:agg8 agg7:tor8 agg8:tor8 tor8:h15"
	if got := firstFlowPorts(f); got != want {
		t.Errorf("h0 to h15 crosses\n%s\nwant\n%s", got, want)
	}

	// Oversubscribed 2:1 at the ToRs: one aggregation switch per pod,
	// two cores; a ToR's one uplink, the aggregation switch's two.
	f, err = Parse("f.yaml", []byte(`name: f
fabric: {kind: fat-tree, k: 4, host_rate: 50mbit, oversubscription: 2}
flows:
  - {from: h0, to: h15, size: 1mb}
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Fabric.Hosts != 16 || len(f.Nodes) != 16+8+4+2 || len(f.Links) != 16+8+8 {
		t.Fatalf("%d hosts, %d nodes, %d links: want 16, 16 + 14 switches, 32 links", f.Fabric.Hosts, len(f.Nodes), len(f.Links))
	}
	for i, want := range map[int]string{16: "tor1-agg1", 17: "tor2-agg1", 18: "tor3-agg2", 23: "tor8-agg4", 24: "agg1-core1", 27: "agg4-core1", 28: "agg1-core2", 31: "agg4-core2"} {
		if l := f.Links[i]; l.A+"-"+l.B != want {
			t.Errorf("link %d: %s-%s, want %s", i, l.A, l.B, want)
		}
	}
	want = "tor1:agg1 agg1:core1 agg1:core2 core1:agg4 core2:agg4 agg4:tor8 tor8:h15"
	if got := firstFlowPorts(f); got != want {
		t.Errorf("2:1: h0 to h15 crosses\n%s\nwant\n%s", got, want)
	}
	var spread []string
	for _, sw := range f.Fabric.fatTree().Uplinks() {
		spread = append(spread, sw.Name+">"+strings.Join(sw.Up, ","))
	}
	if got := strings.Join(spread, " "); !strings.HasSuffix(got, "tor8>agg4 agg1>core1,core2 agg2>core1,core2 agg3>core1,core2 agg4>core1,core2") {
		t.Errorf("2:1 uplinks %s", got)
	}

	// Core links at twice the hosts' rate: an aggregation switch has one,
	// the tree two cores, each linked to one aggregation switch of every
	// pod at 100 Mbit/s.
	f, err = Parse("f.yaml", []byte(`name: f
fabric: {kind: fat-tree, k: 4, host_rate: 50mbit, core_rate: 100mbit}
flows:
  - {from: h0, to: h15, size: 1mb}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Nodes) != 16+8+8+2 || len(f.Links) != 16+16+8 {
		t.Fatalf("%d nodes, %d links: want 16 + 18 switches, 40 links", len(f.Nodes), len(f.Links))
	}
	for i, want := range map[int]string{16: "tor1-agg1 50mbit", 32: "agg1-core1 100mbit", 33: "agg3-core1 100mbit", 36: "agg2-core2 100mbit", 39: "agg8-core2 100mbit"} {
		if l := f.Links[i]; l.A+"-"+l.B+" "+l.Rate.String() != want {
			t.Errorf("link %d: %s-%s %s, want %s", i, l.A, l.B, l.Rate, want)
		}
	}
	want = "tor1:agg1 tor1:agg2 agg1:core1 agg2:core2 core1:agg7 core2:agg8 agg7:tor8 agg8:tor8 tor8:h15"
	if got := firstFlowPorts(f); got != want {
		t.Errorf("core at 2x: h0 to h15 crosses\n%s\nwant\n%s", got, want)
	}
	for _, c := range []struct{ field, want string }{
		{"core_rate: 75mbit", `fabric.core_rate: "75mbit": a whole multiple r of host_rate (50mbit) with r dividing k/2 (2)`},
		{"core_rate: 150mbit", `fabric.core_rate: "150mbit": a whole multiple`},
		{"spine_rate: 100mbit", `fabric.spine_rate: "100mbit": a fat tree's ToR uplinks run at host_rate`},
	} {
		_, err := Parse("f.yaml", []byte("name: f\nfabric: {kind: fat-tree, k: 4, host_rate: 50mbit, "+c.field+"}\nflows:\n  - {from: h0, to: h15, size: 1mb}\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.field, err, c.want)
		}
	}
	if _, err := Parse("f.yaml", []byte("name: f\nfabric: {kind: leaf-spine, hosts: 4, leaves: 2, spines: 2, host_rate: 50mbit, core_rate: 100mbit}\nflows:\n  - {from: h0, to: h3, size: 1mb}\n")); err == nil || !strings.Contains(err.Error(), "fabric.core_rate") {
		t.Errorf("a leaf-spine's core_rate: %v", err)
	}
}

// firstFlowPorts is the ports the file's first flow crosses, in path
// order.
func firstFlowPorts(f *File) string {
	p := f.Plan()
	var names []string
	for _, j := range p.Flows[0].Ports {
		names = append(names, p.Ports[j].Name)
	}
	return strings.Join(names, " ")
}

// TestECMPBranches: a leaf-to-leaf flow's ports, in path order, with the
// spines' alternatives in one ECMP group per tier.
func TestECMPBranches(t *testing.T) {
	f, err := Parse("b.yaml", []byte("name: b\nfabric: {kind: leaf-spine, hosts: 4, leaves: 2, spines: 2, host_rate: 100mbit}\nflows:\n  - {from: h0, to: h3, size: 1mb}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Plan()
	fp := p.Flows[0]
	var names []string
	for _, j := range fp.Ports {
		names = append(names, p.Ports[j].Name)
	}
	want := []string{"leaf1:sp1", "leaf1:sp2", "sp1:leaf2", "sp2:leaf2", "leaf2:h3"}
	if strings.Join(names, " ") != strings.Join(want, " ") || fmt.Sprint(fp.Branches) != "[1 1 2 2 0]" {
		t.Errorf("ports %v branches %v, want %v [1 1 2 2 0]", names, fp.Branches, want)
	}
	if fmt.Sprint(fp.ReplyBranches) != "[1 1 2 2 0]" {
		t.Errorf("reply branches %v", fp.ReplyBranches)
	}
}

// TestUETSenderAddrs: a host that serves UET and sends it gives its
// sender an address of its own on its link, the prefix's last; a second
// sender the one below; the lab's link carries them.
func TestUETSenderAddrs(t *testing.T) {
	f, err := Parse("u.yaml", []byte(star+`flows:
  - {name: a, from: h0, to: h1, transport: uet, size: 1mb}
  - {name: b, from: h1, to: h2, transport: uet, size: 1mb}
  - {name: c, from: h1, to: h3, transport: uet, size: 1mb}
  - {name: d, from: h2, to: h3, transport: uet, size: 1mb}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Plan()
	got := map[string]string{}
	for _, fp := range p.Flows {
		got[fp.Flow.Name] = fp.Client.Bind.String()
	}
	// h0 only sends (its own address); h1 serves a and sends b and c;
	// h2 serves b and sends d.
	want := map[string]string{"a": p.Addrs["h0"].String(), "b": "198.18.1.254", "c": "198.18.1.253", "d": "198.18.2.254"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("senders' addresses %v, want %v", got, want)
	}
	for _, l := range p.Spec.Links {
		if l.A.Node == "h1" && fmt.Sprint(l.A.Extra) != "[198.18.1.254 198.18.1.253]" {
			t.Errorf("h1's link: extra %v", l.A.Extra)
		}
	}
}
