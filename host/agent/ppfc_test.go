package agent

import (
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/rpbpf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// kickWaker stands in for the engine's waker where no loop runs: it
// counts kicks.
type kickWaker struct{ kicks atomic.Int64 }

func (w *kickWaker) Sleep(time.Duration) error { return errors.New("no transmit loop") }
func (w *kickWaker) Kick()                     { w.kicks.Add(1) }
func (w *kickWaker) Close() error              { return nil }

var (
	peerX   = netip.MustParseAddrPort("198.18.0.2:4791")
	peerY   = netip.MustParseAddrPort("198.18.0.3:4791")
	switchS = netip.MustParseAddrPort("198.18.9.1:49404") // a switch port, bpf/port.c's source port
)

// ppfcLab is one agent without its loops (newAgent) on a fake clock. The
// test is its transmit loop (tx), its receive loop (deliver), its peers
// and the switch; nothing runs but what it calls.
type ppfcLab struct {
	t      *testing.T
	a      *Agent
	clock  *engine.FakeClock
	waker  *kickWaker
	local  netip.AddrPort // the agent's address and receive port
	slots  []txPacket
	rslots []txPacket
}

func newPPFCLab(t *testing.T, mod func(*Config)) *ppfcLab {
	t.Helper()
	pa, _ := pktio.NewPipe(pktio.PipeOptions{})
	clock, waker := engine.NewFakeClock(0), &kickWaker{}
	cfg := Config{Conn: pa, Clock: clock, Waker: waker}
	if mod != nil {
		mod(&cfg)
	}
	a, err := newAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	slots, _ := newSlots(64)
	rslots, _ := newSlots(8)
	return &ppfcLab{t: t, a: a, clock: clock, waker: waker, local: pa.LocalAddr(), slots: slots, rslots: rslots}
}

// qp connects a QP to peer (its QPN 0x100, first PSN 0) and starts an
// endless WRITE of 4 KB messages: unpaced, so each tx fills the window of
// 16 packets; AckReq every 4; ACK timeout 1 ms.
func (l *ppfcLab) qp(peer netip.AddrPort) *QP {
	l.t.Helper()
	cfg := DefaultQPConfig()
	cfg.Window, cfg.AckReqEvery, cfg.AckTimeout = 16, 4, time.Millisecond
	qp, err := l.a.CreateQP(cfg)
	if err != nil {
		l.t.Fatal(err)
	}
	if err := qp.Connect(l.local, Endpoint{Addr: peer, QPN: 0x100, Len: 1 << 20, MTU: cfg.MTU}); err != nil {
		l.t.Fatal(err)
	}
	if err := qp.Start(Stream{Op: OpWrite, MessageBytes: 4096}); err != nil {
		l.t.Fatal(err)
	}
	return qp
}

// tx runs the transmit loop over qp at the clock's time until it would
// sleep, as txLoop does: the packets it sends (in l.slots) and when it
// next wants to run.
func (l *ppfcLab) tx(qp *QP) (int, time.Duration) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	now, total := l.clock.Now(), 0
	for range 100 {
		n, next := qp.fillLocked(now, l.slots[total:], nil)
		total += n
		if n == 0 && next > now {
			return total, next
		}
	}
	l.t.Fatalf("qp %#x: the transmit loop does not go idle at %v", qp.QPN(), now)
	return 0, 0
}

// wantTx checks what the transmit loop does for qp now.
func (l *ppfcLab) wantTx(qp *QP, pkts int, next time.Duration) {
	l.t.Helper()
	n, due := l.tx(qp)
	if n != pkts || due != next {
		l.t.Fatalf("at %v qp %#x sent %d packets, next at %v; want %d, next at %v", l.clock.Now(), qp.QPN(), n, due, pkts, next)
	}
}

// deliver runs the receive path on one datagram from `from` and returns
// the replies of the batch (NAKs and CNPs, then coalesced ACKs).
func (l *ppfcLab) deliver(from netip.AddrPort, tos uint8, b []byte) []txPacket {
	rx := agentRx{a: l.a}
	out := engine.NewReplies(l.rslots)
	m := pktio.Message{Buffers: [][]byte{b}, N: len(b), Addr: from, TOS: tos}
	rx.Receive(l.clock.Now(), &m, out)
	rx.EndBatch(out)
	return out.Packets()
}

// ppfc sends a notification from the switch, ICRC sealed to the agent.
func (l *ppfcLab) ppfc(from netip.AddrPort, p roce.PPFC) {
	l.t.Helper()
	b := make([]byte, roce.PPFCLen)
	if _, err := roce.BuildPPFC(b, from, l.local, &p); err != nil {
		l.t.Fatal(err)
	}
	l.deliver(from, 0, b)
}

func stop(dest netip.AddrPort, pause time.Duration) roce.PPFC {
	return roce.PPFC{Dest: dest.Addr(), Action: roce.PPFCStop, Port: 3, Pause: pause}
}

func resume(dest netip.AddrPort) roce.PPFC {
	return roce.PPFC{Dest: dest.Addr(), Action: roce.PPFCResume, Port: 3}
}

