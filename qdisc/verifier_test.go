package qdisc

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// verifierBudget bounds the instructions the verifier processes for each
// port program, the cost of attaching a port (most of its 0.18 s). Measured
// on Linux 6.18: port_enqueue 39,072 (244,613 while ppfc_enqueued was
// inlined and log2_u64 branched: a port took 0.55 s to attach; 52,617
// while log2_u64 was inlined at every call and the trimmed IPv6 UDP
// checksum summed in a loop), ppfc_egress 10,650, port_dequeue 5,393,
// port_xmit 5,057. The bounds
// leave room for other kernels' verifiers and for growth, not for a
// return of the path explosion.
var verifierBudget = map[string]int{
	"port_enqueue":   80_000,
	"ppfc_egress":    25_000,
	"port_dequeue":   15_000,
	"port_xmit":      15_000,
	"port_host_drop": 1_000,
}

// TestVerifierBudget loads each port program alone, with its load-time
// settings as LoadObjects sets them for a port with test hooks off, and
// holds the verifier's count of processed instructions to its budget.
func TestVerifierBudget(t *testing.T) {
	labtest.RequireRoot(t)
	spec, err := bpf.LoadPort()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables["ppfc_mark"].Set(ppfcMark(1)); err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables["trim_mark"].Set(trimMark(1)); err != nil {
		t.Fatal(err)
	}
	processed := regexp.MustCompile(`processed (\d+) insns`)
	for name, budget := range verifierBudget {
		ps := spec.Programs[name]
		if ps == nil {
			t.Errorf("%s: not in the port object", name)
			continue
		}
		one := &ebpf.CollectionSpec{Maps: spec.Maps, Variables: spec.Variables, Types: spec.Types,
			Programs: map[string]*ebpf.ProgramSpec{name: ps}}
		c, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
		if err != nil {
			t.Errorf("%s: %v", name, loadError("load", err))
			continue
		}
		m := processed.FindStringSubmatch(c.Programs[name].VerifierLog)
		c.Close()
		if m == nil {
			t.Errorf("%s: no instruction count in the verifier's log %q", name, c.Programs[name].VerifierLog)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		t.Logf("%s: %d instructions processed (budget %d)", name, n, budget)
		if n > budget {
			t.Errorf("%s: the verifier processed %d instructions, over its budget of %d: a path explosion makes every port slow to attach", name, n, budget)
		}
	}
}
