//go:build linux

package lab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// Tolerances of the RTT tests, chosen on the 2-core development VM (see the
// numbers in TestDelayRTT's log). No delayed probe may come back sooner than
// the configured delay: the forwarder never releases early. The median RTT
// may grow by at most rttSlack more than the delay, which covers the TUN
// round trip and the writer's wake-up (≈ 45 µs at the median on an idle VM)
// with room for other tests sharing the two cores; and by at most
// rttUnder less, because the base median has noise of its own (seen: up to
// 40 µs under in TestDelayPerFlow, whose base flow also crosses the
// forwarder, with zero delay; 103 µs in a full CI run, where the base
// median was 242 µs against a 61 µs minimum). A probe that beats the
// configured delay fails whatever the median.
const (
	rttSlack  = 500 * time.Microsecond
	rttUnder  = 200 * time.Microsecond
	rttProbes = 200
	rttGap    = time.Millisecond
)

// echoServer echoes every datagram sent to addr:port in n until the test
// ends.
func echoServer(t *testing.T, n *Node, addr netip.Addr, port uint16) {
	t.Helper()
	var c *net.UDPConn
	if err := n.Do(func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, port)))
		return err
	}); err != nil {
		t.Fatalf("echo server on %s:%d in %s: %v", addr, port, n.Name, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			k, peer, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // closed by the cleanup
			}
			_, _ = c.WriteToUDPAddrPort(buf[:k], peer)
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
	})
}

// probeTarget is where probeRTT sends from and to.
type probeTarget struct {
	from *Node
	dst  netip.AddrPort
}

// probeRTT sends count sequence-numbered probes to each target, one at a
// time and alternating between the targets (so load changes hit them alike),
// with gap between rounds, and returns per target the round-trip times of
// the probes echoed within 200 ms. The first rounds warm up ARP and are not
// returned. It gives up after count/10 losses, so it takes at most about
// count × (gap + the RTTs) + count/10 × 200 ms.
func probeRTT(t *testing.T, count int, gap time.Duration, targets ...probeTarget) [][]time.Duration {
	t.Helper()
	const warmup = 5
	conns := make([]*net.UDPConn, len(targets))
	for i, tg := range targets {
		if err := tg.from.Do(func() (err error) {
			conns[i], err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(tg.dst))
			return err
		}); err != nil {
			t.Fatalf("dial %s from %s: %v", tg.dst, tg.from.Name, err)
		}
		defer conns[i].Close()
	}
	out, in := make([]byte, 64), make([]byte, 2048)
	rtts := make([][]time.Duration, len(targets))
	lost := 0
	for seq := range count + warmup {
		for i, c := range conns {
			if lost > max(warmup, count/10) {
				t.Logf("probes: giving up after %d losses", lost)
				return rtts
			}
			binary.BigEndian.PutUint64(out, uint64(seq))
			start := time.Now()
			if _, err := c.Write(out); err != nil {
				t.Fatalf("probe %s: %v", targets[i].dst, err)
			}
			_ = c.SetReadDeadline(start.Add(200 * time.Millisecond))
			for {
				k, err := c.Read(in)
				if err != nil {
					lost++
					break
				}
				if k == len(out) && binary.BigEndian.Uint64(in) == uint64(seq) {
					if seq >= warmup {
						rtts[i] = append(rtts[i], time.Since(start))
					}
					break
				}
			}
		}
		time.Sleep(gap)
	}
	return rtts
}

type rttSummary struct{ min, p50, p90, p99, max time.Duration }

func summarize(d []time.Duration) rttSummary {
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(f float64) time.Duration { return s[min(len(s)-1, int(f*float64(len(s))))] }
	return rttSummary{s[0], q(0.5), q(0.9), q(0.99), s[len(s)-1]}
}

func (r rttSummary) String() string {
	return fmt.Sprintf("min %v p50 %v p90 %v p99 %v max %v", r.min, r.p50, r.p90, r.p99, r.max)
}

func logDelayStats(t *testing.T, name string, s DelayStats) {
	t.Helper()
	t.Logf("%s: released %d (%d B), dropped %d (queue full %d, oversize %d, write errors %d), held max %d; lateness mean %v p50 < %v p99 < %v max %v; kernel: diverted %d returned %d reentered %d bypassed %d malformed %d dropped %d, tun dropped %d",
		name, s.Packets, s.Bytes, s.Dropped, s.QueueFull, s.Oversize, s.WriteErrors, s.MaxHeld,
		s.LatenessMean, s.LatenessQuantile(0.5), s.LatenessQuantile(0.99), s.LatenessMax,
		s.Diverted, s.Returned, s.Reentered, s.Bypassed, s.Malformed, s.KernelDropped, s.TunDropped)
}

// assertAddedRTT checks that no delayed probe beat the configured delay and
// that delayed - base is within [want-rttUnder, want+rttSlack] at the
// median.
func assertAddedRTT(t *testing.T, what string, base, delayed []time.Duration, want time.Duration) {
	t.Helper()
	if len(base) < rttProbes*9/10 || len(delayed) < rttProbes*9/10 {
		t.Fatalf("%s: only %d base and %d delayed probes of %d echoed", what, len(base), len(delayed), rttProbes)
	}
	b, d := summarize(base), summarize(delayed)
	added := d.p50 - b.p50
	t.Logf("%s: base RTT %v; delayed RTT %v; added (median) %v, configured %v", what, b, d, added, want)
	if d.min < want {
		t.Errorf("%s: a probe came back in %v, faster than the configured delay %v", what, d.min, want)
	}
	if added < want-rttUnder || added > want+rttSlack {
		t.Errorf("%s: median RTT grew by %v, want %v..%v", what, added, want-rttUnder, want+rttSlack)
	}
}

