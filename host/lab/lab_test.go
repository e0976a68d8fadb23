//go:build linux

package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc/ethfeat"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

const minKernel = "5.10"

// pidPrefix matches every namespace this test process may create.
func pidPrefix() string { return fmt.Sprintf("%s%d-", NamePrefix, os.Getpid()) }

func twoNodeSpec() Spec {
	return Spec{
		Nodes: []NodeSpec{
			{Name: "a", Forwarding: true},
			{Name: "b", Sysctls: map[string]string{
				"net.ipv4.tcp_ecn":                   "1", // exists before links
				"net.ipv4.conf.eth0.accept_local":    "1", // per-device: applied after links
				"net/ipv6/conf/eth0/hop_limit":       "33",
				"net.ipv4.conf.default.arp_announce": "2",
			}},
		},
		Links: []LinkSpec{{
			A:               Endpoint{Node: "a", Dev: "eth0", Addr: netip.MustParsePrefix("198.18.100.1/24"), Addr6: netip.MustParsePrefix("2001:db8:100::1/64")},
			B:               Endpoint{Node: "b", Dev: "eth0", Addr: netip.MustParsePrefix("198.18.100.2/24"), Addr6: netip.MustParsePrefix("2001:db8:100::2/64")},
			MTU:             9000,
			DisableOffloads: true,
			TxQueueLen:      500,
		}},
	}
}

