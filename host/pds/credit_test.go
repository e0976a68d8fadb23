package pds

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
)

// ctrlFilter drops a share of b's CTRL packets of type ct (every n-th).
func ctrlFilter(ct uet.CtrlType, every int, dropped *int) func(netip.AddrPort, *pktio.Message) bool {
	var mu sync.Mutex
	seen := 0
	return func(from netip.AddrPort, m *pktio.Message) bool {
		var h uet.Header
		if _, err := uet.Parse(m.Buffers[0][:m.N], &h); err != nil || h.Type != uet.TypeCtrl || h.Ctrl.CtrlType != ct {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		seen++
		if seen%every == 0 {
			*dropped++
			return true
		}
		return false
	}
}

// TestCredit: one stream from a to b under each congestion control mode
// (fake time, a clean pipe). Under RCCC the sender spends only credit:
// every byte but the speculative start was granted by b's pacer, which
// grants 0.99 of the line, so the goodput is 0.99 of NSCC's within 1 %;
// every message arrives intact, nothing is resent, and both ends show
// their CCC's credit state.
func TestCredit(t *testing.T) {
	const msgs, size = 200, 64 << 10
	ideal := 0.0
	for _, mode := range []CCMode{CCNSCC, CCRCCC, CCBoth, CCNone} {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t, nil, func(a, b *Config) { a.CC = mode })
			if ideal == 0 {
				ideal = 1e9 * float64(p.a.payloadMax()) / float64(p.a.cfg.MTU+ethernetLen)
			}
			start := p.clock.Now()
			s, err := p.a.Start(addrB.Addr(), Stream{JobID: 7, MessageBytes: size, Messages: msgs, Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			// Mid-stream: both ends' view of the CCC.
			p.runFor(t, 20*time.Millisecond)
			sc, rc := p.a.CCCs(), p.b.RxCCCs()
			if len(sc) != 1 || len(rc) != 1 {
				t.Fatalf("%d sender CCCs, %d receiver CCCs: want 1, 1", len(sc), len(rc))
			}
			if got := sc[0].Credit != nil; got != mode.credit() {
				t.Errorf("sender CCC credit state %v, want %v", got, mode.credit())
			}
			if got := rc[0].Source != nil; got != mode.credit() {
				t.Errorf("receiver CCC source at the pacer %v, want %v", got, mode.credit())
			}
			if mode.credit() {
				t.Logf("mid-stream: sender %s credit %d B speculating %v; receiver source %s target %d granted %d",
					sc[0].State, sc[0].Credit.Credit, sc[0].Credit.Speculating, rc[0].Source.State, rc[0].Source.TargetBytes, rc[0].Source.GrantedBytes)
				if sc[0].Credit.Speculating || rc[0].Source.State != rccc.SourceActive {
					t.Errorf("mid-stream: speculating %v, source %v: want false, active", sc[0].Credit.Speculating, rc[0].Source.State)
				}
			}
			p.wait(t, 2*time.Second, s)
			elapsed := p.clock.Now() - start
			ca, cb := p.a.Counters(), p.b.Counters()
			if cb.MessagesReceived != msgs || cb.VerifyErrors != 0 {
				t.Fatalf("b received %d messages, %d verify errors: want %d, 0", cb.MessagesReceived, cb.VerifyErrors, msgs)
			}
			if ca.Retransmits != 0 || ca.Timeouts != 0 || cb.Duplicates != 0 {
				t.Errorf("a: %d retransmits, %d timeouts; b: %d duplicates: want 0", ca.Retransmits, ca.Timeouts, cb.Duplicates)
			}
			goodput := float64(msgs*size*8) / elapsed.Seconds()
			want := ideal
			if mode.credit() {
				// The pacer grants 0.99 of the line; a RUD_CC_REQ is 4
				// bytes longer.
				want = 0.99 * 1e9 * float64(p.a.payloadMax()) / float64(p.a.cfg.MTU+ethernetLen)
			}
			t.Logf("%s: goodput %.1f Mbit/s (%.4f of the expected %.1f); a: credit requests %d, credits %d (stale %d); b: credits sent %d (unsent %d), credit ACKs %d",
				mode, goodput/1e6, goodput/want, want/1e6, ca.CreditRequestsSent, ca.CreditsReceived, ca.StaleCredits, cb.CreditsSent, cb.CreditsUnsent, cb.CreditAcksSent)
			if goodput < 0.98*want || goodput > 1.01*want {
				t.Errorf("goodput %.1f Mbit/s, want %.1f within -2 %%..+1 %%", goodput/1e6, want/1e6)
			}
			if mode.credit() {
				if cb.CreditsSent == 0 || ca.CreditsReceived != cb.CreditsSent || ca.StaleCredits != 0 {
					t.Errorf("credits: b sent %d, a received %d (%d stale)", cb.CreditsSent, ca.CreditsReceived, ca.StaleCredits)
				}
				ps := p.b.PacerStats()
				if ps.GrantedBytes < uint64(msgs*size)-uint64(p.b.rcccParams.SpeculativeBytes) {
					t.Errorf("pacer granted %d bytes for %d sent", ps.GrantedBytes, msgs*size)
				}
			} else if ca.CreditsReceived+cb.CreditsSent+ca.CreditRequestsSent != 0 {
				t.Errorf("mode %v: credit traffic a %+v b %+v", mode, ca, cb)
			}
		})
	}
}

