//go:build linux

// Package lab builds throwaway network-namespace topologies (nodes joined by
// veth pairs) for tests, benchmarks and demos of the fabric emulator.
//
// Everything lives in named namespaces created by this package; the root
// namespace is never configured. Addresses must come from the benchmarking
// range 198.18.0.0/15 (RFC 2544) and, for IPv6, the documentation range
// 2001:db8::/32, so a mistake can never leak traffic onto a real network.
//
// Labs are always torn down: Close is idempotent, a failed Build removes what
// it made, SIGINT/SIGTERM close every live lab before exiting with 130/143,
// and Build sweeps namespaces left behind by processes that died without
// cleaning up (SIGKILL, a test timeout).
//
// Namespaces are named fl-<pid>-<4 hex>-<node> and bind-mounted under
// /run/netns, so `ip netns exec` and `ip -n` work on them while a lab runs.
//
// # Link emulation
//
// The development kernel has no netem, so Node.AddDelay (and
// DumbbellSpec.SenderDelays) adds delay with eBPF and a TUN forwarder in Go;
// see link.Delay (host/lab/link) for the design, its accuracy and its
// capacity; Node.AddLoss adds random loss (link.Loss). Labs close
// their delay links first when they close.
package lab

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/lab/link"
)

// NetnsDir is where named namespaces are bind-mounted; it is the directory
// `ip netns` uses (/var/run is a symlink to /run on every modern distro).
const NetnsDir = "/run/netns"

// NamePrefix starts every namespace name this package creates.
const NamePrefix = "fl-"

// ErrInvalidSpec is wrapped by every error caused by a bad Spec, so callers
// can tell a typo from a kernel failure.
var ErrInvalidSpec = errors.New("invalid topology spec")

// AddrRange4 is the IPv4 range a lab may use (RFC 2544's benchmarking
// range); nothing else is ever configured.
var AddrRange4 = labPrefix4

var (
	// The address ranges a lab may use; nothing else is ever configured.
	labPrefix4 = netip.MustParsePrefix("198.18.0.0/15")
	labPrefix6 = netip.MustParsePrefix("2001:db8::/32")
)

// Spec declares a topology. Build validates all of it before touching the
// kernel.
type Spec struct {
	Nodes  []NodeSpec
	Links  []LinkSpec
	Routes []RouteSpec
}

// NodeSpec declares one network namespace.
type NodeSpec struct {
	Name string // logical name, [A-Za-z0-9_.-], at most 32 bytes
	// Forwarding turns on net.ipv4.ip_forward and net.ipv6.conf.all.forwarding.
	Forwarding bool
	// Sysctls are "net.*" keys (dotted, or slash-separated when a device name
	// contains a dot). Keys that already exist are written before links are
	// created, so conf.default.* reaches the new veths; per-device keys are
	// written once the devices exist.
	Sysctls map[string]string
}

// Endpoint is one end of a veth pair.
type Endpoint struct {
	Node  string
	Dev   string       // interface name inside Node, at most 15 bytes
	Addr  netip.Prefix // required, inside 198.18.0.0/15
	Addr6 netip.Prefix // optional, inside 2001:db8::/32; set on both ends or neither
	// Extra are more IPv4 addresses of the end, in Addr's prefix: a
	// host's senders that each need an address of their own (a UET
	// endpoint per address). Optional.
	Extra []netip.Addr
}

// LinkSpec declares a veth pair between two different nodes.
type LinkSpec struct {
	A, B Endpoint
	MTU  int // 0 means 1500
	// DisableOffloads turns TSO, GSO and GRO off on both ends so every
	// packet crosses the emulated port at wire size. Without it UDP GSO
	// (tx-udp-segmentation) is off all the same: a host's UDP GSO send
	// leaves its device as datagrams, as from a NIC with USO.
	DisableOffloads bool
	TxQueueLen      int // 0 keeps the kernel default
}

// RouteSpec adds Dst via the on-link gateway Via inside Node. Dst must lie
// inside the lab ranges: a lab never gets a default route.
type RouteSpec struct {
	Node string
	Dst  netip.Prefix
	Via  netip.Addr
	// Vias are further on-link gateways: with them the route is an ECMP
	// route over Via and Vias, hashed as the node's
	// net.ipv4.fib_multipath_hash_policy says. Optional.
	Vias []netip.Addr
	// QuickAck turns delayed ACKs off on the route (RTAX_QUICKACK): the
	// node's TCP ACKs every segment it receives from Dst. Optional.
	QuickAck bool
}

