package pds

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

var (
	addrA = netip.MustParseAddrPort("198.18.0.1:4793")
	addrB = netip.MustParseAddrPort("198.18.0.2:4793")
)

// pair is two endpoints over an in-memory pipe in fake time: the clock
// moves only when both are quiet (nothing in the pipe, both receive loops
// between batches, both transmit loops asleep), to the earliest deadline.
type pair struct {
	a, b   *Endpoint
	pa, pb *pktio.PipeConn
	clock  *engine.FakeClock
}

func newPair(t *testing.T, filter func(from netip.AddrPort, m *pktio.Message) bool, mod func(a, b *Config)) *pair {
	t.Helper()
	clock := engine.NewFakeClock(time.Millisecond)
	pa, pb := pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB, Filter: filter, Depth: 1 << 14})
	ca, cb := DefaultConfig(), DefaultConfig()
	ca.Conn, ca.Clock, ca.Verify = pa, clock, true
	cb.Conn, cb.Clock, cb.Verify = pb, clock, true
	if mod != nil {
		mod(&ca, &cb)
	}
	a, err := New(ca)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return &pair{a: a, b: b, pa: pa, pb: pb, clock: clock}
}

func inFlight(from, to *pktio.PipeConn) uint64 {
	s, r := from.Stats(), to.Stats()
	return s.DatagramsSent - s.Dropped() - r.DatagramsReceived
}

func (p *pair) idle() bool {
	return p.clock.Sleeping() == 2 && inFlight(p.pa, p.pb) == 0 && inFlight(p.pb, p.pa) == 0 &&
		p.a.eng.ReceiveIdle() && p.b.eng.ReceiveIdle()
}

// wait drives fake time until every sender is done, at most d of it.
func (p *pair) wait(t *testing.T, d time.Duration, ss ...*Sender) {
	t.Helper()
	done := func() bool {
		for _, s := range ss {
			select {
			case <-s.Done():
			default:
				return false
			}
		}
		return true
	}
	if err := p.clock.Drive(done, p.idle, p.clock.Now()+d); err != nil {
		for _, s := range ss {
			t.Logf("sender %d: %+v", s.PDC(), s.Counters())
		}
		t.Fatalf("%v; a %+v; b %+v", err, p.a.Counters(), p.b.Counters())
	}
	for _, s := range ss {
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// runFor drives fake time d forward.
func (p *pair) runFor(t *testing.T, d time.Duration) {
	t.Helper()
	p.clock.RunUntil(p.clock.Now()+d, p.idle)
}

// TestOneStream: 200 messages of 64 KiB from a to b over a clean pipe,
// every byte checked, no retransmission, at the port's rate: the payload
// goodput is the link's (1 Gbit/s) less the headers, within 2 %.
func TestOneStream(t *testing.T) {
	p := newPair(t, nil, nil)
	start := p.clock.Now()
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 7, MessageBytes: 64 << 10, Messages: 200, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Second, s)
	elapsed := p.clock.Now() - start
	ca, cb := p.a.Counters(), p.b.Counters()
	if cb.MessagesReceived != 200 || cb.VerifyErrors != 0 || cb.MessageBytesReceived != 200*64<<10 {
		t.Fatalf("b received %d messages (%d bytes), %d verify errors: want 200, 0", cb.MessagesReceived, cb.MessageBytesReceived, cb.VerifyErrors)
	}
	if ca.Retransmits != 0 || ca.Timeouts != 0 || cb.Duplicates != 0 || len(cb.NacksSent) != 0 {
		t.Errorf("losses on a clean pipe: a %+v b %+v", ca, cb)
	}
	goodput := float64(200*64<<10*8) / elapsed.Seconds()
	// Each full packet carries payloadMax of MTU + 14 Ethernet bytes.
	ideal := 1e9 * float64(p.a.payloadMax()) / float64(p.a.cfg.MTU+ethernetLen)
	t.Logf("goodput %.1f Mbit/s in %v of fake time, ideal %.1f; a %+v", goodput/1e6, elapsed, ideal/1e6, ca)
	if goodput < 0.98*ideal || goodput > 1.01*ideal {
		t.Errorf("goodput %.1f Mbit/s, want %.1f ± 2 %%", goodput/1e6, ideal/1e6)
	}
}

// TestRandomLoss: 1 % of the packets each way are lost; SACK inference,
// NACK-free RTO and retransmission deliver every message intact.
func TestRandomLoss(t *testing.T) {
	loss := pktio.NewRandomLoss(0.01, 1, 2)
	p := newPair(t, loss.Filter, nil)
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 100_000, Messages: 300, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second, s)
	ca, cb := p.a.Counters(), p.b.Counters()
	t.Logf("%d packets dropped; a: %d retransmits, %d inferred losses, %d timeouts; b: %d duplicates", loss.Dropped(), ca.Retransmits, ca.InferredLosses, ca.Timeouts, cb.Duplicates)
	if cb.MessagesReceived != 300 || cb.VerifyErrors != 0 {
		t.Fatalf("b received %d messages, %d verify errors: want 300, 0", cb.MessagesReceived, cb.VerifyErrors)
	}
	if loss.Dropped() == 0 || ca.Retransmits == 0 {
		t.Errorf("%d dropped, %d retransmitted: the test lost nothing", loss.Dropped(), ca.Retransmits)
	}
	if c := s.Counters(); c.MessagesAcked != 300 || c.BytesAcked != 300*100_000 {
		t.Errorf("sender counters %+v", c)
	}
}

