package agent

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/rpbpf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// fakeRP is an rpbpf.Offload whose counters the test moves, standing in
// for the kernel's CNP intake over the in-memory pipe.
type fakeRP struct {
	mu      sync.Mutex
	qps     map[uint32]rpbpf.QPContext
	ctr     map[uint32]*fakeCNPs
	removed []uint32
}

var _ rpbpf.Offload = (*fakeRP)(nil)

func (f *fakeRP) AddQP(c rpbpf.QPContext) (rpbpf.CNPCounter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.qps[c.QPN] = c
	f.ctr[c.QPN] = &fakeCNPs{}
	return f.ctr[c.QPN], nil
}

func (f *fakeRP) RemoveQP(qpn uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.qps, qpn)
	f.removed = append(f.removed, qpn)
	return nil
}

// fakeCNPs counts CNPs the way rp_ingress does: the time first, then the
// count.
type fakeCNPs struct {
	mu  sync.Mutex
	at  []uint64
	cnt atomic.Uint64
	// PPFC notifications toward the QP's peer, as rp_ingress records them.
	ppfc    []rpbpf.PPFCEvent
	ppfcCnt atomic.Uint64
}

func (c *fakeCNPs) addPPFC(e rpbpf.PPFCEvent) {
	c.mu.Lock()
	c.ppfc = append(c.ppfc, e)
	c.mu.Unlock()
	c.ppfcCnt.Add(1)
}

func (c *fakeCNPs) PPFCCounted() uint64 { return c.ppfcCnt.Load() }

func (c *fakeCNPs) PPFCEvent(i uint64) (rpbpf.PPFCEvent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := uint64(len(c.ppfc))
	if i >= n || n-i > rpbpf.PPFCRing {
		return rpbpf.PPFCEvent{}, false
	}
	return c.ppfc[i], true
}

func (c *fakeCNPs) add(ns uint64) {
	c.mu.Lock()
	c.at = append(c.at, ns)
	c.mu.Unlock()
	c.cnt.Add(1)
}

func (c *fakeCNPs) Counted() uint64 { return c.cnt.Load() }

func (c *fakeCNPs) Arrival(i uint64) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := uint64(len(c.at))
	if i >= n || n-i > rpbpf.Ring {
		return 0, false
	}
	return c.at[i], true
}

// newRPPair is two agents over a pipe through filter, a with ca and b with
// cb (their Conns set here), and a DCQCN requester on a connected to a
// responder without CC on b.
func newRPPair(t *testing.T, filter func(netip.AddrPort, *pktio.Message) bool, ca, cb Config) (*pair, *QP) {
	t.Helper()
	pa, pb := pktio.NewPipe(pktio.PipeOptions{Filter: filter, Depth: 1 << 14})
	ca.Conn, cb.Conn = pa, pb
	a, err := New(ca)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cb)
	if err != nil {
		_ = a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	p := &pair{a: a, b: b, pa: pa, pb: pb}
	qa := DefaultQPConfig()
	qa.CC = CCDCQCN
	qa.DCQCN = dcqcn.PaperParams(1 * units.Gbit)
	qb := DefaultQPConfig()
	qb.CC = CCNone
	req, _ := p.connect(t, qa, qb)
	return p, req
}