// Lab is a built topology. All methods are safe for concurrent use.
type Lab struct {
	runID string

	mu     sync.Mutex // held for all of Build, so a signal waits for a consistent lab
	closed bool
	nodes  []*Node
	byName map[string]*Node
	delays []*link.Delay // closed before the nodes
	spec   Spec          // as built: ReplaceRoute resolves devices in it
}

// ReplaceRoute replaces rs.Node's route to rs.Dst by one over rs.Via and
// rs.Vias (ECMP with more than one), each out of the device of the
// node's link whose subnet holds it, as Build installs routes: for a lab
// whose traffic moves while it runs (a PE's reroute agent).
func (l *Lab) ReplaceRoute(rs RouteSpec) error {
	l.mu.Lock()
	n, ok := l.byName[rs.Node]
	closed := l.closed
	l.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case !ok:
		return fmt.Errorf("lab: ReplaceRoute: no node %q", rs.Node)
	}
	hops := l.spec.hops(rs)
	if len(hops) != 1+len(rs.Vias) {
		return fmt.Errorf("lab: ReplaceRoute: %s: a next hop of %s via %s and %v is on none of its links", rs.Node, rs.Dst, rs.Via, rs.Vias)
	}
	return n.routeVia(rs.Dst, hops, rs.QuickAck)
}

// Build creates the topology described by spec. On error nothing it created
// is left behind. The first Build installs the SIGINT/SIGTERM handler (see
// DisableSignalHandler) and every Build sweeps stale namespaces (SweepStale).
func Build(spec Spec) (*Lab, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	installSignalHandler()
	// Best effort: a sweep failure must not stop a test that would work.
	_, _ = SweepStale()

	l := &Lab{byName: make(map[string]*Node, len(spec.Nodes)), spec: spec}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := register(l); err != nil {
		return nil, err
	}
	if err := l.build(spec); err != nil {
		return nil, withTeardown(err, l.closeLocked())
	}
	return l, nil
}

// shape is how a lab of one shape (a dumbbell, a multipath fabric, a WAN)
// is built from its spec S.
type shape[S, T any] struct {
	name     string // the constructor's: New<name>
	topology func(S) (Spec, error)
	// from makes a built lab the shape; on error it detaches what it
	// attached, and the caller closes the lab.
	from func(*Lab, S) (T, error)
	// detach closes what from attached, before the lab. Optional: nil
	// when closing the lab closes all of it.
	detach func(T) error
}

// build builds the lab of s and makes it the shape. On error nothing is
// left behind.
func (sh shape[S, T]) build(s S) (T, error) {
	var zero T
	spec, err := sh.topology(s)
	if err != nil {
		return zero, err
	}
	lab, err := Build(spec)
	if err != nil {
		return zero, err
	}
	v, err := sh.from(lab, s)
	if err != nil {
		return zero, withTeardown(err, lab.Close())
	}
	return v, nil
}

// buildT is build that fails tb on error and, in tb.Cleanup, detaches the
// shape and then closes the lab.
func (sh shape[S, T]) buildT(tb TB, s S) T {
	tb.Helper()
	spec, err := sh.topology(s)
	if err != nil {
		tb.Fatalf("lab.New%s: %v", sh.name, err)
	}
	lab := BuildT(tb, spec)
	v, err := sh.from(lab, s)
	if err != nil {
		tb.Fatalf("lab.New%s: %v", sh.name, err) // BuildT's cleanup closes the lab
	}
	if sh.detach != nil {
		// Registered after BuildT's, so it runs before the lab closes.
		tb.Cleanup(func() {
			if err := sh.detach(v); err != nil {
				tb.Errorf("lab: %s %s: %v", sh.name, lab.RunID(), err)
			}
		})
	}
	return v
}

// withTeardown is err with the failure, if any, of the teardown that
// followed it.
func withTeardown(err, teardownErr error) error {
	if teardownErr != nil {
		return fmt.Errorf("%w (teardown: %v)", err, teardownErr)
	}
	return err
}