// TestDelayRTT: a 2 ms SenderDelay on s1 adds 2 ms (+ at most rttSlack at the
// median) to s1's RTT; s2, undelayed, gives the base RTT of the same path.
func TestDelayRTT(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	const delay = 2 * time.Millisecond
	d := NewDumbbellT(t, DumbbellSpec{Senders: 2, SenderDelays: []time.Duration{delay}})
	if len(d.Delays) != 2 || d.Delays[0] == nil || d.Delays[1] != nil {
		t.Fatalf("Delays = %v, want a link on s1 only", d.Delays)
	}
	echoServer(t, d.Receiver, d.ReceiverAddr, 7000)
	dst := netip.AddrPortFrom(d.ReceiverAddr, 7000)
	rtts := probeRTT(t, rttProbes, rttGap, probeTarget{d.Senders[1], dst}, probeTarget{d.Senders[0], dst})
	assertAddedRTT(t, "s1 with 2 ms", rtts[0], rtts[1], delay)

	s := d.Delays[0].Stats()
	logDelayStats(t, "s1 delay", s)
	// Each probe crosses the link once; ARP is not delayed.
	if s.Diverted < rttProbes || s.Packets != s.Diverted || s.Returned != s.Diverted || s.Reentered != s.Returned {
		t.Errorf("diverted %d, released %d, returned %d, reentered %d: want all equal and >= %d", s.Diverted, s.Packets, s.Returned, s.Reentered, rttProbes)
	}
	if s.Dropped != 0 || s.KernelDropped != 0 || s.TunDropped != 0 || s.Malformed != 0 {
		t.Errorf("drops: forwarder %d, kernel %d, tun %d, malformed %d", s.Dropped, s.KernelDropped, s.TunDropped, s.Malformed)
	}
	if s.Bypassed == 0 {
		t.Errorf("no ARP bypassed the delay")
	}
	if s.DivertedBytes != s.Bytes || s.ReturnedBytes != s.Bytes {
		t.Errorf("bytes: diverted %d, released %d, returned %d", s.DivertedBytes, s.Bytes, s.ReturnedBytes)
	}
}

// TestDelayTimerLateness compares how late a goroutine wakes from a Go timer
// and from a timerfd in the Go poller (what the forwarder's writer sleeps
// on), for sleeps like the forwarder's. It asserts only that the timerfd is
// not worse; the numbers go to the log.
func TestDelayTimerLateness(t *testing.T) {
	const n = 300
	waits := []time.Duration{100 * time.Microsecond, 500 * time.Microsecond, 2 * time.Millisecond}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	tf := os.NewFile(uintptr(fd), "timerfd")
	defer tf.Close()
	var tick [8]byte
	for _, w := range waits {
		goLate := make([]time.Duration, 0, n)
		fdLate := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			time.Sleep(w)
			goLate = append(goLate, time.Since(start)-w)

			start = time.Now()
			ts := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(w))}
			if err := unix.TimerfdSettime(fd, 0, &ts, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := tf.Read(tick[:]); err != nil {
				t.Fatal(err)
			}
			fdLate = append(fdLate, time.Since(start)-w)
		}
		g, f := summarize(goLate), summarize(fdLate)
		t.Logf("sleep %v: Go timer late %v; timerfd late %v", w, g, f)
		if f.p50 > g.p50 {
			t.Errorf("sleep %v: timerfd median lateness %v above the Go timer's %v", w, f.p50, g.p50)
		}
	}
}

// TestDelayIPv6: the same over IPv6, where neighbour discovery must bypass
// the delay and bpf_redirect_neigh takes its IPv6 path.
func TestDelayIPv6(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	const delay = time.Millisecond
	d := NewDumbbellT(t, DumbbellSpec{Senders: 2, IPv6: true, SenderDelays: []time.Duration{delay}})
	echoServer(t, d.Receiver, d.ReceiverAddr6, 7000)
	dst := netip.AddrPortFrom(d.ReceiverAddr6, 7000)
	rtts := probeRTT(t, rttProbes, rttGap, probeTarget{d.Senders[1], dst}, probeTarget{d.Senders[0], dst})
	assertAddedRTT(t, "s1 IPv6 with 1 ms", rtts[0], rtts[1], delay)
	s := d.Delays[0].Stats()
	logDelayStats(t, "s1 IPv6 delay", s)
	if s.Bypassed == 0 || s.KernelDropped != 0 || s.Malformed != 0 {
		t.Errorf("bypassed %d (want ND), kernel dropped %d, malformed %d", s.Bypassed, s.KernelDropped, s.Malformed)
	}
}

