//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/dctcp"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

const (
	// All experiment traffic is DSCP 26 (class 3, "roce"); the kernel adds
	// ECT(0) to the TOS of ECN-capable TCP connections itself.
	dscp  = qdisc.DSCPRoCE
	tos   = int(dscp) << 2
	class = qdisc.ClassRoCE
	// Ports of the servers in the receiver.
	longPort  = 5001
	shortPort = 5002
	echoPort  = 5003
	// tcpiOptECN is TCPI_OPT_ECN of tcp_info.tcpi_options (uapi
	// linux/tcp.h): ECN was negotiated on the connection.
	tcpiOptECN = 8
	// delayLinkKind is how host/lab applies DumbbellSpec.SenderDelays.
	delayLinkKind = "link.Delay: eBPF redirect to a TUN, Go forwarder on a timerfd"
	// maxShortRequest bounds what the short-flow server reads.
	maxShortRequest = 16 << 20
)

// dumbbellSpec is the lab: one sender per delay, classic ECN on the
// senders, offloads off so the port sees MTU-sized packets.
func (e *experiment) dumbbellSpec() lab.DumbbellSpec {
	return lab.DumbbellSpec{
		Senders:         e.o.senders(),
		DisableOffloads: true,
		// Congestion control is set per socket (a namespace may only pick
		// from the host's allowed list and inherits its default, often bbr).
		SenderSysctls: map[string]string{"net.ipv4.tcp_ecn": "1"},
		SenderDelays:  e.o.wireDelays(),
	}
}

// wireDelays are the senders' one-way delays on the slowed fabric.
func (o *options) wireDelays() []time.Duration {
	out := make([]time.Duration, len(o.delays))
	for i, d := range o.delays {
		out[i] = o.wire(d)
	}
	return out
}

// setup registers DCTCP (-cc dctcp), builds the lab, attaches the port and
// starts the servers.
func (e *experiment) setup(ctx context.Context) error {
	e.cc = e.o.cc
	if e.o.transport == transportRoCE {
		e.cc = ccCubic // the TCP servers only answer the RTT probes (UDP)
	}
	if e.cc == ccDCTCP {
		// A name of this run's: another process may hold DefaultName.
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		reg, err := dctcp.Register(dctcp.Options{Name: "dctcp_" + hex.EncodeToString(b[:])})
		if err != nil {
			return fmt.Errorf("register DCTCP: %w", err)
		}
		e.dctcp, e.cc = reg, reg.Name()
	}
	lab, err := lab.NewDumbbell(e.dumbbellSpec())
	if err != nil {
		return fmt.Errorf("build the lab: %w", err)
	}
	e.lab = lab
	if ctx.Err() != nil {
		return ctx.Err()
	}
	b := lab.Bottleneck
	// Attach with the seed-000 defaults; each scheme reconfigures class 3.
	e.cfg = qdisc.DefaultConfig(e.o.rate)
	port, err := qdisc.Attach(e.cfg.Slowed(e.o.timescale), qdisc.AttachOptions{
		Dev: b.Dev, Netns: b.Node.NetnsName, PeerDev: b.PeerDev, PeerNetns: b.PeerNode.NetnsName,
	})
	if err != nil {
		return fmt.Errorf("attach the port to %s:%s: %w", b.Node.Name, b.Dev, err)
	}
	e.port = port
	if e.o.quickAck {
		if err := quickAck(lab.Receiver); err != nil {
			return err
		}
	}
	e.srv, err = startServers(lab.Receiver, e.cc, e.o.perScheme()+time.Minute)
	return err
}

// quickAck sets quickack on n's routes through a gateway (to the other
// hosts): TCP there ACKs every packet, no delayed ACKs (RTAX_QUICKACK).
func quickAck(n *lab.Node) error {
	h := n.Netlink()
	routes, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("quickack: routes of %s: %w", n.Name, err)
	}
	set := 0
	for _, r := range routes {
		if r.Gw == nil {
			continue
		}
		r.QuickACK = 1
		if err := h.RouteReplace(&r); err != nil {
			return fmt.Errorf("quickack: route %v of %s: %w", r.Dst, n.Name, err)
		}
		set++
	}
	if set == 0 {
		return fmt.Errorf("quickack: %s has no route through a gateway", n.Name)
	}
	return nil
}

