package agent

import (
	"bytes"
	"context"
	"github.com/fabriclab/fabriclab/host/pattern"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// pair is two agents talking over an in-memory pipe; clock is set for a
// pair in fake time (newPair).
type pair struct {
	a, b   *Agent
	pa, pb *pktio.PipeConn
	clock  *engine.FakeClock
}

// newPair is two agents in fake time (newFakePair) without a port limit.
func newPair(t *testing.T, filter func(from netip.AddrPort, m *pktio.Message) bool, trace func(Event)) *pair {
	t.Helper()
	return newFakePair(t, filter, trace, 0)
}

// connect creates a QP on each agent and connects them.
func (p *pair) connect(t *testing.T, ca, cb QPConfig) (*QP, *QP) {
	t.Helper()
	qa, err := p.a.CreateQP(ca)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := p.b.CreateQP(cb)
	if err != nil {
		t.Fatal(err)
	}
	ea, eb := qa.Endpoint(), qb.Endpoint()
	ea.Addr, eb.Addr = p.pa.LocalAddr(), p.pb.LocalAddr()
	if err := qa.Connect(ea.Addr, eb); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(eb.Addr, ea); err != nil {
		t.Fatal(err)
	}
	return qa, qb
}

func waitDone(t *testing.T, qp *QP, d time.Duration) {
	t.Helper()
	select {
	case <-qp.Done():
		if err := qp.Err(); err != nil {
			t.Fatalf("qp %#x: %v", qp.QPN(), err)
		}
	case <-time.After(d):
		acked, sent := qp.Progress()
		t.Fatalf("qp %#x not done after %v: acked %d of %d sent packets; counters %+v", qp.QPN(), d, acked, sent, qp.Counters())
	}
}

func TestWriteStreamVerified(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    Op
		mtu   int
		msg   int
		psn   uint32
		count uint64
	}{
		{"write-only-256", OpWrite, 256, 200, 1, 500},
		{"write-multi-1024", OpWrite, 1024, 64 << 10, 0xFFFF00, 40}, // PSN wraps
		{"write-4096-odd", OpWrite, 4096, 10001, 7, 50},
		{"send-multi-2048", OpSend, 2048, 5000, 0xFFFFFE, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, nil, nil)
			ca := DefaultQPConfig()
			ca.MTU, ca.PSN = tc.mtu, tc.psn
			cb := ca
			cb.VerifyIncoming = true
			qa, qb := p.connect(t, ca, cb)
			if err := qa.Start(Stream{Op: tc.op, MessageBytes: tc.msg, Messages: tc.count, Verify: true}); err != nil {
				t.Fatal(err)
			}
			p.waitDone(t, qa, 10*time.Second)
			ra, rb := qa.Counters(), qb.Counters()
			want := tc.count * uint64(tc.msg)
			if ra.AckedBytes != want || rb.RecvBytes != want {
				t.Errorf("acked %d, received %d bytes, want %d", ra.AckedBytes, rb.RecvBytes, want)
			}
			if ra.AckedMessages != tc.count || rb.RecvMessages != tc.count {
				t.Errorf("acked %d, received %d messages, want %d", ra.AckedMessages, rb.RecvMessages, tc.count)
			}
			if rb.VerifyErrors != 0 || rb.OutOfSequence != 0 || ra.LocalAckTimeoutErr != 0 || ra.RetransmitPackets != 0 {
				t.Errorf("errors on a clean pipe: requester %+v responder %+v", ra, rb)
			}
			// The last message sits in the responder's buffer.
			last := tc.count - 1
			want1 := make([]byte, tc.msg)
			pattern.Fill(want1, qa.QPN(), last, 0)
			if tc.op == OpWrite {
				slots := uint64(len(qb.Buffer()) / tc.msg)
				off := int(last%slots) * tc.msg
				if !bytes.Equal(qb.Buffer()[off:off+tc.msg], want1) {
					t.Errorf("buffer slot %d does not hold message %d", last%slots, last)
				}
			}
			ca2 := p.a.Counters()
			if ca2.ICRCErrors != 0 || ca2.Malformed != 0 || ca2.UnknownQP != 0 {
				t.Errorf("agent drops %+v", ca2)
			}
		})
	}
}

