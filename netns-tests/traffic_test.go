package netnstests

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TOS bytes: DSCP << 2 | ECN.
const (
	tosRoCEECT0   = 26<<2 | 2
	tosRoCENotECT = 26 << 2
	tosCNP        = 48 << 2
	tosRoCETCP    = 26 << 2 // the kernel sets ECT(0) on TCP data itself
)

// attachModes are the two ways a port hooks its programs; every netns test
// runs on both.
var attachModes = []struct {
	name   string
	legacy bool
}{{"tcx", false}, {"legacy", true}}

func attachPort(t *testing.T, p lab.Port, cfg qdisc.Config, legacy bool) *qdisc.Port {
	t.Helper()
	return attachPortWith(t, p, cfg, qdisc.AttachOptions{Legacy: legacy})
}

// attachPortWith attaches cfg to p with opts (Dev, Netns and the peer are
// filled from p) and checks the port came up as asked: the attach mode, and
// departures counted at xmit unless opts ask for the peer's ingress. This
// kernel has everything the xmit hook needs, so a fallback is a failure.
func attachPortWith(t *testing.T, p lab.Port, cfg qdisc.Config, opts qdisc.AttachOptions) *qdisc.Port {
	t.Helper()
	opts.Dev, opts.Netns = p.Dev, p.Node.NetnsName
	opts.PeerDev, opts.PeerNetns = p.PeerDev, p.PeerNode.NetnsName
	port, err := qdisc.Attach(cfg, opts)
	if err != nil {
		t.Fatalf("attach port: %v", err)
	}
	t.Cleanup(func() {
		if err := port.Close(); err != nil {
			t.Errorf("detach port: %v", err)
		}
	})
	want := qdisc.AttachTCX
	if opts.Legacy {
		want = qdisc.AttachLegacy
	}
	info := port.Info()
	if info.Attach != want {
		t.Fatalf("attached with %s, want %s", info.Attach, want)
	}
	wantDep := qdisc.DepartXmit
	if opts.Departure == qdisc.DepartPeerIngress {
		wantDep = qdisc.DepartPeerIngress
	}
	if info.Departure != wantDep {
		t.Fatalf("departures counted at %s (%s), want %s", info.Departure, info.DepartureNote, wantDep)
	}
	return port
}