func (e *experiment) setupReport(limit units.ByteSize, rps string) Setup {
	o := e.o
	s := Setup{
		RateBps: uint64(o.rate), Timescale: o.timescale.K(), WireRateBps: uint64(o.wireRate()), Senders: o.senders(), DelayLink: delayLinkKind,
		LongPerSender: o.longPerSender, Transport: o.transport, Congestion: o.congestion(), CongestionName: e.cc, Class: int(class), DSCP: int(dscp),
		WarmupS: o.warmup.Seconds(), MeasureS: o.measure.Seconds(), SampleUs: us(o.sampleEvery),
		ShortMinBytes: uint64(o.shortMinBytes), ShortMaxBytes: uint64(o.shortMaxBytes), ShortGapUs: us(o.shortGap),
		Seed: o.seed, Lambda: o.lambda, PstLambda: o.pstLambdaFor(), LimitBytes: uint64(limit), Attach: string(e.port.Info().Attach), RPS: rps, OffloadsOff: true,
		QuickAck: o.quickAck,
	}
	if o.sharp.SqrtLaw {
		s.SharpOverrides = append(s.SharpOverrides, "sqrt law")
	}
	for _, d := range o.delays {
		s.DelaysUs = append(s.DelaysUs, us(d))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"ins_target", o.sharp.InsTarget}, {"pst_target", o.sharp.PstTarget}, {"pst_interval", o.sharp.PstInterval}} {
		if f.d != 0 {
			s.SharpOverrides = append(s.SharpOverrides, f.name+" "+units.FormatDuration(f.d))
		}
	}
	return s
}

// servers are the receiver's listeners: a sink for the long flows, the
// short-flow server and a UDP echo for the RTT probes. Every connection is
// tracked so close ends all of them.
type servers struct {
	long, short  net.Listener
	echo         net.PacketConn
	connDeadline time.Duration
	g            group
	mu           struct {
		sync.Mutex
		conns  map[net.Conn]struct{}
		closed bool
	}
}

func startServers(r *lab.Node, cc string, connDeadline time.Duration) (*servers, error) {
	s := &servers{connDeadline: connDeadline}
	s.mu.conns = map[net.Conn]struct{}{}
	err := r.Do(func() error {
		// The receiving ends run the senders' congestion control (DCTCP's
		// ECE state machine is the receiver's): accepted sockets inherit
		// the listener's.
		lc := net.ListenConfig{Control: func(network, _ string, c syscall.RawConn) error {
			if !strings.HasPrefix(network, "tcp") {
				return nil
			}
			var serr error
			err := c.Control(func(fd uintptr) { serr = dctcp.SetCongestion(int(fd), cc) })
			return errors.Join(err, serr)
		}}
		var err error
		if s.long, err = lc.Listen(context.Background(), "tcp4", fmt.Sprintf(":%d", longPort)); err != nil {
			return err
		}
		if s.short, err = lc.Listen(context.Background(), "tcp4", fmt.Sprintf(":%d", shortPort)); err != nil {
			return err
		}
		s.echo, err = lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf(":%d", echoPort))
		return err
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("servers in the receiver: %w", err)
	}
	s.g.Go(func() error { return s.accept(s.long, s.sink) })
	s.g.Go(func() error { return s.accept(s.short, s.answer) })
	s.g.Go(s.echoLoop)
	return s, nil
}

// close stops the listeners and every open connection, and waits for the
// handlers.
func (s *servers) close() {
	s.mu.Lock()
	s.mu.closed = true
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	for _, c := range []io.Closer{s.long, s.short, s.echo} {
		if c != nil {
			c.Close()
		}
	}
	_ = s.g.Wait()
}

func (s *servers) accept(l net.Listener, handle func(net.Conn)) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return nil // closed
		}
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.mu.conns[c] = struct{}{}
		s.mu.Unlock()
		// A bounded life: no handler outlives a scheme by much.
		_ = c.SetDeadline(time.Now().Add(s.connDeadline))
		s.g.Go(func() error {
			defer func() {
				s.mu.Lock()
				delete(s.mu.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			handle(c)
			return nil
		})
	}
}

// sink reads and discards a long flow until it ends.
func (s *servers) sink(c net.Conn) {
	buf := make([]byte, 256<<10)
	_, _ = io.CopyBuffer(io.Discard, c, buf)
}

// answer serves short flows: a 4-byte big-endian length N, then N bytes;
// it answers one byte once it has read them all.
func (s *servers) answer(c net.Conn) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxShortRequest {
		return
	}
	if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
		return
	}
	if _, err := c.Write([]byte{1}); err != nil {
		return
	}
	// Wait for the client to close first (it keeps the TIME_WAIT).
	_, _ = io.Copy(io.Discard, c)
}