// TestCCCShared: two jobs to one destination open two PDCs that share one
// CCC; its lifecycle runs IDLE → ACTIVE → READY … PENDING → IDLE, and it
// is freed when both PDCs have closed on idle.
func TestCCCShared(t *testing.T) {
	var mu sync.Mutex
	var trace []CCCTransition
	p := newPair(t, nil, func(a, _ *Config) {
		a.Trace = func(tr CCCTransition) { mu.Lock(); trace = append(trace, tr); mu.Unlock() }
	})
	s1, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 32 << 10, Messages: 50, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := p.a.Start(addrB.Addr(), Stream{JobID: 2, MessageBytes: 32 << 10, Messages: 50, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if s1.PDC() == s2.PDC() {
		t.Fatal("two jobs share a PDC")
	}
	p.wait(t, time.Second, s1, s2)
	p.runFor(t, 3*p.a.cfg.IdleTimeout)
	ca, cb := p.a.Counters(), p.b.Counters()
	if ca.CCCsCreated != 1 || ca.PDCsOpened != 2 || ca.PDCsClosed != 2 || ca.CCCsFreed != 1 {
		t.Errorf("a: %d CCCs created, %d freed, %d PDCs opened, %d closed; want 1, 1, 2, 2", ca.CCCsCreated, ca.CCCsFreed, ca.PDCsOpened, ca.PDCsClosed)
	}
	if cb.TargetPDCsOpened != 2 || cb.TargetPDCsClosed != 2 || cb.TargetPDCsExpired != 0 || cb.RxCCCsCreated != 1 || cb.RxCCCsFreed != 1 {
		t.Errorf("b: target PDCs %d opened %d closed (%d expired), rx CCCs %d created %d freed; want 2, 2 (0), 1, 1",
			cb.TargetPDCsOpened, cb.TargetPDCsClosed, cb.TargetPDCsExpired, cb.RxCCCsCreated, cb.RxCCCsFreed)
	}
	mu.Lock()
	defer mu.Unlock()
	var seq []string
	for _, tr := range trace {
		seq = append(seq, tr.To.String())
	}
	t.Logf("CCC %d transitions: %v; counts %v", len(trace), compress(seq), ca.Transitions)
	// In order: created IDLE, ACTIVE, READY first; PENDING, IDLE, FREED
	// last.
	want := []string{"IDLE", "ACTIVE", "READY"}
	if len(seq) < 6 || !equal(seq[:3], want) || !equal(seq[len(seq)-3:], []string{"PENDING", "IDLE", "FREED"}) {
		t.Errorf("transitions %v: want IDLE ACTIVE READY … PENDING IDLE FREED", compress(seq))
	}
	for i := 1; i < len(trace); i++ {
		if trace[i].From != trace[i-1].To || trace[i].At < trace[i-1].At {
			t.Errorf("transition %d %v→%v at %v follows %v→%v at %v", i, trace[i].From, trace[i].To, trace[i].At, trace[i-1].From, trace[i-1].To, trace[i-1].At)
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// compress shortens a long sequence for the log.
func compress(s []string) []string {
	if len(s) <= 12 {
		return s
	}
	return append(append(append([]string{}, s[:6]...), "…"), s[len(s)-6:]...)
}

// TestPDCLimit: a target with room for one PDC refuses the second with
// NACK NO_PDC_AVAIL; the source retries after its RTO and both complete,
// the second once the first PDC has closed.
func TestPDCLimit(t *testing.T) {
	p := newPair(t, nil, func(_, b *Config) { b.MaxPDCs = 1 })
	s1, _ := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 8 << 10, Messages: 20, Verify: true})
	s2, _ := p.a.Start(addrB.Addr(), Stream{JobID: 2, MessageBytes: 8 << 10, Messages: 20, Verify: true})
	p.wait(t, 5*time.Second, s1, s2)
	cb := p.b.Counters()
	ca := p.a.Counters()
	t.Logf("b nacks sent %v, pdc refused %d; a nacks received %v", cb.NacksSent, cb.PDCRefused, ca.NacksReceived)
	if cb.NacksSent[uet.NackNoPDCAvail.String()] == 0 || ca.NacksReceived[uet.NackNoPDCAvail.String()] == 0 {
		t.Errorf("no NO_PDC_AVAIL: b sent %v, a received %v", cb.NacksSent, ca.NacksReceived)
	}
	if cb.MessagesReceived != 40 || cb.VerifyErrors != 0 {
		t.Errorf("b received %d messages, %d verify errors: want 40, 0", cb.MessagesReceived, cb.VerifyErrors)
	}
}

// TestECNEcho: CE on the data comes back as the ACK's M flag, and NSCC
// cuts the window (the delay quadrant aside: a fake pipe has no queue, so
// the cuts are what CE with the ACK's service time makes of it). A target
// with NoECNEcho counts the CE and echoes none, not even for a CE-marked
// duplicate (the copy of a data packet written again after the stream).
func TestECNEcho(t *testing.T) {
	var dup *pktio.Message
	filter := func(from netip.AddrPort, m *pktio.Message) bool {
		if from.Addr() == addrA.Addr() && m.N > 1000 {
			m.TOS |= 3
			if dup == nil {
				dup = &pktio.Message{Buffers: [][]byte{slices.Clone(m.Buffers[0][:m.N])}, Addr: m.Addr, SrcPort: from.Port()}
			}
		}
		return false
	}
	for _, deaf := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoECNEcho=%v", deaf), func(t *testing.T) {
			dup = nil
			p := newPair(t, filter, func(_, b *Config) { b.NoECNEcho = deaf })
			s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 64 << 10, Messages: 30, Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			p.wait(t, time.Second, s)
			ca, cb := p.a.Counters(), p.b.Counters()
			t.Logf("b: %d CE, %d ACKs; a: %d echoes", cb.CEReceived, cb.AcksSent, ca.ECNEchoes)
			if cb.CEReceived == 0 || cb.MessagesReceived != 30 {
				t.Fatalf("b: %d CE received, %d of 30 messages", cb.CEReceived, cb.MessagesReceived)
			}
			switch {
			case deaf && ca.ECNEchoes != 0:
				t.Errorf("a deaf target: a got %d ECN echoes, want 0", ca.ECNEchoes)
			case !deaf && (ca.ECNEchoes == 0 || ca.ECNEchoes > cb.AcksSent):
				t.Errorf("%d ACKs sent; a: %d ECN echoes", cb.AcksSent, ca.ECNEchoes)
			}
			// The first data packet again, CE-marked: a duplicate, ACKed.
			dup.N = len(dup.Buffers[0])
			if n, err := p.pa.WriteBatch([]pktio.Message{*dup}); n != 1 || err != nil {
				t.Fatalf("write the duplicate: %d, %v", n, err)
			}
			p.runFor(t, 5*time.Millisecond)
			ca2, cb2 := p.a.Counters(), p.b.Counters()
			if cb2.Duplicates != cb.Duplicates+1 {
				t.Fatalf("b counted %d duplicates after the copy, want %d", cb2.Duplicates, cb.Duplicates+1)
			}
			if want := ca.ECNEchoes + uint64(btoi(!deaf)); ca2.ECNEchoes != want {
				t.Errorf("after a CE-marked duplicate: a counted %d ECN echoes, want %d", ca2.ECNEchoes, want)
			}
		})
	}
}

