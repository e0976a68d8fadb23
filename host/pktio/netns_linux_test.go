//go:build linux

package pktio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc/ethfeat"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

// Test addresses, all on lo inside the test's own network namespace.
const (
	testAddr4A = "198.18.0.1"
	testAddr4B = "198.18.0.2"
	testAddr6A = "2001:db8::1"
	testAddr6B = "2001:db8::2"
)

// testNetns is a fresh, unnamed network namespace with lo up and carrying
// the test addresses. Sockets created inside it (testNetns.do) stay in it,
// so the test uses them from any goroutine; no traffic touches the root
// namespace.
type testNetns struct {
	h       netns.NsHandle
	loIndex int
}

// newTestNetns creates the namespace; loMTU, if non-zero, is set on its lo.
func newTestNetns(tb testing.TB, loMTU int) *testNetns {
	tb.Helper()
	labtest.RequireRoot(tb)
	n := &testNetns{}
	errc := make(chan error, 1)
	go func() {
		// A thread of its own: if switching back fails, it stays locked and
		// dies with the goroutine instead of running others in the netns.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("netns.Get: %w", err)
			return
		}
		defer orig.Close()
		h, err := netns.New() // unshare(CLONE_NEWNET): this thread is now inside
		if err != nil {
			errc <- fmt.Errorf("netns.New: %w", err)
			runtime.UnlockOSThread() // unshare failed: still in orig
			return
		}
		n.h = h
		err = configureNetns(h, n, loMTU)
		if serr := netns.Set(orig); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("back to the original netns: %w", serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		if n.h.IsOpen() {
			n.h.Close()
		}
		tb.Fatalf("test netns: %v", err)
	}
	tb.Cleanup(func() { n.h.Close() })
	return n
}

func configureNetns(h netns.NsHandle, n *testNetns, loMTU int) error {
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return fmt.Errorf("netlink handle: %w", err)
	}
	defer nl.Close()
	lo, err := nl.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	n.loIndex = lo.Attrs().Index
	if err := nl.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	for _, a := range []string{testAddr4A + "/32", testAddr4B + "/32", testAddr6A + "/128", testAddr6B + "/128"} {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return err
		}
		if addr.IP.To4() == nil {
			addr.Flags = unix.IFA_F_NODAD // usable at once, no duplicate address detection
		}
		if err := nl.AddrAdd(lo, addr); err != nil {
			return fmt.Errorf("add %s to lo: %w", a, err)
		}
	}
	if loMTU != 0 {
		if err := nl.LinkSetMTU(lo, loMTU); err != nil {
			return fmt.Errorf("lo mtu %d: %w", loMTU, err)
		}
	}
	// lo segments a UDP GSO send as it leaves, as a lab's veths do
	// (host/lab): captures and receivers see the datagrams, not one
	// super-packet. The ethtool socket is this thread's, in the netns.
	if _, err := ethfeat.Set("lo", map[string]bool{"tx-udp-segmentation": false}); err != nil {
		return fmt.Errorf("lo tx-udp-segmentation off: %w", err)
	}
	// IPv6 inserts an address's local route (table local) from a
	// workqueue (addrconf_dad_work, even with nodad on lo) after
	// RTM_NEWADDR has returned. Until then only the prefix route in table
	// main matches, which the kernel turns into a reject route because it
	// points at lo: a datagram sent then is accepted by sendmsg and dropped
	// (Ip6OutNoRoutes, ICMPv6 unreachable). Wait for the local routes.
	for _, a := range []string{testAddr6A, testAddr6B} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			rs, err := nl.RouteGet(net.ParseIP(a))
			if err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no local route to %s 5 s after adding it to lo: %v %v", a, rs, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Then prove each family carries a datagram between the test addresses
	// (plain net sockets, not the package under test), so no other bring-up
	// step still in flight can eat the first datagram of a test.
	for _, pair := range [][2]string{{testAddr4B, testAddr4A}, {testAddr6B, testAddr6A}} {
		if err := probe(pair[0], pair[1]); err != nil {
			return err
		}
	}
	return nil
}

