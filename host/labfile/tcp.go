//go:build linux

package labfile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/dctcp"
	"github.com/fabriclab/fabriclab/host/lab"
)

// A tcp flow is one connection: the client writes its size (or for its
// duration), half-closes, and the server answers with the byte count it
// read, an 8-byte big-endian integer. The flow's time is from the
// connection's first write to that answer: for a sized flow its FCT,
// every byte delivered to the receiving application.

// defaultTCPWrite is a tcp flow's write size without message_size.
const defaultTCPWrite = 128 << 10

// tcpReadIdle bounds a server connection's silence: a client that
// vanished does not hold its goroutine past the run.
const tcpReadIdle = 30 * time.Second

// TCPPlan is a tcp flow's connection.
type TCPPlan struct {
	Server netip.AddrPort
	Bind   netip.Addr
	// CC is the congestion control as the file names it (dctcp maps to
	// the run's registration where the kernel has none).
	CC   string
	DSCP int
	// Size, or Duration for a timed flow.
	Size       uint64
	Duration   time.Duration
	WriteBytes int
}

// checkTCPCC checks a congestion control's name as TCP_CONGESTION takes
// it; whether the kernel has it is known only when the lab runs.
func checkTCPCC(name string) error {
	if len(name) == 0 || len(name) > 15 {
		return fmt.Errorf("a kernel congestion control's name, 1..15 characters (dctcp, cubic, reno, ...)")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("a kernel congestion control's name: [a-z0-9_-] (dctcp, cubic, reno, ...)")
		}
	}
	return nil
}

// tcpRegistrations counts this process's DCTCP registrations: each run's
// name is its own, so runs (and tests) side by side never collide.
var tcpRegistrations atomic.Uint32

// resolveTCP maps every tcp flow's congestion control to the kernel's
// name: dctcp to the kernel's if it has one (loaded, or a module it loads
// now), else to the project's BPF DCTCP, registered here for the run
// (closed by teardown). Others must be
// in the kernel (a module autoloads on first use).
func (r *runner) resolveTCP() error {
	r.tcpCC = map[string]string{}
	avail := dctcp.Available()
	for _, fp := range r.p.Flows {
		if fp.TCP == nil {
			continue
		}
		cc := fp.TCP.CC
		if _, done := r.tcpCC[cc]; done {
			continue
		}
		if slices.Contains(avail, cc) {
			r.tcpCC[cc] = cc
			continue
		}
		if cc == CCDCTCP && probeTCPCC(cc) == nil {
			r.tcpCC[cc] = cc // the kernel's, its module loaded now
			continue
		}
		if cc == CCDCTCP {
			name := fmt.Sprintf("fl_dctcp%d", (uint32(syscall.Getpid())*16+tcpRegistrations.Add(1))%1000000)
			reg, err := dctcp.Register(dctcp.Options{Name: name})
			if err != nil {
				return fmt.Errorf("flow %s: the kernel has no dctcp and the BPF DCTCP did not register: %w", fp.Flow.Name, err)
			}
			r.dctcp = reg
			r.tcpCC[cc] = name
			r.log.Info("tcp: BPF DCTCP registered", "name", name)
			continue
		}
		if err := probeTCPCC(cc); err != nil {
			return fmt.Errorf("flow %s: cc %s: %w (available: %s)", fp.Flow.Name, cc, err, strings.Join(avail, ", "))
		}
		r.tcpCC[cc] = cc
	}
	return nil
}

// probeTCPCC sets cc on a socket that is never connected, which loads its
// module if it has one.
func probeTCPCC(cc string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return dctcp.SetCongestion(fd, cc)
}

// tcpControl sets the congestion control and the DSCP on a socket before
// it connects or listens.
func tcpControl(cc string, dscp int) func(string, string, syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = dctcp.SetCongestion(int(fd), cc); serr != nil {
				return
			}
			if dscp != 0 {
				if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, dscp<<2); serr != nil {
					serr = fmt.Errorf("IP_TOS %#x: %w", dscp<<2, serr)
				}
			}
		})
		return errors.Join(err, serr)
	}
}

// tcpServer is a tcp flow sink: it counts what each connection delivers
// and answers the count when the client half-closes.
type tcpServer struct {
	ln    net.Listener
	conns sync.WaitGroup
	mu    sync.Mutex
	open  map[net.Conn]struct{}
}