// TestCCCLimit: a target whose contexts are all taken (its one CCC sends
// to the source) answers the source's SYN with NACK NO_CCC_AVAIL; once its
// own stream is done and its CCC freed, the source gets through.
func TestCCCLimit(t *testing.T) {
	p := newPair(t, nil, func(_, b *Config) { b.MaxCCCs = 1; b.IdleTimeout = 20 * time.Millisecond })
	sb, err := p.b.Start(addrA.Addr(), Stream{JobID: 9, MessageBytes: 64 << 10, Messages: 20, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.runFor(t, 100*time.Microsecond)
	sa, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 8 << 10, Messages: 5, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, 5*time.Second, sb, sa)
	ca, cb := p.a.Counters(), p.b.Counters()
	t.Logf("b: nacks sent %v, ccc refused %d, cccs freed %d; a: nacks received %v, messages received %d", cb.NacksSent, cb.CCCRefused, cb.CCCsFreed, ca.NacksReceived, ca.MessagesReceived)
	if cb.NacksSent[uet.NackNoCCCAvail.String()] == 0 || cb.CCCRefused == 0 {
		t.Errorf("b sent no NO_CCC_AVAIL: %v", cb.NacksSent)
	}
	if cb.MessagesReceived != 5 || ca.MessagesReceived != 20 || cb.VerifyErrors+ca.VerifyErrors != 0 {
		t.Errorf("messages received: b %d (want 5), a %d (want 20); verify errors %d", cb.MessagesReceived, ca.MessagesReceived, cb.VerifyErrors+ca.VerifyErrors)
	}
}

// TestMalformed: garbage, truncated headers, unknown PDCs and spoofed
// ACKs are counted and dropped; the endpoint keeps working.
func TestMalformed(t *testing.T) {
	p := newPair(t, nil, nil)
	var h uet.Header
	h.Type = uet.TypeAckCC
	h.Ack = uet.Ack{Type: uet.TypeAckCC, DPDCID: 77, CACKPSN: 5}
	ack := make([]byte, 64)
	ack = ack[:h.Encode(ack)]
	junk := [][]byte{{}, {0xff}, make([]byte, 11), {0x10, 0, 0, 0}, ack}
	msgs := make([]pktio.Message, len(junk))
	for i := range junk {
		msgs[i] = pktio.Message{Buffers: [][]byte{junk[i]}, Addr: addrA}
	}
	if _, err := p.pb.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 3, MessageBytes: 10_000, Messages: 10, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Second, s)
	ca := p.a.Counters()
	if ca.Malformed != 4 || ca.UnknownPDC != 1 {
		t.Errorf("a: malformed %d (want 4), unknown pdc %d (want 1)", ca.Malformed, ca.UnknownPDC)
	}
	if cb := p.b.Counters(); cb.MessagesReceived != 10 {
		t.Errorf("b received %d messages, want 10", cb.MessagesReceived)
	}
}

