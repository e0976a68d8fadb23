package agent

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// newFakePair is two agents over an in-memory pipe in fake time: both
// engines' loops run, and the clock moves only when both are quiet (no
// datagram in the pipe, both receive loops between batches, both transmit
// loops asleep), to the earliest deadline. Rates and times measured on it
// do not depend on the machine's load.
func newFakePair(t *testing.T, filter func(from netip.AddrPort, m *pktio.Message) bool, trace func(Event), portRate units.Rate) *pair {
	t.Helper()
	clock := engine.NewFakeClock(0)
	pa, pb := pktio.NewPipe(pktio.PipeOptions{Filter: filter, Depth: 1 << 14})
	a, err := New(Config{Conn: pa, Clock: clock, Trace: trace, PortRate: portRate})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Conn: pb, Clock: clock, Trace: trace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return &pair{a: a, b: b, pa: pa, pb: pb, clock: clock}
}

// inFlight is the datagrams written to one end and not yet read by the
// other.
func inFlight(from, to *pktio.PipeConn) uint64 {
	s, r := from.Stats(), to.Stats()
	return s.DatagramsSent - s.Dropped() - r.DatagramsReceived
}

func (p *pair) idle() bool {
	return p.clock.Sleeping() == 2 && inFlight(p.pa, p.pb) == 0 && inFlight(p.pb, p.pa) == 0 &&
		p.a.eng.ReceiveIdle() && p.b.eng.ReceiveIdle()
}

// runUntil drives fake time to t.
func (p *pair) runUntil(tb testing.TB, t time.Duration) {
	tb.Helper()
	p.clock.RunUntil(t, p.idle)
}

// waitDone drives fake time until qp is done, at most d of it.
func (p *pair) waitDone(t *testing.T, qp *QP, d time.Duration) {
	t.Helper()
	done := func() bool {
		select {
		case <-qp.Done():
			return true
		default:
			return false
		}
	}
	if err := p.clock.Drive(done, p.idle, p.clock.Now()+d); err != nil {
		acked, sent := qp.Progress()
		t.Fatalf("qp %#x: %v: acked %d of %d sent packets; counters %+v", qp.QPN(), err, acked, sent, qp.Counters())
	}
	if err := qp.Err(); err != nil {
		t.Fatalf("qp %#x: %v", qp.QPN(), err)
	}
}

// wireRate is the bit rate of c0 → c1 over d, on the wire (42 bytes of
// Ethernet, IPv4 and UDP headers per packet).
func wireRate(c0, c1 Counters, d time.Duration) float64 {
	return float64(c1.TxBytes-c0.TxBytes+(c1.TxPackets-c0.TxPackets)*42) * 8 / d.Seconds()
}

// TestFakeTimePacing: a capped QP sends at its cap, on fake time: within
// 1 %, whatever the machine's load.
func TestFakeTimePacing(t *testing.T) {
	p := newFakePair(t, nil, nil, 0)
	ca := DefaultQPConfig()
	ca.RateCap = 200 * units.Mbit
	qa, _ := p.connect(t, ca, DefaultQPConfig())
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	p.runUntil(t, 5*time.Millisecond)
	c0, t0 := qa.Counters(), p.clock.Now()
	p.runUntil(t, 25*time.Millisecond)
	c1, t1 := qa.Counters(), p.clock.Now()
	wire := wireRate(c0, c1, t1-t0)
	t.Logf("wire rate %.2f Mbit/s for a 200 Mbit/s cap, fake time", wire/1e6)
	if wire < 0.99*200e6 || wire > 1.01*200e6 {
		t.Errorf("wire rate %.2f Mbit/s: want 200 ± 1 %%", wire/1e6)
	}
	if c := qa.Counters(); c.RetransmitPackets != 0 || c.LocalAckTimeoutErr != 0 {
		t.Errorf("retransmissions on a clean pipe: %+v", c)
	}
}

// TestFakeTimePortRate: four QPs capped at 500 Mbit/s share a 1 Gbit/s
// port: the port runs at its rate (±1 %) and shares it evenly (each QP
// within 5 % of a quarter).
func TestFakeTimePortRate(t *testing.T) {
	p := newFakePair(t, nil, nil, units.Gbit)
	ca := DefaultQPConfig()
	ca.RateCap = 500 * units.Mbit
	var qps []*QP
	for range 4 {
		qa, _ := p.connect(t, ca, DefaultQPConfig())
		if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 64 << 10}); err != nil {
			t.Fatal(err)
		}
		qps = append(qps, qa)
	}
	p.runUntil(t, 5*time.Millisecond)
	c0, t0 := p.a.Counters(), p.clock.Now()
	q0 := make([]Counters, len(qps))
	for i, qa := range qps {
		q0[i] = qa.Counters()
	}
	p.runUntil(t, 25*time.Millisecond)
	c1, t1 := p.a.Counters(), p.clock.Now()
	wire := wireRate(c0.Counters, c1.Counters, t1-t0)
	t.Logf("4 QPs × 500 Mbit/s through a 1 Gbit/s port: %.2f Mbit/s, fake time", wire/1e6)
	if wire < 0.99e9 || wire > 1.01e9 {
		t.Errorf("port rate %.2f Mbit/s: want 1000 ± 1 %%", wire/1e6)
	}
	for i, qa := range qps {
		r := wireRate(q0[i], qa.Counters(), t1-t0)
		if r < 0.95*wire/4 || r > 1.05*wire/4 {
			t.Errorf("qp %d: %.2f Mbit/s of %.2f: want a quarter ± 5 %%", i, r/1e6, wire/1e6)
		}
	}
}

