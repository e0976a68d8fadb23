package netnstests

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// pinned is what the stale-record tests attach: a port or a tunnel PE.
type pinned interface {
	attach() (attached, error)
	forget() error
	open() error // the record, found again
}

// attached is a pinned port or PE: Release leaves it as a killed process
// does.
type attached interface {
	Close() error
	Release() error
}

// TestAttachOverStaleRecord: a pinned port or tunnel PE whose device went
// away while attached (a namespace deleted under a killed process, whose
// inode a new namespace reuses, looks the same to the pins) leaves a
// record whose links are attached to nothing. Attaching again on a new
// device of that name replaces the record; a live one is still refused.
func TestAttachOverStaleRecord(t *testing.T) {
	labtest.RequireRoot(t)
	for _, kind := range []string{"port", "tunnel PE"} {
		t.Run(kind, func(t *testing.T) {
			l := lab.BuildT(t, lab.Spec{
				Nodes: []lab.NodeSpec{{Name: "a"}, {Name: "b"}},
				Links: []lab.LinkSpec{{
					A: lab.Endpoint{Node: "a", Dev: "p0", Addr: netip.MustParsePrefix("198.18.20.1/24")},
					B: lab.Endpoint{Node: "b", Dev: "p0", Addr: netip.MustParsePrefix("198.18.20.2/24")},
					// A tunnel PE wants packets unmerged and unsegmented.
					DisableOffloads: true,
				}},
			})
			ns := l.Node("a").NetnsName
			var p pinned = stalePort{ns}
			if kind == "tunnel PE" {
				p = stalePE{ns}
			}
			checkAttachOverStale(t, l, p)
		})
	}
}

func checkAttachOverStale(t *testing.T, l *lab.Lab, p pinned) {
	first, err := p.attach()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.forget() })
	if _, err := p.attach(); err == nil {
		t.Fatal("a second attach on a live record succeeded")
	}
	if err := first.Release(); err != nil {
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
	if err := l.Node("a").SetOffloads("p0", false); err != nil {
		t.Fatal(err)
	}
	second, err := p.attach()
	if err != nil {
		t.Fatalf("attach over the stale record: %v", err)
	}
	if err := p.open(); err != nil {
		t.Errorf("the new one is not pinned: %v", err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.open(); err == nil {
		t.Error("a record is left after Close")
	}
}

type stalePort struct{ ns string }

func (s stalePort) opts() qdisc.AttachOptions {
	return qdisc.AttachOptions{Dev: "p0", Netns: s.ns, Mode: qdisc.QueueVirtual, Pin: true}
}

func (s stalePort) attach() (attached, error) {
	return qdisc.Attach(qdisc.DefaultConfig(100*units.Mbit), s.opts())
}

func (s stalePort) forget() error { return qdisc.Forget(s.ns, "p0") }

func (s stalePort) open() error {
	p, err := qdisc.Open(s.ns, "p0")
	if err == nil {
		p.Release()
	}
	return err
}

type stalePE struct{ ns string }

func (s stalePE) attach() (attached, error) {
	cfg := tunnel.Config{
		Local:  netip.MustParseAddr("198.18.20.1"),
		Routes: []tunnel.Route{{Prefix: netip.MustParsePrefix("198.18.21.0/24"), Remote: netip.MustParseAddr("198.18.20.2")}},
	}
	return tunnel.Attach(s.ns, "p0", cfg, tunnel.AttachOptions{Pin: true})
}

func (s stalePE) forget() error { return tunnel.Forget(s.ns, "p0") }

func (s stalePE) open() error {
	pe, err := tunnel.Open(s.ns, "p0")
	if err == nil {
		pe.Release()
	}
	return err
}