// ack acknowledges qp's first k packets, from its peer.
func (l *ppfcLab) ack(qp *QP, k uint64) {
	l.t.Helper()
	qp.mu.Lock()
	psn := qp.psn(qp.mu.req.initPSN, k-1)
	peer, local := qp.mu.peer.Addr, netip.AddrPortFrom(qp.mu.local.Addr(), roce.UDPPort)
	qp.mu.Unlock()
	b := make([]byte, 64)
	n := buildAck(b, peer, local, roce.DefaultPKey, qp.QPN(), psn, roce.ACKSyndrome(roce.CreditsUnlimited), 0)
	l.deliver(peer, 0, b[:n])
}

// ackAll acknowledges everything qp has sent.
func (l *ppfcLab) ackAll(qp *QP) {
	l.t.Helper()
	_, sent := qp.Progress()
	l.ack(qp, sent)
}

// counters checks qp's PPFC counters.
func wantPPFC(t *testing.T, qp *QP, pauses, resumes uint64, paused time.Duration) {
	t.Helper()
	c := qp.Counters()
	if c.PPFCPauses != pauses || c.PPFCResumes != resumes || c.PPFCPausedNs != uint64(paused) {
		t.Fatalf("qp %#x: ppfc_pauses %d, ppfc_resumes %d, ppfc_paused_ns %d; want %d, %d, %d",
			qp.QPN(), c.PPFCPauses, c.PPFCResumes, c.PPFCPausedNs, pauses, resumes, paused.Nanoseconds())
	}
}

// TestPPFCStop: a stop for X pauses exactly the QPs whose peer is X for its
// Pause Duration; the QP toward Y keeps sending.
func TestPPFCStop(t *testing.T) {
	l := newPPFCLab(t, nil)
	x1, x2, y := l.qp(peerX), l.qp(peerX), l.qp(peerY)
	for _, qp := range []*QP{x1, x2, y} {
		l.wantTx(qp, 16, time.Millisecond) // the window; next: its ACK timeout
		l.ackAll(qp)
	}
	l.clock.Set(10 * time.Microsecond)
	l.ppfc(switchS, stop(peerX, 100*time.Microsecond))
	l.wantTx(x1, 0, 110*time.Microsecond) // nothing until the pause ends
	l.wantTx(x2, 0, 110*time.Microsecond)
	l.wantTx(y, 16, 1010*time.Microsecond)
	l.clock.Set(110*time.Microsecond - 1)
	l.wantTx(x1, 0, 110*time.Microsecond)
	l.clock.Set(110 * time.Microsecond)
	l.wantTx(x1, 16, 1110*time.Microsecond)
	l.wantTx(x2, 16, 1110*time.Microsecond)
	wantPPFC(t, x1, 1, 0, 100*time.Microsecond)
	wantPPFC(t, x2, 1, 0, 100*time.Microsecond)
	wantPPFC(t, y, 0, 0, 0)
	c := l.a.Counters()
	if c.PPFCReceivedStop != 1 || c.PPFCPauses != 2 || c.PPFCIgnoredSource != 0 || c.PPFCIgnoredDestination != 0 || c.Malformed != 0 || c.ICRCErrors != 0 {
		t.Errorf("agent counters %+v: want ppfc_received_stop 1, ppfc_pauses 2, nothing ignored or dropped", c)
	}
}

// TestPPFCResume: a resume ends the pause at once and kicks the transmit
// loop; a stop with Pause Duration 0 lasts until then, or PPFCMaxPause.
func TestPPFCResume(t *testing.T) {
	l := newPPFCLab(t, nil)
	x := l.qp(peerX)
	l.wantTx(x, 16, time.Millisecond)
	l.ackAll(x)
	l.ppfc(switchS, stop(peerX, 0))
	l.wantTx(x, 0, roce.MaxPPFCPause) // 65.535 ms
	l.clock.Set(30 * time.Microsecond)
	kicks := l.waker.kicks.Load()
	l.ppfc(switchS, resume(peerX))
	if l.waker.kicks.Load() == kicks {
		t.Error("resume did not kick the transmit loop")
	}
	l.wantTx(x, 16, 1030*time.Microsecond)
	wantPPFC(t, x, 1, 1, 30*time.Microsecond)
	// A resume to a QP that is not paused changes nothing.
	l.ppfc(switchS, resume(peerX))
	wantPPFC(t, x, 1, 1, 30*time.Microsecond)
	if c := l.a.Counters(); c.PPFCReceivedStop != 1 || c.PPFCReceivedResume != 2 || c.PPFCIgnoredDestination != 0 {
		t.Errorf("agent counters %+v: want 1 stop and 2 resumes received", c)
	}
	// Without a resume, the pause ends at PPFCMaxPause.
	l.ackAll(x)
	start := l.clock.Now()
	l.ppfc(switchS, stop(peerX, 0))
	l.clock.Set(start + roce.MaxPPFCPause - 1)
	l.wantTx(x, 0, start+roce.MaxPPFCPause)
	l.clock.Set(start + roce.MaxPPFCPause)
	l.wantTx(x, 16, start+roce.MaxPPFCPause+time.Millisecond)
	wantPPFC(t, x, 2, 1, 30*time.Microsecond+roce.MaxPPFCPause)
}

