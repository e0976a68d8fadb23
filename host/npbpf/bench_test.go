package npbpf

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fabriclab/fabriclab/host/roce"
)

// The programs' own cost per packet, timed by the kernel (BPF_PROG_RUN
// with a repeat count):
//
//	go test -run - -bench . ./host/npbpf/
//
// The ingress cases run with the test hooks, which count a CNP instead of
// cloning the packet. np_egress cannot be timed this way (its first run
// turns the packet into a CNP, which the next runs pass); np_icrc_test
// stands in for its main cost, the ICRC of a 56-byte CNP.

func BenchmarkIngress(b *testing.B) {
	o := loadTest(b)
	c := testQP(false, uint64(time.Microsecond))
	addQP(b, o, c)
	setClock(b, o, 1e9) // the clock stands still: CEs after the first are coalesced
	c0 := testQP(false, 0)
	c0.QPN = 0x777
	addQP(b, o, c0)
	for _, tc := range []struct {
		name string
		p    dataPkt
	}{
		{"not RoCE (UDP 4792)", dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 1024, destQP: c.QPN, dport: 4792}},
		{"RoCE ECT(0)", dataPkt{ecn: ecnECT0, op: roce.OpRCWriteMiddle, payload: 1024, destQP: c.QPN}},
		{"RoCE CE, coalesced", dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 1024, destQP: c.QPN}},
		{"RoCE CE, answered (clone not included)", dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 1024, destQP: c0.QPN}},
	} {
		data := tc.p.frame(b)
		b.Run(tc.name, func(b *testing.B) { timeProg(b, o.objs.Ingress, data) })
	}
}

func BenchmarkICRC(b *testing.B) {
	o := loadTest(b)
	ip, _ := hex.DecodeString("45c2003c718c4000401191610a0011010a001201000012b700280000" +
		"8100ffff4000011800000000" + "00000000000000000000000000000000")
	frame := append(append([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00}, ip...), 0, 0, 0, 0)
	timeProg(b, o.icrcTest, frame)
}

// timeProg reports the kernel's time per run.
func timeProg(b *testing.B, prog *ebpf.Program, data []byte) {
	b.Helper()
	var per time.Duration
	for b.Loop() {
		_, d, err := prog.Benchmark(data, 10_000, nil)
		if err != nil {
			b.Fatal(err)
		}
		per = d
	}
	b.ReportMetric(float64(per.Nanoseconds()), "ns/run")
}
