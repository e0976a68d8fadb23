package netnstests

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Ultra Ethernet Transport on real packets: UET endpoints (host/pds, NSCC)
// on UDP 4793 in the senders and the receiver of the dumbbell, data on
// DSCP 26 into the bottleneck port's RoCE class (ACKs on 48, the
// strict-priority class), at the RoCE tests' line rate and MTU 4096.
const (
	// uetBaseRTT is NSCC's configured base RTT and its floor
	// (nscc.LabParams): the lab's round trip is the endpoints' scheduling
	// on two shared cores more than the wire (a 4 KB packet is 33 µs at
	// 1 Gbit/s, the loops wake 25-100 µs late, 9 endpoints share 2 CPUs
	// in the incast), so MaxWnd = 1.5 × 1 Gbit/s × 1 ms = 187 KB and the
	// target queueing delay tq is 1 ms. Measured at 500 µs: one flow
	// 94-97 % of the payload capacity (the window too short for the
	// host's round trips), the incast's tail 1.03-1.13 × ideal; at 1 ms,
	// 99 % and 1.01-1.03.
	uetBaseRTT = 1 * time.Millisecond
	// uetMsgBytes is each message (16 packets).
	uetMsgBytes = 64 << 10
	// uetIdle keeps finished PDCs open long enough to read their
	// counters.
	uetIdle = 2 * time.Second
	// uetRTO is the last-resort retransmission timeout: losses are
	// recovered by SACK inference and probes within a round trip or two,
	// and an endpoint starved of CPU for tens of ms (two shared cores)
	// must not resend what was never lost (the RoCE tests' ACK timeout is
	// 268 ms for the same reason).
	uetRTO = 200 * time.Millisecond
)

// uetBDP is the fabric's BDP at uetBaseRTT: 62 500 B.
var uetBDP = units.ByteSize(fabricRate.BytesPerSecond() * uetBaseRTT.Seconds())

// uetPortConfig is the bottleneck port of the UET tests, slowed to the
// lab's time scale: WRED on the data class from 1 to 2 BDPs at
// uetBaseRTT, so that a queue beyond tq comes with ECN.
func uetPortConfig() qdisc.Config {
	cfg := qdisc.DefaultConfig(fabricRate)
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "uet", LimitBytes: roceLimit, ECN: qdisc.ECNWRED,
		MinThBytes: uetBDP, MaxThBytes: 2 * uetBDP, MaxP: 1}
	return cfg.Slowed(labScale)
}

// uetBed is the dumbbell with the port on its bottleneck, one endpoint per
// sender and one on the receiver.
type uetBed struct {
	*roceBed
	server  *pds.Endpoint
	clients []*pds.Endpoint
}

func newUETBed(t *testing.T, senders int, cfg qdisc.Config, mod func(*pds.Config)) *uetBed {
	t.Helper()
	b := &uetBed{roceBed: newPortBed(t, senders, cfg)}
	d := b.d
	held := func(c *pds.Config) {
		c.Held = b.meter.Held()
		if mod != nil {
			mod(c)
		}
	}
	b.server = newUETEndpoint(t, d.Receiver, d.ReceiverAddr, held)
	for i, s := range d.Senders {
		b.clients = append(b.clients, newUETEndpoint(t, s, d.SenderAddrs[i], held))
	}
	warmNeighbors(t, d)
	return b
}

