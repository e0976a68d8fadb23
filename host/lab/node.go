//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/qdisc/ethfeat"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

// ErrClosed is returned by Node methods after the lab was closed.
var ErrClosed = errors.New("lab: lab closed")

// Node is one network namespace of a Lab.
type Node struct {
	Name      string // logical name from the Spec
	NetnsName string // full named netns, usable with `ip netns exec`

	lab *Lab

	mu     sync.RWMutex // guards closed, ns and nl against a concurrent Close
	closed bool
	ns     netns.NsHandle
	nl     *netlink.Handle
}

// NsHandle returns the namespace handle. It is owned by the lab: do not close
// it, and do not keep it past Close, after which its fd number may be reused.
func (n *Node) NsHandle() netns.NsHandle {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.ns
}

// Netlink returns a handle whose sockets live in the node's namespace, for
// every netlink family the package uses. It is owned by the lab and valid
// until Close. It panics after Close: a closed netlink.Handle silently falls
// back to the calling thread's namespace, usually the host's.
func (n *Node) Netlink() *netlink.Handle {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		panic(fmt.Sprintf("lab: Netlink() on node %q after its lab was closed", n.Name))
	}
	return n.nl
}

// Do runs fn on a locked OS thread inside the node's namespace and returns its
// error. Sockets created by fn stay in the namespace after Do returns, which
// is the simplest way to get a listener or dialer there. Goroutines started by
// fn run in the caller's namespace, not the node's. A panic or Goexit
// (t.FailNow) in fn is re-raised in the caller's goroutine, so a test stops
// and its cleanups still run.
func (n *Node) Do(fn func() error) error {
	n.mu.RLock()
	if n.closed {
		n.mu.RUnlock()
		return ErrClosed
	}
	// A private dup keeps the target valid even if Close runs meanwhile.
	fd, err := unix.FcntlInt(uintptr(n.ns), unix.F_DUPFD_CLOEXEC, 0)
	n.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("lab: dup netns fd of %s: %w", n.NetnsName, err)
	}
	defer unix.Close(fd)
	return nsexec.DoNamed(netns.NsHandle(fd), n.NetnsName, fn)
}

// Command runs name inside n via `ip netns exec`, which also gives the child a
// /sys showing the namespace's devices. Close kills it if still running.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NetnsName, name}, args...)...)
}

// Sysctl writes a "net.*" sysctl inside the namespace. Other sysctl trees are
// host-wide, so they are refused.
func (n *Node) Sysctl(key, value string) error {
	path, err := sysctlPath(key)
	if err != nil {
		return err
	}
	if strings.ContainsAny(value, "\n\x00") {
		return fmt.Errorf("lab: sysctl %s: value %q contains a newline or NUL", key, value)
	}
	return n.Do(func() error {
		if err := os.WriteFile(path, []byte(value), 0); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
		}
		return nil
	})
}

// ReadSysctl reads a "net.*" sysctl inside the namespace, trimmed.
func (n *Node) ReadSysctl(key string) (string, error) {
	path, err := sysctlPath(key)
	if err != nil {
		return "", err
	}
	var v string
	err = n.Do(func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("sysctl %s: %w", key, err)
		}
		v = strings.TrimSpace(string(b))
		return nil
	})
	return v, err
}

func (n *Node) sysctlExists(key string) (bool, error) {
	path, err := sysctlPath(key)
	if err != nil {
		return false, err
	}
	var ok bool
	err = n.Do(func() error {
		_, err := os.Stat(path)
		switch {
		case err == nil:
			ok = true
		case errors.Is(err, os.ErrNotExist):
		default:
			return err
		}
		return nil
	})
	return ok, err
}

// LinkIndex returns the ifindex of dev inside the namespace, e.g. for
// attaching BPF programs.
func (n *Node) LinkIndex(dev string) (int, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return 0, ErrClosed
	}
	l, err := n.nl.LinkByName(dev)
	if err != nil {
		return 0, fmt.Errorf("lab: %s: link %s: %w", n.Name, dev, err)
	}
	return l.Attrs().Index, nil
}

// offloadFeatures are the ethtool feature strings behind `ethtool -K dev
// tso|gso|gro|tx-udp-segmentation`.
var offloadFeatures = []string{
	"tx-tcp-segmentation", "tx-tcp-ecn-segmentation", "tx-tcp-mangleid-segmentation", "tx-tcp6-segmentation", // tso
	"tx-generic-segmentation", // gso
	"tx-udp-segmentation",     // UDP GSO super-packets
	"rx-gro",                  // gro
}

// SetOffloads turns TSO, GSO and GRO on or off for dev and verifies the
// result, so packet-level emulation is not silently fed 64 KiB super-packets.
func (n *Node) SetOffloads(dev string, on bool) error {
	// The ethtool ioctl resolves dev in its socket's namespace, so the
	// socket must be created there.
	return n.Do(func() error { return SetOffloads(dev, on) })
}