// TestCreditRequest: without speculative credit a sender starts with a
// CTRL CREDIT_REQ, and when every third CTRL CREDIT is lost the ACK_CCs'
// CREDIT cc_state and the next grants make up for them: every message
// arrives, nothing times out.
func TestCreditRequest(t *testing.T) {
	dropped := 0
	p := newPair(t, ctrlFilter(uet.CtrlCredit, 3, &dropped), func(a, b *Config) {
		a.CC = CCRCCC
		r := rccc.LabParams(a.LinkRate, 100*time.Microsecond, 4096+ethernetLen)
		r.SpeculativeBytes = 0
		a.RCCC, b.RCCC = &r, &r
	})
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 200_000, Messages: 50, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, 2*time.Second, s)
	ca, cb := p.a.Counters(), p.b.Counters()
	t.Logf("%d CTRL CREDIT dropped; a: credit requests %d, credits %d, timeouts %d; b: credit requests %d, credits %d, credit ACKs %d",
		dropped, ca.CreditRequestsSent, ca.CreditsReceived, ca.Timeouts, cb.CreditRequestsReceived, cb.CreditsSent, cb.CreditAcksSent)
	if cb.MessagesReceived != 50 || cb.VerifyErrors != 0 {
		t.Fatalf("b received %d messages, %d verify errors", cb.MessagesReceived, cb.VerifyErrors)
	}
	if ca.CreditRequestsSent == 0 || cb.CreditRequestsReceived != ca.CreditRequestsSent {
		t.Errorf("credit requests: a sent %d, b received %d", ca.CreditRequestsSent, cb.CreditRequestsReceived)
	}
	if dropped == 0 || ca.Timeouts != 0 || ca.Retransmits != 0 {
		t.Errorf("%d credits dropped; a: %d timeouts, %d retransmits: want some, 0, 0", dropped, ca.Timeouts, ca.Retransmits)
	}
	if st := p.a.CCCs()[0].Credit; st.SpeculativeBytes != 0 || st.Overdrawn != 0 {
		t.Errorf("sender credit %+v: want no speculative bytes, no overdraft", st)
	}
}