// TestDelayPerFlow: PerFlow gives two flows of one sender different delays
// (1 ms and 4 ms by destination port); a third flow gets none.
func TestDelayPerFlow(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	d := NewDumbbellT(t, DumbbellSpec{Senders: 1})
	want := map[uint16]time.Duration{7001: time.Millisecond, 7002: 4 * time.Millisecond}
	dl, err := d.Senders[0].AddDelay("eth0", DelaySpec{PerFlow: func(k FlowKey) time.Duration {
		if k.Proto != unix.IPPROTO_UDP || k.Dst != d.ReceiverAddr {
			return 0
		}
		return want[k.DstPort]
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []uint16{7000, 7001, 7002} {
		echoServer(t, d.Receiver, d.ReceiverAddr, port)
	}
	var targets []probeTarget
	for _, port := range []uint16{7000, 7001, 7002} {
		targets = append(targets, probeTarget{d.Senders[0], netip.AddrPortFrom(d.ReceiverAddr, port)})
	}
	rtts := probeRTT(t, rttProbes, rttGap, targets...)
	for i, port := range []uint16{7001, 7002} {
		assertAddedRTT(t, fmt.Sprintf("port %d", port), rtts[0], rtts[i+1], want[port])
	}
	logDelayStats(t, "s1 per-flow delay", dl.Stats())
}

// flowResult is what the receiver saw of one sequence-numbered flow.
type flowResult struct {
	got, outOfOrder int
	last            int64
}

// sendSequenced sends total datagrams of size bytes, numbered per flow,
// round-robin over conns at rate packets/s, within limit. It paces with
// sleeps, so packets leave in bursts of about rate × 1 ms.
func sendSequenced(t *testing.T, conns []*net.UDPConn, total, size int, rate float64, limit time.Duration) []int {
	t.Helper()
	sent := make([]int, len(conns))
	buf := make([]byte, size)
	start := time.Now()
	for i := 0; i < total; {
		elapsed := time.Since(start)
		if elapsed > limit {
			t.Errorf("sent only %d of %d packets in %v", i, total, limit)
			break
		}
		for due := min(total, int(elapsed.Seconds()*rate)+1); i < due; i++ {
			f := i % len(conns)
			binary.BigEndian.PutUint64(buf, uint64(sent[f]))
			if _, err := conns[f].Write(buf); err != nil {
				t.Fatalf("send: %v", err)
			}
			sent[f]++
		}
		time.Sleep(100 * time.Microsecond)
	}
	return sent
}

// receiveSequenced reads numbered datagrams on each conn until stop is
// closed and the conn's deadline passes.
func receiveSequenced(conns []*net.UDPConn) ([]flowResult, func()) {
	res := make([]flowResult, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		res[i].last = -1
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 2048)
			for {
				k, err := c.Read(buf)
				if err != nil {
					return
				}
				if k < 8 {
					continue
				}
				seq := int64(binary.BigEndian.Uint64(buf))
				if seq <= res[i].last {
					res[i].outOfOrder++
				}
				res[i].last = max(res[i].last, seq)
				res[i].got++
			}
		}()
	}
	return res, wg.Wait
}

// udpPair opens n flows from node from to distinct ports of dst in node to:
// connected senders and bound receivers (with 4 MB receive buffers).
func udpPair(t *testing.T, from, to *Node, dst netip.Addr, basePort uint16, n int) (snd, rcv []*net.UDPConn) {
	t.Helper()
	for i := range n {
		port := basePort + uint16(i)
		var s, r *net.UDPConn
		if err := to.Do(func() (err error) {
			r, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, port)))
			if err == nil {
				err = r.SetReadBuffer(4 << 20)
			}
			return err
		}); err != nil {
			t.Fatalf("listen %s:%d: %v", dst, port, err)
		}
		if err := from.Do(func() (err error) {
			s, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, port)))
			return err
		}); err != nil {
			t.Fatalf("dial %s:%d: %v", dst, port, err)
		}
		t.Cleanup(func() { s.Close(); r.Close() })
		snd, rcv = append(snd, s), append(rcv, r)
	}
	return snd, rcv
}

// TestDelayOrderNoLoss: two flows at 10 kpps each (20 kpps, 100-byte
// datagrams, 1 s) through a 2 ms delay with 1 ms of jitter arrive complete
// and each in order. 20 kpps is well below the capacity TestDelayCapacity
// measures.
func TestDelayOrderNoLoss(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	const (
		rate  = 20000
		total = rate // 1 s
		size  = 72   // UDP payload: 100-byte IP packets
	)
	d := NewDumbbellT(t, DumbbellSpec{Senders: 1})
	dl, err := d.Senders[0].AddDelay("eth0", DelaySpec{Delay: 2 * time.Millisecond, Jitter: time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	snd, rcv := udpPair(t, d.Senders[0], d.Receiver, d.ReceiverAddr, 7100, 2)
	res, wait := receiveSequenced(rcv)
	start := time.Now()
	sent := sendSequenced(t, snd, total, size, rate, 3*time.Second)
	took := time.Since(start)
	// Wait for the tail (delay + jitter), bounded.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if s := dl.Stats(); s.Held == 0 && s.Packets+s.Dropped >= uint64(total) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	for _, c := range rcv {
		_ = c.SetReadDeadline(time.Now())
	}
	wait()
	s := dl.Stats()
	logDelayStats(t, "order", s)
	t.Logf("sent %v in %v (%.0f pps); received %+v", sent, took, float64(total)/took.Seconds(), res)
	for i := range sent {
		if res[i].got != sent[i] {
			t.Errorf("flow %d: received %d of %d", i, res[i].got, sent[i])
		}
		if res[i].outOfOrder != 0 {
			t.Errorf("flow %d: %d datagrams out of order", i, res[i].outOfOrder)
		}
	}
	if s.Dropped != 0 || s.TunDropped != 0 || s.KernelDropped != 0 {
		t.Errorf("drops: forwarder %d, tun %d, kernel %d", s.Dropped, s.TunDropped, s.KernelDropped)
	}
}

// blast sends ipSize-byte IP packets from snd as fast as one goroutine with
// sendmmsg can for window, while a goroutine counts what rcv gets. It
// returns the packets offered and received, and the send time.
func blast(t *testing.T, snd, rcv *net.UDPConn, ipSize int, window time.Duration, during func()) (offered, received int, took time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pc := ipv4.NewPacketConn(rcv)
		msgs := make([]ipv4.Message, 64)
		for j := range msgs {
			msgs[j].Buffers = [][]byte{make([]byte, 2048)}
		}
		for {
			k, err := pc.ReadBatch(msgs, 0)
			if err != nil {
				return
			}
			received += k
		}
	}()
	pc := ipv4.NewPacketConn(snd)
	msgs := make([]ipv4.Message, 64)
	for j := range msgs {
		msgs[j].Buffers = [][]byte{make([]byte, ipSize-28)}
	}
	start := time.Now()
	for time.Since(start) < window {
		k, err := pc.WriteBatch(msgs, 0)
		if err != nil {
			t.Fatalf("sendmmsg: %v", err)
		}
		offered += k
	}
	took = time.Since(start)
	during()
	time.Sleep(100 * time.Millisecond) // drain
	_ = rcv.SetReadDeadline(time.Now())
	<-done
	return offered, received, took
}

