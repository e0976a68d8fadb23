package netnstests

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// injector sends hand-built IPv4/UDP datagrams from any source address out
// of a node: a hostile or broken host on the lab network (a raw socket,
// IPPROTO_RAW, so the test writes the IP header).
type injector struct {
	fd   int
	sent atomic.Uint64
}

func newInjector(t *testing.T, n *lab.Node) *injector {
	t.Helper()
	j := &injector{fd: -1}
	if err := n.Do(func() (err error) {
		j.fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(j.fd) })
	return j
}

// send sends payload as one UDP datagram from src to dst with tos.
func (j *injector) send(t *testing.T, src, dst netip.AddrPort, tos uint8, payload []byte) {
	t.Helper()
	pkt := ipUDP(src, dst, tos, payload)
	d4 := dst.Addr().As4()
	for {
		err := unix.Sendto(j.fd, pkt, 0, &unix.SockaddrInet4{Addr: d4})
		if err == unix.ENOBUFS || err == unix.EAGAIN {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		if err != nil {
			t.Fatalf("inject to %v: %v", dst, err)
		}
		j.sent.Add(1)
		return
	}
}

// sendBatch sends n copies of one datagram with a sendmmsg each 64: a
// flood faster than one system call per packet allows.
func (j *injector) sendBatch(t *testing.T, src, dst netip.AddrPort, tos uint8, payload []byte, n int) {
	t.Helper()
	pkt := ipUDP(src, dst, tos, payload)
	var sa unix.RawSockaddrInet4
	sa.Family = unix.AF_INET
	sa.Addr = dst.Addr().As4()
	const batch = 64
	iov := unix.Iovec{Base: &pkt[0]}
	iov.SetLen(len(pkt))
	var hdrs [batch]unix.Mmsghdr
	for i := range hdrs {
		h := &hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&sa))
		h.Namelen = unix.SizeofSockaddrInet4
		h.Iov = &iov
		h.SetIovlen(1)
	}
	for n > 0 {
		k := min(n, batch)
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(j.fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(k), 0, 0, 0)
		if errno == unix.ENOBUFS || errno == unix.EAGAIN {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		if errno != 0 {
			t.Fatalf("inject to %v: sendmmsg: %v", dst, errno)
		}
		n -= int(r)
		j.sent.Add(uint64(r))
	}
}

// ipUDP is an IPv4/UDP datagram from src to dst with tos: the kernel fills
// in the IP checksum, the UDP checksum is 0 (as RoCEv2 sends).
func ipUDP(src, dst netip.AddrPort, tos uint8, payload []byte) []byte {
	pkt := make([]byte, 28+len(payload))
	pkt[0], pkt[1] = 0x45, tos
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	binary.BigEndian.PutUint16(pkt[6:], 0x4000) // DF
	pkt[8], pkt[9] = 64, unix.IPPROTO_UDP
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(pkt[12:], s4[:])
	copy(pkt[16:], d4[:])
	binary.BigEndian.PutUint16(pkt[20:], src.Port())
	binary.BigEndian.PutUint16(pkt[22:], dst.Port())
	binary.BigEndian.PutUint16(pkt[24:], uint16(8+len(payload)))
	copy(pkt[28:], payload)
	return pkt
}

// roceFrom builds a RoCEv2 UDP payload with h and payload, its ICRC sealed
// for src -> dst (what a spoofer who knows the addresses computes too).
func roceFrom(src, dst netip.AddrPort, h roce.Header, payload []byte) []byte {
	b := make([]byte, roce.PacketLen(h.BTH.Opcode, len(payload)))
	n := roce.Build(b, &h, payload)
	b = b[:n]
	roce.SealICRC(src, dst, b)
	return b
}

// abuseCounters is what the client side counts: its agent's drops, its
// steering program's, and its QP's.
type abuseCounters struct {
	agent agent.AgentCounters
	qp    agent.Counters
	steer struct{ unknownQP, misdirected, malformed uint64 }
}

