package netnstests

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestPortNoBurstAfterIdle: a train sent at once into an idle port leaves
// at the port's rate, no faster. The port's token bucket fills while it
// is idle; what it holds leaves at once when packets come, so a bucket
// larger than HTB's timer needs (100 µs of the rate) makes a slow port
// faster than a wire: at 10 Mbit/s a floor of four 1514-byte frames let
// 6 KB through at once, 4.8 ms of a 26.5-ms train. The spans are the
// receiver's kernel timestamps, taken as the stack delivers the packet on
// the softirq pass of its departure (TestPortKeepsReceiveTimestamp), so
// the host can only lengthen them, except by delaying a train's first
// packet alone: the median of five trains is judged.
func TestPortNoBurstAfterIdle(t *testing.T) {
	const (
		rate    = 10 * units.Mbit
		payload = 1400
		wire    = payload + 42 // UDP, IPv4, Ethernet
		n       = 24
		trains  = 5
		// slack: the bucket's 100 µs and the receive path's jitter on
		// the first packet of a train.
		slack = time.Millisecond
	)
	port, out, tsConn := timestampedPort(t, rate)

	want := time.Duration(float64((n-1)*wire*8) / float64(rate) * float64(time.Second))
	var spans []time.Duration
	buf := make([]byte, payload)
	for tr := range trains {
		time.Sleep(100 * time.Millisecond) // the port idle, its bucket full
		for range n {
			if _, err := out.Write(buf); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ts, err := tsConn(ctx, n)
		cancel()
		if err != nil {
			t.Fatalf("train %d: %v", tr, err)
		}
		spans = append(spans, ts[n-1].Sub(ts[0]))
	}
	s := settle(t, port)
	if got := s.Classes[qdisc.ClassRoCE].DequeuedPackets; got != n*trains {
		t.Errorf("the RoCE class dequeued %d packets, want %d", got, n*trains)
	}
	slices.Sort(spans)
	med := spans[trains/2]
	t.Logf("%d trains of %d × %d B at %v: first to last %v (median; least %v, most %v), %v at the rate",
		trains, n, wire, rate, med.Round(10*time.Microsecond), spans[0].Round(10*time.Microsecond),
		spans[trains-1].Round(10*time.Microsecond), want.Round(10*time.Microsecond))
	if med < want-slack {
		t.Errorf("a train left an idle port in %v, %v faster than its %v at %v: the port's bucket lets a burst through after idle",
			med.Round(10*time.Microsecond), (want - med).Round(10*time.Microsecond), want.Round(10*time.Microsecond), rate)
	}
}

// TestPortKeepsReceiveTimestamp: a packet that crossed a port carries its
// arrival time to the receiver's socket (SO_TIMESTAMPNS), not the time the
// application read it. The port's dequeue hook used to clear the delivery
// stamp its enqueue set; netif_rx had not stamped the packet (the stamp was
// set then), so the kernel stamped it at recvmsg: every receive timestamp
// behind a port was the read time (the engine's Arrival, a capture's
// spacing), and a train read late looked like a burst.
func TestPortKeepsReceiveTimestamp(t *testing.T) {
	const (
		n = 5
		// wait: how long the packets sit in the socket before the read.
		wait = 100 * time.Millisecond
	)
	port, out, tsConn := timestampedPort(t, 100*units.Mbit)
	sent := time.Now()
	for range n {
		if _, err := out.Write(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(wait)
	read := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts, err := tsConn(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	s := settle(t, port)
	if got := s.Classes[qdisc.ClassRoCE].DequeuedPackets; got != n {
		t.Fatalf("the RoCE class dequeued %d packets, want %d: the packets did not cross the port's queue", got, n)
	}
	for i, at := range ts {
		t.Logf("packet %d: stamped %v after the first send, %v before the read began",
			i, at.Sub(sent).Round(time.Microsecond), read.Sub(at).Round(time.Microsecond))
		if at.Before(sent) || !at.Before(read) {
			t.Errorf("packet %d stamped %v after the first send, the read began %v after it: want the arrival, between the two",
				i, at.Sub(sent).Round(time.Microsecond), read.Sub(sent).Round(time.Microsecond))
		}
	}
}

// timestampedPort is a sender, a port at rate and a timestamped sink
// behind it: out sends RoCE-class datagrams (DSCP 26, ECT(0)) to the sink,
// read returns the kernel's receive times of the next k.
func timestampedPort(t *testing.T, rate units.Rate) (*qdisc.Port, *net.UDPConn, func(ctx context.Context, k int) ([]time.Time, error)) {
	t.Helper()
	d, port, _, _ := udpPort(t, 1, qdisc.DefaultConfig(rate), false)
	conn, read := timestampedSink(t, d.Receiver)
	dst := netip.AddrPortFrom(d.ReceiverAddr, uint16(conn.LocalAddr().(*net.UDPAddr).Port))
	var out *net.UDPConn
	if err := d.Senders[0].Do(func() error {
		var err error
		out, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	if err := ipv4.NewConn(out).SetTOS(tosRoCEECT0); err != nil {
		t.Fatal(err)
	}
	return port, out, read
}

// timestampedSink is a UDP socket on n whose datagrams carry the kernel's
// receive time (SO_TIMESTAMPNS); read returns the times of the next k.
func timestampedSink(t *testing.T, n *lab.Node) (*net.UDPConn, func(ctx context.Context, k int) ([]time.Time, error)) {
	t.Helper()
	var conn *net.UDPConn
	if err := n.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		t.Fatalf("SO_TIMESTAMPNS: %v %v", err, serr)
	}
	read := func(ctx context.Context, k int) ([]time.Time, error) {
		buf, oob := make([]byte, 65536), make([]byte, 128)
		dl, _ := ctx.Deadline()
		if err := conn.SetReadDeadline(dl); err != nil {
			return nil, err
		}
		var ts []time.Time
		for len(ts) < k {
			_, oobn, _, _, err := conn.ReadMsgUDP(buf, oob)
			if err != nil {
				return ts, err
			}
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return ts, err
			}
			for _, m := range msgs {
				if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
					sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
					nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
					ts = append(ts, time.Unix(sec, nsec))
				}
			}
		}
		return ts, nil
	}
	stampsOn(t, conn, read)
	return conn, read
}

// stampsOn waits until the kernel stamps datagrams as they arrive. The
// first SO_TIMESTAMPNS of the machine turns receive stamping on through a
// work item (net_enable_timestamp schedules netstamp_work); until it has
// run, an arriving packet is not stamped and recvmsg stamps it with the
// read time: the first packets of a run read late looked read at once
// (one run in ten here). A datagram to the sink itself over lo, read 2 ms
// after it was sent, tells: stamped before the read began, stamping is on.
func stampsOn(t *testing.T, conn *net.UDPConn, read func(ctx context.Context, k int) ([]time.Time, error)) {
	t.Helper()
	self := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: conn.LocalAddr().(*net.UDPAddr).Port}
	for try := 1; ; try++ {
		if _, err := conn.WriteToUDP([]byte{0}, self); err != nil {
			t.Fatalf("stamping check: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ts, err := read(ctx, 1)
		cancel()
		if err != nil {
			t.Fatalf("stamping check: %v", err)
		}
		if ts[0].Before(began) {
			if try > 1 {
				t.Logf("receive stamping came on after %d checks 2 ms apart", try)
			}
			return
		}
		if try == 500 {
			t.Fatalf("the kernel still stamps datagrams at the read after %d checks: receive stamping never came on", try)
		}
	}
}