// drainDelay waits, at most 5 s, until dl holds nothing.
func drainDelay(t *testing.T, dl *DelayLink) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); dl.Stats().Held > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("delay link still holds %d packets after 5 s", dl.Stats().Held)
		}
	}
}

// TestDelayCapacity measures how many packets per second the forwarder
// releases with 1500-byte and 100-byte IP packets when offered more than it
// can take (one goroutine with sendmmsg, unpaced, for 1 s), with a 1 ms
// delay, and for comparison what the same sender gets through the same path
// without a delay link. Sender, forwarder and receiver share the machine's
// cores, so this is the capacity of the whole emulated path. It logs the
// ratio to the no-delay rate (0.6 on the development VM once, 0.21-0.25 on
// 2026-11-23's, original code included: a performance figure, not a
// property) and asserts what the labs need with margin: 50 kpps, three
// times the experiment's 17 kpps and above the 20 kpps TestDelayOrderNoLoss
// relies on.
func TestDelayCapacity(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	const window = time.Second
	sizes := []int{1500, 100}
	d := NewDumbbellT(t, DumbbellSpec{Senders: 1})
	port := uint16(7200)
	basePPS := map[int]float64{}
	for _, ipSize := range sizes {
		snd, rcv := udpPair(t, d.Senders[0], d.Receiver, d.ReceiverAddr, port, 1)
		port++
		offered, received, took := blast(t, snd[0], rcv[0], ipSize, window, func() {})
		basePPS[ipSize] = float64(received) / took.Seconds()
		t.Logf("%4d-byte packets, no delay link: offered %.0f pps, received %.0f pps = %.2f Gbit/s",
			ipSize, float64(offered)/took.Seconds(), float64(received)/took.Seconds(), float64(received*ipSize)*8/took.Seconds()/1e9)
	}

	dl, err := d.Senders[0].AddDelay("eth0", DelaySpec{Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, ipSize := range sizes {
		snd, rcv := udpPair(t, d.Senders[0], d.Receiver, d.ReceiverAddr, port, 1)
		port++
		before := dl.Stats()
		var mid DelayStats
		offered, received, took := blast(t, snd[0], rcv[0], ipSize, window, func() { mid = dl.Stats() })
		drainDelay(t, dl)
		after := dl.Stats()
		pps := float64(mid.Packets-before.Packets) / took.Seconds()
		gbps := float64(mid.Bytes-before.Bytes) * 8 / took.Seconds() / 1e9
		t.Logf("%4d-byte packets, 1 ms delay link: offered %.0f pps; forwarder released %.0f pps = %.2f Gbit/s; receiver got %d of %d released; dropped at the tun queue %d, forwarder queue %d; held max %d; lateness mean %v p99 < %v",
			ipSize, float64(offered)/took.Seconds(), pps, gbps, received, after.Packets-before.Packets,
			after.TunDropped-before.TunDropped, after.QueueFull-before.QueueFull, after.MaxHeld,
			after.LatenessMean, after.LatenessQuantile(0.99))
		t.Logf("%4d-byte packets: the delay link carries %.2f of the no-delay rate", ipSize, pps/basePPS[ipSize])
		if want := 50000.0; pps < want {
			t.Errorf("%d-byte packets: forwarder released %.0f pps, want at least %.0f (3x the experiment's 17 kpps)", ipSize, pps, want)
		}
	}

	// Below saturation: loss and release lateness at paced rates (0.5 s
	// each, sent in 1 ms bursts). Logged only: they depend on what else
	// runs on the machine.
	for _, ipSize := range sizes {
		for _, rate := range []int{50000, 100000} {
			snd, rcv := udpPair(t, d.Senders[0], d.Receiver, d.ReceiverAddr, port, 1)
			port++
			res, wait := receiveSequenced(rcv)
			before := dl.Stats()
			sent := sendSequenced(t, snd, rate/2, ipSize-28, float64(rate), 2*time.Second)
			time.Sleep(100 * time.Millisecond)
			_ = rcv[0].SetReadDeadline(time.Now())
			wait()
			drainDelay(t, dl)
			after := dl.Stats()
			var lateSum time.Duration
			var late DelayStats
			for i := range late.Lateness {
				late.Lateness[i] = after.Lateness[i] - before.Lateness[i]
			}
			late.LatenessMax = after.LatenessMax
			if n := after.Packets - before.Packets; n > 0 {
				lateSum = time.Duration((int64(after.LatenessMean)*int64(after.Packets) - int64(before.LatenessMean)*int64(before.Packets)) / int64(n))
			}
			t.Logf("%4d-byte packets paced at %d pps: received %d of %d (loss %.3f%%, out of order %d); lateness mean %v p50 < %v p99 < %v",
				ipSize, rate, res[0].got, sent[0], 100*(1-float64(res[0].got)/float64(sent[0])), res[0].outOfOrder,
				lateSum, late.LatenessQuantile(0.5), late.LatenessQuantile(0.99))
		}
	}
}

// TestDelayTCP: a TCP transfer with TSO/GSO on (the dumbbell default) goes
// through a delay link intact: the kernel segments the GSO packets for the
// TUN and completes their checksums.
func TestDelayTCP(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	const total = 8 << 20
	d := NewDumbbellT(t, DumbbellSpec{Senders: 1, SenderDelays: []time.Duration{time.Millisecond}})
	var ln net.Listener
	if err := d.Receiver.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(d.ReceiverAddr, 7400).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deadline := time.Now().Add(10 * time.Second)
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		_ = c.SetDeadline(deadline)
		var n int64
		buf := make([]byte, 64<<10)
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if err != nil {
				got <- n
				return
			}
		}
	}()
	var c net.Conn
	if err := d.Senders[0].Do(func() (err error) {
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(d.ReceiverAddr, 7400).String(), 2*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(deadline)
	start := time.Now()
	buf := make([]byte, 64<<10)
	for sent := 0; sent < total; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			t.Fatalf("after %d bytes: %v", sent, err)
		}
	}
	c.Close()
	n := <-got
	took := time.Since(start)
	s := d.Delays[0].Stats()
	logDelayStats(t, "tcp", s)
	t.Logf("received %d of %d bytes in %v (%.0f Mbit/s)", n, total, took, float64(n)*8/took.Seconds()/1e6)
	if n != total {
		t.Fatalf("received %d bytes, want %d", n, total)
	}
	if s.Packets <= s.Diverted {
		t.Logf("note: no GSO packet was diverted (released %d, diverted %d)", s.Packets, s.Diverted)
	}
}