// startIncast starts one stream of perSender bytes (uetMsgBytes messages,
// verified) from every client to the server, job IDs 1, 2, ….
func (b *uetBed) startIncast(t *testing.T, perSender uint64) []*pds.Sender {
	t.Helper()
	var ss []*pds.Sender
	for i, c := range b.clients {
		s, err := c.Start(b.d.ReceiverAddr, pds.Stream{JobID: uint32(i + 1), MessageBytes: uetMsgBytes, Messages: perSender / uetMsgBytes, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	return ss
}

// warmNeighbors resolves the dumbbell's ARP entries both ways with one
// datagram each, as a NIC's connection manager resolves the address before
// the first packet: a raw socket's first packets otherwise wait for ARP
// (an incast's first ACK came 20 ms late).
func warmNeighbors(t *testing.T, d *lab.Dumbbell) {
	t.Helper()
	for i, s := range d.Senders {
		pokeNeighbor(t, s, d.ReceiverAddr)
		pokeNeighbor(t, d.Receiver, d.SenderAddrs[i])
	}
	time.Sleep(20 * time.Millisecond)
}

// pokeNeighbor sends one datagram from n to dst's discard port, so that
// n resolves the next hop toward dst.
func pokeNeighbor(t *testing.T, n *lab.Node, dst netip.Addr) {
	t.Helper()
	if err := n.Do(func() error {
		c, err := net.Dial("udp4", netip.AddrPortFrom(dst, 9).String()) // discard
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte{0})
		return err
	}); err != nil {
		t.Fatalf("warm the neighbours of %s: %v", n.Name, err)
	}
}

// newUETEndpoint opens UDP 4793 on addr in n (pktio.EntropyConn) and starts
// an endpoint on it; the test's cleanup closes it.
func newUETEndpoint(t *testing.T, n *lab.Node, addr netip.Addr, mod func(*pds.Config)) *pds.Endpoint {
	t.Helper()
	var conn *pktio.EntropyConn
	if err := n.Do(func() (err error) {
		conn, err = pktio.ListenEntropy(netip.AddrPortFrom(addr, uet.Port), pktio.RoCEOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cfg := pds.DefaultConfig()
	cfg.Conn, cfg.Logger = conn, testLogger(t)
	cfg.LinkRate, cfg.MTU, cfg.BaseRTT, cfg.IdleTimeout, cfg.RTO, cfg.Verify = fabricRate, roceMTU, uetBaseRTT, uetIdle, uetRTO, true
	cfg = cfg.Slowed(labScale)
	if mod != nil {
		mod(&cfg)
	}
	ep, err := pds.New(cfg)
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ep.Close() })
	return ep
}

// uetPayloadShare is the payload's share of the port's bytes for full
// packets: MTU-sized IP packets in Ethernet frames, IPv4, UDP, PDS and SES
// headers around the payload.
func uetPayloadShare() float64 {
	payload := roceMTU - 20 - 8 - uet.RequestLen - uet.SESStdLen
	return float64(payload) / float64(roceMTU+14)
}

// waitSenders waits (wall clock) for every sender to finish and returns
// each one's completion time after start.
func waitSenders(t *testing.T, start time.Time, ss []*pds.Sender, limit time.Duration) []time.Duration {
	t.Helper()
	fct := make([]time.Duration, len(ss))
	deadline := time.After(limit)
	for i, s := range ss {
		select {
		case <-s.Done():
			fct[i] = time.Since(start)
		case <-deadline:
			t.Fatalf("sender %d not done after %v: %+v", i, limit, s.Counters())
		}
		if err := s.Err(); err != nil {
			t.Fatalf("sender %d: %v", i, err)
		}
	}
	return fct
}

// TestUETOneFlow: one UET flow at line rate through the port: goodput
// ≥ 85 % of the payload capacity (98.3-99.3 % on a quiet machine, see
// below), no loss anywhere.
func TestUETOneFlow(t *testing.T) {
	roceSize(t)
	retryStarved(t, uetOneFlow)
}

func uetOneFlow(t *testing.T, c *hostChecks) hostlost.Report {
	b := newUETBed(t, 1, uetPortConfig(), nil)
	run, skip := fabric(2500*time.Millisecond), fabric(500*time.Millisecond)
	drops0, rcvbuf0 := softnetDrops(), udpRcvbufErrors(t, b.d.Receiver)
	b.startMeter(t)
	s, err := b.clients[0].Start(b.d.ReceiverAddr, pds.Stream{JobID: 1, MessageBytes: uetMsgBytes, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(skip)
	c0, t0, m0 := s.Counters(), time.Now(), hostlost.Now()
	time.Sleep(run - skip)
	c1, t1, m1 := s.Counters(), time.Now(), hostlost.Now()
	for _, ci := range b.clients[0].CCCs() {
		if n := ci.NSCC; n != nil {
			t.Logf("CCC %s: cwnd %d B, in flight %d B; NSCC: %d decreases, %d quick adapts, %d losses, %d ECN above / %d below target, %d fair / %d proportional / %d fast increases",
				ci.State, ci.Window, ci.InFlight, n.Decreases, n.QuickAdapts, n.Losses, n.ECNAboveTargetAcks, n.ECNBelowTargetAcks, n.FairAcks, n.ProportionalAcks, n.FastIncreaseAcks)
		}
	}
	s.Stop()
	waitSenders(t, t0, []*pds.Sender{s}, 10*time.Second)
	host := b.hostLost(t)
	starved := host.StarvedBetween(m0, m1)
	backlogDrops, rcvbufDrops := softnetDrops()-drops0, udpRcvbufErrors(t, b.d.Receiver)-rcvbuf0
	st := settle(t, b.port)
	r := st.Classes[qdisc.ClassRoCE]
	goodput := float64(c1.BytesAcked-c0.BytesAcked) * 8 / t1.Sub(t0).Seconds()
	goodputNet := float64(c1.BytesAcked-c0.BytesAcked) * 8 / (t1.Sub(t0) - starved).Seconds()
	capacity := uetPayloadShare() * float64(roceRate)
	ca, cs := b.clients[0].Counters(), b.server.Counters()
	t.Logf("goodput %s Mbit/s = %.1f%% of the payload capacity %s Mbit/s; the port sat idle %v while the sender was held: net of it %.1f%%; port: %d CE marked of %d, %d dropped, max backlog %s, sojourn p99 < %v",
		mbit(goodput), 100*goodput/capacity, mbit(capacity), starved.Round(10*time.Microsecond), 100*goodputNet/capacity, r.CEMarked(), r.EnqueuedPackets, portDrops(st), kib(float64(r.MaxBacklogBytes)), r.Sojourn.Quantile(0.99))
	t.Logf("sender: %d retransmits, %d timeouts, %d probes, %d ECN echoes; receiver: %d messages, %d verify errors, %d duplicates; host drops: rcvbuf %d, backlog %d",
		ca.Retransmits, ca.Timeouts, ca.ProbesSent, ca.ECNEchoes, cs.MessagesReceived, cs.VerifyErrors, cs.Duplicates, rcvbufDrops, backlogDrops)
	// Quiet runs measure 98.3-99.3 % (20 runs); with one core kept busy
	// 89.5-96 % (10 runs): the lone sender and receiver share the other
	// core with the port's softirqs, and what a descheduled sender did not
	// send is lost to the line (the window is not the limit: NSCC sits at
	// MaxWnd with a third of it in flight; a window of 6 BDP measured the
	// same). The bound leaves that margin.
	// What a descheduled sender did not send is lost to the line: the
	// bound runs again in a host-starved run (retryStarved).
	if goodputNet < 0.85*capacity {
		c.Errorf("goodput %s Mbit/s net of the host's %v is below 85%% of the payload capacity %s Mbit/s (raw %s)", mbit(goodputNet), starved, mbit(capacity), mbit(goodput))
	}
	if d := portDrops(st); d != 0 || ca.Retransmits != 0 || cs.VerifyErrors != 0 || rcvbufDrops != 0 {
		t.Errorf("loss on a lossless path: port %d, retransmits %d, verify errors %d, receive buffer %d", d, ca.Retransmits, cs.VerifyErrors, rcvbufDrops)
	}
	return host
}

// TestUETRandomLoss: 1 % of the UET packets leaving the sender are lost
// (a BPF drop on its link, where it enters the switch: the packets are
// the wire's there, not the sender's GSO sends): SACK inference, probes
// and retransmission deliver every message intact.
func TestUETRandomLoss(t *testing.T) {
	roceSize(t)
	b := newUETBed(t, 1, uetPortConfig(), nil)
	in := b.d.SenderPorts[0]
	loss := in.Node.AddLossT(t, in.Dev, link.LossSpec{Fraction: 0.01, UDPPort: uet.Port, Ingress: true})
	const msgs = 300
	s, err := b.clients[0].Start(b.d.ReceiverAddr, pds.Stream{JobID: 1, MessageBytes: uetMsgBytes, Messages: msgs, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	waitSenders(t, time.Now(), []*pds.Sender{s}, 60*time.Second)
	ls, err := loss.Stats()
	if err != nil {
		t.Fatal(err)
	}
	ca, cs := b.clients[0].Counters(), b.server.Counters()
	t.Logf("dropped %d of %d packets (%.2f%%); sender: %d retransmits, %d inferred losses, %d probes, %d timeouts; receiver: %d messages, %d duplicates",
		ls.Dropped, ls.Candidates, 100*ls.Fraction(), ca.Retransmits, ca.InferredLosses, ca.ProbesSent, ca.Timeouts, cs.MessagesReceived, cs.Duplicates)
	if cs.MessagesReceived != msgs || cs.VerifyErrors != 0 {
		t.Errorf("receiver: %d messages, %d verify errors; want %d, 0", cs.MessagesReceived, cs.VerifyErrors, msgs)
	}
	// The drop also hits probes and CLOSE_CMDs, which are not resent as
	// such.
	if ls.Dropped == 0 || ca.Retransmits+ca.ProbesSent+ca.ClosesSent < ls.Dropped || ca.Retransmits == 0 {
		t.Errorf("%d dropped, %d retransmitted (%d probes, %d closes sent): every data drop must be resent", ls.Dropped, ca.Retransmits, ca.ProbesSent, ca.ClosesSent)
	}
}

// TestUETCCCLifecycle: two jobs to one destination open two PDCs that
// share one CCC, whose transitions run in order, IDLE → ACTIVE → READY …
// PENDING → IDLE, freed once both PDCs closed; the receiver's contexts
// follow.
func TestUETCCCLifecycle(t *testing.T) {
	roceSize(t)
	var mu sync.Mutex
	var trace []pds.CCCTransition
	b := newUETBed(t, 1, uetPortConfig(), func(c *pds.Config) {
		c.IdleTimeout = fabric(300 * time.Millisecond)
		c.Trace = func(tr pds.CCCTransition) { mu.Lock(); trace = append(trace, tr); mu.Unlock() }
	})
	var ss []*pds.Sender
	for job := uint32(1); job <= 2; job++ {
		s, err := b.clients[0].Start(b.d.ReceiverAddr, pds.Stream{JobID: job, MessageBytes: uetMsgBytes, Messages: 50, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	waitSenders(t, time.Now(), ss, 30*time.Second)
	time.Sleep(fabric(time.Second)) // both PDCs close on idle (300 ms), then the CCC goes
	ca, cs := b.clients[0].Counters(), b.server.Counters()
	mu.Lock()
	defer mu.Unlock()
	var seq []string
	for _, tr := range trace {
		if tr.Key.Src != b.d.SenderAddrs[0] || tr.Key.Dst != b.d.ReceiverAddr {
			t.Errorf("transition of CCC %+v", tr.Key)
		}
		seq = append(seq, tr.To.String())
	}
	t.Logf("sender: %d PDCs opened, %d closed, %d CCCs created, %d freed, transitions %v; receiver: %d PDCs opened, %d closed, rx CCCs %d/%d",
		ca.PDCsOpened, ca.PDCsClosed, ca.CCCsCreated, ca.CCCsFreed, ca.Transitions, cs.TargetPDCsOpened, cs.TargetPDCsClosed, cs.RxCCCsCreated, cs.RxCCCsFreed)
	if ca.PDCsOpened != 2 || ca.PDCsClosed != 2 || ca.CCCsCreated != 1 || ca.CCCsFreed != 1 {
		t.Errorf("sender: want 2 PDCs opened and closed, 1 CCC created and freed")
	}
	if cs.TargetPDCsOpened != 2 || cs.TargetPDCsClosed != 2 || cs.RxCCCsCreated != 1 || cs.RxCCCsFreed != 1 {
		t.Errorf("receiver: want 2 PDCs opened and closed, 1 CCC created and freed")
	}
	n := len(seq)
	if n < 6 || seq[0] != "IDLE" || seq[1] != "ACTIVE" || seq[2] != "READY" || seq[n-3] != "PENDING" || seq[n-2] != "IDLE" || seq[n-1] != "FREED" {
		t.Errorf("transitions %v…%v: want IDLE ACTIVE READY … PENDING IDLE FREED", seq[:min(n, 6)], seq[max(n-6, 0):])
	}
	for i := 1; i < n; i++ {
		if trace[i].From != trace[i-1].To || trace[i].At < trace[i-1].At {
			t.Errorf("transition %d %v→%v at %v after %v→%v at %v", i, trace[i].From, trace[i].To, trace[i].At, trace[i-1].From, trace[i-1].To, trace[i-1].At)
		}
	}
}