// TestPPFCExtend: a stop to a paused QP extends the pause, never shortens
// it; Config.PPFCMaxPause bounds every pause.
func TestPPFCExtend(t *testing.T) {
	l := newPPFCLab(t, func(c *Config) { c.PPFCMaxPause = 300 * time.Microsecond })
	x := l.qp(peerX)
	l.wantTx(x, 16, time.Millisecond)
	l.ackAll(x)
	l.ppfc(switchS, stop(peerX, 100*time.Microsecond))
	l.clock.Set(50 * time.Microsecond)
	l.ppfc(switchS, stop(peerX, 20*time.Microsecond)) // ends before the pause: no effect
	l.wantTx(x, 0, 100*time.Microsecond)
	l.ppfc(switchS, stop(peerX, 100*time.Microsecond))
	l.wantTx(x, 0, 150*time.Microsecond)
	l.ppfc(switchS, stop(peerX, 0)) // until resume: PPFCMaxPause from now
	l.wantTx(x, 0, 350*time.Microsecond)
	l.ppfc(switchS, stop(peerX, 5*time.Millisecond)) // above PPFCMaxPause
	l.wantTx(x, 0, 350*time.Microsecond)
	l.clock.Set(350 * time.Microsecond)
	l.wantTx(x, 16, 1350*time.Microsecond)
	wantPPFC(t, x, 5, 0, 350*time.Microsecond)
}

// TestPPFCNoAckTimeout: time paused does not count toward the ACK timeout,
// and a paused requester retransmits nothing.
func TestPPFCNoAckTimeout(t *testing.T) {
	l := newPPFCLab(t, nil)
	x := l.qp(peerX)
	l.wantTx(x, 16, time.Millisecond) // unacknowledged: times out at 1 ms
	l.clock.Set(500 * time.Microsecond)
	l.ppfc(switchS, stop(peerX, 0))
	l.clock.Set(10 * time.Millisecond)
	l.wantTx(x, 0, 500*time.Microsecond+roce.MaxPPFCPause)
	l.ppfc(switchS, resume(peerX))
	// 0.5 ms of the timeout ran before the pause, 0.5 ms remain.
	l.wantTx(x, 0, 10500*time.Microsecond)
	l.clock.Set(10500*time.Microsecond - 1)
	l.wantTx(x, 0, 10500*time.Microsecond)
	if c := x.Counters(); c.LocalAckTimeoutErr != 0 || c.RetransmitPackets != 0 {
		t.Fatalf("local_ack_timeout_err %d, retransmitted_packets %d: want 0 before the timeout", c.LocalAckTimeoutErr, c.RetransmitPackets)
	}
	l.clock.Set(10500 * time.Microsecond)
	l.wantTx(x, 16, 11500*time.Microsecond) // the timeout, then go-back-N
	if c := x.Counters(); c.LocalAckTimeoutErr != 1 || c.RetransmitPackets != 16 {
		t.Fatalf("local_ack_timeout_err %d, retransmitted_packets %d: want 1 and 16", c.LocalAckTimeoutErr, c.RetransmitPackets)
	}

	// An ACK during the pause restarts the timer; the pause after it does
	// not count either.
	l.ackAll(x)
	l.clock.Set(20 * time.Millisecond)
	l.wantTx(x, 16, 21*time.Millisecond)
	l.clock.Set(20200 * time.Microsecond)
	l.ppfc(switchS, stop(peerX, 0))
	l.clock.Set(20400 * time.Microsecond)
	_, sent := x.Progress()
	l.ack(x, sent-8) // half the window
	l.wantTx(x, 0, 20200*time.Microsecond+roce.MaxPPFCPause)
	l.clock.Set(25 * time.Millisecond)
	l.ppfc(switchS, resume(peerX))
	l.wantTx(x, 8, 26*time.Millisecond) // the window's other half; timer from the resume
	if c := x.Counters(); c.LocalAckTimeoutErr != 1 {
		t.Errorf("local_ack_timeout_err %d, want still 1", c.LocalAckTimeoutErr)
	}
	wantPPFC(t, x, 2, 2, 9500*time.Microsecond+4800*time.Microsecond)
}