// listenTCP opens a tcp server on node at addr with the congestion
// control cc (the receiver's ACKs follow it: DCTCP's ECE echo).
func listenTCP(node *lab.Node, addr netip.AddrPort, cc string) (*tcpServer, error) {
	lc := net.ListenConfig{Control: tcpControl(cc, 0)}
	s := &tcpServer{open: map[net.Conn]struct{}{}}
	err := node.Do(func() error {
		var err error
		s.ln, err = lc.Listen(context.Background(), "tcp4", addr.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Serve accepts until ctx ends or Close.
func (s *tcpServer) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		s.mu.Lock()
		s.open[c] = struct{}{}
		s.mu.Unlock()
		s.conns.Add(1)
		go func() {
			defer s.conns.Done()
			defer func() { _ = recover() }() // a sink's panic loses its flow, not the run's teardown
			s.sink(c)
			s.mu.Lock()
			delete(s.open, c)
			s.mu.Unlock()
		}()
	}
}

func (s *tcpServer) sink(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 256<<10)
	var n uint64
	for {
		_ = c.SetReadDeadline(time.Now().Add(tcpReadIdle))
		k, err := c.Read(buf)
		n += uint64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return
		}
	}
	var ans [8]byte
	binary.BigEndian.PutUint64(ans[:], n)
	_ = c.SetWriteDeadline(time.Now().Add(tcpReadIdle))
	_, _ = c.Write(ans[:])
}

// Close stops accepting, resets the connections still open and waits for
// their goroutines.
func (s *tcpServer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.open {
		_ = c.SetDeadline(time.Now())
	}
	s.mu.Unlock()
	s.conns.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// tcpReport is a tcp flow's outcome.
type tcpReport struct {
	Delivered uint64        // what the server read
	Elapsed   time.Duration // first write to the server's answer
	// From TCP_INFO at the end: segments retransmitted, segments whose
	// ACKs echoed CE, and whether ECN was negotiated.
	Retransmits uint64
	DeliveredCE uint64
	ECN         bool
	CC          string // as the kernel names it
}

// runTCP runs one tcp flow from node with the kernel congestion control
// cc; progress counts the bytes written as they go.
func runTCP(ctx context.Context, node *lab.Node, tp *TCPPlan, cc string, size uint64, progress *atomic.Uint64) (tcpReport, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: tcpControl(cc, tp.DSCP),
		LocalAddr: &net.TCPAddr{IP: tp.Bind.AsSlice()}}
	var conn net.Conn
	err := node.Do(func() error {
		var err error
		conn, err = d.DialContext(ctx, "tcp4", tp.Server.String())
		return err
	})
	if err != nil {
		return tcpReport{}, fmt.Errorf("connect to %v: %w", tp.Server, err)
	}
	c := conn.(*net.TCPConn)
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()

	buf := make([]byte, tp.WriteBytes)
	t0 := time.Now()
	var end time.Time
	if size == 0 {
		end = t0.Add(tp.Duration)
		_ = c.SetWriteDeadline(end)
	}
	var sent uint64
	for size == 0 || sent < size {
		n := len(buf)
		if size != 0 {
			n = int(min(uint64(n), size-sent))
		}
		k, err := c.Write(buf[:n])
		sent += uint64(k)
		progress.Add(uint64(k))
		if err != nil {
			if size == 0 && ctx.Err() == nil && isTimeout(err) {
				break // the duration is over
			}
			return tcpReport{}, fmt.Errorf("write after %d bytes: %w", sent, err)
		}
	}
	_ = c.SetWriteDeadline(time.Time{})
	if err := c.CloseWrite(); err != nil {
		return tcpReport{}, fmt.Errorf("half-close: %w", err)
	}
	var ans [8]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		return tcpReport{}, fmt.Errorf("the server's count after %d bytes sent: %w", sent, err)
	}
	rep := tcpReport{Delivered: binary.BigEndian.Uint64(ans[:]), Elapsed: time.Since(t0)}
	if rep.Delivered != sent {
		return rep, fmt.Errorf("the server read %d bytes of %d sent", rep.Delivered, sent)
	}
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				rep.Retransmits = uint64(info.Total_retrans)
				rep.DeliveredCE = uint64(info.Delivered_ce)
				rep.ECN = info.Options&tcpiOptECN != 0
			}
			rep.CC, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		})
	}
	return rep, nil
}

// tcpiOptECN is TCPI_OPT_ECN: the connection negotiated ECN.
const tcpiOptECN = 8

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
