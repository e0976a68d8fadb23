package qdisc

import (
	"net"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// egressPrograms counts the TCX egress programs on dev.
func egressPrograms(t *testing.T, dev string) int {
	t.Helper()
	res, err := link.QueryPrograms(link.QueryOptions{Target: mustIndex(t, dev), Attach: ebpf.AttachTCXEgress})
	if err != nil {
		t.Fatalf("query %s's egress: %v", dev, err)
	}
	return len(res.Programs)
}

// TestPPFCAttachedOnDemand: ppfc_egress goes onto the namespace's other
// devices only for a port whose classes notify, at attach or when a
// configure (of this process or, pinned, of another) turns PPFC on; it
// leaves with the port.
func TestPPFCAttachedOnDemand(t *testing.T) {
	labtest.EnterNetns(t)
	for _, pair := range [][2]string{{"pa0a", "pa0b"}, {"pa1a", "pa1b"}, {"pa2a", "pa2b"}} {
		vethUp(t, pair[0], pair[1])
	}
	cfg := DefaultConfig(200 * units.Mbit)
	ppfc := cfg
	ppfc.Classes[ClassRoCE].XoffBytes, ppfc.Classes[ClassRoCE].XonBytes = 400_000, 200_000

	p, err := Attach(cfg, AttachOptions{Dev: "pa0a"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if n := egressPrograms(t, "pa1a"); n != 0 || len(p.Info().PPFCIfindexes) != 0 {
		t.Fatalf("a port without PPFC: %d programs on another device's egress, ppfc devices %v; want none", n, p.Info().PPFCIfindexes)
	}
	if err := p.Configure(ppfc); err != nil {
		t.Fatal(err)
	}
	if n := egressPrograms(t, "pa1a"); n != 1 || len(p.Info().PPFCIfindexes) != 5 {
		t.Fatalf("after PPFC was configured: %d programs on pa1a's egress, ppfc devices %v; want 1 and the 5 other devices", n, p.Info().PPFCIfindexes)
	}
	// Off again: it stays (idle without PPFC); on again: not twice.
	if err := p.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Configure(ppfc); err != nil {
		t.Fatal(err)
	}
	if n := egressPrograms(t, "pa1a"); n != 1 {
		t.Fatalf("PPFC off and on again: %d programs on pa1a's egress, want 1", n)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := egressPrograms(t, "pa1a"); n != 0 {
		t.Fatalf("after the port left: %d programs on pa1a's egress", n)
	}

	// Pinned: attached without PPFC by one handle, configured through
	// another (what portctl configure does), detached by a third.
	pinned, err := Attach(cfg, AttachOptions{Dev: "pa2a", Pin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := pinned.Release(); err != nil {
		t.Fatal(err)
	}
	q, err := Open("", "pa2a")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Configure(ppfc); err != nil {
		q.Release()
		t.Fatal(err)
	}
	if err := q.Release(); err != nil {
		t.Fatal(err)
	}
	r, err := Open("", "pa2a")
	if err != nil {
		t.Fatal(err)
	}
	if n := egressPrograms(t, "pa1a"); n != 1 || !slices.Contains(r.Info().PPFCIfindexes, mustIndex(t, "pa1a")) {
		r.Close()
		t.Fatalf("pinned port configured by another handle: %d programs on pa1a's egress, ppfc devices %v", n, r.Info().PPFCIfindexes)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := egressPrograms(t, "pa1a"); n != 0 {
		t.Fatalf("after the pinned port left: %d programs on pa1a's egress", n)
	}
}

func mustIndex(t *testing.T, dev string) int {
	t.Helper()
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	return ifi.Index
}