// TestPPFCRespondsWhilePaused: a paused QP still places what its peer
// sends, ACKs it and answers CE with CNPs, at once or held back by
// min_time_between_cnps.
func TestPPFCRespondsWhilePaused(t *testing.T) {
	l := newPPFCLab(t, nil)
	x := l.qp(peerX)
	l.ppfc(switchS, stop(peerX, 0))
	data := func(psn uint32) []byte {
		h := roce.Header{
			BTH:  roce.BTH{Opcode: roce.OpRCWriteOnly, PKey: roce.DefaultPKey, DestQP: x.QPN(), PSN: psn, AckReq: true},
			RETH: roce.RETH{VA: x.va, RKey: x.rkey, DMALen: 64},
		}
		b := make([]byte, 128)
		n := roce.Build(b, &h, make([]byte, 64))
		roce.SealICRC(peerX, l.local, b[:n])
		return b[:n]
	}
	ops := func(pkts []txPacket) (s []string) {
		for _, p := range pkts {
			s = append(s, roce.Opcode(p.Buf[0]).String())
		}
		return s
	}
	if got := ops(l.deliver(peerX, ecnCE, data(0))); strings.Join(got, " ") != "CNP RC_ACKNOWLEDGE" {
		t.Fatalf("replies %v: want a CNP and an ACK", got)
	}
	l.clock.Set(time.Microsecond)
	if got := ops(l.deliver(peerX, ecnCE, data(1))); strings.Join(got, " ") != "RC_ACKNOWLEDGE" {
		t.Fatalf("replies %v: want an ACK (the CNP waits for min_time_between_cnps)", got)
	}
	l.clock.Set(4 * time.Microsecond)
	l.wantTx(x, 1, roce.MaxPPFCPause) // the held-back CNP, no data
	if op := roce.Opcode(l.slots[0].Buf[0]); op != roce.OpCNP {
		t.Errorf("sent %v while paused, want the CNP", op)
	}
	if c := x.Counters(); c.RecvMessages != 2 || c.NPCNPSent != 2 {
		t.Errorf("received_messages %d, np_cnp_sent %d: want 2 and 2", c.RecvMessages, c.NPCNPSent)
	}
}

// TestPPFCIgnored: a notification from outside PPFCSources, or naming a
// destination no connected QP has for peer, is counted and changes
// nothing.
func TestPPFCIgnored(t *testing.T) {
	l := newPPFCLab(t, func(c *Config) {
		c.PPFCSources = []netip.Prefix{netip.MustParsePrefix("198.18.9.0/24"), netip.MustParsePrefix("2001:db8:9::/48")}
	})
	x := l.qp(peerX)
	gone := l.qp(peerY)
	gone.Destroy()
	l.ppfc(netip.MustParseAddrPort("198.18.7.1:4791"), stop(peerX, time.Millisecond)) // not a listed switch
	l.ppfc(switchS, stop(peerY, time.Millisecond))                                    // its only QP is destroyed
	l.ppfc(switchS, stop(netip.MustParseAddrPort("198.18.0.77:4791"), time.Millisecond))
	nobody := netip.MustParseAddr("198.18.0.77")
	l.ppfc(switchS, roce.PPFC{Dest: nobody, Action: roce.PPFCAlarm, Pause: time.Millisecond})
	l.ppfc(switchS, roce.PPFC{Dest: nobody, Action: roce.PPFCHold, Pause: time.Millisecond})
	l.wantTx(x, 16, time.Millisecond)
	wantPPFC(t, x, 0, 0, 0)
	c := l.a.Counters()
	want := [...]uint64{3, 0, 1, 1, 1, 4}
	got := [...]uint64{c.PPFCReceivedStop, c.PPFCReceivedResume, c.PPFCReceivedAlarm, c.PPFCReceivedHold, c.PPFCIgnoredSource, c.PPFCIgnoredDestination}
	if got != want {
		t.Errorf("received stop/resume/alarm/hold, ignored source/destination %v, want %v", got, want)
	}
	// From a listed switch, it applies.
	l.ppfc(netip.MustParseAddrPort("198.18.9.200:4791"), stop(peerX, time.Millisecond))
	l.wantTx(x, 0, time.Millisecond)
}

// TestPPFCDropped: a corrupted notification is dropped (icrc_errors), a
// malformed one too (malformed); neither pauses anything. SkipICRCCheck
// takes the corrupted one.
func TestPPFCDropped(t *testing.T) {
	l := newPPFCLab(t, nil)
	x := l.qp(peerX)
	good := make([]byte, roce.PPFCLen)
	p := stop(peerX, time.Millisecond)
	if _, err := roce.BuildPPFC(good, switchS, l.local, &p); err != nil {
		t.Fatal(err)
	}
	corrupt := append([]byte(nil), good...)
	corrupt[roce.PPFCLen-roce.ICRCLen-1] ^= 0x01 // the Pause Duration's low bit
	otherDst := make([]byte, roce.PPFCLen)
	if _, err := roce.BuildPPFC(otherDst, switchS, netip.MustParseAddrPort("198.18.0.9:4791"), &p); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{corrupt, otherDst, good[:roce.PPFCLen-1], append(append([]byte(nil), good...), 0, 0, 0, 0)} {
		l.deliver(switchS, 0, b)
	}
	l.wantTx(x, 16, time.Millisecond)
	if c := l.a.Counters(); c.ICRCErrors != 2 || c.Malformed != 2 || c.PPFCReceivedStop != 0 || c.PPFCPauses != 0 {
		t.Errorf("icrc_errors %d, malformed %d, ppfc_received_stop %d, ppfc_pauses %d: want 2, 2, 0, 0",
			c.ICRCErrors, c.Malformed, c.PPFCReceivedStop, c.PPFCPauses)
	}

	s := newPPFCLab(t, func(c *Config) { c.SkipICRCCheck = true })
	sx := s.qp(peerX)
	s.deliver(switchS, 0, corrupt)
	s.wantTx(sx, 0, time.Millisecond+time.Microsecond) // 1001 µs: the flipped bit
}