// TestFakeTimeDCQCN: CE on every data packet for 10 ms of fake time: the
// NP sends one CNP per 50 µs at most, the RP handles each, and Rc falls
// as the paper profile's α says.
func TestFakeTimeDCQCN(t *testing.T) {
	var marked bool // written only between Drive calls, when the loops are quiet
	filter := func(from netip.AddrPort, m *pktio.Message) bool {
		if marked && m.N > 100 {
			m.TOS |= ecnCE
		}
		return false
	}
	p := newFakePair(t, filter, nil, 0)
	ca := DefaultQPConfig()
	ca.CC = CCDCQCN
	ca.DCQCN = dcqcn.PaperParams(units.Gbit)
	cb := DefaultQPConfig()
	cb.CNPPeriod = 50 * time.Microsecond
	qa, qb := p.connect(t, ca, cb)
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	p.runUntil(t, 5*time.Millisecond)
	st0, _ := qa.CC()
	marked = true
	p.runUntil(t, 15*time.Millisecond)
	marked = false
	st1, _ := qa.CC()
	ra, rb := qa.Counters(), qb.Counters()
	t.Logf("Rc %v → %v, α %.3f; np_cnp_sent %d, rp_cnp_handled %d ignored %d", st0.Rc, st1.Rc, st1.Alpha, rb.NPCNPSent, ra.RPCNPHandled, ra.RPCNPIgnored)
	if rb.NPCNPSent == 0 || rb.NPCNPSent > 201 {
		t.Errorf("np_cnp_sent %d in 10 ms of CE: want 1..201 (one per 50 µs)", rb.NPCNPSent)
	}
	if ra.RPCNPHandled+ra.RPCNPIgnored != rb.NPCNPSent {
		t.Errorf("rp_cnp_handled %d + ignored %d != np_cnp_sent %d", ra.RPCNPHandled, ra.RPCNPIgnored, rb.NPCNPSent)
	}
	if st0.Rc != units.Gbit || st1.Rc >= st0.Rc/4 {
		t.Errorf("Rc %v → %v under 10 ms of CE: want line rate, then below a quarter", st0.Rc, st1.Rc)
	}
}

// TestFakeTimeTurns: 100 unpaced QPs share a 400 Mbit/s port, which has
// credit for about nine packets a wake: each QP's turn is one burst
// (MaxBurst, 8 packets) back to back, the port's credit running out in the
// middle of one notwithstanding. With a turn lost to the port's credit,
// half the turns were one packet and the QP's cold state was paid twice a
// burst (issue 28's scale rows).
func TestFakeTimeTurns(t *testing.T) {
	var (
		mu    sync.Mutex
		order []uint32 // DestQP of the data packets, in order
	)
	filter := func(from netip.AddrPort, m *pktio.Message) bool {
		var h roce.Header
		if payload, err := roce.Parse(m.Buffers[0][:m.N], &h); err == nil && len(payload) > 0 {
			mu.Lock()
			order = append(order, h.BTH.DestQP)
			mu.Unlock()
		}
		return false
	}
	p := newFakePair(t, filter, nil, 400*units.Mbit)
	ca := DefaultQPConfig()
	for range 100 {
		qa, _ := p.connect(t, ca, DefaultQPConfig())
		if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 4096}); err != nil {
			t.Fatal(err)
		}
	}
	p.runUntil(t, 60*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	runs := map[int]int{} // turn length: turns
	k := 0
	for i := 1; i <= len(order); i++ {
		k++
		if i == len(order) || order[i] != order[i-1] {
			if i != len(order) {
				runs[k]++
			}
			k = 0
		}
	}
	turns := 0
	for _, c := range runs {
		turns += c
	}
	t.Logf("%d data packets in 60 ms, %d turns; turns by length: %v", len(order), turns, runs)
	if len(order) < 2500 {
		t.Fatalf("%d data packets in 60 ms at 400 Mbit/s: want about 2,700", len(order))
	}
	if full := runs[ca.MaxBurst]; float64(full) < 0.98*float64(turns) {
		t.Errorf("%d of %d turns were a burst of %d packets: want all but the first few", full, turns, ca.MaxBurst)
	}
}