func TestTwoNodeLab(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	l := BuildT(t, twoNodeSpec())
	a, b := l.Node("a"), l.Node("b")

	if !strings.HasPrefix(l.RunID(), pidPrefix()) || a.NetnsName != l.RunID()+"-a" {
		t.Fatalf("RunID %q / NetnsName %q do not follow fl-<pid>-<hex>-<node>", l.RunID(), a.NetnsName)
	}
	if got := l.Nodes(); len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("Nodes() = %v", got)
	}

	udpExchange(t, a, b, netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.2"))
	udpExchange(t, b, a, netip.MustParseAddr("2001:db8:100::2"), netip.MustParseAddr("2001:db8:100::1"))

	for key, want := range map[string]string{
		"net.ipv4.tcp_ecn":                        "1",
		"net.ipv4.conf.eth0.accept_local":         "1",
		"net/ipv6/conf/eth0/hop_limit":            "33",
		"net.ipv4.conf.eth0.arp_announce":         "2", // inherited from default: set before the veth existed
		"net.ipv4.conf.all.rp_filter":             "0",
		"net.ipv6.conf.all.accept_dad":            "0",
		"net.ipv4.ip_forward":                     "0",
		"net.ipv6.conf.default.accept_dad":        "0",
		"net.ipv4.conf.default.rp_filter":         "0",
		"net.ipv6.conf.eth0.accept_dad":           "0",
		"net.ipv4.conf.eth0.rp_filter":            "0",
		"net.ipv6.conf.all.forwarding":            "0",
		"net.ipv4.conf.default.accept_local":      "0",
		"net.ipv6.conf.eth0.router_solicitations": "0", // IPv6 lab: quiet once built
	} {
		if got, err := b.ReadSysctl(key); err != nil || got != want {
			t.Errorf("b: %s = %q, %v; want %q", key, got, err, want)
		}
	}
	// 1 ms, read back as a whole number of jiffies.
	if got, err := b.ReadSysctl("net.ipv6.conf.eth0.mldv2_unsolicited_report_interval"); err != nil || got == "1000" {
		t.Errorf("b: eth0's MLDv2 unsolicited report interval %q, %v; want 1 ms (as jiffies), not the default 1000", got, err)
	}
	for _, key := range []string{"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"} {
		if got, err := a.ReadSysctl(key); err != nil || got != "1" {
			t.Errorf("a: %s = %q, %v; want 1", key, got, err)
		}
	}
	if err := a.Sysctl("net.ipv4.tcp_ecn", "2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.ReadSysctl("net.ipv4.tcp_ecn"); got != "2" {
		t.Errorf("a: tcp_ecn = %q after Sysctl, want 2", got)
	}
	if got, _ := b.ReadSysctl("net.ipv4.tcp_ecn"); got != "1" {
		t.Errorf("b: tcp_ecn = %q; a Sysctl on a leaked into b", got)
	}
	if err := a.Sysctl("kernel.panic", "0"); err == nil {
		t.Error("Sysctl accepted a host-wide key")
	}

	for _, n := range []*Node{a, b} {
		assertOffloadsOff(t, n, "eth0")
		link, err := n.Netlink().LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		if at := link.Attrs(); at.MTU != 9000 || at.TxQLen != 500 {
			t.Errorf("%s eth0: mtu %d txqlen %d, want 9000 500", n.Name, at.MTU, at.TxQLen)
		}
		idx, err := n.LinkIndex("eth0")
		if err != nil || idx != link.Attrs().Index {
			t.Errorf("%s LinkIndex(eth0) = %d, %v; want %d", n.Name, idx, err, link.Attrs().Index)
		}
	}
	if _, err := a.LinkIndex("nope0"); err == nil {
		t.Error("LinkIndex of a missing device succeeded")
	}

	if err := a.SetOffloads("eth0", true); err != nil {
		t.Fatal(err)
	}
	if f := features(t, a, "eth0"); !f["tx-generic-segmentation"] || !f["rx-gro"] {
		t.Errorf("offloads not back on: gso=%v gro=%v", f["tx-generic-segmentation"], f["rx-gro"])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := b.Command(ctx, "ip", "-br", "addr").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -br addr in %s: %v\n%s", b.NetnsName, err, out)
	}
	if !bytes.Contains(out, []byte("eth0")) || !bytes.Contains(out, []byte("198.18.100.2/24")) {
		t.Errorf("ip -br addr in b does not show eth0 198.18.100.2/24:\n%s", out)
	}

	// The namespace really is distinct from the caller's.
	var inside string
	if err := a.Do(func() error {
		h, err := netns.Get()
		if err != nil {
			return err
		}
		defer h.Close()
		inside = h.UniqueId()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inside != a.NsHandle().UniqueId() {
		t.Errorf("Do ran in %s, want %s", inside, a.NsHandle().UniqueId())
	}

	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertGone(t, l.RunID())
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := a.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close = %v, want ErrClosed", err)
	}
	if err := a.Sysctl("net.ipv4.tcp_ecn", "1"); !errors.Is(err, ErrClosed) {
		t.Errorf("Sysctl after Close = %v, want ErrClosed", err)
	}
	mustPanic(t, "Netlink after Close", func() { a.Netlink() })
	mustPanic(t, "unknown node", func() { l.Node("zz") })
}

// TestUDPSegmentationOff: a link built with offloads at their defaults
// still cuts UDP GSO sends as they leave (tx-udp-segmentation off, so a
// switch port downstream sees datagrams), and keeps TSO and GRO.
func TestUDPSegmentationOff(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	spec := twoNodeSpec()
	spec.Links[0].DisableOffloads = false
	l := BuildT(t, spec)
	for _, n := range l.Nodes() {
		f := features(t, n, "eth0")
		if f[udpSegmentation] || !f["tx-tcp-segmentation"] || !f["tx-generic-segmentation"] {
			t.Errorf("%s/eth0: %s %v, tso %v, gso %v; want off, on, on", n.Name, udpSegmentation, f[udpSegmentation],
				f["tx-tcp-segmentation"], f["tx-generic-segmentation"])
		}
	}
}

func TestDumbbell(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	d := NewDumbbellT(t, DumbbellSpec{
		Senders:         2,
		MTU:             4000,
		DisableOffloads: true,
		IPv6:            true,
		SenderSysctls:   map[string]string{"net.ipv4.tcp_ecn": "1"},
	})

	if len(d.Senders) != 2 || d.Senders[0].Name != "s1" || d.Senders[1].Name != "s2" ||
		d.Switch.Name != "sw" || d.Receiver.Name != "r" {
		t.Fatalf("unexpected nodes: %v %v %v", d.Senders, d.Switch, d.Receiver)
	}
	wantBottleneck := Port{Node: d.Switch, Dev: "swp0", PeerNode: d.Receiver, PeerDev: "eth0"}
	if d.Bottleneck != wantBottleneck {
		t.Errorf("Bottleneck = %+v", d.Bottleneck)
	}
	for i, p := range d.SenderPorts {
		want := Port{Node: d.Switch, Dev: fmt.Sprintf("swp%d", i+1), PeerNode: d.Senders[i], PeerDev: "eth0"}
		if p != want {
			t.Errorf("SenderPorts[%d] = %+v, want %+v", i, p, want)
		}
	}
	if d.ReceiverAddr != netip.MustParseAddr("198.19.0.2") || d.ReceiverAddr6 != netip.MustParseAddr("2001:db8:ff::2") {
		t.Errorf("receiver addrs %s %s", d.ReceiverAddr, d.ReceiverAddr6)
	}
	for i := range d.Senders {
		if want := netip.AddrFrom4([4]byte{198, 18, byte(i + 1), 2}); d.SenderAddrs[i] != want {
			t.Errorf("SenderAddrs[%d] = %s, want %s", i, d.SenderAddrs[i], want)
		}
		if want := netip.MustParseAddr(fmt.Sprintf("2001:db8:%x::2", i+1)); d.SenderAddrs6[i] != want {
			t.Errorf("SenderAddrs6[%d] = %s, want %s", i, d.SenderAddrs6[i], want)
		}
	}

	for i, s := range d.Senders {
		udpExchange(t, s, d.Receiver, d.SenderAddrs[i], d.ReceiverAddr)
		udpExchange(t, s, d.Receiver, d.SenderAddrs6[i], d.ReceiverAddr6)
		if got, _ := s.ReadSysctl("net.ipv4.tcp_ecn"); got != "1" {
			t.Errorf("%s tcp_ecn = %q, want 1", s.Name, got)
		}
	}
	// Sender to sender goes through the switch too.
	udpExchange(t, d.Senders[0], d.Senders[1], d.SenderAddrs[0], d.SenderAddrs[1])

	if got, _ := d.Switch.ReadSysctl("net.ipv4.ip_forward"); got != "1" {
		t.Errorf("switch ip_forward = %q", got)
	}
	if got, _ := d.Receiver.ReadSysctl("net.ipv4.ip_forward"); got != "0" {
		t.Errorf("receiver ip_forward = %q", got)
	}
	assertOffloadsOff(t, d.Switch, d.Bottleneck.Dev)
	assertOffloadsOff(t, d.Receiver, d.Bottleneck.PeerDev)

	for _, n := range d.Nodes() {
		routes, err := n.Netlink().RouteList(nil, netlink.FAMILY_ALL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range routes {
			if r.Dst == nil {
				t.Errorf("%s has a default route: %v", n.Name, r)
				continue
			}
			if ones, _ := r.Dst.Mask.Size(); ones == 0 {
				t.Errorf("%s has a default route: %v", n.Name, r)
			}
		}
	}
}

func TestBuildErrors(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	good := func() Spec { return twoNodeSpec() }
	cases := []struct {
		name  string
		spec  func() Spec
		field string
	}{
		{"no nodes", func() Spec { return Spec{} }, "Nodes"},
		{"duplicate node", func() Spec {
			s := good()
			s.Nodes = append(s.Nodes, NodeSpec{Name: "a"})
			return s
		}, "Nodes[2].Name"},
		{"bad node name", func() Spec { s := good(); s.Nodes[0].Name = "a/b"; return s }, "Nodes[0].Name"},
		{"host sysctl", func() Spec {
			s := good()
			s.Nodes[0].Sysctls = map[string]string{"kernel.panic": "1"}
			return s
		}, `Nodes[0].Sysctls["kernel.panic"]`},
		{"unknown node in link", func() Spec { s := good(); s.Links[0].B.Node = "c"; return s }, "Links[0].B.Node"},
		{"same node both ends", func() Spec { s := good(); s.Links[0].B.Node = "a"; s.Links[0].B.Dev = "eth1"; return s }, "Links[0].B.Node"},
		{"long dev", func() Spec { s := good(); s.Links[0].A.Dev = "averyveryverylongname"; return s }, "Links[0].A.Dev"},
		{"missing addr", func() Spec { s := good(); s.Links[0].A.Addr = netip.Prefix{}; return s }, "Links[0].A.Addr"},
		{"extra addr off the prefix", func() Spec {
			s := good()
			s.Links[0].A.Extra = []netip.Addr{netip.MustParseAddr("198.18.99.9")}
			return s
		}, "Links[0].A.Extra[0]"},
		{"extra addr taken", func() Spec {
			s := good()
			s.Links[0].A.Extra = []netip.Addr{s.Links[0].B.Addr.Addr()}
			return s
		}, "Links[0].A.Extra[0]"},
		{"addr outside lab range", func() Spec {
			s := good()
			s.Links[0].A.Addr = netip.MustParsePrefix("10.0.0.1/24")
			return s
		}, "Links[0].A.Addr"},
		{"addr6 outside doc range", func() Spec {
			s := good()
			s.Links[0].B.Addr6 = netip.MustParsePrefix("fd00::2/64")
			return s
		}, "Links[0].B.Addr6"},
		{"v6 in Addr", func() Spec {
			s := good()
			s.Links[0].A.Addr = netip.MustParsePrefix("2001:db8::1/64")
			return s
		}, "Links[0].A.Addr"},
		{"subnet mismatch", func() Spec {
			s := good()
			s.Links[0].B.Addr = netip.MustParsePrefix("198.18.101.2/24")
			return s
		}, "Links[0].B.Addr"},
		{"network address", func() Spec {
			s := good()
			s.Links[0].B.Addr = netip.MustParsePrefix("198.18.100.0/24")
			return s
		}, "Links[0].B.Addr"},
		{"bad mtu", func() Spec { s := good(); s.Links[0].MTU = 70000; return s }, "Links[0].MTU"},
		{"duplicate dev", func() Spec {
			s := good()
			l := s.Links[0]
			l.A.Addr, l.B.Addr = netip.MustParsePrefix("198.18.7.1/24"), netip.MustParsePrefix("198.18.7.2/24")
			l.A.Addr6, l.B.Addr6 = netip.Prefix{}, netip.Prefix{}
			l.B.Dev = "eth1"
			s.Links = append(s.Links, l)
			return s
		}, "Links[1].A.Dev"},
		{"default route", func() Spec {
			s := good()
			s.Routes = []RouteSpec{{Node: "a", Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("198.18.100.2")}}
			return s
		}, "Routes[0].Dst"},
		{"off-link gateway", func() Spec {
			s := good()
			s.Routes = []RouteSpec{{Node: "a", Dst: netip.MustParsePrefix("198.19.0.0/24"), Via: netip.MustParseAddr("198.18.5.1")}}
			return s
		}, "Routes[0].Via"},
		{"off-link ECMP gateway", func() Spec {
			s := good()
			s.Routes = []RouteSpec{{Node: "a", Dst: netip.MustParsePrefix("198.19.0.0/24"), Via: netip.MustParseAddr("198.18.100.2"),
				Vias: []netip.Addr{netip.MustParseAddr("198.18.5.1")}}}
			return s
		}, "Routes[0].Vias[0]"},
		{"ECMP gateway twice", func() Spec {
			s := good()
			s.Routes = []RouteSpec{{Node: "a", Dst: netip.MustParsePrefix("198.19.0.0/24"), Via: netip.MustParseAddr("198.18.100.2"),
				Vias: []netip.Addr{netip.MustParseAddr("198.18.100.2")}}}
			return s
		}, "Routes[0].Vias[0]"},
		{"unknown route node", func() Spec {
			s := good()
			s.Routes = []RouteSpec{{Node: "x", Dst: netip.MustParsePrefix("198.19.0.0/24"), Via: netip.MustParseAddr("198.18.100.2")}}
			return s
		}, "Routes[0].Node"},
		// Passes validation, fails in the kernel after namespaces and the
		// veth exist: exercises teardown of a partly built lab.
		{"kernel failure", func() Spec {
			s := good()
			s.Nodes[1].Sysctls = map[string]string{"net.ipv4.conf.eth0.no_such_knob": "1"}
			return s
		}, `Nodes[1].Sysctls["net.ipv4.conf.eth0.no_such_knob"]`},
	}
	before, err := LiveNamespaces(pidPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Build(tc.spec())
			if err == nil {
				l.Close()
				t.Fatal("Build succeeded")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error does not name %s: %v", tc.field, err)
			}
			if wantSpecErr := tc.name != "kernel failure"; errors.Is(err, ErrInvalidSpec) != wantSpecErr {
				t.Errorf("errors.Is(err, ErrInvalidSpec) = %v, want %v: %v", !wantSpecErr, wantSpecErr, err)
			}
			after, err2 := LiveNamespaces(pidPrefix())
			if err2 != nil {
				t.Fatal(err2)
			}
			if len(after) != len(before) {
				t.Errorf("failed Build left namespaces behind: %v (before %v)", after, before)
			}
			t.Logf("%v", err)
		})
	}
	if _, err := NewDumbbell(DumbbellSpec{Senders: 0}); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "Senders") {
		t.Errorf("NewDumbbell(Senders: 0) = %v", err)
	}
}

