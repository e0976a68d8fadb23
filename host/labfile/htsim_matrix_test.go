//go:build linux

package labfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// uetRing is examples/allreduce-ring.yaml with its flows' transport
// and cc replaced.
func uetRing(t *testing.T, flow string) *File {
	t.Helper()
	data, err := os.ReadFile("examples/allreduce-ring.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const rocev2 = "flow: {transport: rocev2, cc: dcqcn, verify: true}"
	if !strings.Contains(string(data), rocev2) {
		t.Fatalf("allreduce-ring.yaml has no %q", rocev2)
	}
	f, err := Parse("allreduce-ring.yaml", []byte(strings.Replace(string(data), rocev2, flow, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestHtsimMatrixScenario: the ring all-reduce example with UET maps onto
// htsim_uec's leaf-spine at the fabric's written rates (its timescale
// aside), with the port class its flows use (the default port: 2 MiB,
// WRED 50–1000 KiB at max_p 0.1, slope-matched), its matrix's nodes on
// the same hosts, its flows' packet size (UET's 4096 bytes on the 9000-byte
// path), and a note for what does not map.
func TestHtsimMatrixScenario(t *testing.T) {
	for _, cc := range []pds.CCMode{pds.CCNSCC, pds.CCRCCC, pds.CCBoth} {
		f := uetRing(t, "flow: {transport: uet, cc: "+cc.String()+", verify: true}")
		s, notes, err := f.HtsimMatrixScenario("")
		if err != nil {
			t.Fatal(err)
		}
		wantFabric := htsim.LeafSpine{Hosts: 8, Leaves: 2, Spines: 2, HostRate: 50 * units.Mbit, SpineRate: 100 * units.Mbit}
		if s.Fabric != wantFabric || s.MTUBytes != 4096 || s.CC != cc || len(s.Matrix.Conns) != 120 {
			t.Errorf("%s: fabric %+v, mtu %d, cc %s, %d conns", cc, s.Fabric, s.MTUBytes, s.CC, len(s.Matrix.Conns))
		}
		// max_p 0.1: htsim's max at 50 KiB + 950 KiB / 0.1, capped at the
		// limit.
		if s.LimitBytes != 2*units.MiB || s.MinThBytes != 50*units.KiB || s.MaxThBytes != 2*units.MiB || s.TrimBytes != 0 {
			t.Errorf("%s: limit %s, ecn %s–%s, trim %s", cc, s.LimitBytes, s.MinThBytes, s.MaxThBytes, s.TrimBytes)
		}
		for n, h := range s.HostOf {
			if h != n {
				t.Errorf("node %d on host %d", n, h)
			}
		}
		text := strings.Join(notes, "\n")
		if !strings.Contains(text, "max_p 0.1") || !strings.Contains(text, "store-and-forward") ||
			strings.Contains(text, "RCCC") != (cc != pds.CCNSCC) {
			t.Errorf("%s: notes\n%s", cc, text)
		}
		if _, err := htsim.NewMatrixPlan(s); err != nil {
			t.Errorf("%s: %v", cc, err)
		}
	}
}

// TestHtsimMatrixMTU: htsim sends the lab flows' packets, not the path's
// MTU: a flow's mtu is htsim's -mtu (less its 14-byte Ethernet header).
func TestHtsimMatrixMTU(t *testing.T) {
	for _, c := range []struct {
		flow string
		mtu  int
	}{
		{"flow: {transport: uet, cc: rccc, verify: true}", 4096},
		{"flow: {transport: uet, cc: rccc, mtu: 9000, verify: true}", 9000},
		{"flow: {transport: uet, cc: rccc, mtu: 2048, verify: true}", 2048},
	} {
		s, _, err := uetRing(t, c.flow).HtsimMatrixScenario("")
		if err != nil {
			t.Fatal(err)
		}
		p, err := htsim.NewMatrixPlan(s)
		if err != nil {
			t.Fatal(err)
		}
		if s.MTUBytes != c.mtu || p.WireMTUBytes != c.mtu+14 {
			t.Errorf("%s: mtu %d, htsim's -mtu %d; want %d, %d", c.flow, s.MTUBytes, p.WireMTUBytes, c.mtu, c.mtu+14)
		}
	}
}

// TestHtsimMatrixKnobs: the flows' NSCC target_qdelay is htsim's
// -target_q_delay; a knob htsim takes no flag for is named in a note.
func TestHtsimMatrixKnobs(t *testing.T) {
	s, notes, err := uetRing(t, "flow: {transport: uet, cc: nscc, knobs: {target_qdelay: 4ms, gamma: 0.5}, verify: true}").HtsimMatrixScenario("")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(notes, "\n")
	if s.TargetQDelay != 4*time.Millisecond || !strings.Contains(text, "target_qdelay: the flows' 4ms on both sides") || !strings.Contains(text, "gamma=0.5 are the lab's flows' alone") {
		t.Errorf("target_qdelay %v; notes\n%s", s.TargetQDelay, text)
	}
	if s, _, _ = uetRing(t, "flow: {transport: uet, cc: nscc, verify: true}").HtsimMatrixScenario(""); s.TargetQDelay != 0 {
		t.Errorf("no knobs: target_qdelay %v, want htsim's own (0)", s.TargetQDelay)
	}
}

func TestHtsimMatrixScenarioRefuses(t *testing.T) {
	for _, c := range []struct{ flow, says string }{
		{"flow: {transport: rocev2, cc: dcqcn, verify: true}", "htsim_roce (snapshot 40ccb05) cannot run a matrix"},
		{"flow: {transport: uet, cc: none}", "cc none"},
		{"flow: {transport: uet, cc: nscc, streams: 2}", "2 streams"},
	} {
		f := uetRing(t, c.flow)
		_, _, err := f.HtsimMatrixScenario("")
		if err == nil || !strings.Contains(err.Error(), "htsim cannot run this lab: ") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want it to say %q", c.flow, err, c.says)
		}
	}
	// An incast lab has no matrix.
	f, err := Load("examples/uet-incast-deep.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.HtsimMatrixScenario(""); err == nil || !strings.Contains(err.Error(), "no workload matrix") {
		t.Errorf("incast: %v", err)
	}
}

// TestSummarizeMatrix: a comparison sums the lab's completion over ideal
// and htsim's run by run, and their ratio per run; an incomplete run is
// counted, not averaged.
func TestSummarizeMatrix(t *testing.T) {
	run := func(lab, hs float64) *Result {
		return &Result{Matrix: &MatrixResult{All: CollectiveResult{CCTRatio: lab}, Htsim: &HtsimMatrixRun{All: CollectiveResult{CCTRatio: hs}}}}
	}
	ms := summarizeMatrix([]*Result{run(1.10, 1.00), run(1.20, 1.20), run(0, 1.10)})
	if ms == nil || ms.CCTRatio.N != 2 || ms.Incomplete != 1 || ms.HtsimCCTRatio.N != 3 || ms.LabOverHtsim.N != 2 ||
		ms.LabOverHtsim.Min != 1.0 || ms.LabOverHtsim.Max < 1.0999 || ms.LabOverHtsim.Max > 1.1001 {
		t.Errorf("summary %+v", ms)
	}
	var b strings.Builder
	writeMatrixTable(&b, &Comparison{Name: "x", Summary: []VariantSummary{{Name: "nscc", Matrix: ms}}})
	for _, want := range []string{"lab/htsim", "1.000–1.100", "htsim", "1 run(s) whose matrix did not complete"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if summarizeMatrix([]*Result{{}}) != nil {
		t.Error("a file without a matrix has a matrix summary")
	}
}

// TestHtsimExampleFiles: every side-by-side lab file maps onto htsim in
// every variant, with the variant's cc and lb.
func TestHtsimExampleFiles(t *testing.T) {
	files, err := filepath.Glob("examples/" + htsimExamples + "*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("htsim examples: %v %v", files, err)
	}
	for _, path := range files {
		f, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range f.VariantNames() {
			s, notes, err := f.HtsimMatrixScenario(v)
			if err != nil {
				t.Errorf("%s %s: %v", path, v, err)
				continue
			}
			p, err := htsim.NewMatrixPlan(s)
			if err != nil {
				t.Errorf("%s %s: %v", path, v, err)
				continue
			}
			vp, _ := f.variantPlan(v)
			c := vp.Flows[f.MatrixFlow(0)].Client
			if s.CC != c.UETCC || s.LB != c.LB || p.Scale != 1000 {
				t.Errorf("%s %s: cc %v lb %v scale %g; the lab's cc %v lb %v", path, v, s.CC, s.LB, p.Scale, c.UETCC, c.LB)
			}
			if ft := s.FatTree; ft != nil && ft.Oversubscription != int(f.Fabric.Oversubscription) {
				t.Errorf("%s %s: htsim's oversubscription %d, the lab's %g", path, v, ft.Oversubscription, f.Fabric.Oversubscription)
			}
			// Where htsim adds its oversubscribed CC, the notes say so.
			joined := strings.Join(notes, "\n")
			if want := p.Oversubscription() > 1 && s.CC == pds.CCRCCC; strings.Contains(joined, "OversubscribedCC") != want {
				t.Errorf("%s %s: oversubscription %d, cc %v: notes\n%s", path, v, p.Oversubscription(), s.CC, joined)
			}
		}
	}
}

// TestECMPHashSeeds: where the kernel has per-namespace ECMP seeds, every
// node hashes the 5-tuple afresh (policy 3) with a seed of its own, so
// that a fat tree's tiers do not all make one choice.
func TestECMPHashSeeds(t *testing.T) {
	if !hashSeedSysctl() {
		t.Skipf("the kernel has no %s (Linux 6.11): nodes keep policy 1", fibHashSeed)
	}
	f, err := Load("examples/htsim-fattree.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seeds := map[string]string{}
	for _, n := range f.Plan().Spec.Nodes {
		sc := n.Sysctls
		if sc["net.ipv4.fib_multipath_hash_policy"] != "3" || sc["net.ipv4.fib_multipath_hash_fields"] != "0x0037" || sc[fibHashSeed] == "" || sc[fibHashSeed] == "0" {
			t.Fatalf("node %s: sysctls %v", n.Name, sc)
		}
		if other, dup := seeds[sc[fibHashSeed]]; dup {
			t.Errorf("nodes %s and %s share seed %s", other, n.Name, sc[fibHashSeed])
		}
		seeds[sc[fibHashSeed]] = n.Name
	}
	if len(seeds) != 36 {
		t.Errorf("%d nodes seeded, want 36", len(seeds))
	}
}
