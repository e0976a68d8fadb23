package npprobe

import (
	"testing"

	"golang.org/x/net/bpf"

	"github.com/fabriclab/fabriclab/host/roce"
)

// TestTapFilter runs the tap's socket filter in x/net/bpf's VM.
func TestTapFilter(t *testing.T) {
	insns, err := udp4791()
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]bpf.RawInstruction, len(insns))
	for i, in := range insns {
		raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("disassemble")
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	v4 := frame(t, false, 0, roce.OpRCSendOnly, 1, 4791)
	opts := append(append(append([]byte{}, v4[:14]...), 0x46), v4[15:34]...) // IHL 6
	opts = append(append(opts, 1, 1, 1, 1), v4[34:]...)                      // four NOP options
	later := append([]byte{}, v4...)
	later[20], later[21] = 0, 1 // fragment offset 1
	arp := append(append([]byte{}, v4[:12]...), 0x08, 0x06, 0, 1)
	for _, tc := range []struct {
		name string
		b    []byte
		keep bool
	}{
		{"IPv4 UDP 4791", v4, true},
		{"IPv6 UDP 4791", frame(t, true, 0, roce.OpCNP, 1, 4791), true},
		{"IPv4 options, UDP 4791", opts, true},
		{"IPv4 UDP 4792", frame(t, false, 0, roce.OpRCSendOnly, 1, 4792), false},
		{"IPv6 UDP 4792", frame(t, true, 0, roce.OpRCSendOnly, 1, 4792), false},
		{"later fragment", later, false},
		{"ARP", arp, false},
	} {
		n, err := vm.Run(tc.b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (n > 0) != tc.keep {
			t.Errorf("%s: kept %d bytes, want keep=%v", tc.name, n, tc.keep)
		}
	}
}