// BuildT builds spec or fails tb, and closes the lab in tb.Cleanup, which Go
// runs even when the test panics.
func BuildT(tb TB, spec Spec) *Lab {
	tb.Helper()
	l, err := Build(spec)
	if err != nil {
		tb.Fatalf("lab.Build: %v", err)
	}
	tb.Cleanup(func() {
		if err := l.Close(); err != nil {
			tb.Errorf("lab: closing lab %s: %v", l.RunID(), err)
		}
	})
	return l
}

// RunID returns the "fl-<pid>-<hex>" prefix shared by this lab's namespaces.
func (l *Lab) RunID() string { return l.runID }

// Node returns the node with the given logical name. It panics on an unknown
// name because that is a bug in the caller, not a runtime condition.
func (l *Lab) Node(name string) *Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.byName[name]
	if !ok {
		panic(fmt.Sprintf("lab: lab %s has no node %q", l.runID, name))
	}
	return n
}

// Nodes returns the nodes in Spec order.
func (l *Lab) Nodes() []*Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Node(nil), l.nodes...)
}

// Close kills any process still running in the lab's namespaces and deletes
// the namespaces, which destroys their veths. It is idempotent.
func (l *Lab) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closeLocked()
}

func (l *Lab) closeLocked() error {
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	// Delay links hold TUN file descriptors and goroutines that use the
	// nodes' handles: they go first.
	for i := len(l.delays) - 1; i >= 0; i-- {
		if err := l.delays[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(l.nodes) - 1; i >= 0; i-- {
		if err := l.nodes[i].teardown(); err != nil {
			errs = append(errs, err)
		}
	}
	unregister(l)
	return errors.Join(errs...)
}

// CloseAll closes every lab of this process that is still open. Programs
// that install their own signal handling call it on the way out.
func CloseAll() error {
	liveMu.Lock()
	labs := make([]*Lab, 0, len(live))
	for l := range live {
		labs = append(labs, l)
	}
	liveMu.Unlock()
	var errs []error
	for _, l := range labs {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

func (l *Lab) build(spec Spec) error {
	uses6 := spec.usesIPv6()
	for i, ns := range spec.Nodes {
		n, err := l.addNode(ns.Name)
		if err != nil {
			return fmt.Errorf("lab: Nodes[%d] %q: %w", i, ns.Name, err)
		}
		if err := n.baseline(ns.Forwarding, uses6); err != nil {
			return fmt.Errorf("lab: Nodes[%d] %q: %w", i, ns.Name, err)
		}
	}

	// Sysctls whose key exists now go in before any device is created.
	deferred := make([]map[string]string, len(spec.Nodes))
	for i, ns := range spec.Nodes {
		n := l.byName[ns.Name]
		for _, k := range sortedKeys(ns.Sysctls) {
			exists, err := n.sysctlExists(k)
			if err != nil {
				return fmt.Errorf("lab: Nodes[%d].Sysctls[%q]: %w", i, k, err)
			}
			if !exists {
				if deferred[i] == nil {
					deferred[i] = map[string]string{}
				}
				deferred[i][k] = ns.Sysctls[k]
				continue
			}
			if err := n.Sysctl(k, ns.Sysctls[k]); err != nil {
				return fmt.Errorf("lab: Nodes[%d].Sysctls[%q]: %w", i, k, err)
			}
		}
	}

	for i, ls := range spec.Links {
		if err := l.addLink(ls); err != nil {
			return fmt.Errorf("lab: Links[%d] (%s:%s <-> %s:%s): %w",
				i, ls.A.Node, ls.A.Dev, ls.B.Node, ls.B.Dev, err)
		}
	}

	deadline := time.Now().Add(readyTimeout)
	for i, ls := range spec.Links {
		for _, ep := range []Endpoint{ls.A, ls.B} {
			if err := l.byName[ep.Node].waitOperational(ep.Dev, deadline); err != nil {
				return fmt.Errorf("lab: Links[%d] %s:%s: %w", i, ep.Node, ep.Dev, err)
			}
		}
	}

	for i, ns := range spec.Nodes {
		n := l.byName[ns.Name]
		for _, k := range sortedKeys(deferred[i]) {
			if err := n.Sysctl(k, deferred[i][k]); err != nil {
				return fmt.Errorf("lab: Nodes[%d].Sysctls[%q]: %w", i, k, err)
			}
		}
	}

	for i, rs := range spec.Routes {
		n := l.byName[rs.Node]
		if len(rs.Vias) > 0 {
			if err := n.routeVia(rs.Dst, spec.hops(rs), rs.QuickAck); err != nil {
				return fmt.Errorf("lab: Routes[%d] (%s: %s via %s and %v): %w", i, rs.Node, rs.Dst, rs.Via, rs.Vias, err)
			}
			continue
		}
		r := &netlink.Route{Dst: prefixToIPNet(rs.Dst), Gw: net.IP(rs.Via.AsSlice())}
		if rs.QuickAck {
			r.QuickACK = 1
		}
		if err := n.nl.RouteAdd(r); err != nil {
			return fmt.Errorf("lab: Routes[%d] (%s: %s via %s): %w", i, rs.Node, rs.Dst, rs.Via, err)
		}
	}
	return nil
}

// hops are an ECMP route's nexthops: each gateway with the device of rs's
// node on its subnet (validate checked there is one).
func (s Spec) hops(rs RouteSpec) []wanHop {
	var out []wanHop
	for _, gw := range append([]netip.Addr{rs.Via}, rs.Vias...) {
		for _, l := range s.Links {
			for _, ep := range []Endpoint{l.A, l.B} {
				if ep.Node == rs.Node && ep.Addr.Masked().Contains(gw) {
					out = append(out, wanHop{dev: ep.Dev, gw: gw})
				}
			}
		}
	}
	return out
}

// addNode creates the named namespace and the handles bound to it.
func (l *Lab) addNode(name string) (*Node, error) {
	full := l.runID + "-" + name
	h, err := newNamedNetns(full)
	if err != nil {
		// A half-made bind mount may exist; deleteNamed tolerates absence.
		_ = deleteNamed(full)
		return nil, fmt.Errorf("create netns %s: %w", full, err)
	}
	n := &Node{Name: name, NetnsName: full, lab: l, ns: h}
	// Track it before anything else can fail so teardown always sees it.
	l.nodes = append(l.nodes, n)
	l.byName[name] = n
	if n.nl, err = newHandleIn(n); err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	return n, nil
}

// baseline applies the settings every node gets: lo up, no reverse-path
// filtering (asymmetric lab routes are legitimate), no IPv6 DAD so addresses
// work at once (no IPv6 at all when the spec does not use it), and optional
// forwarding.
func (n *Node) baseline(forwarding, uses6 bool) error {
	lo, err := n.nl.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lookup lo: %w", err)
	}
	if err := n.nl.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	kv := [][2]string{
		{"net.ipv4.conf.all.rp_filter", "0"},
		{"net.ipv4.conf.default.rp_filter", "0"},
	}
	if forwarding {
		kv = append(kv, [2]string{"net.ipv4.ip_forward", "1"})
	}
	has6, err := n.sysctlExists("net.ipv6.conf.all.accept_dad")
	if err != nil {
		return err
	}
	if uses6 && !has6 {
		return errors.New("spec uses IPv6 but the kernel has no IPv6 support")
	}
	if has6 {
		kv = append(kv,
			[2]string{"net.ipv6.conf.all.accept_dad", "0"},
			[2]string{"net.ipv6.conf.default.accept_dad", "0"})
		if forwarding {
			kv = append(kv, [2]string{"net.ipv6.conf.all.forwarding", "1"})
		}
		if !uses6 {
			// An IPv4-only lab stays quiet: no link-local addresses, so
			// no MLD reports or router solicitations at random times
			// (one landing between a port's two program attachments
			// reaches the dequeue hook unstamped).
			kv = append(kv,
				[2]string{"net.ipv6.conf.all.disable_ipv6", "1"},
				[2]string{"net.ipv6.conf.default.disable_ipv6", "1"})
		} else {
			// An IPv6 lab is quiet once built: no router solicitations
			// (addresses are static), and a device's MLD reports (its
			// solicited-node and all-routers groups) all go out as it
			// comes up, not at random up to a second later, when a
			// port may be attaching. Devices created after this take
			// the defaults.
			kv = append(kv,
				[2]string{"net.ipv6.conf.default.router_solicitations", "0"},
				[2]string{"net.ipv6.conf.default.mldv1_unsolicited_report_interval", "1"},
				[2]string{"net.ipv6.conf.default.mldv2_unsolicited_report_interval", "1"})
		}
	}
	for _, p := range kv {
		if err := n.Sysctl(p[0], p[1]); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) addLink(ls LinkSpec) error {
	a, b := l.byName[ls.A.Node], l.byName[ls.B.Node]
	mtu := ls.MTU
	if mtu == 0 {
		mtu = 1500
	}
	attrs := netlink.NewLinkAttrs() // TxQLen -1 means "kernel default"; 0 would mean 0.
	attrs.Name = ls.A.Dev
	attrs.MTU = mtu
	if ls.TxQueueLen > 0 {
		attrs.TxQLen = ls.TxQueueLen
	}
	veth := &netlink.Veth{
		LinkAttrs:     attrs,
		PeerName:      ls.B.Dev,
		PeerTxQLen:    attrs.TxQLen,
		PeerMTU:       uint32(mtu),
		PeerNamespace: netlink.NsFd(int(b.ns)),
	}
	// Sent on A's netlink socket, so A's end is born in A's namespace and
	// the peer is born directly in B's: nothing ever exists in the root ns.
	if err := a.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth: %w", err)
	}
	for _, side := range []struct {
		n  *Node
		ep Endpoint
	}{{a, ls.A}, {b, ls.B}} {
		link, err := side.n.nl.LinkByName(side.ep.Dev)
		if err != nil {
			return fmt.Errorf("%s: lookup %s: %w", side.ep.Node, side.ep.Dev, err)
		}
		addrs := []*netlink.Addr{{IPNet: prefixToIPNet(side.ep.Addr)}}
		for _, x := range side.ep.Extra {
			addrs = append(addrs, &netlink.Addr{IPNet: prefixToIPNet(netip.PrefixFrom(x, side.ep.Addr.Bits()))})
		}
		if side.ep.Addr6.IsValid() {
			addrs = append(addrs, &netlink.Addr{IPNet: prefixToIPNet(side.ep.Addr6), Flags: unix.IFA_F_NODAD})
		}
		for _, ad := range addrs {
			if err := side.n.nl.AddrAdd(link, ad); err != nil {
				return fmt.Errorf("%s: add %s to %s: %w", side.ep.Node, ad.IPNet, side.ep.Dev, err)
			}
		}
		if ls.DisableOffloads {
			if err := side.n.SetOffloads(side.ep.Dev, false); err != nil {
				return fmt.Errorf("%s: %w", side.ep.Node, err)
			}
		} else if err := side.n.noUDPSegmentation(side.ep.Dev); err != nil {
			return fmt.Errorf("%s: %w", side.ep.Node, err)
		}
		if err := side.n.nl.LinkSetUp(link); err != nil {
			return fmt.Errorf("%s: set %s up: %w", side.ep.Node, side.ep.Dev, err)
		}
	}
	return nil
}

// readyTimeout bounds the wait for all veths to become operational.
const readyTimeout = 5 * time.Second

// waitOperational waits until dev is operationally up and has its root qdisc.
// Carrier changes are applied asynchronously by the kernel's linkwatch worker;
// until it runs, the device transmits through noop_qdisc, which silently drops
// everything, so the first ARP/ND of a test would vanish and cost a 1 s retry.
func (n *Node) waitOperational(dev string, deadline time.Time) error {
	for {
		link, err := n.nl.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("lookup: %w", err)
		}
		if link.Attrs().OperState == netlink.OperUp {
			qs, err := n.nl.QdiscList(link)
			if err != nil {
				return fmt.Errorf("list qdiscs: %w", err)
			}
			for _, q := range qs {
				if q.Attrs().Parent == netlink.HANDLE_ROOT {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not operational after %v (operstate %s)", readyTimeout, link.Attrs().OperState)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Live-lab registry, used for run-ID uniqueness and by the signal handler.
var (
	liveMu  sync.Mutex
	live    = map[*Lab]struct{}{}
	sigOnce sync.Once
	sigMu   sync.Mutex
	sigCh   chan os.Signal // non-nil once the handler is installed
)

// register assigns l a run ID unique among this process's live labs and the
// namespaces already on disk, and records l as live.
func register(l *Lab) error {
	liveMu.Lock()
	defer liveMu.Unlock()
	for range 64 {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("lab: run id: %w", err)
		}
		id := fmt.Sprintf("%s%d-%04x", NamePrefix, os.Getpid(), binary.BigEndian.Uint16(b[:]))
		if runIDTaken(id) {
			continue
		}
		l.runID = id
		live[l] = struct{}{}
		return nil
	}
	return errors.New("lab: could not find a free run id")
}

func runIDTaken(id string) bool {
	for o := range live {
		if o.runID == id {
			return true
		}
	}
	names, _ := LiveNamespaces(id + "-")
	return len(names) > 0
}

func unregister(l *Lab) {
	liveMu.Lock()
	delete(live, l)
	liveMu.Unlock()
}

// installSignalHandler makes Ctrl-C and SIGTERM tear labs down instead of
// leaking namespaces. Exit codes follow the shell's 128+signal convention.
func installSignalHandler() {
	sigOnce.Do(func() {
		ch := make(chan os.Signal, 2)
		sigMu.Lock()
		sigCh = ch
		sigMu.Unlock()
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			// Stderr may be a pipe its reader has left (go test killed
			// before the test binary): the message must not kill the
			// process by SIGPIPE before the teardown.
			signal.Ignore(syscall.SIGPIPE)
			code := 130
			if sig == syscall.SIGTERM {
				code = 143
			}
			fmt.Fprintf(os.Stderr, "lab: %v: tearing down network namespace labs\n", sig)
			done := make(chan struct{})
			go func() {
				if err := CloseAll(); err != nil {
					fmt.Fprintf(os.Stderr, "lab: teardown: %v\n", err)
				}
				close(done)
			}()
			// A second signal or a wedged teardown must not trap the user.
			select {
			case <-done:
			case <-ch:
			case <-time.After(10 * time.Second):
			}
			os.Exit(code)
		}()
	})
}

// DisableSignalHandler stops lab from handling SIGINT/SIGTERM, for programs
// with their own shutdown path; they must call CloseAll (or Close) on exit.
func DisableSignalHandler() {
	sigOnce.Do(func() {}) // prevents a later install
	sigMu.Lock()
	defer sigMu.Unlock()
	if sigCh != nil {
		signal.Stop(sigCh)
	}
}

// newNamedNetns creates and bind-mounts a namespace on a throwaway locked
// thread: netns.NewNamed moves the calling thread into the new namespace, and
// a goroutine that exits while locked takes its thread with it.
func newNamedNetns(name string) (netns.NsHandle, error) {
	type result struct {
		h   netns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately never unlocked: this thread is now in the new namespace.
		h, err := netns.NewNamed(name)
		ch <- result{h, err}
	}()
	r := <-ch
	return r.h, r.err
}

// deleteNamed removes a bind-mounted namespace, tolerating one that was only
// partly created (file without mount) or is already gone.
func deleteNamed(name string) error {
	err := netns.DeleteNamed(name)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if errors.Is(err, unix.EINVAL) { // not a mount point: just the placeholder file
		if rerr := os.Remove(NetnsDir + "/" + name); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return rerr
		}
		return nil
	}
	return err
}

// netlinkFamilies are opened on every node handle. A request for a family the
// handle lacks would silently go out on a socket in the *calling* thread's
// namespace, so every family the netlink package may use is bound here.
var netlinkFamilies = []int{unix.NETLINK_ROUTE, unix.NETLINK_GENERIC, unix.NETLINK_NETFILTER, unix.NETLINK_XFRM}

// newHandleIn opens the node's netlink handle from inside the namespace via
// Do, rather than netlink.NewHandleAt, whose thread restore ignores errors.
func newHandleIn(n *Node) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := n.Do(func() error {
		var fams []int
		for _, f := range netlinkFamilies {
			// Families the kernel lacks cannot be opened anywhere, so
			// skipping them cannot redirect requests to another namespace.
			probe, err := netlink.NewHandle(f)
			if err != nil {
				if f == unix.NETLINK_ROUTE {
					return err
				}
				continue
			}
			probe.Close()
			fams = append(fams, f)
		}
		var err error
		h, err = netlink.NewHandle(fams...)
		return err
	})
	return h, err
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{
		IP:   net.IP(p.Addr().AsSlice()),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}
}

func (s Spec) usesIPv6() bool {
	for _, l := range s.Links {
		if l.A.Addr6.IsValid() || l.B.Addr6.IsValid() {
			return true
		}
	}
	for _, r := range s.Routes {
		if r.Dst.Addr().Is6() {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	// Deterministic order makes failures reproducible.
	return slices.Sorted(maps.Keys(m))
}
