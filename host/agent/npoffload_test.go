package agent

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/pktio"
)

// fakeNP is an NPOffload that records what the agent gives it and reports
// fixed counters, standing in for the kernel NP over the in-memory pipe.
type fakeNP struct {
	mu      sync.Mutex
	qps     map[uint32]npbpf.QPContext
	removed []uint32
}

var _ npbpf.NPOffload = (*fakeNP)(nil)

func (f *fakeNP) AddQP(c npbpf.QPContext) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.qps[c.QPN] = c
	return nil
}

func (f *fakeNP) RemoveQP(qpn uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.qps, qpn)
	f.removed = append(f.removed, qpn)
	return nil
}

func (f *fakeNP) Counters(qpn uint32) (npbpf.NPCounters, error) {
	return npbpf.NPCounters{NPECNMarkedRoCEPackets: 7, NPCNPSent: 3}, nil
}

// With an NPOffload, a responder QP is handed to the kernel NP when it
// connects (its peer's QPN and addresses, its own source port, N, the CNP
// DSCP), sends no CNP of its own, reports the kernel's NP counters, and
// is removed when destroyed, its counters kept in the agent's totals.
func TestNPOffload(t *testing.T) {
	var marked atomic.Bool
	filter := func(from netip.AddrPort, m *pktio.Message) bool {
		if marked.Load() && m.N > 100 {
			m.TOS |= ecnCE
		}
		return false
	}
	pa, pb := pktio.NewPipe(pktio.PipeOptions{Filter: filter, Depth: 1 << 14})
	a, err := New(Config{Conn: pa})
	if err != nil {
		t.Fatal(err)
	}
	off := &fakeNP{qps: map[uint32]npbpf.QPContext{}}
	b, err := New(Config{Conn: pb, NPOffload: off})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	p := &pair{a: a, b: b, pa: pa, pb: pb}
	cb := DefaultQPConfig()
	cb.CNPPeriod = 50 * time.Microsecond
	cb.CNPDSCP = 46
	qa, qb := p.connect(t, DefaultQPConfig(), cb)

	off.mu.Lock()
	c, ok := off.qps[qb.QPN()]
	off.mu.Unlock()
	want := npbpf.QPContext{QPN: qb.QPN(), PeerQPN: qa.QPN(), Local: pb.LocalAddr().Addr(), Peer: pa.LocalAddr().Addr(),
		SrcPort: b.localPort(qb.QPN()), PKey: 0xffff, CNPDSCP: 46, MinTimeBetweenCNPs: 50 * time.Microsecond}
	if !ok || c != want || !qb.NPOffloaded() || qa.NPOffloaded() {
		t.Fatalf("offloaded %v (requester %v): %+v, want %+v", qb.NPOffloaded(), qa.NPOffloaded(), c, want)
	}

	marked.Store(true)
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 64 << 10, Messages: 20}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, qa, 5*time.Second)
	ra, rb := qa.Counters(), qb.Counters()
	if ra.RPCNPHandled+ra.RPCNPIgnored != 0 {
		t.Errorf("the agent sent CNPs for an offloaded QP: requester handled %d", ra.RPCNPHandled+ra.RPCNPIgnored)
	}
	if rb.NPECNMarkedRoCEPackets != 7 || rb.NPCNPSent != 3 {
		t.Errorf("responder counters %+v: want the kernel's 7 marked, 3 CNPs", rb)
	}
	qb.Destroy()
	off.mu.Lock()
	removed := append([]uint32(nil), off.removed...)
	off.mu.Unlock()
	if len(removed) != 1 || removed[0] != qb.QPN() {
		t.Errorf("removed %v, want [%#x]", removed, qb.QPN())
	}
	if tot := b.Counters(); tot.NPCNPSent != 3 || tot.NPECNMarkedRoCEPackets != 7 {
		t.Errorf("agent totals after destroy: %+v", tot.Counters)
	}
}