// probe sends datagrams from src to dst until one arrives (5 s at most).
// Precondition: the calling thread is in the test netns.
func probe(src, dst string) error {
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(dst)})
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer rx.Close()
	tx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)})
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer tx.Close()
	buf := make([]byte, 16)
	for range 50 {
		if _, err := tx.WriteToUDP([]byte("probe"), rx.LocalAddr().(*net.UDPAddr)); err != nil {
			return fmt.Errorf("probe %s → %s: %w", src, dst, err)
		}
		rx.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, _, err := rx.ReadFromUDP(buf); err == nil {
			return nil
		}
	}
	return fmt.Errorf("probe %s → %s: nothing arrived in 5 s", src, dst)
}

// do runs f on an OS thread switched into the namespace.
func (n *testNetns) do(f func() error) error { return nsexec.DoNamed(n.h, "test netns", f) }

// listen opens a UDPConn inside the namespace, closed at cleanup.
func (n *testNetns) listen(tb testing.TB, addr string, opts UDPOptions) *UDPConn {
	tb.Helper()
	c, err := n.tryListen(addr, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func (n *testNetns) tryListen(addr string, opts UDPOptions) (*UDPConn, error) {
	var c *UDPConn
	err := n.do(func() error {
		var err error
		c, err = ListenUDP(mustAddrPort(addr), opts)
		return err
	})
	return c, err
}

// capture is an AF_PACKET socket on the namespace's lo that sees every
// packet sent on it, from the IP header on (SOCK_DGRAM: no link header).
type capture struct {
	fd int
}

func (n *testNetns) capture(tb testing.TB) *capture {
	tb.Helper()
	c := &capture{fd: -1}
	err := n.do(func() error {
		proto := int(htons(unix.ETH_P_ALL))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		c.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: n.loIndex}); err != nil {
			return fmt.Errorf("bind AF_PACKET to lo: %w", err)
		}
		// Each packet crosses lo twice and both copies queue here: room
		// for thousands of them.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20); err != nil {
			return fmt.Errorf("capture SO_RCVBUFFORCE: %w", err)
		}
		tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if c.fd >= 0 {
		tb.Cleanup(func() { unix.Close(c.fd) })
	}
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// outgoing returns the UDP packets (IP header on) sent on lo since the
// capture opened, until none has come for 200 ms. Each packet crosses lo
// twice (out, then in); only the outgoing copy is kept.
func (c *capture) outgoing(tb testing.TB) [][]byte {
	tb.Helper()
	var pkts [][]byte
	buf := make([]byte, 1<<16)
	for {
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return pkts
		}
		if err != nil {
			tb.Fatalf("capture: %v", err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype != unix.PACKET_OUTGOING {
			continue
		}
		pkts = append(pkts, append([]byte(nil), buf[:n]...))
	}
}

// ipHeader is what the tests check in a captured packet.
type ipHeader struct {
	version  int
	tos      uint8 // IPv4 TOS / IPv6 traffic class
	id       uint16
	df       bool
	fragment bool // IPv4 MF or offset, IPv6 fragment header
	src, dst net.IP
	dstPort  uint16
	payload  []byte // UDP payload
}

func parseIP(b []byte) (ipHeader, error) {
	var h ipHeader
	if len(b) < 1 {
		return h, errors.New("empty")
	}
	h.version = int(b[0] >> 4)
	switch h.version {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		if len(b) < ihl+8 || b[9] != unix.IPPROTO_UDP {
			return h, fmt.Errorf("not IPv4/UDP: % x", head(b))
		}
		h.tos = b[1]
		h.id = binary.BigEndian.Uint16(b[4:6])
		frag := binary.BigEndian.Uint16(b[6:8])
		h.df = frag&0x4000 != 0
		h.fragment = frag&0x2000 != 0 || frag&0x1fff != 0
		h.src, h.dst = net.IP(b[12:16]), net.IP(b[16:20])
		h.dstPort = binary.BigEndian.Uint16(b[ihl+2:])
		h.payload = b[ihl+8:]
	case 6:
		if len(b) < 48 {
			return h, fmt.Errorf("short IPv6: % x", head(b))
		}
		h.tos = b[0]<<4 | b[1]>>4
		h.fragment = b[6] == unix.IPPROTO_FRAGMENT
		if b[6] != unix.IPPROTO_UDP && !h.fragment {
			return h, fmt.Errorf("not IPv6/UDP: % x", head(b))
		}
		h.src, h.dst = net.IP(b[8:24]), net.IP(b[24:40])
		h.dstPort = binary.BigEndian.Uint16(b[42:44])
		h.payload = b[48:]
	default:
		return h, fmt.Errorf("IP version %d", h.version)
	}
	return h, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