// With an RPOffload, a DCQCN requester is handed to the kernel's CNP
// intake when it connects; its RP cuts once per CNP the kernel counted, at
// that CNP's arrival, while the CNPs its receive loop reads cut nothing
// (counted as rp_cnp_agent_read); a time the ring lost is taken as the
// read's; the QP is removed when destroyed.
func TestRPOffload(t *testing.T) {
	var marked atomic.Bool
	filter := func(from netip.AddrPort, m *pktio.Message) bool {
		if marked.Load() && m.N > 100 {
			m.TOS |= ecnCE
		}
		return false
	}
	var mu sync.Mutex
	var evs []Event
	off := &fakeRP{qps: map[uint32]rpbpf.QPContext{}, ctr: map[uint32]*fakeCNPs{}}
	offB := &fakeRP{qps: map[uint32]rpbpf.QPContext{}, ctr: map[uint32]*fakeCNPs{}}
	p, qa := newRPPair(t, filter, Config{RPOffload: off, Trace: func(e Event) {
		if e.Kind == EventCNPHandled {
			mu.Lock()
			evs = append(evs, e)
			mu.Unlock()
		}
	}}, Config{RPOffload: offB})
	a, pa, pb := p.a, p.pa, p.pb

	off.mu.Lock()
	c, ok := off.qps[qa.QPN()]
	kc := off.ctr[qa.QPN()]
	off.mu.Unlock()
	offB.mu.Lock()
	bAdded := len(offB.qps) != 0
	offB.mu.Unlock()
	want := rpbpf.QPContext{QPN: qa.QPN(), Local: pa.LocalAddr().Addr(), Peer: pb.LocalAddr().Addr(), PKey: roce.DefaultPKey}
	if !ok || c != want || bAdded {
		t.Fatalf("added %+v (%v), want %+v; QP without DCQCN added: %v", c, ok, want, bAdded)
	}

	marked.Store(true) // b's NP answers with CNPs through the pipe
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for qa.Counters().RPCNPAgentRead == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := qa.Counters(); got.RPCNPAgentRead == 0 || got.RPCNPHandled != 0 {
		t.Fatalf("CNPs read by the agent: %d, handled %d; want some read and none handled", got.RPCNPAgentRead, got.RPCNPHandled)
	}
	cc0, _ := qa.CC()

	// Three CNPs the kernel took 40 µs ago, then one whose time the ring
	// lost (more than Ring since).
	// before is read first: the agent may sync the ring as soon as
	// the CNPs are in it, before qa.CC asks.
	before := a.clock.Now()
	mono := monotonicNs()
	for range 3 {
		kc.add(mono - 40_000)
	}
	cc1, _ := qa.CC()
	if cc1.Stats.RateCuts != cc0.Stats.RateCuts+3 || cc1.Rc >= cc0.Rc {
		t.Fatalf("after 3 kernel CNPs: %d cuts (was %d), Rc %v (was %v)", cc1.Stats.RateCuts, cc0.Stats.RateCuts, cc1.Rc, cc0.Rc)
	}
	mu.Lock()
	got := append([]Event(nil), evs...)
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d CNPHandled events, want 3", len(got))
	}
	for _, e := range got {
		age := e.Synced - e.At
		if !e.Kernel || e.At != e.Arrived || e.RcAfter >= e.RcBefore || age < 40*time.Microsecond || e.Synced < before || age > 40*time.Millisecond {
			t.Errorf("event %+v: want a kernel cut at the arrival, 40 µs (plus the read's delay) before the sync", e)
		}
	}
	for range rpbpf.Ring + 1 {
		kc.add(0)
	}
	kc.mu.Lock()
	kc.at = kc.at[:len(kc.at)-rpbpf.Ring-1]
	kc.mu.Unlock()
	kc.add(monotonicNs())
	qa.CC()
	qa.Stop()
	waitDone(t, qa, 5*time.Second)
	ctr := qa.Counters()
	if ctr.RPCNPKernel != 3+rpbpf.Ring+2 || ctr.RPCNPHandled != ctr.RPCNPKernel || ctr.RPCNPTimeUnknown == 0 {
		t.Errorf("counters: kernel %d handled %d time unknown %d; want %d, all handled, some unknown",
			ctr.RPCNPKernel, ctr.RPCNPHandled, ctr.RPCNPTimeUnknown, 3+rpbpf.Ring+2)
	}
	qa.Destroy()
	off.mu.Lock()
	removed := append([]uint32(nil), off.removed...)
	off.mu.Unlock()
	if len(removed) != 1 || removed[0] != qa.QPN() {
		t.Errorf("removed %v, want [%#x]", removed, qa.QPN())
	}
}

// A CNP that came in a run a device coalesced (GRO) is one rp_ingress
// leaves to the agent (bpf/rp.c, gro_runs): with an RPOffload the agent's
// RP takes it itself, and the kernel's counter stays where it is.
func TestRPOffloadCoalescedCNP(t *testing.T) {
	var marked atomic.Bool
	filter := func(from netip.AddrPort, m *pktio.Message) bool {
		if !marked.Load() {
			return false
		}
		if m.N > 100 {
			m.TOS |= ecnCE
		} else if m.N > 0 && roce.Opcode(m.Buffers[0][0]) == roce.OpCNP {
			m.Coalesced = true
		}
		return false
	}
	off := &fakeRP{qps: map[uint32]rpbpf.QPContext{}, ctr: map[uint32]*fakeCNPs{}}
	_, qa := newRPPair(t, filter, Config{RPOffload: off}, Config{})
	cc0, _ := qa.CC()

	marked.Store(true)
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for qa.Counters().RPCNPHandled == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	qa.Stop()
	waitDone(t, qa, 5*time.Second)
	ctr := qa.Counters()
	cc1, _ := qa.CC()
	if ctr.RPCNPHandled == 0 || ctr.RPCNPAgentRead != 0 || ctr.RPCNPKernel != 0 || cc1.Stats.RateCuts == cc0.Stats.RateCuts {
		t.Errorf("counters: handled %d, agent read %d, kernel %d; cuts %d (was %d): want coalesced CNPs handled by the agent, none left to the kernel",
			ctr.RPCNPHandled, ctr.RPCNPAgentRead, ctr.RPCNPKernel, cc1.Stats.RateCuts, cc0.Stats.RateCuts)
	}
}
