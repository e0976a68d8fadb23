package netnstests

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestAttachOverStaleRecord: a pinned port whose device went away while
// attached (a namespace deleted under a killed daemon, whose inode a new
// namespace reuses, looks the same to the pins) leaves a record whose
// links are attached to nothing. Attaching again on a new device of that
// name replaces the record; a live port is still refused.
func TestAttachOverStaleRecord(t *testing.T) {
	labtest.RequireRoot(t)
	l := lab.BuildT(t, lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "a"}, {Name: "b"}},
		Links: []lab.LinkSpec{{
			A: lab.Endpoint{Node: "a", Dev: "p0", Addr: netip.MustParsePrefix("198.18.20.1/24")},
			B: lab.Endpoint{Node: "b", Dev: "p0", Addr: netip.MustParsePrefix("198.18.20.2/24")},
		}},
	})
	ns := l.Node("a").NetnsName
	opts := qdisc.AttachOptions{Dev: "p0", Netns: ns, Mode: qdisc.QueueVirtual, Pin: true}
	cfg := qdisc.DefaultConfig(100 * units.Mbit)
	p, err := qdisc.Attach(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qdisc.Forget(ns, "p0") })
	if _, err := qdisc.Attach(cfg, opts); err == nil {
		t.Fatal("a second attach on a live port succeeded")
	}
	if err := p.Release(); err != nil { // as a killed process leaves it
		t.Fatal(err)
	}
	// The device goes; one of the same name comes.
	nl := l.Node("a").Netlink()
	dev, err := nl.LinkByName("p0")
	if err != nil {
		t.Fatal(err)
	}
	if err := nl.LinkDel(dev); err != nil {
		t.Fatal(err)
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "p0"
	if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "q0"}); err != nil {
		t.Fatal(err)
	}
	if d, err := nl.LinkByName("p0"); err != nil || nl.LinkSetUp(d) != nil {
		t.Fatalf("new p0: %v", err)
	}
	p2, err := qdisc.Attach(cfg, opts)
	if err != nil {
		t.Fatalf("attach over the stale record: %v", err)
	}
	if info := p2.Info(); !info.Pinned {
		t.Errorf("the new port is not pinned: %+v", info)
	}
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := qdisc.Open(ns, "p0"); err == nil {
		t.Error("a record is left after Close")
	}
}
