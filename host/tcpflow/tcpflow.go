//go:build linux

// Package tcpflow is a kernel TCP flow as the lab runs it beside RoCEv2
// and UET: one connection per flow, a congestion control by its kernel
// name (DCTCP from host/dctcp where the kernel has none), ECN on, and an
// FCT the receiving application saw. The client writes its size (or for
// its duration) and half-closes; the server answers with the count of
// bytes it read, an 8-byte big-endian integer. The flow's time runs from
// the first write to that answer. fabriclab run and fabriclabd share it.
package tcpflow

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
)

// DefaultWrite is a flow's write size when none is given.
const DefaultWrite = 128 << 10

// DCTCP is the congestion control the lab's tcp flows default to.
const DCTCP = "dctcp"

// readIdle bounds a server connection's silence: a client that vanished
// does not hold its goroutine.
const readIdle = 30 * time.Second

// Do runs f in the namespace the socket belongs in (a lab node's); nil
// runs it in the caller's.
type Do func(f func() error) error

func (do Do) run(f func() error) error {
	if do == nil {
		return f()
	}
	return do(f)
}

// CheckCC checks a congestion control's name as TCP_CONGESTION takes it;
// whether the kernel has it is known only when a socket asks.
func CheckCC(name string) error {
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

// registrations counts this process's DCTCP registrations: each name is
// its own, so labs (and tests) side by side never collide.
var registrations atomic.Uint32

// CCs maps congestion controls as a file names them to the kernel's:
// dctcp to the kernel's if it has one (loaded, or a module it loads now),
// else to the project's BPF DCTCP, registered on first use and
// unregistered by Close. Others must be in the kernel (a module autoloads
// on first use).
type CCs struct {
	// Prefix names the BPF DCTCP's registration (Prefix + a number).
	Prefix string
	mu     sync.Mutex
	names  map[string]string
	reg    *dctcp.Registration
}

// Resolve is cc's kernel name; registered is set when it registered the
// BPF DCTCP for it.
func (c *CCs) Resolve(cc string) (name string, registered bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.names[cc]; ok {
		return n, false, nil
	}
	if c.names == nil {
		c.names = map[string]string{}
	}
	avail := dctcp.Available()
	switch {
	case slices.Contains(avail, cc), probe(cc) == nil:
		c.names[cc] = cc // the kernel's, its module loaded now if need be
		return cc, false, nil
	case cc == DCTCP:
		prefix := c.Prefix
		if prefix == "" {
			prefix = "fl_dctcp"
		}
		name := fmt.Sprintf("%s%d", prefix, (uint32(syscall.Getpid())*16+registrations.Add(1))%1000000)
		if len(name) > 15 {
			return "", false, fmt.Errorf("BPF DCTCP name %s: longer than 15 characters", name)
		}
		reg, err := dctcp.Register(dctcp.Options{Name: name})
		if err != nil {
			return "", false, fmt.Errorf("the kernel has no dctcp and the BPF DCTCP did not register: %w", err)
		}
		c.reg = reg
		c.names[cc] = name
		return name, true, nil
	}
	return "", false, fmt.Errorf("cc %s: %w (available: %s)", cc, probe(cc), strings.Join(avail, ", "))
}

// Close unregisters the BPF DCTCP, if registered.
func (c *CCs) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = nil
	if c.reg == nil {
		return nil
	}
	err := c.reg.Close()
	c.reg = nil
	return err
}

// probe sets cc on a socket that is never connected, which loads its
// module if it has one.
func probe(cc string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return dctcp.SetCongestion(fd, cc)
}