// TestGoBackN loses 1 % of the data packets (and some ACKs): everything
// still arrives, intact and in order, through NAKs and timeouts.
func TestGoBackN(t *testing.T) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	var lost atomic.Uint64
	filter := func(from netip.AddrPort, m *pktio.Message) bool {
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() < 0.01 {
			lost.Add(1)
			return true
		}
		return false
	}
	p := newPair(t, filter, nil)
	ca := DefaultQPConfig()
	ca.AckTimeout = 2 * time.Millisecond
	ca.RetryCount = 50
	ca.RateCap = 500 * units.Mbit
	cb := ca
	cb.VerifyIncoming = true
	qa, qb := p.connect(t, ca, cb)
	const msgs, size = 300, 16 << 10
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: size, Messages: msgs, Verify: true}); err != nil {
		t.Fatal(err)
	}
	p.waitDone(t, qa, 20*time.Second)
	ra, rb := qa.Counters(), qb.Counters()
	t.Logf("lost %d datagrams; requester %+v; responder %+v", lost.Load(), ra, rb)
	if rb.RecvBytes != msgs*size || rb.RecvMessages != msgs || rb.VerifyErrors != 0 {
		t.Errorf("responder got %d bytes, %d messages, %d verify errors; want %d, %d, 0", rb.RecvBytes, rb.RecvMessages, rb.VerifyErrors, msgs*size, msgs)
	}
	if lost.Load() == 0 || ra.RetransmitPackets == 0 || rb.OutOfSequence == 0 || ra.PacketSeqErr == 0 {
		t.Errorf("no recovery exercised: lost %d, retransmitted %d, out_of_sequence %d, packet_seq_err %d", lost.Load(), ra.RetransmitPackets, rb.OutOfSequence, ra.PacketSeqErr)
	}
}

// TestManyQPs: one agent holds thousands of QPs on its two goroutines.
func TestManyQPs(t *testing.T) {
	p := newPair(t, nil, nil)
	const n = 2000
	cfg := DefaultQPConfig()
	cfg.BufferBytes = 8 << 10
	cb := cfg
	cb.VerifyIncoming = true
	var qas []*QP
	for range n {
		qa, _ := p.connect(t, cfg, cb)
		qas = append(qas, qa)
	}
	for _, qa := range qas {
		if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 3000, Messages: 3, Verify: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, qa := range qas {
		p.waitDone(t, qa, 30*time.Second)
	}
	c := p.b.Counters()
	if c.RecvMessages != 3*n || c.VerifyErrors != 0 {
		t.Errorf("received %d messages (want %d), %d verify errors", c.RecvMessages, 3*n, c.VerifyErrors)
	}
}

// TestMalformedCounted injects garbage: counted, dropped, nothing breaks.
func TestMalformedCounted(t *testing.T) {
	p := newPair(t, nil, nil)
	qa, qb := p.connect(t, DefaultQPConfig(), DefaultQPConfig())
	junk := [][]byte{
		{},
		{0x0a},
		make([]byte, 11),
		append([]byte{0x0a, 0x0f}, make([]byte, 40)...), // TVer != 0
	}
	// A valid packet with a wrong ICRC, one of another partition and one
	// to an unknown QP.
	var h roce.Header
	h.BTH.Opcode = roce.OpRCSendOnly
	h.BTH.PKey = roce.DefaultPKey
	h.BTH.DestQP = qb.QPN()
	bad := make([]byte, 64)
	n := roce.Build(bad, &h, make([]byte, 8))
	junk = append(junk, bad[:n])
	h.BTH.PKey = 0x8001
	other := make([]byte, 64)
	n = roce.Build(other, &h, make([]byte, 8))
	roce.SealICRC(p.pa.LocalAddr(), p.pb.LocalAddr(), other[:n])
	junk = append(junk, other[:n])
	h.BTH.PKey = roce.DefaultPKey
	h.BTH.DestQP = 0x777777
	unk := make([]byte, 64)
	n = roce.Build(unk, &h, make([]byte, 8))
	roce.SealICRC(p.pa.LocalAddr(), p.pb.LocalAddr(), unk[:n])
	junk = append(junk, unk[:n])
	msgs := make([]pktio.Message, len(junk))
	for i := range junk {
		msgs[i] = pktio.Message{Buffers: [][]byte{junk[i]}, Addr: p.pb.LocalAddr()}
	}
	if _, err := p.pa.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 4096, Messages: 10}); err != nil {
		t.Fatal(err)
	}
	p.waitDone(t, qa, 5*time.Second)
	c := p.b.Counters()
	if c.Malformed != 4 || c.ICRCErrors != 1 || c.UnknownQP != 1 || c.PKeyViolations != 1 {
		t.Errorf("malformed %d (want 4), icrc %d (want 1), unknown qp %d (want 1), pkey violations %d (want 1)",
			c.Malformed, c.ICRCErrors, c.UnknownQP, c.PKeyViolations)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*QPConfig)
		want string
	}{
		{func(c *QPConfig) { c.MTU = 1500 }, "mtu 1500: must be one of 256, 512, 1024, 2048, 4096"},
		{func(c *QPConfig) { c.DSCP = 64 }, "dscp 64: must be 0..63"},
		{func(c *QPConfig) { c.Window = 0 }, "window 0: must be 1..1048576 packets"},
		{func(c *QPConfig) { c.CC = "cubic" }, `cc "cubic": must be none or dcqcn`},
		{func(c *QPConfig) { c.AckReqEvery = 1000 }, "ackreq_every 1000: must be 1..window (512)"},
		{func(c *QPConfig) { c.PKey = 0x8000 }, "pkey 0x8000: must have a base (low 15 bits) of 1..0x7fff"},
	} {
		c := DefaultQPConfig()
		tc.mod(&c)
		err := c.Validate()
		if err == nil || err.Error() != "agent: "+tc.want {
			t.Errorf("got %v, want %q", err, "agent: "+tc.want)
		}
	}
}