func portStats(t *testing.T, p *qdisc.Port) qdisc.Stats {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitIdle waits until the port's queues and the host queue after it are
// empty, so that the counters are at rest and their invariants hold exactly.
func waitIdle(t *testing.T, p *qdisc.Port) qdisc.Stats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := portStats(t, p)
		if t := s.Total(); t.BacklogPackets == 0 && t.BacklogBytes == 0 && t.Host.BacklogPackets == 0 && t.Host.BacklogBytes == 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("port still has a backlog after 5 s: %d bytes, %d bytes in the host queue", s.Total().BacklogBytes, s.Total().Host.BacklogBytes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// udpPort builds a dumbbell with offloads off, attaches cfg to its
// bottleneck and opens a UDP sink in the receiver; dst is the sink.
func udpPort(t *testing.T, senders int, cfg qdisc.Config, legacy bool) (*lab.Dumbbell, *qdisc.Port, *sink, netip.AddrPort) {
	t.Helper()
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	d := lab.NewDumbbellT(t, lab.DumbbellSpec{Senders: senders, DisableOffloads: true})
	port := attachPort(t, d.Bottleneck, cfg, legacy)
	sk := newSink(t, d.Receiver)
	return d, port, sk, netip.AddrPortFrom(d.ReceiverAddr, uint16(sk.port))
}

// settle waits for the port to drain, checks the counter invariants and
// returns the counters at rest.
func settle(t *testing.T, p *qdisc.Port) qdisc.Stats {
	t.Helper()
	s := waitIdle(t, p)
	q, err := p.Qdisc()
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, s, q)
	return s
}

func checkInvariants(t *testing.T, s qdisc.Stats, q qdisc.QdiscCounters) {
	t.Helper()
	for i := range s.Classes {
		if err := s.Classes[i].CheckInvariant(); err != nil {
			t.Error(err)
		}
	}
	if q.Drops != 0 {
		t.Errorf("the kernel qdisc dropped %d packets itself: the port's accounting missed them", q.Drops)
	}
	// Only the frames enqueue could not stamp (ARP) arrive unstamped.
	if want := s.Port.UnaccountedPackets - s.Port.UnaccountedDroppedPackets; s.Port.DequeueUnstampedPackets != want {
		t.Errorf("%d packets reached the dequeue hook without an enqueue stamp, want %d (the unaccounted ones)", s.Port.DequeueUnstampedPackets, want)
	}
	// With the xmit hook nearly every departure is counted where HTB
	// hands the packet over. The kernel skips tracing programs in a
	// softirq that interrupted a task with BPF instrumentation disabled
	// (another process's BPF syscalls, a test reading the port's maps,
	// another tracing program running on the CPU): the peer counts those,
	// exactly, as late departures. Usually 0-3 % under load; in a few UET
	// incast runs 12-26 % (of ~4400), in bursts. A broken hook would leave
	// (nearly) all departures late: that is what this looks for.
	t0 := s.Total()
	if t0.Host.EnteredPackets > 0 {
		if late := s.Port.LateDeparturePackets; late*2 > t0.DequeuedPackets {
			t.Errorf("%d of %d departures counted late at the peer: more than half (is the xmit hook attached?)", late, t0.DequeuedPackets)
		} else if late > 0 {
			t.Logf("%d of %d departures counted late at the peer (%.2f %%)", late, t0.DequeuedPackets, 100*float64(late)/float64(t0.DequeuedPackets))
		}
		// A slot is busy for about one packet in 32768 / packets in
		// flight between the hooks (a few dozen at most here).
		if busy := s.Port.HandoffBusyPackets; busy*100 > t0.DequeuedPackets {
			t.Errorf("%d of %d departures found their handoff slot busy: more than 1 %%", busy, t0.DequeuedPackets)
		}
	}
}

// sink receives UDP in a namespace and counts datagrams by the kind
// classify gives them from their payload and TOS byte (IP_RECVTOS); newSink
// counts them by ECN codepoint, as the receiving host sees them.
type sink struct {
	conn     *net.UDPConn
	port     int
	received [4]atomic.Uint64
	wg       sync.WaitGroup
}

func newSink(t *testing.T, n *lab.Node) *sink {
	return newClassifyingSink(t, n, func(_ []byte, tos byte) int { return int(tos & 3) })
}

// newClassifyingSink counts each datagram in received[classify(...)], a
// kind 0 to 3.
func newClassifyingSink(t *testing.T, n *lab.Node, classify func(payload []byte, tos byte) int) *sink {
	t.Helper()
	return newClassifyingSinkOn(t, n, "udp4", classify)
}

// newClassifyingSinkOn is newClassifyingSink on network "udp4" or "udp6"
// (the TOS then is the traffic class, IPV6_RECVTCLASS).
func newClassifyingSinkOn(t *testing.T, n *lab.Node, network string, classify func(payload []byte, tos byte) int) *sink {
	t.Helper()
	s := &sink{}
	err := n.Do(func() error {
		var err error
		s.conn, err = net.ListenUDP(network, &net.UDPAddr{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.port = s.conn.LocalAddr().(*net.UDPAddr).Port
	_ = s.conn.SetReadBuffer(8 << 20)
	rc, err := s.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if network == "udp6" {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		}
	}); err != nil || serr != nil {
		t.Fatalf("IP_RECVTOS / IPV6_RECVTCLASS: %v %v", err, serr)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 9000)
		oob := make([]byte, 64)
		for {
			n, oobn, _, _, err := s.conn.ReadMsgUDP(buf, oob)
			if err != nil {
				return
			}
			s.received[classify(buf[:n], tosFromCmsg(oob[:oobn]))&3].Add(1)
		}
	}()
	t.Cleanup(s.close)
	return s
}

// tosFromCmsg finds the IP_TOS (or IPV6_TCLASS, an int) control message
// of a received datagram.
func tosFromCmsg(oob []byte) byte {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) > 0 {
			return m.Data[0]
		}
		if m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS && len(m.Data) >= 4 {
			return byte(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return 0
}

func (s *sink) close() {
	s.conn.Close()
	s.wg.Wait()
}

func (s *sink) total() uint64 {
	var n uint64
	for i := range s.received {
		n += s.received[i].Load()
	}
	return n
}

// flow is a paced UDP source: payload-byte datagrams with a fixed TOS at
// rate while on, silent while off, for total; every loop is bounded.
type flow struct {
	tos     int
	payload int
	rate    units.Rate
	on, off time.Duration // off = 0: always on
	total   time.Duration
	// sends, optional, gets the time of each datagram written.
	sends *sendLog
}

// sendLog is when a flow wrote its datagrams: whether the host let a
// sender run when a test needed its packets.
type sendLog struct {
	mu sync.Mutex
	at []time.Time
}

func (l *sendLog) add(t time.Time) {
	l.mu.Lock()
	l.at = append(l.at, t)
	l.mu.Unlock()
}

// within is how many datagrams were written in [from, to].
func (l *sendLog) within(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.at {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

// maxGap is the longest span of [from, to] with no datagram written in it
// (to - from where none was).
func (l *sendLog) maxGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var gap time.Duration
	last := from
	for _, t := range l.at { // in the order written
		if t.Before(from) || t.After(to) {
			continue
		}
		gap = max(gap, t.Sub(last))
		last = t
	}
	return max(gap, to.Sub(last))
}

// send runs the flow from node n to dst and returns the datagrams sent.
func (f flow) send(ctx context.Context, n *lab.Node, dst netip.AddrPort) (int, error) {
	var conn *net.UDPConn
	err := n.Do(func() error {
		var err error
		conn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := ipv4.NewConn(conn).SetTOS(f.tos); err != nil {
		return 0, err
	}
	buf := make([]byte, f.payload)
	wire := float64(f.payload + 42) // UDP + IPv4 + Ethernet headers
	perSec := f.rate.BytesPerSecond() / wire
	start := time.Now()
	sent := 0
	tick := time.NewTicker(500 * time.Microsecond)
	defer tick.Stop()
	var onTime time.Duration // time spent in on-periods so far
	lastTick := start
	for {
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case now := <-tick.C:
			elapsed := now.Sub(start)
			if elapsed >= f.total {
				return sent, nil
			}
			on := true
			if f.off > 0 {
				on = elapsed%(f.on+f.off) < f.on
			}
			if on {
				onTime += now.Sub(lastTick)
			}
			lastTick = now
			due := int(onTime.Seconds()*perSec) - sent
			for range due {
				// A full socket buffer drops like a NIC ring would.
				if _, err := conn.Write(buf); err != nil && !errors.Is(err, syscall.ENOBUFS) {
					return sent, err
				}
				if f.sends != nil {
					f.sends.add(time.Now())
				}
				sent++
			}
		}
	}
}

// iperf3Result is the part of `iperf3 -J` the tests read.
type iperf3Result struct {
	Error string `json:"error"`
	End   struct {
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		SumSent struct {
			Retransmits int `json:"retransmits"`
		} `json:"sum_sent"`
	} `json:"end"`
}

// iperf3TCP runs one TCP flow per sender to the receiver with congestion
// control cc, set per socket: a namespace inherits the host's default (often
// bbr, which ignores ECN) and may only switch to the host's allowed list.
// midway, if set, runs once the flows are past slow start.
func iperf3TCP(t *testing.T, d *lab.Dumbbell, tos int, cc string, seconds int, midway func(), meter *portMeter) []iperf3Result {
	t.Helper()
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Fatal("iperf3 not found: apt-get install -y iperf3")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+20)*time.Second)
	defer cancel()
	var servers []*exec.Cmd
	for i := range d.Senders {
		srv := d.Receiver.Command(ctx, "iperf3", "-s", "-1", "-p", fmt.Sprint(5201+i))
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, srv)
	}
	defer func() {
		for _, s := range servers {
			_ = s.Process.Kill()
			_ = s.Wait()
		}
	}()
	results := make([]iperf3Result, len(d.Senders))
	errs := make([]error, len(d.Senders))
	var wg sync.WaitGroup
	for i, s := range d.Senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out []byte
			var err error
			// The server may need a moment to listen: retry briefly.
			for try := 0; try < 20; try++ {
				cmd := s.Command(ctx, "iperf3", "-c", d.ReceiverAddr.String(), "-p", fmt.Sprint(5201+i),
					"-t", fmt.Sprint(seconds), "-S", fmt.Sprint(tos), "-C", cc, "-J")
				var buf bytes.Buffer
				cmd.Stdout = &buf
				if err = cmd.Start(); err == nil {
					meter.watch(t, cmd.Process.Pid)
					err = cmd.Wait()
				}
				out = buf.Bytes()
				results[i] = iperf3Result{}
				if jerr := json.Unmarshal(out, &results[i]); jerr == nil && results[i].Error != "" {
					err = errors.New(results[i].Error)
				}
				if err == nil || !strings.Contains(err.Error()+string(out), "connect") {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs[i] = fmt.Errorf("iperf3 from %s: %v: %.300s", s.Name, err, out)
			}
		}()
	}
	if midway != nil {
		time.Sleep(time.Duration(seconds) * time.Second / 3)
		midway()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return results
}

// leftovers lists programs of ours are still loaded that were not
// there before the tests, and namespaces of this run that survive.
func leftovers(before map[string]bool) ([]string, error) {
	// The kernel frees a detached program after an RCU grace period.
	for range 50 {
		left, err := leftoversNow(before)
		if err != nil || len(left) == 0 {
			return left, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return leftoversNow(before)
}

func leftoversNow(before map[string]bool) ([]string, error) {
	var left []string
	names, err := lab.LiveNamespaces(fmt.Sprintf("%s%d-", lab.NamePrefix, os.Getpid()))
	if err != nil {
		return nil, err
	}
	left = append(left, names...)
	progs, err := portPrograms()
	if err != nil {
		return nil, err
	}
	for id := range progs {
		if !before[id] {
			left = append(left, "bpf program "+id)
		}
	}
	return left, nil
}

// portPrograms lists the loaded programs named like the port's.
func portPrograms() (map[string]bool, error) {
	out := map[string]bool{}
	names := map[string]bool{bpf.PortProgPortEnqueue: true, bpf.PortProgPortDequeue: true,
		bpf.PortProgPortXmit: true, bpf.PortProgPortHostDrop: true}
	ids, err := listProgramIDs()
	if err != nil {
		return nil, err
	}
	for id, name := range ids {
		if names[name] {
			out[fmt.Sprint(id)] = true
		}
	}
	return out, nil
}