// control sets the congestion control and the DSCP on a socket before it
// connects or listens.
func control(cc string, dscp int) func(string, string, syscall.RawConn) error {
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

// Server is a flow sink: it counts what each connection delivers and
// answers the count when the client half-closes.
type Server struct {
	ln       net.Listener
	conns    sync.WaitGroup
	mu       sync.Mutex
	open     map[net.Conn]struct{}
	closed   bool // Close began: a connection accepted now is closed at once
	received atomic.Uint64
	accepted atomic.Uint64
	// acceptErrors counts Accept's failures that Serve waited out.
	acceptErrors atomic.Uint64
}

// Listen opens a server at addr with the congestion control cc (the
// kernel's name: the receiver's ACKs follow it, DCTCP's ECE echo).
func Listen(do Do, addr netip.AddrPort, cc string) (*Server, error) {
	lc := net.ListenConfig{Control: control(cc, 0)}
	s := &Server{open: map[net.Conn]struct{}{}}
	err := do.run(func() error {
		var err error
		s.ln, err = lc.Listen(context.Background(), "tcp4", addr.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() netip.AddrPort { return s.ln.Addr().(*net.TCPAddr).AddrPort() }

// Received is the bytes its connections read; Accepted, the connections.
func (s *Server) Received() uint64 { return s.received.Load() }
func (s *Server) Accepted() uint64 { return s.accepted.Load() }

// AcceptErrors is Accept's failures Serve waited out and accepted again
// after (out of descriptors, an aborted handshake).
func (s *Server) AcceptErrors() uint64 { return s.acceptErrors.Load() }

// Open is the connections in progress.
func (s *Server) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Serve accepts until ctx ends, Drain or Close.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	var backoff time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of descriptors, an aborted handshake: the listener
			// still works. Wait and accept again, as net/http does.
			s.acceptErrors.Add(1)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		backoff = 0
		s.accepted.Add(1)
		// Registered with Close's flag under one lock: Close either
		// sees the connection or the connection sees Close.
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.open[c] = struct{}{}
		s.conns.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.conns.Done()
			defer func() {
				s.mu.Lock()
				delete(s.open, c)
				s.mu.Unlock()
			}()
			defer func() { _ = recover() }() // a sink's panic loses its flow, not the server
			s.sink(c)
		}()
	}
}

func (s *Server) sink(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 256<<10)
	var n uint64
	for {
		_ = c.SetReadDeadline(time.Now().Add(readIdle))
		k, err := c.Read(buf)
		n += uint64(k)
		s.received.Add(uint64(k))
		if err == io.EOF {
			break
		}
		if err != nil {
			return
		}
	}
	var ans [8]byte
	binary.BigEndian.PutUint64(ans[:], n)
	_ = c.SetWriteDeadline(time.Now().Add(readIdle))
	_, _ = c.Write(ans[:])
}

// Shutdown stops accepting; the connections in progress go on (Wait).
func (s *Server) Shutdown() { _ = s.ln.Close() }

// Wait waits for the connections in progress to end.
func (s *Server) Wait() { s.conns.Wait() }

// Close stops accepting, resets the connections still open (a deadline
// would not do: the sink renews its own before each read) and waits for
// their goroutines.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.open {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST: the client's run ends now too
		}
		_ = c.Close()
	}
	s.mu.Unlock()
	s.conns.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Conn is one flow's connection.
type Conn struct {
	Server netip.AddrPort
	Bind   netip.Addr // optional: the kernel's choice
	CC     string     // the kernel's name (CCs.Resolve)
	DSCP   int
	// Size, or Duration for a timed flow.
	Size       uint64
	Duration   time.Duration
	WriteBytes int // 0: DefaultWrite
}

// Report is a flow's outcome.
type Report struct {
	Sent      uint64        // what the client wrote
	Delivered uint64        // what the server read
	Elapsed   time.Duration // first write to the server's answer
	// From TCP_INFO at the end: segments retransmitted, segments whose
	// ACKs echoed CE, and whether ECN was negotiated.
	Retransmits uint64
	DeliveredCE uint64
	ECN         bool
	CC          string // as the kernel names it
}

// Run runs the flow; progress (optional) counts the bytes written as they
// go.
func Run(ctx context.Context, do Do, tc Conn, progress *atomic.Uint64) (Report, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: control(tc.CC, tc.DSCP)}
	if tc.Bind.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: tc.Bind.AsSlice()}
	}
	var conn net.Conn
	err := do.run(func() error {
		var err error
		conn, err = d.DialContext(ctx, "tcp4", tc.Server.String())
		return err
	})
	if err != nil {
		return Report{}, fmt.Errorf("connect to %v: %w", tc.Server, err)
	}
	c := conn.(*net.TCPConn)
	defer c.Close()
	wb := tc.WriteBytes
	if wb <= 0 {
		wb = DefaultWrite
	}
	buf := make([]byte, wb)
	t0 := time.Now()
	size := tc.Size
	if size == 0 {
		_ = c.SetWriteDeadline(t0.Add(tc.Duration))
	}
	// After the duration's deadline, so that a cancel overrides it and
	// never the reverse.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	var rep Report
	for size == 0 || rep.Sent < size {
		n := len(buf)
		if size != 0 {
			n = int(min(uint64(n), size-rep.Sent))
		}
		k, err := c.Write(buf[:n])
		rep.Sent += uint64(k)
		if progress != nil {
			progress.Add(uint64(k))
		}
		if err != nil {
			if size == 0 && ctx.Err() == nil && isTimeout(err) {
				break // the duration is over
			}
			return rep, fmt.Errorf("write after %d bytes: %w", rep.Sent, err)
		}
	}
	// Clearing the duration's deadline keeps a cancel's read deadline,
	// which bounds the wait for the server's count below.
	_ = c.SetWriteDeadline(time.Time{})
	if err := c.CloseWrite(); err != nil {
		return rep, fmt.Errorf("half-close: %w", err)
	}
	var ans [8]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		return rep, fmt.Errorf("the server's count after %d bytes sent: %w", rep.Sent, err)
	}
	rep.Delivered, rep.Elapsed = binary.BigEndian.Uint64(ans[:]), time.Since(t0)
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
	if rep.Delivered != rep.Sent {
		return rep, fmt.Errorf("the server read %d bytes of %d sent", rep.Delivered, rep.Sent)
	}
	return rep, nil
}

// tcpiOptECN is TCPI_OPT_ECN: the connection negotiated ECN.
const tcpiOptECN = 8

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