// TestConfigErrors: a bad field is named with its value and range.
func TestConfigErrors(t *testing.T) {
	pa, _ := pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB})
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.MTU = 100 }, "mtu 100: must be 512..9000"},
		{func(c *Config) { c.RTO = time.Nanosecond }, "rto 1ns: must be"},
		{func(c *Config) { c.DSCP = 64 }, "dscp 64: must be 0..63"},
		{func(c *Config) { c.MaxPDCs = 1 << 16 }, "max_pdcs 65536: must be 1..65535"},
		{func(c *Config) { c.LinkRate = 1 * units.Kbit }, "rccc: max_wnd"},
	} {
		cfg := DefaultConfig()
		cfg.Conn = pa
		c.mod(&cfg)
		err := cfg.Validate()
		if err == nil || !contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
	if err := (Stream{MessageBytes: 0}).Validate(); err == nil || !contains(err.Error(), "message_bytes 0: must be 1..") {
		t.Errorf("Stream.Validate() = %v", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestRestartedSource: a source endpoint that restarts (same address, PDC
// IDs numbered again, new start PSNs) gets through at once: its SYN with a
// new start PSN replaces the target's stale PDC.
func TestRestartedSource(t *testing.T) {
	p := newPair(t, nil, nil)
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 10_000, Messages: 5, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Second, s)
	// The restart: a's next PDC reuses the ID the target still holds.
	p.a.mu.Lock()
	p.a.nextID = s.PDC() - 1
	for k, q := range p.a.byKey {
		q.free(p.clock.Now())
		delete(p.a.byKey, k)
	}
	p.a.mu.Unlock()
	s2, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 10_000, Messages: 5, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if s2.PDC() != s.PDC() {
		t.Fatalf("the new PDC has ID %d, want the old %d", s2.PDC(), s.PDC())
	}
	p.wait(t, 100*time.Millisecond, s2)
	if cb := p.b.Counters(); cb.TargetPDCsReplaced != 1 || cb.MessagesReceived != 10 || cb.VerifyErrors != 0 {
		t.Errorf("b: %d replaced, %d messages, %d verify errors; want 1, 10, 0", cb.TargetPDCsReplaced, cb.MessagesReceived, cb.VerifyErrors)
	}
}

// TestReestablish: the target forgets a PDC its source still holds (the
// target's idle timeout is shorter), after thousands of PSNs; the source's
// next data is refused with INV_DPDCID and it establishes the PDC again
// with SYNs whose psn_offsets count from its oldest unacknowledged PSN,
// and the stream completes.
func TestReestablish(t *testing.T) {
	p := newPair(t, nil, func(a, b *Config) { a.IdleTimeout, b.IdleTimeout = time.Second, 10*time.Millisecond })
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 1 << 20, Messages: 12, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Second, s)
	p.runFor(t, 30*time.Millisecond) // b frees its side after 20 ms
	if n := p.b.Counters().TargetPDCsExpired; n != 1 {
		t.Fatalf("b expired %d PDCs, want 1", n)
	}
	s2, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 100_000, Messages: 5, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Second, s2)
	ca, cb := p.a.Counters(), p.b.Counters()
	t.Logf("a: nacks %v, %d timeouts, %d PDC errors; b: %d target PDCs opened, %d messages", ca.NacksReceived, ca.Timeouts, ca.PDCErrors, cb.TargetPDCsOpened, cb.MessagesReceived)
	if cb.MessagesReceived != 17 || ca.PDCErrors != 0 || cb.TargetPDCsOpened != 2 {
		t.Errorf("b received %d messages over %d PDCs; a: %d PDC errors: want 17, 2, 0", cb.MessagesReceived, cb.TargetPDCsOpened, ca.PDCErrors)
	}
}

// TestManyPDCsLossy: 400 jobs to one destination, 400 PDCs in one CCC,
// through 1 % random loss: every message arrives verified, every PDC
// closes on idle and the CCC is freed. The CCC runs a PDC's timers only
// when they are due or an event touched it (pdcsched.go); a PDC whose
// RTO, probe or close were forgotten would leave its Sender waiting.
func TestManyPDCsLossy(t *testing.T) {
	loss := pktio.NewRandomLoss(0.01, 3, 4)
	const jobs = 400
	// A PDC's turn comes once per 400 packets and a loss costs it an RTO:
	// a target that freed PDCs between their packets would cost a NACK
	// and a SYN a turn, and one with a message in progress would split
	// the message across two PDCs, neither counting it received. Every
	// PDC gets its turn (TestCCCRoundRobinFullWindow): none is freed.
	p := newPair(t, loss.Filter, nil)
	senders := p.startJobs(t, jobs, 8<<10, 3)
	p.wait(t, 20*time.Second, senders...)
	for i, s := range senders {
		if err := s.Err(); err != nil {
			t.Errorf("job %d: %v (%+v)", i+1, err, s.Counters())
		}
	}
	p.runFor(t, 3*p.a.cfg.IdleTimeout)
	ca, cb := p.a.Counters(), p.b.Counters()
	t.Logf("%d packets dropped; a: %d retransmits, %d timeouts, %d probes; PDCs %d opened %d closed; b: %d target PDCs opened, %d expired",
		loss.Dropped(), ca.Retransmits, ca.Timeouts, ca.ProbesSent, ca.PDCsOpened, ca.PDCsClosed, cb.TargetPDCsOpened, cb.TargetPDCsExpired)
	if cb.MessagesReceived != 3*jobs || cb.VerifyErrors != 0 {
		t.Fatalf("b received %d messages, %d verify errors: want %d, 0; b %+v", cb.MessagesReceived, cb.VerifyErrors, 3*jobs, cb)
	}
	if loss.Dropped() == 0 || ca.Retransmits == 0 {
		t.Errorf("%d dropped, %d retransmitted: the test lost nothing", loss.Dropped(), ca.Retransmits)
	}
	if ca.CCCsCreated != 1 || ca.PDCsOpened != jobs || ca.PDCsClosed != jobs || ca.CCCsFreed != 1 {
		t.Errorf("a: %d CCCs created, %d freed, %d PDCs opened, %d closed; want 1, 1, %d, %d", ca.CCCsCreated, ca.CCCsFreed, ca.PDCsOpened, ca.PDCsClosed, jobs, jobs)
	}
	if cb.TargetPDCsExpired != 0 || cb.TargetPDCsOpened != jobs || ca.NacksReceived[uet.NackInvDPDCID.String()] != 0 {
		t.Errorf("b: %d target PDCs expired between their turns, %d opened for %d jobs, %d INV_DPDCID NACKs: want 0, %d, 0",
			cb.TargetPDCsExpired, cb.TargetPDCsOpened, jobs, ca.NacksReceived[uet.NackInvDPDCID.String()], jobs)
	}
}

// oneMTUWindow is a CCC window of one packet.
type oneMTUWindow struct{ mtu int }

func (w oneMTUWindow) Window() int                           { return w.mtu }
func (w oneMTUWindow) CanSend(inFlight, size int) bool       { return inFlight+size <= w.mtu }
func (oneMTUWindow) OnAck(now time.Duration, s cc.AckSample) {}
func (oneMTUWindow) OnNack(now time.Duration, size int)      {}
func (oneMTUWindow) OnLoss(now time.Duration, size int)      {}
func (oneMTUWindow) Advance(now time.Duration)               {}
func (oneMTUWindow) NextEvent() time.Duration                { return engine.Never }

// startJobs starts jobs streams from a to b, job IDs 1..jobs, each its
// own PDC in a's one CCC: messages messages of msgBytes, verified.
func (p *pair) startJobs(t *testing.T, jobs, msgBytes int, messages uint64) []*Sender {
	t.Helper()
	senders := make([]*Sender, jobs)
	for i := range senders {
		s, err := p.a.Start(addrB.Addr(), Stream{JobID: uint32(i + 1), MessageBytes: msgBytes, Messages: messages, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		senders[i] = s
	}
	return senders
}

// TestCCCRoundRobinFullWindow: PDCs sharing a CCC whose window holds one
// packet take turns. The CCC once picked a PDC before asking the window,
// so the PDC picked to find it full lost its turn, and with the ACK clock
// alternating full and open every other PDC waited for the rest to
// finish (in TestManyPDCsLossy, targets freed PDCs starved 100 ms).
func TestCCCRoundRobinFullWindow(t *testing.T) {
	p := newPair(t, nil, func(a, _ *Config) {
		a.NewWindow = func(time.Duration) cc.WindowController { return oneMTUWindow{a.MTU} }
	})
	start := p.clock.Now()
	const jobs = 8
	senders := p.startJobs(t, jobs, 64<<10, 1)
	anyDone := func() bool {
		for _, s := range senders {
			select {
			case <-s.Done():
				return true
			default:
			}
		}
		return false
	}
	if err := p.clock.Drive(anyDone, p.idle, p.clock.Now()+time.Second); err != nil {
		t.Fatal(err)
	}
	first := p.clock.Now() - start
	p.wait(t, time.Second, senders...)
	last := p.clock.Now() - start
	t.Logf("first PDC done at %v, last at %v", first, last)
	if first < last*3/4 {
		t.Errorf("first PDC done at %v, last at %v: the PDCs did not take turns", first, last)
	}
}

// TestCCCTurnQuantum: PDCs sharing a CCC take turns of pdcQuantum bytes,
// not of a packet, so the target's ACKs (one covers one PDC's packets in
// a row) come once a turn: a packet a turn had an ACK a packet at
// thousands of PDCs (docs/measured.md, scale).
func TestCCCTurnQuantum(t *testing.T) {
	p := newPair(t, nil, func(a, _ *Config) {
		a.NewWindow = func(time.Duration) cc.WindowController { return openWindow{} }
	})
	const jobs = 8
	senders := p.startJobs(t, jobs, 256<<10, 1)
	p.wait(t, 5*time.Second, senders...)
	cb := p.b.Counters()
	perTurn := (16 << 10) / p.a.cfg.MTU // pdcQuantum
	t.Logf("b: %d data packets, %d ACKs (a turn is %d packets of MTU %d)", cb.RxDataPackets, cb.AcksSent, perTurn, p.a.cfg.MTU)
	if cb.RxDataPackets == 0 || cb.AcksSent*uint64(perTurn) > 2*cb.RxDataPackets {
		t.Errorf("%d ACKs for %d data packets: want about one a turn of %d packets", cb.AcksSent, cb.RxDataPackets, perTurn)
	}
}

// TestTargetWaitsForItsTurn: 200 PDCs share one CCC at 50 Mbit/s, so a
// PDC's turn comes every ~130 ms, past the target's default expiry (twice
// the 50 ms idle timeout). The target learns the source's round (its PDC
// count × the gap between its packets) and keeps each PDC four turns:
// none is freed between its packets, none refused with INV_DPDCID.
func TestTargetWaitsForItsTurn(t *testing.T) {
	const jobs = 200
	p := newPair(t, nil, func(a, _ *Config) { a.LinkRate, a.BaseRTT = 50*units.Mbit, time.Millisecond })
	senders := p.startJobs(t, jobs, 8<<10, 4)
	start := p.clock.Now()
	p.wait(t, 20*time.Second, senders...)
	ca, cb := p.a.Counters(), p.b.Counters()
	t.Logf("%v for %d messages; b: %d target PDCs opened, %d expired; a: NACKs %v", p.clock.Now()-start, cb.MessagesReceived, cb.TargetPDCsOpened, cb.TargetPDCsExpired, ca.NacksReceived)
	if cb.MessagesReceived != 4*jobs || cb.VerifyErrors != 0 {
		t.Fatalf("b received %d messages, %d verify errors: want %d, 0", cb.MessagesReceived, cb.VerifyErrors, 4*jobs)
	}
	if cb.TargetPDCsExpired != 0 || cb.TargetPDCsOpened != jobs || ca.NacksReceived[uet.NackInvDPDCID.String()] != 0 {
		t.Errorf("b: %d target PDCs expired between turns, %d opened for %d jobs; a: %d INV_DPDCID: want 0, %d, 0",
			cb.TargetPDCsExpired, cb.TargetPDCsOpened, jobs, ca.NacksReceived[uet.NackInvDPDCID.String()], jobs)
	}
}

// TestRxCCCDataGapBursts: a source's packets come in bursts (16 back to
// back, then a pause); the gap a target's expiry scales with is their
// mean over windows, not the last few packets' (a per-packet average read
// after a burst said a tenth of it, and targets were freed between
// their turns: 10,000 PDCs livelocked with no message received). And it
// is the gap between turns, not packets: a PDC sending its quantum's
// packets in a row is heard from once a round.
func TestRxCCCDataGapBursts(t *testing.T) {
	for _, tc := range []struct {
		perTurn int // packets in a row of one PDC
		want    time.Duration
	}{{1, 100 * time.Microsecond}, {4, 400 * time.Microsecond}, {16, 1600 * time.Microsecond}} {
		var c rxCCC
		const window = 6250 * time.Microsecond
		now := time.Duration(0)
		for range 100 { // 160 ms
			for i := range 16 {
				now += time.Microsecond
				c.noteData(now, window, i%tc.perTurn == 0)
			}
			now += 1600*time.Microsecond - 16*time.Microsecond
		}
		if c.dataGap < tc.want*9/10 || c.dataGap > tc.want*11/10 {
			t.Errorf("dataGap %v after bursts of 16 every 1.6 ms, %d packets a turn: want %v ± 10 %%", c.dataGap, tc.perTurn, tc.want)
		}
	}
}

// TestRxCCCLoneTurns: one busy PDC among idle ones takes a turn every
// pdcQuantum bytes at its target, as at its source, so the gap between
// turns is a quantum's time, not a whole measuring window (which, times
// the source's PDC count, would keep its idle PDCs' targets for ages).
func TestRxCCCLoneTurns(t *testing.T) {
	var c rxCCC
	busy := &target{}
	const window, size = 6250 * time.Microsecond, 1024
	now := time.Duration(0)
	for range 16_000 { // 160 ms, a packet every 10 µs
		now += 10 * time.Microsecond
		c.noteData(now, window, c.beginsTurn(busy, size))
		c.last = busy
	}
	if want := 160 * time.Microsecond; c.dataGap < want*9/10 || c.dataGap > want*11/10 {
		t.Errorf("dataGap %v for one PDC sending 1 KiB every 10 µs: want %v (16 packets a turn) ± 10 %%", c.dataGap, want)
	}
}

// TestFirstPDCID: an endpoint given its first PDC ID numbers its PDCs
// from it, up (a lab parts its hosts' endpoints so).
func TestFirstPDCID(t *testing.T) {
	p := newPair(t, nil, func(a, _ *Config) { a.FirstPDCID = 4242 })
	var ids []uint16
	for job := range uint32(2) {
		s, err := p.a.Start(addrB.Addr(), Stream{JobID: job + 1, MessageBytes: 10_000, Messages: 2, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		p.wait(t, time.Second, s)
		ids = append(ids, s.PDC())
	}
	if ids[0] != 4242 || ids[1] != 4243 {
		t.Errorf("PDC IDs %v, want 4242 and 4243", ids)
	}
}