func (b *roceBed) abuseCounters(t *testing.T, f *roceFlow) abuseCounters {
	t.Helper()
	var c abuseCounters
	c.agent = b.clients[0].Counters()
	c.qp = f.qp.Counters()
	st, err := b.conns[0].SteeringStats()
	if err != nil {
		t.Fatal(err)
	}
	c.steer.unknownQP, c.steer.misdirected, c.steer.malformed = st.UnknownQP, st.Misdirected, st.Malformed
	return c
}

// drops sums every cause the client may drop a packet for.
func (c *abuseCounters) drops() uint64 {
	a := &c.agent
	return a.Malformed + a.ICRCErrors + a.UnknownQP + a.WrongPeer + a.Unsupported + c.qp.InvalidAckPSN +
		c.steer.unknownQP + c.steer.misdirected + c.steer.malformed
}

// TestRoCEAbuse (issue 15): a host on the lab network that sends garbage,
// spoofs control packets or floods CNPs, while a verified RDMA WRITE stream
// runs from s1 to r. Injected from the switch's namespace toward s1's agent
// (UDP 4791), each kind in its own phase, with the counters read around it:
//   - 1,000 random datagrams, 1,000 ACKs with a bad ICRC from the peer, 1,000
//     READ responses (an opcode this requester does not serve) with a good
//     ICRC: every one dropped and counted once, by the steering program or
//     the agent;
//   - 1,000 CNPs and 1,000 remote-access-error NAKs from an address that is
//     not the QP's peer: counted as wrong_peer, no rate cut, no QP error;
//   - 1,000 remote-access-error NAKs from the peer's address for a PSN the
//     requester acknowledged long ago: counted as invalid_ack_psn, the QP
//     lives;
//   - a CNP flood from the peer's address, 200 kpps for 0.5 s, to a QP with
//     mlx5's DCQCN profile (one cut per 4 µs at most): every CNP reaches the
//     RP, and Rc falls to rpg_min_rate.
//
// The stream then ends normally: every byte acknowledged, none corrupted.
// The port does not mark (ECN off), so no genuine CNP muddles the counts.
func TestRoCEAbuse(t *testing.T) {
	roceSize(t)
	cfg := rocePortConfig()
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: roceLimit, ECN: qdisc.ECNOff}
	b := newRoCEBed(t, 1, cfg)
	// mlx5's profile: a CNP cuts at most once per rate_reduce_monitor_period
	// (4 µs), so how the flood's arrival times are seen decides how often
	// it cuts.
	p, err := dcqcn.Profile("mlx5", roceRate)
	if err != nil {
		t.Fatal(err)
	}
	f := b.dial(t, 0, senderQPConfig(p), true)
	inj := newInjector(t, b.d.Switch)
	client := netip.AddrPortFrom(b.d.SenderAddrs[0], roce.UDPPort)
	peer := netip.AddrPortFrom(b.d.ReceiverAddr, roce.UDPPort)
	stranger := netip.AddrPortFrom(netip.MustParseAddr("198.19.0.99"), roce.UDPPort)
	qpn := f.qp.QPN()
	rng := rand.New(rand.NewPCG(1, 2))

	// Rc, sampled every ms from the start of the stream.
	var (
		rcMu  sync.Mutex
		rcMin = units.Rate(1 << 62)
	)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				if cc, ok := f.qp.CC(); ok {
					rcMu.Lock()
					rcMin = min(rcMin, cc.Rc)
					rcMu.Unlock()
				}
			}
		}
	}()
	defer func() { close(stopSampling); <-sampled }()

	f.start(t, 0, true)
	time.Sleep(300 * time.Millisecond)
	rcvbuf0 := udpRcvbufErrors(t, b.d.Senders[0])

	// settleInjected waits until the client has seen n more packets in
	// drops (or gives up after 2 s) and returns the counters.
	settleInjected := func(before abuseCounters, n uint64, what func(a, b *abuseCounters) uint64) abuseCounters {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for {
			c := b.abuseCounters(t, f)
			if what(&before, &c) >= n || time.Now().After(deadline) {
				return c
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	allDrops := func(a, b *abuseCounters) uint64 { return b.drops() - a.drops() }

	// 1. Garbage.
	c0 := b.abuseCounters(t, f)
	for range 1000 {
		g := make([]byte, rng.IntN(200))
		for i := range g {
			g[i] = byte(rng.Uint32())
		}
		inj.send(t, stranger, client, 0, g)
	}
	bad := roceFrom(peer, client, roce.Header{BTH: roce.BTH{Opcode: roce.OpRCAck, PKey: 0xFFFF, DestQP: qpn}, AETH: roce.AETH{Syndrome: roce.ACKSyndrome(roce.CreditsUnlimited)}}, nil)
	bad[len(bad)-1] ^= 0xFF
	for range 1000 {
		inj.send(t, peer, client, 0, bad)
	}
	rr := roceFrom(peer, client, roce.Header{BTH: roce.BTH{Opcode: roce.OpRCReadResponseOnly, PKey: 0xFFFF, DestQP: qpn}, AETH: roce.AETH{Syndrome: roce.ACKSyndrome(roce.CreditsUnlimited)}}, make([]byte, 64))
	for range 1000 {
		inj.send(t, peer, client, 0, rr)
	}
	c1 := settleInjected(c0, 3000, allDrops)
	t.Logf("garbage: 3000 injected; steering: unknown_qp +%d, misdirected +%d, malformed +%d; agent: malformed +%d, icrc_errors +%d, unknown_qp +%d, wrong_peer +%d, unsupported_opcode +%d",
		c1.steer.unknownQP-c0.steer.unknownQP, c1.steer.misdirected-c0.steer.misdirected, c1.steer.malformed-c0.steer.malformed,
		c1.agent.Malformed-c0.agent.Malformed, c1.agent.ICRCErrors-c0.agent.ICRCErrors, c1.agent.UnknownQP-c0.agent.UnknownQP,
		c1.agent.WrongPeer-c0.agent.WrongPeer, c1.agent.Unsupported-c0.agent.Unsupported)
	if d := c1.drops() - c0.drops(); d != 3000 {
		t.Errorf("3000 garbage datagrams, %d counted as dropped", d)
	}
	if d := c1.agent.ICRCErrors - c0.agent.ICRCErrors; d < 1000 {
		t.Errorf("1000 ACKs with a bad ICRC, icrc_errors +%d", d)
	}
	if d := c1.agent.Unsupported - c0.agent.Unsupported; d != 1000 {
		t.Errorf("1000 READ responses to a WRITE requester, unsupported_opcode +%d", d)
	}

	// 2. Control packets from a stranger.
	cnp := func(from netip.AddrPort) []byte {
		return roceFrom(from, client, roce.CNPHeader(qpn, 0xFFFF), nil)
	}
	nak := func(from netip.AddrPort, psn uint32) []byte {
		return roceFrom(from, client, roce.Header{BTH: roce.BTH{Opcode: roce.OpRCAck, PKey: 0xFFFF, DestQP: qpn, PSN: psn},
			AETH: roce.AETH{Syndrome: roce.NAKSyndrome(roce.NAKRemoteAccessError)}}, nil)
	}
	sc := cnp(stranger)
	for i := range 1000 {
		inj.send(t, stranger, client, 0xC0, sc)
		inj.send(t, stranger, client, 0, nak(stranger, uint32(i)*7919&roce.QPNMask))
	}
	c2 := settleInjected(c1, 2000, allDrops)
	t.Logf("stranger: 1000 CNPs and 1000 NAKs; wrong_peer +%d, rp_cnp_handled +%d, remote_access_err +%d",
		c2.agent.WrongPeer-c1.agent.WrongPeer, c2.qp.RPCNPHandled-c1.qp.RPCNPHandled, c2.qp.RemoteAccessErr-c1.qp.RemoteAccessErr)
	if d := c2.agent.WrongPeer - c1.agent.WrongPeer; d != 2000 {
		t.Errorf("2000 control packets from a stranger, wrong_peer +%d", d)
	}
	if c2.qp.RPCNPHandled+c2.qp.RPCNPIgnored != c1.qp.RPCNPHandled+c1.qp.RPCNPIgnored || c2.qp.RemoteAccessErr != c1.qp.RemoteAccessErr || f.qp.Err() != nil {
		t.Errorf("a stranger's CNPs or NAKs acted: rp_cnp_handled %d -> %d, remote_access_err %d -> %d, qp err %v",
			c1.qp.RPCNPHandled, c2.qp.RPCNPHandled, c1.qp.RemoteAccessErr, c2.qp.RemoteAccessErr, f.qp.Err())
	}

	// 3. NAKs from the peer's address for a PSN long acknowledged.
	acked, _ := f.qp.Progress()
	old := roce.PSNAdd(f.qp.Endpoint().PSN, int(acked)-(1<<22))
	pn := nak(peer, old)
	for range 1000 {
		inj.send(t, peer, client, 0, pn)
	}
	c3 := settleInjected(c2, 1000, allDrops)
	t.Logf("spoofed peer: 1000 NAKs for an old PSN; invalid_ack_psn +%d, remote_access_err +%d", c3.qp.InvalidAckPSN-c2.qp.InvalidAckPSN, c3.qp.RemoteAccessErr-c2.qp.RemoteAccessErr)
	if d := c3.qp.InvalidAckPSN - c2.qp.InvalidAckPSN; d != 1000 || c3.qp.RemoteAccessErr != c2.qp.RemoteAccessErr || f.qp.Err() != nil {
		t.Errorf("1000 NAKs for an acknowledged PSN: invalid_ack_psn +%d, remote_access_err +%d, qp err %v",
			d, c3.qp.RemoteAccessErr-c2.qp.RemoteAccessErr, f.qp.Err())
	}

	// 4. A CNP flood from the peer's address: 200 kpps for 0.5 s.
	const floodRate, floodFor = 200_000, 500 * time.Millisecond
	pc := cnp(peer)
	start := time.Now()
	var flood int
	for time.Since(start) < floodFor {
		if due := int(time.Since(start).Seconds() * floodRate); due > flood {
			inj.sendBatch(t, peer, client, 0xC0, pc, due-flood)
			flood = due
		}
		time.Sleep(200 * time.Microsecond)
	}
	c4 := settleInjected(c3, 0, allDrops)
	time.Sleep(100 * time.Millisecond)
	c4 = b.abuseCounters(t, f)
	rcvbuf := udpRcvbufErrors(t, b.d.Senders[0]) - rcvbuf0
	cnps := c4.qp.RPCNPHandled + c4.qp.RPCNPIgnored - c3.qp.RPCNPHandled - c3.qp.RPCNPIgnored
	rcMu.Lock()
	low := rcMin
	rcMu.Unlock()
	t.Logf("flood: %d CNPs in %v from the peer's address; rp_cnp_handled +%d, rp_cnp_ignored +%d, receive-buffer drops %d; Rc fell to %v (rpg_min_rate %v)",
		flood, time.Since(start).Round(time.Millisecond), c4.qp.RPCNPHandled-c3.qp.RPCNPHandled, c4.qp.RPCNPIgnored-c3.qp.RPCNPIgnored, rcvbuf, low, p.RPGMinRate)
	if cnps+rcvbuf != uint64(flood) {
		t.Errorf("%d CNPs sent, %d reached the RP and %d were dropped by the socket", flood, cnps, rcvbuf)
	}
	// How many cut depends on how bunched the injector's bursts arrive: on
	// an idle machine 28-31 % with arrival times, 12-13 % with the batch's
	// read time; with a busy core 14 %. TestCNPFloodArrivalTimes checks
	// the rule itself on exact times.
	if float64(low) > 1.01*float64(p.RPGMinRate) {
		t.Errorf("under a %d kpps CNP flood Rc fell only to %v, want rpg_min_rate %v", floodRate/1000, low, p.RPGMinRate)
	}

	// The stream ends normally.
	f.stop(t)
	srv := f.peer.Counters()
	if srv.VerifyErrors != 0 || f.qp.Err() != nil {
		t.Errorf("the verified stream: %d payload errors, qp err %v", srv.VerifyErrors, f.qp.Err())
	}
	t.Logf("stream: %d MB placed and verified, %d packets retransmitted", srv.RecvBytes>>20, f.qp.Counters().RetransmitPackets)
}