func TestSweepStale(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	dead := deadPid(t)
	stale := fmt.Sprintf("%s%d-beef-stale", NamePrefix, dead)
	h, err := newNamedNetns(stale)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	t.Cleanup(func() { _ = deleteNamed(stale) })
	// What the dead owner started inside it (a daemon) goes too.
	orphan := exec.Command("ip", "netns", "exec", stale, "sleep", "60")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- orphan.Wait() }()
	t.Cleanup(func() { _ = orphan.Process.Kill() })
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", orphan.Process.Pid))
		if strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ip netns exec never ran sleep")
		}
	}

	l := BuildT(t, Spec{Nodes: []NodeSpec{{Name: "x"}}})
	if names, _ := LiveNamespaces(stale); len(names) != 0 {
		t.Fatalf("Build did not sweep %s", stale)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("the process inside the stale namespace ended with %v, want killed", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("the process inside the stale namespace survived the sweep")
	}
	// Our own live lab is never swept.
	if _, err := SweepStale(); err != nil {
		t.Fatal(err)
	}
	if names, _ := LiveNamespaces(l.RunID()); len(names) != 1 {
		t.Fatalf("SweepStale removed a live lab: %v", names)
	}
}

func TestConcurrentLabsDistinct(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	const n = 4
	labs := make([]*Lab, n)
	var wg sync.WaitGroup
	for i := range labs {
		wg.Go(func() {
			l, err := Build(twoNodeSpec())
			if err != nil {
				t.Error(err)
				return
			}
			labs[i] = l
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, l := range labs {
		if l == nil {
			continue
		}
		defer l.Close()
		for _, node := range l.Nodes() {
			if seen[node.NetnsName] {
				t.Errorf("namespace %s used by two labs", node.NetnsName)
			}
			seen[node.NetnsName] = true
		}
	}
	if t.Failed() {
		return
	}
	// Same addresses in every lab, yet isolated: each lab talks to itself.
	for _, l := range labs {
		udpExchange(t, l.Node("a"), l.Node("b"), netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.2"))
	}
	for _, l := range labs {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		assertGone(t, l.RunID())
	}
}

func TestDoPropagatesPanicAndGoexit(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	l := BuildT(t, Spec{Nodes: []NodeSpec{{Name: "x"}}})

	// Goexit (what t.FailNow does) in fn must end the caller's goroutine too.
	done, reached := make(chan struct{}), false
	go func() {
		defer close(done)
		_ = l.Node("x").Do(func() error { runtime.Goexit(); return nil })
		reached = true
	}()
	<-done
	if reached {
		t.Error("Do returned normally after fn called runtime.Goexit")
	}

	defer func() {
		v := recover()
		p, ok := v.(*nsexec.Panic)
		if !ok || p.Value != "boom" || p.Netns != l.Node("x").NetnsName {
			t.Fatalf("recovered %v, want the nsexec.Panic for boom in x's netns", v)
		}
	}()
	_ = l.Node("x").Do(func() error { panic("boom") })
	t.Fatal("Do returned after fn panicked")
}

func TestCloseKillsProcesses(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	l := BuildT(t, Spec{Nodes: []NodeSpec{{Name: "x"}}})
	cmd := l.Node("x").Command(context.Background(), "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Wait until `ip netns exec` has exec'd sleep inside the namespace.
	deadline := time.Now().Add(2 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		if strings.TrimSpace(string(b)) == "sleep" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		cmd.Process.Kill()
		t.Fatal("process inside the namespace survived Close")
	}
}

// TestSignalTearsDown runs a child test binary that builds a lab and then
// signals itself; the handler must delete the lab and exit 128+signal,
// also when its stderr is a pipe nobody reads any more (go test killed
// before the test binary it runs): writing there must not kill it first.
func TestSignalTearsDown(t *testing.T) {
	if os.Getenv("LAB_SIGNAL_CHILD") != "" {
		signalChild()
		return
	}
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	for _, tc := range []struct {
		name         string
		sig          syscall.Signal
		code         int
		brokenStderr bool
	}{
		{"SIGINT", syscall.SIGINT, 130, false},
		{"SIGTERM", syscall.SIGTERM, 143, false},
		{"SIGTERM/stderr-broken", syscall.SIGTERM, 143, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSignalTearsDown$", "-test.count=1")
			cmd.Env = append(os.Environ(), "LAB_SIGNAL_CHILD="+strconv.Itoa(int(tc.sig)))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if tc.brokenStderr {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				r.Close()
				defer w.Close()
				cmd.Stderr = w
			}
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Fatalf("child exit = %v, want code %d\nstdout:%s\nstderr:%s", err, tc.code, stdout.String(), stderr.String())
			}
			runID, _, ok := strings.Cut(stdout.String(), "\n")
			if !ok || !strings.HasPrefix(runID, NamePrefix) {
				t.Fatalf("child printed no run id: %q", stdout.String())
			}
			assertGone(t, runID)
		})
	}
}

func signalChild() {
	sig, _ := strconv.Atoi(os.Getenv("LAB_SIGNAL_CHILD"))
	l, err := Build(twoNodeSpec())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Println(l.RunID())
	_ = syscall.Kill(os.Getpid(), syscall.Signal(sig))
	time.Sleep(10 * time.Second)
	os.Exit(4) // the handler should have exited first
}

// TestDumbbellDelayErrors: bad sender delays are refused before anything
// is built, with the field, the value and the range in the message.
func TestDumbbellDelayErrors(t *testing.T) {
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
}

func TestSysctlPath(t *testing.T) {
	for in, want := range map[string]string{
		"net.ipv4.tcp_ecn":                 "/proc/sys/net/ipv4/tcp_ecn",
		"net/ipv4/conf/eth0.100/rp_filter": "/proc/sys/net/ipv4/conf/eth0.100/rp_filter",
		"net.ipv6.conf.all.accept_dad":     "/proc/sys/net/ipv6/conf/all/accept_dad",
	} {
		if got, err := sysctlPath(in); err != nil || got != want {
			t.Errorf("sysctlPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"kernel.panic", "vm.swappiness", "net/../kernel/panic", "net..ipv4", "/net/ipv4/x", ""} {
		if _, err := sysctlPath(in); err == nil {
			t.Errorf("sysctlPath(%q) succeeded", in)
		}
	}
}

// udpExchange sends a datagram from -> to and waits for the echo, all within
// 2 s. Sockets are created inside the namespaces and then used from here.
func udpExchange(t *testing.T, from, to *Node, src, dst netip.Addr) {
	t.Helper()
	var srv, cli *net.UDPConn
	if err := to.Do(func() (err error) {
		srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 0)))
		return err
	}); err != nil {
		t.Fatalf("listen on %s in %s: %v", dst, to.Name, err)
	}
	defer srv.Close()
	port := srv.LocalAddr().(*net.UDPAddr).Port
	if err := from.Do(func() (err error) {
		cli, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, uint16(port))))
		return err
	}); err != nil {
		t.Fatalf("dial %s from %s: %v", dst, from.Name, err)
	}
	defer cli.Close()

	deadline := time.Now().Add(2 * time.Second)
	srv.SetDeadline(deadline)
	cli.SetDeadline(deadline)
	seen := make(chan netip.AddrPort, 1)
	go func() {
		buf := make([]byte, 1500)
		n, peer, err := srv.ReadFromUDPAddrPort(buf)
		if err != nil {
			close(seen)
			return
		}
		seen <- peer
		srv.WriteToUDPAddrPort(buf[:n], peer)
	}()
	msg := fmt.Appendf(nil, "hello %s -> %s", from.Name, to.Name)
	if _, err := cli.Write(msg); err != nil {
		t.Fatalf("%s -> %s: send: %v", src, dst, err)
	}
	buf := make([]byte, 1500)
	n, err := cli.Read(buf)
	if err != nil {
		t.Fatalf("%s (%s) -> %s (%s): no echo: %v", src, from.Name, dst, to.Name, err)
	}
	if !bytes.Equal(buf[:n], msg) {
		t.Fatalf("echo %q, want %q", buf[:n], msg)
	}
	if peer := <-seen; peer.Addr().Unmap() != src {
		t.Fatalf("receiver saw source %s, want %s", peer.Addr(), src)
	}
}

