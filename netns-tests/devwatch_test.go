package netnstests

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabriclab/fabriclab/host/daemon"
	"github.com/fabriclab/fabriclab/qdisc"
)

// TestDaemonDeviceReplaced: the device under fabriclabd's port goes away
// (ip link del) and comes back; the daemon detaches what is left, reports
// the port lost (/healthz degraded, fabriclab_port_attached 0), attaches
// it again on the new device as configured, where it counts traffic, and
// the metrics count each loss and reattach. Twice: once with time between
// deletion and return, once replaced at once (the old programs' links are
// found detached). SIGTERM then leaves nothing.
func TestDaemonDeviceReplaced(t *testing.T) {
	dl := newDaemonLab(t)
	bin := buildDaemon(t)
	// The HTTP endpoint on d's loopback: eth0 and its address go away.
	dl.mNode, dl.mAddr = dl.d, "127.0.0.1:9471"
	dl.writeConfig(t, "metrics: {listen: \"127.0.0.1:9471\"}\nports:\n  - {dev: eth0, mode: virtual, rate: 200mbit}\n")
	dl.start(t, bin)
	port := map[string]string{"port": "eth0"}
	metric := func(name string) float64 {
		t.Helper()
		v, ok := value(dl.metrics(t), name, port)
		if !ok {
			t.Fatalf("no %s{port=eth0}", name)
		}
		return v
	}
	if metric("fabriclab_port_attached") != 1 || metric("fabriclab_port_device_lost_total") != 0 {
		t.Fatalf("at start: attached %v, lost %v", metric("fabriclab_port_attached"), metric("fabriclab_port_device_lost_total"))
	}
	nl := dl.d.Netlink()
	del := func() {
		t.Helper()
		l, err := nl.LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		if err := nl.LinkDel(l); err != nil { // its peer, c's eth0, goes with it
			t.Fatal(err)
		}
	}
	add := func() int {
		t.Helper()
		attrs := netlink.NewLinkAttrs()
		attrs.Name, attrs.MTU = "eth0", 9000
		veth := &netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerMTU: 9000, PeerNamespace: netlink.NsFd(int(dl.c.NsHandle()))}
		if err := nl.LinkAdd(veth); err != nil {
			t.Fatal(err)
		}
		for _, n := range []struct {
			node interface {
				Netlink() *netlink.Handle
				SetOffloads(string, bool) error
			}
			addr string
		}{{dl.d, "198.18.10.1/24"}, {dl.c, "198.18.10.2/24"}} {
			h := n.node.Netlink()
			l, err := h.LinkByName("eth0")
			if err != nil {
				t.Fatal(err)
			}
			a, _ := netlink.ParseAddr(n.addr)
			if err := h.AddrAdd(l, a); err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
			if err := n.node.SetOffloads("eth0", false); err != nil {
				t.Fatal(err)
			}
		}
		l, err := nl.LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().Index
	}
	// enqueued is what the pinned port on eth0 counted, after 5 datagrams
	// sent through it.
	enqueued := func(wantIfindex int) uint64 {
		t.Helper()
		if err := dl.d.Do(func() error {
			// Unconnected: the far end's ICMP errors fail no send.
			c, err := net.ListenPacket("udp4", "198.18.10.1:0")
			if err != nil {
				return err
			}
			defer c.Close()
			to := &net.UDPAddr{IP: net.IPv4(198, 18, 10, 2), Port: 9}
			for range 5 {
				if _, err := c.WriteTo(make([]byte, 100), to); err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}); err != nil {
			t.Fatalf("send through the port: %v", err)
		}
		p, err := qdisc.Open(dl.d.NetnsName, "eth0")
		if err != nil {
			t.Fatalf("the reattached port is not pinned: %v", err)
		}
		defer p.Release()
		if got := p.Info().Ifindex; got != wantIfindex {
			t.Errorf("the port is on ifindex %d, want the new eth0's %d", got, wantIfindex)
		}
		st, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range st.Classes {
			n += c.EnqueuedPackets
		}
		return n
	}
	lost := func() daemon.Health {
		t.Helper()
		var h daemon.Health
		waitFor(t, 5*time.Second, "the port reported lost", func() bool {
			var err error
			h, err = dl.health()
			return err == nil && h.Status == "degraded" && len(h.Lost) == 1 && h.Lost[0].Name == "eth0"
		})
		return h
	}
	back := func() time.Duration {
		t.Helper()
		t0 := time.Now()
		waitFor(t, 10*time.Second, "the port attached again", func() bool {
			h, err := dl.health()
			return err == nil && h.Status == "ok" && len(h.Ports) == 1
		})
		return time.Since(t0)
	}

	// 1. Gone for a while, then back.
	t0 := time.Now()
	del()
	h := lost()
	noticed := time.Since(t0)
	if metric("fabriclab_port_attached") != 0 || metric("fabriclab_port_device_lost_total") != 1 {
		t.Errorf("while lost: attached %v, lost %v", metric("fabriclab_port_attached"), metric("fabriclab_port_device_lost_total"))
	}
	if p, err := qdisc.Open(dl.d.NetnsName, "eth0"); err == nil {
		p.Release()
		t.Error("the lost port's pins are still there")
	}
	time.Sleep(1500 * time.Millisecond) // a resync or two with no device: no attach is tried
	if f := metric("fabriclab_port_reattach_failures_total"); f != 0 {
		t.Errorf("%v reattach failures with no device", f)
	}
	idx := add()
	took := back()
	if n := enqueued(idx); n < 5 {
		t.Errorf("the reattached port counted %d packets of 5 sent", n)
	}
	if metric("fabriclab_port_attached") != 1 || metric("fabriclab_port_reattached_total") != 1 {
		t.Errorf("after the return: attached %v, reattached %v", metric("fabriclab_port_attached"), metric("fabriclab_port_reattached_total"))
	}

	// 2. Replaced at once: the next event or resync finds the old links detached.
	t1 := time.Now()
	del()
	idx2 := add()
	deadline := time.Now().Add(10 * time.Second)
	for metric("fabriclab_port_reattached_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("replaced at once: not attached again in 10 s (lost %v)", metric("fabriclab_port_device_lost_total"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	replaced := time.Since(t1)
	if n := enqueued(idx2); n < 5 {
		t.Errorf("the port on the replacement counted %d packets of 5 sent", n)
	}
	if l := metric("fabriclab_port_device_lost_total"); l != 2 {
		t.Errorf("device_lost_total %v, want 2", l)
	}
	logs := dl.logs.String()
	for _, want := range []string{"port lost its device", "port attached again on its new device"} {
		if strings.Count(logs, want) != 2 {
			t.Errorf("the log has %q %d times, want 2", want, strings.Count(logs, want))
		}
	}
	dl.signal(t, syscall.SIGTERM)
	dl.waitExit(t)
	if p, err := qdisc.Open(dl.d.NetnsName, "eth0"); err == nil {
		p.Release()
		t.Error("the port is still attached after the daemon exited")
	}
	t.Logf("device deleted: reported lost in %v (lost_seconds %.2f); back: attached again %v after the new device; replaced at once: attached again in %v",
		noticed.Round(time.Millisecond), h.Lost[0].LostSeconds, took.Round(time.Millisecond), replaced.Round(time.Millisecond))
}
