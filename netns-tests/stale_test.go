package netnstests

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

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

func (s stalePort) attach() (attached, error) { return s.attachOn("p0") }

func (s stalePort) attachOn(dev string) (attached, error) {
	opts := qdisc.AttachOptions{Dev: dev, Netns: s.ns, Mode: qdisc.QueueVirtual, Pin: true}
	return qdisc.Attach(qdisc.DefaultConfig(100*units.Mbit), opts)
}

func (s stalePort) forget() error { return qdisc.Forget(s.ns, "p0") }

func (s stalePort) open() error { return s.openOn("p0") }

func (s stalePort) openOn(dev string) error {
	p, err := qdisc.Open(s.ns, dev)
	if err == nil {
		p.Release()
	}
	return err
}

type stalePE struct{ ns string }

func (s stalePE) attach() (attached, error) { return s.attachOn("p0") }

func (s stalePE) attachOn(dev string) (attached, error) {
	// The PE's address is the lab's on dev (p<i>: 198.18.20+i.1/24).
	var i int
	fmt.Sscanf(dev, "p%d", &i)
	cfg := tunnel.Config{
		Local:  netip.AddrFrom4([4]byte{198, 18, byte(20 + i), 1}),
		Routes: []tunnel.Route{{Prefix: netip.MustParsePrefix("198.18.99.0/24"), Remote: netip.AddrFrom4([4]byte{198, 18, byte(20 + i), 2})}},
	}
	return tunnel.Attach(s.ns, dev, cfg, tunnel.AttachOptions{Pin: true})
}

func (s stalePE) forget() error { return tunnel.Forget(s.ns, "p0") }

func (s stalePE) open() error {
	pe, err := tunnel.Open(s.ns, "p0")
	if err == nil {
		pe.Release()
	}
	return err
}

// TestSweepOrphanedPins: ports and PEs left pinned by a process that died
// (Release is what its death leaves) are swept once their device is gone,
// deleted alone or with its namespace: lab.SweepStale, which every Build
// runs, removes their pins and records. A port still on its device stays.
func TestSweepOrphanedPins(t *testing.T) {
	labtest.RequireRoot(t)
	link := func(i int) lab.LinkSpec {
		return lab.LinkSpec{
			A:               lab.Endpoint{Node: "a", Dev: fmt.Sprintf("p%d", i), Addr: netip.MustParsePrefix(fmt.Sprintf("198.18.%d.1/24", 20+i))},
			B:               lab.Endpoint{Node: "b", Dev: fmt.Sprintf("p%d", i), Addr: netip.MustParsePrefix(fmt.Sprintf("198.18.%d.2/24", 20+i))},
			DisableOffloads: true,
		}
	}
	l := lab.BuildT(t, lab.Spec{Nodes: []lab.NodeSpec{{Name: "a"}, {Name: "b"}}, Links: []lab.LinkSpec{link(0), link(1), link(2)}})
	ns := l.Node("a").NetnsName
	gonePort, goneNS := stalePort{ns}, stalePE{ns}
	livePort := stalePort{ns}
	t.Cleanup(func() { _ = qdisc.Forget(ns, "p0"); _ = tunnel.Forget(ns, "p1"); _ = qdisc.Forget(ns, "p2") })

	attachOn := func(dev string, attach func() (attached, error)) {
		t.Helper()
		p, err := attach()
		if err != nil {
			t.Fatalf("attach on %s: %v", dev, err)
		}
		if err := p.Release(); err != nil {
			t.Fatal(err)
		}
	}
	attachOn("p0", gonePort.attach)
	attachOn("p1", func() (attached, error) { return goneNS.attachOn("p1") })
	attachOn("p2", func() (attached, error) { return livePort.attachOn("p2") })
	inode := netnsInode(t, ns)
	portDir := fmt.Sprintf("%s/ns%d_p0", qdisc.PinRoot, inode)
	peDir := fmt.Sprintf("%s/tunnel_ns%d_p1", qdisc.PinRoot, inode)
	liveDir := fmt.Sprintf("%s/ns%d_p2", qdisc.PinRoot, inode)

	// Nothing is orphaned yet: nothing goes.
	if swept, err := lab.SweepStale(); err != nil || slices.Contains(swept, portDir) || slices.Contains(swept, peDir) || slices.Contains(swept, liveDir) {
		t.Fatalf("sweep with every device present removed %v (%v)", swept, err)
	}
	nl := l.Node("a").Netlink()
	for _, dev := range []string{"p0", "p1"} {
		d, err := nl.LinkByName(dev)
		if err != nil {
			t.Fatal(err)
		}
		if err := nl.LinkDel(d); err != nil {
			t.Fatal(err)
		}
	}
	swept, err := lab.SweepStale()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("swept %v", swept)
	if !slices.Contains(swept, portDir) || !slices.Contains(swept, peDir) || slices.Contains(swept, liveDir) {
		t.Errorf("swept %v; want %s and %s, not %s", swept, portDir, peDir, liveDir)
	}
	for _, gone := range []string{portDir, peDir, qdisc.MetaRoot + "/" + filepath.Base(portDir) + ".json", tunnel.MetaRoot + "/" + filepath.Base(peDir) + ".json"} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left (%v)", gone, err)
		}
	}
	if err := (stalePort{ns}).openOn("p2"); err != nil {
		t.Errorf("the live port went: %v", err)
	}

	// A namespace deleted under a released port: its pins go on the next sweep.
	l2, err := lab.Build(lab.Spec{Nodes: []lab.NodeSpec{{Name: "a"}, {Name: "b"}}, Links: []lab.LinkSpec{link(0)}})
	if err != nil {
		t.Fatal(err)
	}
	ns2 := l2.Node("a").NetnsName
	dir2 := fmt.Sprintf("%s/ns%d_p0", qdisc.PinRoot, netnsInode(t, ns2))
	t.Cleanup(func() { _ = os.RemoveAll(dir2); _ = os.Remove(qdisc.MetaRoot + "/" + filepath.Base(dir2) + ".json") })
	p2, err := (stalePort{ns2}).attach()
	if err == nil {
		err = p2.Release()
	}
	if err != nil {
		l2.Close()
		t.Fatal(err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	// The kernel tears a deleted namespace's devices down in a work queue,
	// a little after the last reference went.
	var gone []string
	t0 := time.Now()
	for time.Since(t0) < 5*time.Second && !slices.Contains(gone, dir2) {
		swept, err := lab.SweepStale()
		if err != nil {
			t.Fatal(err)
		}
		gone = append(gone, swept...)
		time.Sleep(20 * time.Millisecond)
	}
	if !slices.Contains(gone, dir2) {
		t.Errorf("5 s after the namespace went, sweeps removed %v; want %s", gone, dir2)
	}
	t.Logf("the deleted namespace's port: swept %v after the lab closed", time.Since(t0).Round(time.Millisecond))
}

// netnsInode is the inode of a named namespace: what pin directories are named after.
func netnsInode(t *testing.T, name string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(lab.NetnsDir+"/"+name, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