func features(t *testing.T, n *Node, dev string) map[string]bool {
	t.Helper()
	var fs map[string]ethfeat.State
	if err := n.Do(func() (err error) {
		fs, err = ethfeat.Get(dev)
		return err
	}); err != nil {
		t.Fatalf("ethtool features %s/%s: %v", n.Name, dev, err)
	}
	f := make(map[string]bool, len(fs))
	for k, st := range fs {
		f[k] = st.Active
	}
	return f
}

func assertOffloadsOff(t *testing.T, n *Node, dev string) {
	t.Helper()
	f := features(t, n, dev)
	for _, k := range []string{"tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-generic-segmentation", "rx-gro"} {
		on, ok := f[k]
		if !ok {
			t.Errorf("%s/%s: ethtool reports no feature %s", n.Name, dev, k)
		} else if on {
			t.Errorf("%s/%s: %s still on", n.Name, dev, k)
		}
	}
}

func assertGone(t *testing.T, runID string) {
	t.Helper()
	names, err := LiveNamespaces(runID + "-")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 {
		t.Fatalf("namespaces of %s still present: %v", runID, names)
	}
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	fn()
}

// deadPid returns a pid with no /proc entry. pid_max itself is never handed
// out (pids are < pid_max), but check anyway.
func deadPid(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for pid := max; pid < max+1000; pid++ {
		if !pidAlive(pid) {
			return pid
		}
	}
	t.Fatal("no dead pid found")
	return 0
}