func (s *servers) echoLoop() error {
	buf := make([]byte, 2048)
	for {
		n, addr, err := s.echo.ReadFrom(buf)
		if err != nil {
			return nil // closed
		}
		_, _ = s.echo.WriteTo(buf[:n], addr)
	}
}

// measureRTT probes every sender's base RTT in parallel through the idle
// port: UDP echoes to the receiver, one every 10 ms, after 3 discarded
// ones (neighbour resolution, cold caches).
func (e *experiment) measureRTT(ctx context.Context) (RTTReport, error) {
	const warm, gap, timeout = 3, 10 * time.Millisecond, 200 * time.Millisecond
	n := len(e.lab.Senders)
	samples := make([][]time.Duration, n)
	lost := make([]int, n)
	names := make([]string, n)
	dst := &net.UDPAddr{IP: e.lab.ReceiverAddr.AsSlice(), Port: echoPort}
	e.printf("measuring base RTTs: %d UDP echoes per sender ...", e.o.pings)
	g := group{}
	for i, node := range e.lab.Senders {
		names[i] = node.Name
		g.Go(func() error {
			var conn *net.UDPConn
			if err := node.Do(func() error {
				var err error
				conn, err = net.DialUDP("udp4", nil, dst)
				return err
			}); err != nil {
				return fmt.Errorf("rtt probe from %s: %w", node.Name, err)
			}
			defer conn.Close()
			if err := ipv4.NewConn(conn).SetTOS(tos); err != nil {
				return err
			}
			buf, in := make([]byte, 64), make([]byte, 64)
			for seq := range e.o.pings + warm {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				binary.BigEndian.PutUint64(buf, uint64(seq))
				t0 := time.Now()
				if _, err := conn.Write(buf); err != nil {
					return fmt.Errorf("rtt probe from %s: %w", node.Name, err)
				}
				_ = conn.SetReadDeadline(t0.Add(timeout))
				got := false
				for range 16 { // skip late answers to earlier probes
					m, err := conn.Read(in)
					if err != nil {
						break
					}
					if m >= 8 && binary.BigEndian.Uint64(in) == uint64(seq) {
						got = true
						break
					}
				}
				rtt := time.Since(t0)
				if seq >= warm {
					if got {
						samples[i] = append(samples[i], rtt)
					} else {
						lost[i]++
					}
				}
				sleepCtx(ctx, gap)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		e.printf("\n")
		return RTTReport{}, err
	}
	e.printf(" done\n\n")
	// The fabric's RTTs: what aqm.Tune derives the fabric's parameters
	// from (the host's share of them shrinks k times).
	for _, s := range samples {
		for j := range s {
			s[j] = e.o.timescale.Fabric(s[j])
		}
	}
	r := rttReport(names, e.o.delays, samples, lost, e.o.pings)
	for _, s := range r.PerSender {
		if s.RTTUs.N == 0 {
			return r, fmt.Errorf("rtt probe from %s: all %d probes lost", s.Sender, s.Lost)
		}
	}
	return r, nil
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// dialTCP connects from node to addr with the per-socket settings of every
// experiment flow: congestion control cc, DSCP 26. The socket is created
// inside the node's namespace and stays there.
func dialTCP(ctx context.Context, node *lab.Node, addr, cc string, timeout time.Duration) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: timeout, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = dctcp.SetCongestion(int(fd), cc); serr != nil {
				return
			}
			if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos); serr != nil {
				serr = fmt.Errorf("IP_TOS %#x: %w", tos, serr)
			}
		})
		return errors.Join(err, serr)
	}}
	var conn net.Conn
	err := node.Do(func() error {
		var err error
		conn, err = d.DialContext(ctx, "tcp4", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return conn.(*net.TCPConn), nil
}

// readTCPInfo reads TCP_INFO and the congestion control of a connection.
func readTCPInfo(c *net.TCPConn) (tcpSnap, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return tcpSnap{}, err
	}
	var s tcpSnap
	var serr error
	err = rc.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if serr != nil {
			return
		}
		s = tcpSnap{At: time.Now(), BytesAcked: info.Bytes_acked, TotalRetrans: uint64(info.Total_retrans),
			MinRTT: time.Duration(info.Min_rtt) * time.Microsecond, SRTT: time.Duration(info.Rtt) * time.Microsecond,
			ECN: info.Options&tcpiOptECN != 0}
		s.Congestion, serr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return tcpSnap{}, fmt.Errorf("TCP_INFO: %w", err)
	}
	return s, nil
}