// TestIPv6 runs a verified stream between IPv6 endpoints: the ICRC covers
// the IPv6 pseudo header instead.
func TestIPv6(t *testing.T) {
	pa, pb := pktio.NewPipe(pktio.PipeOptions{
		A: netip.MustParseAddrPort("[2001:db8::1]:4791"),
		B: netip.MustParseAddrPort("[2001:db8::2]:4791"),
	})
	a, err := New(Config{Conn: pa})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Conn: pb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	p := &pair{a: a, b: b, pa: pa, pb: pb}
	cb := DefaultQPConfig()
	cb.VerifyIncoming = true
	qa, qb := p.connect(t, DefaultQPConfig(), cb)
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 10000, Messages: 100, Verify: true}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, qa, 10*time.Second)
	if c := qb.Counters(); c.RecvBytes != 100*10000 || c.VerifyErrors != 0 {
		t.Errorf("received %d bytes with %d verify errors", c.RecvBytes, c.VerifyErrors)
	}
	if c := b.Counters(); c.ICRCErrors != 0 {
		t.Errorf("%d ICRC errors", c.ICRCErrors)
	}
}

// TestSession sets QPs up over the side channel (a net.Pipe here; TCP in
// the netns tests), runs them, and collects the server's counters.
func TestSession(t *testing.T) {
	p := newPair(t, nil, nil)
	cs, cc := net.Pipe()
	var got SessionResult
	served := make(chan error, 1)
	go func() {
		served <- p.b.ServeConn(cs, ServerOptions{OnFinish: func(_ net.Addr, r SessionResult) { got = r }})
	}()
	cfg := DefaultQPConfig()
	cfg.MTU = 2048
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.a.DialConn(ctx, cc, 3, cfg, SessionRequest{MessageBytes: 8192, Op: "write", Verify: true, NP: true, CNPPeriod: 4 * time.Microsecond, CNPDSCP: 48})
	if err != nil {
		t.Fatal(err)
	}
	for _, qp := range s.QPs {
		if err := qp.Start(Stream{Op: OpWrite, MessageBytes: 8192, Messages: 20, Verify: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, qp := range s.QPs {
		p.waitDone(t, qp, 10*time.Second)
	}
	res, err := s.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if len(res.QPs) != 3 || len(got.QPs) != 3 {
		t.Fatalf("server reported %d QPs (hook %d), want 3", len(res.QPs), len(got.QPs))
	}
	for i, r := range res.QPs {
		if r.QPN != s.Remote[i].QPN || r.Counters.RecvBytes != 20*8192 || r.Counters.VerifyErrors != 0 {
			t.Errorf("server qp %d: %+v", i, r)
		}
	}
	if n := len(p.b.QPs()); n != 0 {
		t.Errorf("server still holds %d QPs after the session", n)
	}
	// A refused session: bad MTU.
	cs2, cc2 := net.Pipe()
	go func() { _ = p.b.ServeConn(cs2, ServerOptions{}) }()
	bad := DefaultQPConfig()
	bad.MTU = 300
	if _, err := p.a.DialConn(ctx, cc2, 1, bad, SessionRequest{MessageBytes: 1}); err == nil || !strings.Contains(err.Error(), "mtu 300") {
		t.Errorf("bad mtu: got %v", err)
	}
}