func TestPPFCConfigErrors(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.PPFCSources = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), {}} }, "agent: ppfc_sources[1] invalid Prefix: not a valid prefix"},
		{func(c *Config) { c.PPFCSources = []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")} },
			"agent: ppfc_sources[0] ::ffff:10.0.0.0/104: IPv4-mapped, never matches: write the IPv4 prefix"},
		{func(c *Config) { c.PPFCMaxPause = -time.Millisecond }, "agent: ppfc_max_pause -1ms: must be 1us..1s"},
		{func(c *Config) { c.PPFCMaxPause = 2 * time.Second }, "agent: ppfc_max_pause 2s: must be 1us..1s"},
	} {
		pa, _ := pktio.NewPipe(pktio.PipeOptions{})
		cfg := Config{Conn: pa}
		c.mod(&cfg)
		a, err := New(cfg)
		if err == nil {
			_ = a.Close()
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("got %v, want %q", err, c.want)
		}
		_ = pa.Close()
	}
}

// TestPPFCThroughLoops: over a pipe with both agents' loops running, a
// stop from the switch holds the requester, whose transmit loop sleeps
// until the resume wakes it; the stream then completes without a timeout.
func TestPPFCThroughLoops(t *testing.T) {
	pa, pb := pktio.NewPipe(pktio.PipeOptions{Depth: 1 << 14})
	a, err := New(Config{Conn: pa, PPFCMaxPause: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Conn: pb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	p := &pair{a: a, b: b, pa: pa, pb: pb}
	cfg := DefaultQPConfig()
	cfg.RateCap = 100 * units.Mbit // the stream lasts
	qa, qb := p.connect(t, cfg, DefaultQPConfig())
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 64 << 10, Messages: 40}); err != nil {
		t.Fatal(err)
	}
	// The switch sits behind pb here: the pipe delivers from pb's address.
	send := func(n roce.PPFC) {
		buf := make([]byte, roce.PPFCLen)
		if _, err := roce.BuildPPFC(buf, pb.LocalAddr(), pa.LocalAddr(), &n); err != nil {
			t.Fatal(err)
		}
		if _, err := pb.WriteBatch([]pktio.Message{{Buffers: [][]byte{buf}, Addr: pa.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5 s; counters %+v", what, qa.Counters())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("first packets acknowledged", func() bool { acked, _ := qa.Progress(); return acked > 0 })
	send(stop(pb.LocalAddr(), 0))
	waitFor("the stop applied", func() bool { return qa.Counters().PPFCPauses == 1 })
	_, sent0 := qa.Progress()
	time.Sleep(20 * time.Millisecond)
	if _, sent := qa.Progress(); sent != sent0 {
		t.Fatalf("sent %d packets while paused", sent-sent0)
	}
	send(resume(pb.LocalAddr()))
	waitDone(t, qa, 10*time.Second)
	c := qa.Counters()
	if c.PPFCResumes != 1 || c.PPFCPausedNs < uint64(20*time.Millisecond) || c.LocalAckTimeoutErr != 0 || c.RetransmitPackets != 0 {
		t.Errorf("requester %+v: want one resume after ≥ 20 ms paused, no timeout, no retransmission", c)
	}
	if rb := qb.Counters(); rb.RecvMessages != 40 {
		t.Errorf("responder received %d messages, want 40", rb.RecvMessages)
	}
}

// wildcardPipe is a pipe end that says it is bound to 0.0.0.0, as a
// RoCEConn listening on the wildcard does.
type wildcardPipe struct{ *pktio.PipeConn }

func (w wildcardPipe) LocalAddr() netip.AddrPort {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), w.PipeConn.LocalAddr().Port())
}

// TestPPFCWildcardConn: on a conn bound to a wildcard the ICRC is checked
// against the address the QPs are connected on.
func TestPPFCWildcardConn(t *testing.T) {
	l := newPPFCLab(t, func(c *Config) { c.Conn = wildcardPipe{c.Conn.(*pktio.PipeConn)} })
	x := l.qp(peerX)
	p := stop(peerX, 100*time.Microsecond)
	other := make([]byte, roce.PPFCLen)
	if _, err := roce.BuildPPFC(other, switchS, netip.MustParseAddrPort("198.18.0.9:4791"), &p); err != nil {
		t.Fatal(err)
	}
	l.deliver(switchS, 0, other)
	if c := l.a.Counters(); c.ICRCErrors != 1 || c.PPFCReceivedStop != 0 {
		t.Fatalf("sealed to another address: icrc_errors %d, ppfc_received_stop %d; want 1, 0", c.ICRCErrors, c.PPFCReceivedStop)
	}
	l.ppfc(switchS, p) // sealed to l.local, the QP's address
	l.wantTx(x, 0, 100*time.Microsecond)
	if c := l.a.Counters(); c.ICRCErrors != 1 || c.PPFCReceivedStop != 1 {
		t.Errorf("icrc_errors %d, ppfc_received_stop %d; want 1, 1", c.ICRCErrors, c.PPFCReceivedStop)
	}
}

func hold(dest netip.AddrPort, pause time.Duration) roce.PPFC {
	return roce.PPFC{Dest: dest.Addr(), Action: roce.PPFCHold, Port: 3, Pause: pause}
}

func alarm(dest netip.AddrPort, d time.Duration) roce.PPFC {
	return roce.PPFC{Dest: dest.Addr(), Action: roce.PPFCAlarm, Port: 3, Pause: d}
}

// TestPPFCHold: a hold pauses as a stop does, a paused QP's pause is
// extended by it, never shortened; holds count apart from stops.
func TestPPFCHold(t *testing.T) {
	l := newPPFCLab(t, nil)
	x, y := l.qp(peerX), l.qp(peerY)
	for _, qp := range []*QP{x, y} {
		l.wantTx(qp, 16, time.Millisecond)
		l.ackAll(qp)
	}
	l.ppfc(switchS, stop(peerX, 100*time.Microsecond))
	l.clock.Set(100 * time.Microsecond) // the pause ran out; the port holds
	l.ppfc(switchS, hold(peerX, 80*time.Microsecond))
	l.wantTx(x, 0, 180*time.Microsecond)
	l.wantTx(y, 16, 1100*time.Microsecond)
	l.clock.Set(150 * time.Microsecond)
	l.ppfc(switchS, hold(peerX, 10*time.Microsecond)) // ends before the pause: no effect
	l.wantTx(x, 0, 180*time.Microsecond)
	l.ppfc(switchS, hold(peerX, 50*time.Microsecond))
	l.wantTx(x, 0, 200*time.Microsecond)
	l.clock.Set(200 * time.Microsecond)
	l.wantTx(x, 16, 1200*time.Microsecond)
	// The stop's pause and the holds' are two pauses: 100 + 100 µs.
	wantPPFC(t, x, 1, 0, 200*time.Microsecond)
	if c := x.Counters(); c.PPFCHolds != 3 {
		t.Errorf("ppfc_holds %d, want 3", c.PPFCHolds)
	}
	if c := l.a.Counters(); c.PPFCReceivedHold != 3 || c.PPFCHolds != 3 || c.PPFCPauses != 1 {
		t.Errorf("agent counters %+v: want 3 holds received and taken, 1 pause", c)
	}
}

// dcqcnQP connects a QP with DCQCN (the paper profile at 1 Gbit/s: Rc
// halves on the first CNP, then climbs back every 55 µs) as l.qp does.
func (l *ppfcLab) dcqcnQP(peer netip.AddrPort) *QP {
	l.t.Helper()
	cfg := DefaultQPConfig()
	cfg.Window, cfg.AckReqEvery, cfg.AckTimeout = 16, 4, time.Millisecond
	cfg.CC, cfg.DCQCN = CCDCQCN, dcqcn.PaperParams(units.Gbit)
	qp, err := l.a.CreateQP(cfg)
	if err != nil {
		l.t.Fatal(err)
	}
	if err := qp.Connect(l.local, Endpoint{Addr: peer, QPN: 0x100, Len: 1 << 20, MTU: cfg.MTU}); err != nil {
		l.t.Fatal(err)
	}
	if err := qp.Start(Stream{Op: OpWrite, MessageBytes: 4096}); err != nil {
		l.t.Fatal(err)
	}
	return qp
}

// cnp delivers a CNP for qp from its peer.
func (l *ppfcLab) cnp(qp *QP, peer netip.AddrPort) {
	l.t.Helper()
	h := roce.CNPHeader(qp.QPN(), roce.DefaultPKey)
	b := make([]byte, roce.PacketLen(roce.OpCNP, 0))
	b = b[:roce.Build(b, &h, nil)]
	roce.SealICRC(peer, l.local, b)
	l.deliver(peer, 0, b)
}

func wantRc(t *testing.T, qp *QP, at time.Duration, rc units.Rate) {
	t.Helper()
	s, ok := qp.CC()
	if !ok || s.Rc != rc {
		t.Fatalf("at %v: Rc %v (DCQCN %v), want %v", at, s.Rc, ok, rc)
	}
}

// TestPPFCAlarm: an alarm holds the DCQCN rate of the QPs toward the
// congested destination for its duration: no increase event takes effect
// (Rc and Rt stay), the QP is neither paused nor cut, and the recovery
// resumes at the first increase event after it. A QP without DCQCN has no
// rate to hold: the alarm is received and not counted as obeyed.
func TestPPFCAlarm(t *testing.T) {
	l := newPPFCLab(t, nil)
	x, plain := l.dcqcnQP(peerX), l.qp(peerX)
	l.tx(x)
	l.ackAll(x)
	l.clock.Set(10 * time.Microsecond)
	l.cnp(x, peerX)
	wantRc(t, x, 10*time.Microsecond, 500*units.Mbit)
	// Increase events at 65, 120, 175, 230 µs …; the alarm holds those
	// before 220 µs.
	l.clock.Set(20 * time.Microsecond)
	l.ppfc(switchS, alarm(peerX, 200*time.Microsecond))
	if n, _ := l.tx(x); n == 0 {
		t.Error("an alarmed QP sent nothing: an alarm does not pause")
	}
	for _, at := range []time.Duration{65, 120, 175, 229} {
		l.clock.Set(at * time.Microsecond)
		wantRc(t, x, l.clock.Now(), 500*units.Mbit)
	}
	l.clock.Set(230 * time.Microsecond)
	wantRc(t, x, l.clock.Now(), 750*units.Mbit)
	s, _ := x.CC()
	if s.Stats.IncreaseHolds != 3 || s.Stats.RateCuts != 1 || s.Rt != units.Gbit {
		t.Errorf("RP %+v: want 3 increase events held, 1 cut, Rt 1gbit", s)
	}
	if c := x.Counters(); c.PPFCAlarmsObeyed != 1 || c.PPFCPauses != 0 || c.PPFCHolds != 0 {
		t.Errorf("counters %+v: want 1 alarm obeyed, no pause", c)
	}
	wantPPFC(t, x, 0, 0, 0)
	if c := plain.Counters(); c.PPFCAlarmsObeyed != 0 {
		t.Errorf("a QP without DCQCN obeyed %d alarms", c.PPFCAlarmsObeyed)
	}
	if c := l.a.Counters(); c.PPFCReceivedAlarm != 1 || c.PPFCAlarmsObeyed != 1 || c.PPFCIgnoredDestination != 0 {
		t.Errorf("agent counters %+v: want 1 alarm received, 1 obeyed", c)
	}
}

// TestPPFCAlarmKernelCNPs: with the RP's CNP intake in the kernel
// (Config.RPOffload), the alarm first runs the RP on the CNPs the kernel
// took before it (each at its arrival), then holds: it does not move the
// RP past them.
func TestPPFCAlarmKernelCNPs(t *testing.T) {
	off := &fakeRP{qps: map[uint32]rpbpf.QPContext{}, ctr: map[uint32]*fakeCNPs{}}
	const kernelNow = uint64(time.Hour) // stands still with the fake clock
	l := newPPFCLab(t, func(c *Config) {
		c.RPOffload = off
		c.KernelNs = func() uint64 { return kernelNow }
	})
	x := l.dcqcnQP(peerX)
	l.tx(x)
	l.ackAll(x)
	l.clock.Set(100 * time.Microsecond)
	// The kernel counted a CNP 30 µs ago; nothing has read it yet.
	// The alarm the kernel took too, now.
	off.ctr[x.QPN()].add(kernelNow - uint64(30*time.Microsecond))
	off.ctr[x.QPN()].addPPFC(rpbpf.PPFCEvent{AtNs: kernelNow, Source: switchS.Addr(), Action: roce.PPFCAlarm, Pause: 200 * time.Microsecond})
	l.tx(x)
	if c := x.Counters(); c.RPCNPKernel != 1 || c.RPCNPHandled != 1 || c.PPFCAlarmsObeyed != 1 {
		t.Fatalf("counters %+v: want the kernel's CNP applied by the alarm, before its hold, and the alarm obeyed", c)
	}
	// Cut at 70 µs: the increase events at 125, 180, 235 and 290 µs
	// fall in the hold (to 300 µs).
	l.clock.Set(299 * time.Microsecond)
	if s, _ := x.CC(); s.Stats.RateCuts != 1 || s.Stats.IncreaseHolds == 0 || s.Rc > 750*units.Mbit {
		t.Errorf("RP %+v: want one cut and the increase events after it held", s)
	}
}

// TestPPFCWatchdog: a storm of stops, each within PPFCMaxPause, one every
// 50 µs: the QP is paused for PPFCWatchdog, then sends for as long again
// ignoring stops, then obeys the storm again (issue 28: a 65,535 µs pause
// repeated forever stalled the QP forever).
func TestPPFCWatchdog(t *testing.T) {
	const wd = time.Millisecond
	l := newPPFCLab(t, func(c *Config) { c.PPFCMaxPause, c.PPFCWatchdog = 300*time.Microsecond, wd })
	x := l.qp(peerX)
	l.wantTx(x, 16, time.Millisecond)
	l.ackAll(x)
	paused := func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		return x.ppfcPausedLocked(l.clock.Now())
	}
	ignored := 0
	for at := time.Duration(0); at <= 3500*time.Microsecond; at += 50 * time.Microsecond {
		l.clock.Set(at)
		l.ppfc(switchS, stop(peerX, 300*time.Microsecond))
		// Paused in [0, 1 ms) and [2, 3 ms), released in between. The
		// stop that would take a pause past 1 ms trips the watchdog (at
		// 0.75 and 2.75 ms); from then on stops are ignored until the
		// release ends.
		released := at >= wd && at < 2*wd || at >= 3*wd
		if in := at % (2 * wd); in > wd-300*time.Microsecond+50*time.Microsecond || released {
			ignored++
		}
		if got := paused(); got == released {
			t.Fatalf("at %v: paused %v, want %v", at, got, !released)
		}
	}
	c := x.Counters()
	if c.PPFCWatchdogTrips != 2 || c.PPFCWatchdogIgnored != uint64(ignored) || c.PPFCPausedNs != uint64(2*wd) {
		t.Errorf("watchdog trips %d, ignored %d, paused %v; want 2, %d, %v", c.PPFCWatchdogTrips, c.PPFCWatchdogIgnored,
			time.Duration(c.PPFCPausedNs), ignored, 2*wd)
	}
	// Released, it sends.
	l.ackAll(x)
	if n, _ := l.tx(x); n == 0 {
		t.Error("released by the watchdog, the QP sent nothing")
	}
	// Off: the storm pauses it for good.
	l2 := newPPFCLab(t, func(c *Config) { c.PPFCMaxPause, c.PPFCWatchdog = 300*time.Microsecond, -1 })
	y := l2.qp(peerX)
	for at := time.Duration(0); at <= 3*wd; at += 50 * time.Microsecond {
		l2.clock.Set(at)
		l2.ppfc(switchS, stop(peerX, 300*time.Microsecond))
	}
	y.mu.Lock()
	stillPaused := y.ppfcPausedLocked(l2.clock.Now())
	y.mu.Unlock()
	if !stillPaused || y.Counters().PPFCWatchdogTrips != 0 {
		t.Errorf("watchdog off: paused %v, trips %d; want paused, 0", stillPaused, y.Counters().PPFCWatchdogTrips)
	}
}

// TestPPFCKernel: with the intake in the kernel (Config.RPOffload), a stop
// the kernel took pauses the QP from its arrival, before the receive loop
// reads it; the same notification then read by the receive loop is
// counted, not obeyed again; a source outside PPFCSources pauses nothing.
func TestPPFCKernel(t *testing.T) {
	off := &fakeRP{qps: map[uint32]rpbpf.QPContext{}, ctr: map[uint32]*fakeCNPs{}}
	// The kernel's clock stands still with the agent's fake one: an
	// event's age is what the test says, however long the host takes.
	const kernelNow = uint64(time.Hour)
	l := newPPFCLab(t, func(c *Config) {
		c.RPOffload = off
		c.PPFCSources = []netip.Prefix{netip.MustParsePrefix("198.18.9.0/24")}
		c.KernelNs = func() uint64 { return kernelNow }
	})
	x := l.dcqcnQP(peerX)
	l.tx(x)
	l.ackAll(x)
	l.clock.Set(time.Millisecond)
	k := off.ctr[x.QPN()]
	// Arrived 40 µs ago: the pause runs from then, 160 µs are left.
	k.addPPFC(rpbpf.PPFCEvent{AtNs: kernelNow - uint64(40*time.Microsecond), Source: switchS.Addr(),
		Action: roce.PPFCStop, Pause: 200 * time.Microsecond})
	n, next := l.tx(x)
	if left := next - l.clock.Now(); n != 0 || left != 160*time.Microsecond {
		t.Fatalf("after the kernel's stop: sent %d, next in %v; want nothing for 160 µs", n, left)
	}
	if c := x.Counters(); c.PPFCKernel != 1 || c.PPFCPauses != 1 {
		t.Fatalf("counters %+v: want the kernel's stop obeyed", c)
	}
	// The receive loop gets to it later: counted, not obeyed again (it
	// would have extended the pause to its own time).
	l.clock.Set(time.Millisecond + 100*time.Microsecond)
	l.ppfc(switchS, stop(peerX, 200*time.Microsecond))
	if c := x.Counters(); c.PPFCPauses != 1 {
		t.Errorf("ppfc_pauses %d: the receive loop obeyed it again", c.PPFCPauses)
	}
	if c := l.a.Counters(); c.PPFCReceivedStop != 1 {
		t.Errorf("ppfc_received_stop %d, want 1", c.PPFCReceivedStop)
	}
	// A resume the kernel took ends it; the receive loop's copy kicks.
	k.addPPFC(rpbpf.PPFCEvent{AtNs: kernelNow, Source: switchS.Addr(), Action: roce.PPFCResume})
	kicks := l.waker.kicks.Load()
	l.ppfc(switchS, resume(peerX))
	if l.waker.kicks.Load() == kicks {
		t.Error("the resume did not kick the transmit loop")
	}
	if n, _ := l.tx(x); n == 0 {
		t.Fatal("resumed, but sent nothing")
	}
	if c := x.Counters(); c.PPFCKernel != 2 || c.PPFCResumes != 1 {
		t.Fatalf("counters %+v: want the kernel's resume obeyed", c)
	}
	// From a stranger: not obeyed.
	l.ackAll(x)
	l.clock.Set(2 * time.Millisecond)
	k.addPPFC(rpbpf.PPFCEvent{AtNs: kernelNow, Source: netip.MustParseAddr("198.18.7.7"), Action: roce.PPFCStop, Pause: time.Millisecond})
	if n, _ := l.tx(x); n == 0 {
		t.Error("a stranger's stop paused the QP")
	}
	if c := x.Counters(); c.PPFCKernel != 2 || c.PPFCPauses != 1 {
		t.Errorf("counters %+v: the stranger's stop counted", c)
	}
}