// TestReplaceRoute: a node's route moves between one next hop and ECMP
// over two while the lab runs, each out of the device whose subnet holds
// the gateway; a gateway on none of the node's links is refused.
func TestReplaceRoute(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, minKernel)
	ep := func(node, dev, addr string) Endpoint {
		return Endpoint{Node: node, Dev: dev, Addr: netip.MustParsePrefix(addr)}
	}
	dst := netip.MustParsePrefix("198.18.12.0/24")
	m1, m2 := netip.MustParseAddr("198.18.10.2"), netip.MustParseAddr("198.18.11.2")
	l := BuildT(t, Spec{
		Nodes: []NodeSpec{{Name: "a"}, {Name: "m1", Forwarding: true}, {Name: "m2", Forwarding: true}, {Name: "b"}},
		Links: []LinkSpec{
			{A: ep("a", "p1", "198.18.10.1/24"), B: ep("m1", "a", "198.18.10.2/24")},
			{A: ep("a", "p2", "198.18.11.1/24"), B: ep("m2", "a", "198.18.11.2/24")},
			{A: ep("m1", "b", "198.18.12.1/24"), B: ep("b", "p1", "198.18.12.2/24")},
			{A: ep("m2", "b", "198.18.13.1/24"), B: ep("b", "p2", "198.18.13.2/24")},
		},
		Routes: []RouteSpec{{Node: "a", Dst: dst, Via: m1, QuickAck: true}},
	})
	quickAck := func() bool {
		t.Helper()
		rs, err := l.Node("a").Netlink().RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: prefixToIPNet(dst)}, netlink.RT_FILTER_DST)
		if err != nil || len(rs) != 1 {
			t.Fatalf("a's routes to %s: %v %v", dst, rs, err)
		}
		return rs[0].QuickACK == 1
	}
	nexthops := func() []string {
		t.Helper()
		rs, err := l.Node("a").Netlink().RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: prefixToIPNet(dst)}, netlink.RT_FILTER_DST)
		if err != nil || len(rs) != 1 {
			t.Fatalf("a's routes to %s: %v %v", dst, rs, err)
		}
		if len(rs[0].MultiPath) == 0 {
			return []string{rs[0].Gw.String()}
		}
		var out []string
		for _, nh := range rs[0].MultiPath {
			out = append(out, nh.Gw.String())
		}
		return out
	}
	if got := nexthops(); !slices.Equal(got, []string{"198.18.10.2"}) || !quickAck() {
		t.Fatalf("as built: %v, quickack %v (want set)", got, quickAck())
	}
	if err := l.ReplaceRoute(RouteSpec{Node: "a", Dst: dst, Via: m1, Vias: []netip.Addr{m2}, QuickAck: true}); err != nil {
		t.Fatal(err)
	}
	if got := nexthops(); !slices.Equal(got, []string{"198.18.10.2", "198.18.11.2"}) || !quickAck() {
		t.Errorf("spread: %v, quickack %v (want set)", got, quickAck())
	}
	if err := l.ReplaceRoute(RouteSpec{Node: "a", Dst: dst, Via: m1}); err != nil {
		t.Fatal(err)
	}
	if got := nexthops(); !slices.Equal(got, []string{"198.18.10.2"}) || quickAck() {
		t.Errorf("back: %v, quickack %v (want off)", got, quickAck())
	}
	if err := l.ReplaceRoute(RouteSpec{Node: "a", Dst: dst, Via: netip.MustParseAddr("198.18.12.1")}); err == nil || !strings.Contains(err.Error(), "on none of its links") {
		t.Errorf("a gateway off a's links: %v", err)
	}
	if err := l.ReplaceRoute(RouteSpec{Node: "z", Dst: dst, Via: m1}); err == nil {
		t.Error("an unknown node was accepted")
	}
}