// tcxPrograms lists the TCX programs on dev in n.
func tcxPrograms(t *testing.T, n *Node, dev string, where ebpf.AttachType) int {
	t.Helper()
	idx, err := n.LinkIndex(dev)
	if err != nil {
		t.Fatal(err)
	}
	var res *link.QueryResult
	if err := n.Do(func() (err error) {
		res, err = link.QueryPrograms(link.QueryOptions{Target: idx, Attach: where})
		return err
	}); err != nil {
		t.Fatalf("query %s %s: %v", n.Name, dev, err)
	}
	return len(res.Programs)
}

func delayProgIDs(t *testing.T, d *DelayLink) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	for _, p := range []*ebpf.Program{d.objs.DelayDivert, d.objs.DelayReturn} {
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, ok := info.ID()
		if !ok {
			t.Fatal("program info has no ID")
		}
		ids = append(ids, id)
	}
	return ids
}

// assertProgsGone waits (bounded) until none of ids is loaded.
func assertProgsGone(t *testing.T, ids []ebpf.ProgramID) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, id := range ids {
		for {
			p, err := ebpf.NewProgramFromID(id)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err == nil {
				p.Close()
			}
			if time.Now().After(deadline) {
				t.Fatalf("program %d still loaded (err %v)", id, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestDelayClose: Close detaches both programs, unloads them, deletes the
// TUN and stops the goroutines; it is idempotent; the device then works
// undelayed and takes a new delay link; a failed AddDelay leaves nothing.
func TestDelayClose(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	d := NewDumbbellT(t, DumbbellSpec{Senders: 1})
	s1 := d.Senders[0]
	echoServer(t, d.Receiver, d.ReceiverAddr, 7000)
	dst := netip.AddrPortFrom(d.ReceiverAddr, 7000)

	if _, err := s1.AddDelay("nosuch0", DelaySpec{Delay: time.Millisecond}); err == nil {
		t.Fatal("AddDelay on a missing device succeeded")
	} else {
		t.Logf("AddDelay(nosuch0): %v", err)
	}
	if _, err := s1.AddDelay("lo", DelaySpec{Delay: time.Millisecond}); err == nil {
		t.Fatal("AddDelay on lo succeeded")
	}
	if _, err := s1.AddDelay("eth0", DelaySpec{Delay: -time.Millisecond}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("AddDelay with a negative delay: %v, want ErrInvalidSpec", err)
	}
	links := func() []string {
		ls, err := s1.Netlink().LinkList()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range ls {
			names = append(names, l.Attrs().Name)
		}
		return names
	}
	if got := links(); len(got) != 2 {
		t.Fatalf("links after failed AddDelay: %v, want lo and eth0", got)
	}

	goroutines := runtime.NumGoroutine()
	dl, err := s1.AddDelay("eth0", DelaySpec{Delay: 3 * time.Millisecond, Jitter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ids := delayProgIDs(t, dl)
	if n := tcxPrograms(t, s1, "eth0", ebpf.AttachTCXEgress); n != 1 {
		t.Fatalf("%d programs on eth0 egress, want 1", n)
	}
	if n := tcxPrograms(t, s1, dl.TunName(), ebpf.AttachTCXIngress); n != 1 {
		t.Fatalf("%d programs on %s ingress, want 1", n, dl.TunName())
	}
	if r := summarize(probeRTT(t, 20, rttGap, probeTarget{s1, dst})[0]); r.min < 3*time.Millisecond {
		t.Fatalf("RTT with a 3 ms delay: %v", r)
	}

	if err := dl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dl.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ok, err := dl.tunExists(); ok || err != nil {
		t.Fatalf("tun %s still exists after Close (err %v)", dl.TunName(), err)
	}
	if n := tcxPrograms(t, s1, "eth0", ebpf.AttachTCXEgress); n != 0 {
		t.Fatalf("%d programs left on eth0 egress", n)
	}
	assertProgsGone(t, ids)
	for end := time.Now().Add(time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after Close, %d before AddDelay", n, goroutines)
	}
	s := dl.Stats()
	logDelayStats(t, "after close", s)
	if s.Packets < 20 || s.Diverted != s.Packets+s.DroppedOnClose {
		t.Errorf("final stats: released %d, diverted %d, dropped on close %d", s.Packets, s.Diverted, s.DroppedOnClose)
	}
	if r := summarize(probeRTT(t, 20, rttGap, probeTarget{s1, dst})[0]); r.p50 > time.Millisecond {
		t.Fatalf("RTT after Close: %v, want the undelayed path", r)
	}

	// The device takes a new delay link, which the lab closes.
	dl2, err := s1.AddDelay("eth0", DelaySpec{Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if dl2.TunName() == dl.TunName() {
		t.Errorf("second link reuses the TUN name %s", dl.TunName())
	}
	if r := summarize(probeRTT(t, 20, rttGap, probeTarget{s1, dst})[0]); r.min < time.Millisecond {
		t.Fatalf("RTT with the second link: %v", r)
	}
}

// TestDelayLabClose: closing a dumbbell's lab closes its delay links (their
// programs are unloaded) before the namespaces go.
func TestDelayLabClose(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	d, err := NewDumbbell(DumbbellSpec{Senders: 3, SenderDelays: []time.Duration{time.Millisecond, 0, 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if len(d.Delays) != 3 || d.Delays[0] == nil || d.Delays[1] != nil || d.Delays[2] == nil {
		t.Fatalf("Delays = %v", d.Delays)
	}
	ids := append(delayProgIDs(t, d.Delays[0]), delayProgIDs(t, d.Delays[2])...)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dl := range []*DelayLink{d.Delays[0], d.Delays[2]} {
		if !dl.closing.Load() {
			t.Errorf("delay link %s not closed by the lab", dl.TunName())
		}
	}
	assertProgsGone(t, ids)
	assertGone(t, d.RunID())
	if _, err := d.Senders[0].AddDelay("eth0", DelaySpec{}); !errors.Is(err, ErrClosed) {
		t.Errorf("AddDelay after Close: %v, want ErrClosed", err)
	}
}

// TestDelaySignalTearsDown: SIGINT in a process with delay links tears them
// down with the lab (exit 130, namespaces and programs gone).
func TestDelaySignalTearsDown(t *testing.T) {
	if os.Getenv("TOPO_DELAY_SIGNAL_CHILD") != "" {
		delaySignalChild()
		return
	}
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDelaySignalTearsDown$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TOPO_DELAY_SIGNAL_CHILD=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("child exit = %v, want code 130\nstdout:%s\nstderr:%s", err, stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "teardown:") {
		t.Errorf("teardown reported errors: %s", stderr.String())
	}
	fields := strings.Fields(stdout.String())
	if len(fields) < 3 || !strings.HasPrefix(fields[0], NamePrefix) {
		t.Fatalf("child printed %q, want a run id and program ids", stdout.String())
	}
	assertGone(t, fields[0])
	var ids []ebpf.ProgramID
	for _, f := range fields[1:] {
		id, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			t.Fatalf("child printed %q", stdout.String())
		}
		ids = append(ids, ebpf.ProgramID(id))
	}
	assertProgsGone(t, ids)
	t.Logf("child torn down in %v", time.Since(start))
}

func delaySignalChild() {
	d, err := NewDumbbell(DumbbellSpec{Senders: 1, SenderDelays: []time.Duration{time.Millisecond}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Print(d.RunID())
	for _, p := range []*ebpf.Program{d.Delays[0].objs.DelayDivert, d.Delays[0].objs.DelayReturn} {
		info, _ := p.Info()
		id, _ := info.ID()
		fmt.Print(" ", id)
	}
	fmt.Println()
	_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
	time.Sleep(10 * time.Second)
	os.Exit(4) // the handler should have exited first
}

// TestDelaySpecErrors: bad delays are refused before anything is built, with
// the field, the value and the range in the message.
func TestDelaySpecErrors(t *testing.T) {
	for _, tc := range []struct {
		ds   DumbbellSpec
		want string
	}{
		{DumbbellSpec{Senders: 2, SenderDelays: make([]time.Duration, 3)}, "DumbbellSpec.SenderDelays: 3 entries for 2 senders"},
		{DumbbellSpec{Senders: 2, SenderDelays: []time.Duration{0, -time.Millisecond}}, "DumbbellSpec.SenderDelays[1]: -1ms outside 0..10s"},
		{DumbbellSpec{Senders: 1, SenderDelays: []time.Duration{11 * time.Second}}, "DumbbellSpec.SenderDelays[0]: 11s outside 0..10s"},
	} {
		_, err := DumbbellTopology(tc.ds)
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DumbbellTopology(%+v) = %v, want ErrInvalidSpec with %q", tc.ds, err, tc.want)
		}
	}
	for _, tc := range []struct {
		s    DelaySpec
		want string
	}{
		{DelaySpec{Delay: -1}, "DelaySpec.Delay: -1ns outside 0..10s"},
		{DelaySpec{Delay: time.Minute}, "DelaySpec.Delay: 1m0s outside 0..10s"},
		{DelaySpec{Jitter: -time.Millisecond}, "DelaySpec.Jitter: -1ms outside 0..10s"},
		{DelaySpec{Limit: -1}, "DelaySpec.Limit: -1 outside 0..1048576 (0 means 10000)"},
		{DelaySpec{Limit: MaxDelayLimit + 1}, "DelaySpec.Limit: 1048577 outside"},
	} {
		err := tc.s.validate("DelaySpec")
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate(%+v) = %v, want ErrInvalidSpec with %q", tc.s, err, tc.want)
		}
	}
	if err := (DelaySpec{Delay: MaxDelay, Jitter: MaxDelay, Limit: MaxDelayLimit}).validate("DelaySpec"); err != nil {
		t.Errorf("limits themselves refused: %v", err)
	}
}

func TestDelayParseFlow(t *testing.T) {
	a4, b4 := netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("198.19.0.2")
	a6, b6 := netip.MustParseAddr("2001:db8:1::2"), netip.MustParseAddr("2001:db8:ff::2")
	ip4 := func(proto byte, frag uint16, l4 ...byte) []byte {
		b := make([]byte, 20, 20+len(l4))
		b[0] = 0x45
		binary.BigEndian.PutUint16(b[6:], frag)
		b[9] = proto
		copy(b[12:], a4.AsSlice())
		copy(b[16:], b4.AsSlice())
		return append(b, l4...)
	}
	ip6 := func(nh byte, rest ...byte) []byte {
		b := make([]byte, 40, 40+len(rest))
		b[0] = 0x60
		b[6] = nh
		copy(b[8:], a6.AsSlice())
		copy(b[24:], b6.AsSlice())
		return append(b, rest...)
	}
	ports := []byte{0x1f, 0x40, 0x1b, 0x58}  // 8000 -> 7000
	hbh := []byte{17, 0, 0, 0, 0, 0, 0, 0}   // hop-by-hop, next UDP, 8 bytes
	frag6 := []byte{17, 0, 0, 1, 0, 0, 0, 1} // fragment, next UDP, M=1
	for _, tc := range []struct {
		name string
		pkt  []byte
		want FlowKey
	}{
		{"udp4", ip4(17, 0, ports...), FlowKey{a4, b4, 17, 8000, 7000}},
		{"tcp4 DF", ip4(6, 0x4000, ports...), FlowKey{a4, b4, 6, 8000, 7000}},
		{"icmp4", ip4(1, 0, 8, 0, 0, 0), FlowKey{a4, b4, 1, 0, 0}},
		{"udp4 first fragment", ip4(17, 0x2000, ports...), FlowKey{a4, b4, 17, 0, 0}},
		{"udp4 later fragment", ip4(17, 0x0010, ports...), FlowKey{a4, b4, 17, 0, 0}},
		{"udp4 no ports", ip4(17, 0, 0x1f), FlowKey{a4, b4, 17, 0, 0}},
		{"udp6", ip6(17, ports...), FlowKey{a6, b6, 17, 8000, 7000}},
		{"udp6 hop-by-hop", ip6(0, append(hbh, ports...)...), FlowKey{a6, b6, 17, 8000, 7000}},
		{"udp6 fragment", ip6(44, append(frag6, ports...)...), FlowKey{a6, b6, 17, 0, 0}},
		{"ipv6 truncated ext", ip6(0, 17), FlowKey{Src: a6, Dst: b6}},
		{"ipv4 truncated", ip4(17, 0)[:19], FlowKey{}},
		{"ipv4 bad ihl", append([]byte{0x4f}, make([]byte, 30)...), FlowKey{}},
		{"not ip", []byte{0x00, 1, 2, 3}, FlowKey{}},
		{"empty", nil, FlowKey{}},
	} {
		if got := parseFlow(tc.pkt); got != tc.want {
			t.Errorf("%s: parseFlow = %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { parseFlow(ip6(17, ports...)) }); n > 1 {
		t.Errorf("parseFlow allocates %v times", n)
	}
}

func TestDelayReleaseHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h releaseHeap
	for i := range 2000 {
		h.push(heldPacket{release: r.Int64N(100), seq: uint64(i)})
		if i%3 == 0 {
			h.pop()
		}
	}
	prev := heldPacket{release: -1}
	for len(h) > 0 {
		x := h.pop()
		if x.release < prev.release || x.release == prev.release && x.seq < prev.seq {
			t.Fatalf("popped %+v after %+v", x, prev)
		}
		prev = x
	}
}

// TestDelayFlowRelease: jitter and per-flow delays never reorder a flow,
// never release early, PerFlow results are clamped, and the flow table is
// pruned.
func TestDelayFlowRelease(t *testing.T) {
	const delay, jitter = 1000, 500 // ns
	calls := 0
	d := &DelayLink{spec: DelaySpec{Delay: delay, Jitter: jitter, PerFlow: func(k FlowKey) time.Duration {
		calls++
		switch k.DstPort {
		case 1:
			return -time.Second
		case 2:
			return time.Hour
		}
		return delay
	}}, flows: map[FlowKey]*flowState{}, pruneAt: minFlowPrune, rng: rand.New(rand.NewPCG(3, 4))}
	pkt := func(dport uint16) []byte {
		b := make([]byte, 28)
		b[0], b[9] = 0x45, 17
		binary.BigEndian.PutUint16(b[22:], dport)
		return b
	}
	last := map[uint16]int64{}
	for i := range 1000 {
		arrival := int64(i * 100)
		for _, port := range []uint16{7000, 7001} {
			rel := d.flowRelease(pkt(port), arrival)
			if rel < arrival+delay {
				t.Fatalf("port %d released at %d, before arrival %d + delay", port, rel, arrival)
			}
			if rel < last[port] {
				t.Fatalf("port %d reordered: %d after %d", port, rel, last[port])
			}
			if rel > max(last[port], arrival+delay+jitter) {
				t.Fatalf("port %d held too long: %d", port, rel)
			}
			last[port] = rel
		}
	}
	if calls != 2 {
		t.Errorf("PerFlow called %d times for 2 flows", calls)
	}
	if rel := d.flowRelease(pkt(1), 0); rel < 0 || rel > jitter {
		t.Errorf("negative PerFlow delay not clamped to 0: release %d", rel)
	}
	if rel := d.flowRelease(pkt(2), 0); rel < int64(MaxDelay) || rel > int64(MaxDelay)+jitter {
		t.Errorf("PerFlow delay of an hour not clamped to MaxDelay: release %d", rel)
	}
	// Many short flows, long past: the table stays bounded.
	for i := range 10 * minFlowPrune {
		d.flowRelease(pkt(uint16(10000+i)), int64(1e12)+int64(i)*int64(time.Millisecond))
	}
	if len(d.flows) > 2*minFlowPrune {
		t.Errorf("flow table holds %d flows", len(d.flows))
	}
}

// TestDelayProgRun runs the two programs on crafted frames through
// BPF_PROG_TEST_RUN (which returns the verdict without redirecting). The
// kernel refuses to run an IP frame shorter than its IP header, so the
// malformed path is reached with a bad IHL and a headerless ICMPv6 packet.
func TestDelayProgRun(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	const tunIndex, devIndex = 77, 78
	cs, err := bpf.LoadDelay()
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Variables[bpf.DelayVarTunIfindex].Set(uint32(tunIndex)); err != nil {
		t.Fatal(err)
	}
	if err := cs.Variables[bpf.DelayVarDevIfindex].Set(uint32(devIndex)); err != nil {
		t.Fatal(err)
	}
	var objs bpf.DelayObjects
	if err := cs.LoadAndAssign(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()

	const (
		pass     = ^uint32(0) // TC_ACT_UNSPEC (-1): next program, then the qdisc
		shot     = 2
		redirect = 7
	)
	unicast := []byte{0x02, 0, 0, 0, 0, 1}
	eth := func(dst []byte, proto uint16, l3 ...byte) []byte {
		b := append(append(slices.Clone(dst), 0x02, 0, 0, 0, 0, 2), byte(proto>>8), byte(proto))
		return append(b, l3...)
	}
	ip4 := make([]byte, 28) // IPv4 + UDP header, 198.18.1.2 -> 198.19.0.2
	ip4[0], ip4[9] = 0x45, 17
	copy(ip4[12:], []byte{198, 18, 1, 2, 198, 19, 0, 2})
	ip6 := func(dst0, nh byte, rest ...byte) []byte {
		b := make([]byte, 40)
		b[0], b[6], b[24] = 0x60, nh, dst0
		return append(b, rest...)
	}
	// __sk_buff up to ingress_ifindex (the fields BPF_PROG_TEST_RUN takes).
	type skbCtx struct {
		Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority, IngressIfindex uint32
	}
	run := func(prog *ebpf.Program, frame []byte, ingress uint32) uint32 {
		t.Helper()
		ctx := skbCtx{IngressIfindex: ingress}
		ret, err := prog.Run(&ebpf.RunOptions{Data: frame, Context: &ctx})
		if err != nil {
			t.Fatalf("run %v on % x: %v", prog, frame, err)
		}
		return ret
	}
	counters := func() bpf.DelayDelayStats {
		var per []bpf.DelayDelayStats
		if err := objs.DelayCounters.Lookup(uint32(0), &per); err != nil {
			t.Fatal(err)
		}
		var s bpf.DelayDelayStats
		for _, c := range per {
			s.Diverted += c.Diverted
			s.Returned += c.Returned
			s.Reentered += c.Reentered
			s.Bypassed += c.Bypassed
			s.Malformed += c.Malformed
			s.ReturnDropped += c.ReturnDropped
			s.RedirectErrors += c.RedirectErrors
		}
		return s
	}

	for _, tc := range []struct {
		name    string
		frame   []byte
		ingress uint32
		want    uint32
	}{
		{"ipv4 udp", eth(unicast, 0x0800, ip4...), 0, redirect},
		{"ipv4 forwarded", eth(unicast, 0x0800, ip4...), 3, redirect},
		{"ipv4 back from the tun", eth(unicast, 0x0800, ip4...), tunIndex, pass},
		{"arp", eth([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0806, make([]byte, 28)...), 0, pass},
		{"arp reply", eth(unicast, 0x0806, make([]byte, 28)...), 0, pass},
		{"ipv4 to an L2 multicast", eth([]byte{0x01, 0, 0x5e, 0, 0, 1}, 0x0800, ip4...), 0, pass},
		{"ipv6 udp", eth(unicast, 0x86dd, ip6(0x20, 17, make([]byte, 8)...)...), 0, redirect},
		{"ipv6 neighbour solicitation", eth(unicast, 0x86dd, ip6(0xfe, 58, 135, 0, 0, 0)...), 0, pass},
		{"ipv6 echo request", eth(unicast, 0x86dd, ip6(0x20, 58, 128, 0, 0, 0)...), 0, redirect},
		{"ipv6 to ff02::", eth(unicast, 0x86dd, ip6(0xff, 17, make([]byte, 8)...)...), 0, pass},
		{"ipv4 bad ihl", eth(unicast, 0x0800, append([]byte{0x44}, ip4[1:]...)...), 0, pass},
		{"icmpv6 without type", eth(unicast, 0x86dd, ip6(0x20, 58)...), 0, pass},
	} {
		if got := run(objs.DelayDivert, tc.frame, tc.ingress); got != tc.want {
			t.Errorf("delay_divert(%s) = %d, want %d", tc.name, int32(got), int32(tc.want))
		}
	}
	s := counters()
	if s.Diverted != 4 || s.Reentered != 1 || s.Bypassed != 5 || s.Malformed != 2 {
		t.Errorf("divert counters %+v, want diverted 4, reentered 1, bypassed 5, malformed 2", s)
	}

	// At the TUN, skb->protocol comes from the frame BPF_PROG_TEST_RUN builds.
	if got := run(objs.DelayReturn, eth(unicast, 0x0800, ip4...), 0); got != redirect {
		t.Errorf("delay_return(ipv4) = %d, want %d", int32(got), redirect)
	}
	if got := run(objs.DelayReturn, eth(unicast, 0x86dd, ip6(0x20, 17, make([]byte, 8)...)...), 0); got != redirect {
		t.Errorf("delay_return(ipv6) = %d, want %d", int32(got), redirect)
	}
	if got := run(objs.DelayReturn, eth(unicast, 0x0806, make([]byte, 28)...), 0); got != shot {
		t.Errorf("delay_return(arp) = %d, want %d", int32(got), shot)
	}
	s = counters()
	if s.Returned != 2 || s.ReturnDropped != 1 || s.RedirectErrors != 0 {
		t.Errorf("return counters %+v, want returned 2, return_dropped 1", s)
	}
}