// SetOffloads is Node.SetOffloads in the calling thread's namespace (a
// lab server's own NICs, ApplyNode).
func SetOffloads(dev string, on bool) error {
	states, err := ethfeat.Get(dev)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, f := range offloadFeatures {
		if st, ok := states[f]; ok && st.Available {
			want[f] = on
		}
	}
	got := states
	if len(want) > 0 {
		if got, err = ethfeat.Set(dev, want); err != nil {
			return fmt.Errorf("ethtool set %s offloads=%v: %w", dev, on, err)
		}
	}
	var wrong []string
	for _, f := range offloadFeatures {
		st, known := got[f]
		if !known {
			continue
		}
		// Off must really be off; on is best effort for fixed features.
		if st.Active != on && (!on || want[f]) {
			wrong = append(wrong, f)
		}
	}
	if len(wrong) > 0 {
		slices.Sort(wrong)
		return fmt.Errorf("ethtool %s: could not turn %s %s", dev, strings.Join(wrong, ","), onOff(on))
	}
	return nil
}

// udpSegmentation is the ethtool feature behind `ethtool -K dev
// tx-udp-segmentation`: whether a UDP GSO send leaves the device whole.
const udpSegmentation = "tx-udp-segmentation"

// noUDPSegmentation turns tx-udp-segmentation off for dev, so the device
// cuts a UDP GSO send (how pktio sends RoCEv2 and UET runs) into its
// datagrams as it transmits it, as a NIC with USO does in hardware: the
// next hop, a switch port's TC program and HTB, sees packets of the path
// MTU. A veth has it on and would carry the super-packet whole.
func (n *Node) noUDPSegmentation(dev string) error {
	return n.Do(func() error {
		got, err := ethfeat.Set(dev, map[string]bool{udpSegmentation: false})
		if err != nil {
			return fmt.Errorf("ethtool %s %s off: %w", dev, udpSegmentation, err)
		}
		if got[udpSegmentation].Active {
			return fmt.Errorf("ethtool %s: could not turn %s off", dev, udpSegmentation)
		}
		return nil
	})
}

// receiveCoalescing are the ethtool features behind `ethtool -K dev gro
// rx-udp-gro-forwarding`: a veth with both coalesces received UDP runs of
// one flow (veth_skb_is_eligible_for_gro) for sockets that ask (UDP_GRO).
var receiveCoalescing = []string{"rx-gro", "rx-udp-gro-forwarding"}

// SetReceiveCoalescing turns UDP receive coalescing (GRO) on or off for
// dev, a host's device, and verifies it. With it on, a run of datagrams of
// one flow reaches the host's RoCEv2 and UET sockets (pktio, UDP_GRO) and
// its TC programs (bpf/np.c, bpf/rp.c) as one sk_buff, so the stack below
// the socket runs once per run: a host with no port in front (the bench's
// veth pair; a lab server's NIC coalesces on its own). Never on a port's
// peer: the port counts and marks each packet at the peer's ingress, after
// GRO would have merged them (qdisc refuses to attach to such a peer).
func (n *Node) SetReceiveCoalescing(dev string, on bool) error {
	return n.Do(func() error {
		want := map[string]bool{}
		for _, f := range receiveCoalescing {
			want[f] = on
		}
		got, err := ethfeat.Set(dev, want)
		if err != nil {
			return fmt.Errorf("ethtool %s gro/rx-udp-gro-forwarding %s: %w", dev, onOff(on), err)
		}
		for _, f := range receiveCoalescing {
			if got[f].Active != on {
				return fmt.Errorf("ethtool %s: could not turn %s %s", dev, f, onOff(on))
			}
		}
		return nil
	})
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// teardown kills what still runs in the namespace, releases the lab's handles
// and removes the name; the kernel then destroys the namespace and its veths.
func (n *Node) teardown() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	if n.ns.IsOpen() {
		if err := killNetnsProcs(n.ns); err != nil {
			errs = append(errs, err)
		}
	}
	if n.nl != nil {
		n.nl.Close()
	}
	if n.ns.IsOpen() {
		if err := n.ns.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := deleteNamed(n.NetnsName); err != nil {
		errs = append(errs, fmt.Errorf("delete netns %s: %w", n.NetnsName, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("lab: teardown %s: %w", n.Name, errors.Join(errs...))
	}
	return nil
}

// killNetnsProcs SIGKILLs every other process whose network namespace is h
// (what `ip netns pids` lists); they would keep the namespace and its veths
// alive after its name is gone.
func killNetnsProcs(h netns.NsHandle) error {
	var want unix.Stat_t
	if err := unix.Fstat(int(h), &want); err != nil {
		return fmt.Errorf("stat netns: %w", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/net", &st) != nil {
			continue // exited, or a kernel thread
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	return nil
}
