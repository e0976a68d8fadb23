package pds

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/pktio"
)

// TestLossInferenceConfig: the names round trip, a bad one is refused
// with the list, and SLEEK needs NSCC's window.
func TestLossInferenceConfig(t *testing.T) {
	for _, n := range LossInferenceNames() {
		l, err := ParseLossInference(strings.ToUpper(n))
		if err != nil || l.String() != n {
			t.Errorf("ParseLossInference(%q) = %v, %v", n, l, err)
		}
	}
	if _, err := ParseLossInference("fast"); err == nil || err.Error() != `pds: loss "fast": want rack, sleek or none` {
		t.Errorf("loss fast: %v", err)
	}
	c := DefaultConfig()
	c.Conn, _ = pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB})
	c.Loss = LossSLEEK
	for _, m := range []CCMode{CCNSCC, CCBoth} {
		if c.CC = m; c.Validate() != nil {
			t.Errorf("sleek with cc %v: %v", m, c.Validate())
		}
	}
	c.CC = CCRCCC
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "pds: loss sleek with cc rccc:") {
		t.Errorf("sleek with cc rccc: %v", err)
	}
	c.CC, c.Loss = CCNSCC, numLossInferences
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "pds: loss 3:") {
		t.Errorf("loss 3: %v", err)
	}
}

// lossRun sprays 300 messages of 64 KiB over pathDelays (skew 600 µs, 18
// packet times) with inference l and a share loss of the data packets
// dropped; every message must arrive intact.
func lossRun(t *testing.T, l LossInference, loss float64) (ca Counters, lost int) {
	t.Helper()
	const msgs, size = 300, 64 << 10
	p, d := newSprayPair(t, lb.KindOblivious, pathDelays, loss, func(a *Config) { a.Loss = l })
	// Only first transmissions are lost: SLEEK enters recovery once per
	// window, so a lost retransmission waits for the RTO, with htsim's
	// runSleek as here; one in ~170 retransmits at 1 % gave CI a timeout.
	d.spareRetx = true
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: size, Messages: msgs, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	start := p.clock.Now()
	sprayWait(t, p, 20*time.Second, s)
	ca, cb := p.a.Counters(), p.b.Counters()
	d.mu.Lock()
	lost = d.lost
	d.mu.Unlock()
	if cb.MessagesReceived != msgs || cb.VerifyErrors != 0 {
		t.Fatalf("b received %d messages, %d verify errors: want %d, 0", cb.MessagesReceived, cb.VerifyErrors, msgs)
	}
	data := ca.TxPackets - ca.ProbesSent - ca.ClosesSent
	t.Logf("loss %v, %d of %d data packets dropped, in %v: %d retransmits, %d inferred losses, %d timeouts, %d probes, %d spurious retransmits reported; b: %d duplicates",
		l, lost, data, p.clock.Now()-start, ca.Retransmits, ca.InferredLosses, ca.Timeouts, ca.ProbesSent, ca.SpuriousRetransmits, cb.Duplicates)
	return ca, lost
}

// TestSLEEKReordering: the target holds up to 18 packets out of order,
// under SLEEK's threshold (1.5 congestion windows, at least 5 packets):
// nothing is resent, with SLEEK or without inference; RACK, learning the
// skew, resends some (TestRACKReordering).
func TestSLEEKReordering(t *testing.T) {
	for _, l := range []LossInference{LossSLEEK, LossNone} {
		t.Run(l.String(), func(t *testing.T) {
			ca, _ := lossRun(t, l, 0)
			if ca.Retransmits != 0 || ca.Timeouts != 0 {
				t.Errorf("%d retransmits, %d timeouts with nothing lost: want 0, 0", ca.Retransmits, ca.Timeouts)
			}
		})
	}
}

// TestSLEEKLoss: with 1 % of the data packets lost on top, SLEEK's
// recovery resends every loss without an RTO; it resends a window from
// the cumulative PSN on (htsim runSleek), so more than what was lost.
// With inference none a hole waits for the RTO (htsim's sources without
// -sleek): later packets' ACKs keep the PDC progressing, so no probe
// goes, and the RTO resends what is outstanding.
func TestSLEEKLoss(t *testing.T) {
	for _, l := range []LossInference{LossSLEEK, LossNone} {
		t.Run(l.String(), func(t *testing.T) {
			ca, lost := lossRun(t, l, 0.01)
			if lost == 0 || ca.Retransmits < uint64(lost) {
				t.Errorf("%d lost: %d retransmits; want at least %d", lost, ca.Retransmits, lost)
			}
			switch {
			case l == LossSLEEK && ca.Timeouts != 0:
				t.Errorf("sleek: %d timeouts, want 0", ca.Timeouts)
			case l == LossNone && ca.Timeouts == 0:
				t.Errorf("none: no timeout, want the RTO to find the holes")
			}
		})
	}
}

// TestSLEEKSteps walks one PDC through htsim's runSleek: below the
// threshold nothing happens; at it the PDC enters recovery up to what it
// has sent and takes a window's worth from base for lost, once; it leaves
// recovery when base passes that point.
func TestSLEEKSteps(t *testing.T) {
	clock := engine.NewFakeClock(time.Millisecond)
	pa, _ := pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB})
	c := DefaultConfig()
	c.Conn, c.Clock, c.Loss = pa, clock, LossSLEEK
	ep, err := newEndpoint(c)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if _, err := ep.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 1 << 20, Messages: 1}); err != nil {
		t.Fatal(err)
	}
	var p *initiator
	for _, v := range ep.initiators {
		p = v
	}
	slots, _ := engine.NewSlots(64, maxDatagram)
	for _, cc := range ep.cccs.byKey {
		for range 4 {
			clock.Advance(100 * time.Microsecond)
			cc.Fill(clock.Now(), slots, nil)
		}
	}
	p.established = true
	w := p.ccc.wnd.Window() / c.MTU
	thr := max(min(3*p.ccc.wnd.Window()/2, p.ccc.wnd.(maxWnder).MaxWnd())/c.MTU, sleekMinPackets)
	if got := p.sleekThreshold(); got != thr {
		t.Fatalf("threshold %d packets, want %d (window %d packets)", got, thr, w)
	}
	sent := p.nxt
	if sent < 2 || int(sent) > w+1 {
		t.Fatalf("%d packets sent with a window of %d: the test needs a window in flight", sent, w)
	}
	t.Logf("%d packets sent, window %d packets, threshold %d", sent, w, thr)
	// Packet 0 is missing, packet 1 arrived.
	p.ack(clock.Now(), 1)
	p.sleek(thr - 1)
	if p.recovering || len(p.retxQ) != 0 {
		t.Fatalf("ooo %d under threshold %d: recovering %v, retxQ %v", thr-1, thr, p.recovering, p.retxQ)
	}
	p.sleek(thr)
	want := []uint64{0}
	for i := uint64(2); i < min(sent, uint64(w)); i++ {
		want = append(want, i)
	}
	if !p.recovering || p.recoveryEnd != sent || !slices.Equal(p.retxQ, want) {
		t.Fatalf("at threshold: recovering %v to %d, retxQ %v; want true to %d, %v", p.recovering, p.recoveryEnd, p.retxQ, sent, want)
	}
	p.sleek(thr)
	if !slices.Equal(p.retxQ, want) {
		t.Fatalf("again at threshold: retxQ %v, want %v (each once)", p.retxQ, want)
	}
	p.base = sent // everything acknowledged
	p.sleek(0)
	if p.recovering {
		t.Fatal("base passed the recovery point: still recovering")
	}
}