// TestCreditNewCCC: a's CCC to b goes idle and is freed while b still
// holds its side; the next stream's CCC starts its credit count at 0
// under a new ccc_id, and b's pacer starts the source over instead of
// reading the new targets as old ones.
func TestCreditNewCCC(t *testing.T) {
	lost := 0
	p := newPair(t, ctrlFilter(uet.CtrlCloseCmd, 1, &lost), func(a, b *Config) {
		a.CC = CCRCCC
		b.IdleTimeout = time.Second // b keeps its PDC and CCC long after a freed its own
	})
	for i := range 3 {
		s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 100_000, Messages: 20, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		p.wait(t, time.Second, s)
		// a's PDC closes on idle (50 ms), its CLOSE_CMDs are lost, and it
		// frees the PDC and the CCC without an answer; b keeps both.
		p.runFor(t, 200*time.Millisecond)
		if n := len(p.a.CCCs()); n != 0 {
			t.Fatalf("round %d: a has %d CCCs after idle, want 0", i, n)
		}
	}
	ca, cb := p.a.Counters(), p.b.Counters()
	t.Logf("a: cccs created %d freed %d, timeouts %d; b: sources reset %d, rx cccs created %d freed %d", ca.CCCsCreated, ca.CCCsFreed, ca.Timeouts, cb.CreditSourcesReset, cb.RxCCCsCreated, cb.RxCCCsFreed)
	if cb.MessagesReceived != 60 || ca.Timeouts != 0 || ca.CCCsCreated != 3 {
		t.Errorf("b received %d messages; a: %d timeouts, %d CCCs: want 60, 0, 3", cb.MessagesReceived, ca.Timeouts, ca.CCCsCreated)
	}
	if lost == 0 || cb.CreditSourcesReset != 2 || cb.RxCCCsCreated != 1 {
		t.Errorf("%d CLOSE_CMDs lost; b: %d sources reset, %d CCCs created: want some, 2, 1", lost, cb.CreditSourcesReset, cb.RxCCCsCreated)
	}
}

// TestCreditReceiverForgot: the receiver frees its CCC (the CLOSE_CMD of
// its only PDC) while the sender's CCC lives on (the close ACK is lost and
// a new stream joins the CCC): the receiver's new source counts from 0,
// behind the sender, and its grants read as old. The sender, waiting with
// nothing in flight, starts its credit over under a new ccc_id, and the
// stream completes at once instead of stalling until the PDC fails.
func TestCreditReceiverForgot(t *testing.T) {
	var mu sync.Mutex
	drop := false
	p := newPair(t, func(from netip.AddrPort, m *pktio.Message) bool {
		var h uet.Header
		if _, err := uet.Parse(m.Buffers[0][:m.N], &h); err != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		return drop && (h.Type == uet.TypeAckCC || h.Type == uet.TypeAck) && h.Ack.Req == uet.AckReqClose
	}, func(a, b *Config) { a.CC = CCRCCC })
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 1 << 20, Messages: 20, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Second, s)
	mu.Lock()
	drop = true
	mu.Unlock()
	p.runFor(t, 60*time.Millisecond) // a's PDC closes; b frees its side and its CCC
	if n := len(p.b.RxCCCs()); n != 0 {
		t.Fatalf("b has %d receiver CCCs after the close, want 0", n)
	}
	start := p.clock.Now()
	s2, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 100_000, Messages: 5, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Second, s2)
	took := p.clock.Now() - start
	ca, cb := p.a.Counters(), p.b.Counters()
	t.Logf("second stream: %v; a: %d resyncs, %d credit requests, %d stale credits, %d timeouts; b: %d sources reset", took, ca.CreditResyncs, ca.CreditRequestsSent, ca.StaleCredits, ca.Timeouts, cb.CreditSourcesReset)
	if ca.CreditResyncs == 0 || ca.Timeouts != 0 || took > 20*time.Millisecond {
		t.Errorf("second stream took %v with %d resyncs, %d timeouts: want within 20 ms, a resync, no timeout", took, ca.CreditResyncs, ca.Timeouts)
	}
}

// TestCreditRequestInterval: a CCC that sends a message every 20 ms and
// idles between learns the time between grants while it is busy only, so
// its CREDIT_REQ stays prompt (it was 28 ms when the idle time counted).
func TestCreditRequestInterval(t *testing.T) {
	p := newPair(t, nil, func(a, b *Config) { a.CC = CCRCCC; a.IdleTimeout, b.IdleTimeout = time.Second, time.Second })
	for range 10 {
		s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 8 << 10, Messages: 1})
		if err != nil {
			t.Fatal(err)
		}
		p.wait(t, time.Second, s)
		p.runFor(t, 20*time.Millisecond)
	}
	p.a.mu.Lock()
	var iv time.Duration
	for _, c := range p.a.cccs.byKey {
		iv = c.creditRequestInterval()
	}
	p.a.mu.Unlock()
	t.Logf("credit request interval %v", iv)
	if iv > 2*p.a.cfg.ProbeTimeout {
		t.Errorf("credit request interval %v after idle periods: want ≤ 2 × the probe timeout %v", iv, p.a.cfg.ProbeTimeout)
	}
}

// TestCreditTargetCapped: a CREDIT_REQ whose target is far ahead of what
// the source was granted (spoofed, or a broken sender) is cut to what a
// sender can ask for, so it draws no more than that from the pacer.
func TestCreditTargetCapped(t *testing.T) {
	pa, _ := pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB})
	cfg := DefaultConfig()
	cfg.Conn, cfg.Clock = pa, engine.NewFakeClock(time.Millisecond)
	ep, err := newEndpoint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	buf := make([]byte, 64)
	h := uet.Header{Type: uet.TypeCtrl, Ctrl: uet.Ctrl{CtrlType: uet.CtrlCreditReq, SPDCID: 9, Payload: creditPayload(1, 1<<22)}}
	n := h.Encode(buf)
	rs, _ := engine.NewSlots(8, maxDatagram)
	out := engine.NewReplies(rs)
	(*endpointRx)(ep).Receive(time.Millisecond, &pktio.Message{Buffers: [][]byte{buf[:n]}, N: n, Addr: addrB}, out)
	c := ep.Counters()
	rc := ep.RxCCCs()
	if c.CreditTargetsCapped != 1 || len(rc) != 1 || rc[0].Source == nil {
		t.Fatalf("capped %d, receiver CCCs %+v: want 1 capped and one source", c.CreditTargetsCapped, rc)
	}
	if most := uint64(ep.maxTargetAhead()) * uet.ByteUnit; rc[0].Source.TargetBytes > most {
		t.Errorf("source target %d B, want at most %d B", rc[0].Source.TargetBytes, most)
	}
}

// TestOORWindowBounded: a target that answers every packet with NACK
// PSN_OOR_WINDOW (the two ends disagree on the PDC's PSNs) makes the PDC
// fail after MaxRetries, each an RTO apart, instead of resending for ever.
func TestOORWindowBounded(t *testing.T) {
	pa, _ := pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB})
	cfg := DefaultConfig()
	cfg.Conn, cfg.Clock, cfg.MaxRetries = pa, engine.NewFakeClock(time.Millisecond), 3
	ep, err := newEndpoint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	s, err := ep.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 100_000, Messages: 1})
	if err != nil {
		t.Fatal(err)
	}
	slots, _ := engine.NewSlots(16, maxDatagram)
	var p *initiator
	for _, c := range ep.cccs.byKey {
		c.Fill(time.Millisecond, slots, nil)
		p = c.pdcs[0]
	}
	buf := make([]byte, 64)
	rs, _ := engine.NewSlots(8, maxDatagram)
	for i := range 4 {
		h := uet.Header{Type: uet.TypeNack, Nack: uet.Nack{Code: uet.NackPSNOORWindow, NackPSN: p.psn(0), SPDCID: 5, DPDCID: p.id}}
		n := h.Encode(buf)
		(*endpointRx)(ep).Receive(time.Duration(2+i)*time.Millisecond, &pktio.Message{Buffers: [][]byte{buf[:n]}, N: n, Addr: addrB}, engine.NewReplies(rs))
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("sender not done after 4 PSN_OOR_WINDOW NACKs with MaxRetries 3")
	}
	if err := s.Err(); err == nil || !contains(err.Error(), "PSN_OOR_WINDOW") {
		t.Errorf("sender error %v, want the PSN_OOR_WINDOW failure", err)
	}
}
