package rpbpf

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// devices makes n devices in the test's namespace (veth pairs: n ends
// and their peers) and returns the n names.
func devices(tb testing.TB, n int) []string {
	tb.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("rp%d", i)
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
		if err := netlink.LinkAdd(veth); err != nil {
			tb.Fatalf("add veth %s: %v", name, err)
		}
		names = append(names, name)
	}
	return names
}

// ingressPrograms are the IDs of the programs in dev's TCX ingress chain.
func ingressPrograms(tb testing.TB, dev string) []ebpf.ProgramID {
	tb.Helper()
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		tb.Fatal(err)
	}
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		tb.Fatalf("query %s's TCX ingress: %v", dev, err)
	}
	var ids []ebpf.ProgramID
	for _, p := range res.Programs {
		ids = append(ids, p.ID)
	}
	return ids
}

// attachTest attaches an RP to devs in the test's namespace.
func attachTest(tb testing.TB, devs []string) *RP {
	tb.Helper()
	rp, err := Attach(netns.None(), devs, LoadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = rp.Close() })
	return rp
}

// programID is the shared program's kernel ID, and its maps' but those of
// its global variables (.bss, .rodata): cilium/ebpf keeps those mapped
// until the GC finds their Variables unreachable.
func programID(tb testing.TB, rp *RP) (ebpf.ProgramID, []ebpf.MapID) {
	tb.Helper()
	info, err := rp.sh.objs.program().Info()
	if err != nil {
		tb.Fatal(err)
	}
	id, ok := info.ID()
	ids, ok2 := info.MapIDs()
	if !ok || !ok2 {
		tb.Fatal("no program or map IDs")
	}
	var maps []ebpf.MapID
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			tb.Fatal(err)
		}
		mi, err := m.Info()
		m.Close()
		if err != nil {
			tb.Fatal(err)
		}
		if strings.HasPrefix(mi.Name, "rp_") {
			maps = append(maps, mid)
		}
	}
	if len(maps) != 5 { // rp_qps, rp_cnps, rp_ppfc_peers, rp_ppfc, rp_counters
		tb.Fatalf("the program uses %d rp_ maps, want 5", len(maps))
	}
	return id, maps
}

// TestAttachShares: 4 hosts attaching to the same 2 devices of one
// namespace load one program, with one TCX link on each device; closed in
// a mixed order, the program stays until the last Close and is then gone
// from the devices and the kernel, maps included. A host on other devices
// gets its own.
func TestAttachShares(t *testing.T) {
	labtest.RequireKernel(t, tcxKernel)
	labtest.EnterNetns(t)
	devs := devices(t, 3)
	const hosts = 4
	var rps []*RP
	for i := range hosts {
		// Each host names the devices in its own order.
		d := []string{devs[i%2], devs[1-i%2]}
		rps = append(rps, attachTest(t, d))
	}
	prog, maps := programID(t, rps[0])
	for i, rp := range rps[1:] {
		if rp.sh != rps[0].sh {
			t.Fatalf("host %d loaded its own program", i+2)
		}
	}
	check := func(when string, want int) {
		t.Helper()
		for _, dev := range devs[:2] {
			ids := ingressPrograms(t, dev)
			if len(ids) != want || (want == 1 && ids[0] != prog) {
				t.Errorf("%s: %s's TCX ingress runs %v, want %d program(s) (%d)", when, dev, ids, want, prog)
			}
		}
	}
	check("4 hosts", 1)
	other := attachTest(t, devs[2:])
	if other.sh == rps[0].sh {
		t.Error("a host on another device shares the program")
	}
	if ids := ingressPrograms(t, devs[2]); len(ids) != 1 {
		t.Errorf("%s's TCX ingress runs %v, want one program", devs[2], ids)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	for n, i := range []int{2, 0, 3, 1} {
		if err := rps[i].Close(); err != nil {
			t.Fatalf("close host %d: %v", i+1, err)
		}
		if err := rps[i].Close(); err != nil {
			t.Fatalf("close host %d again: %v", i+1, err)
		}
		if n < hosts-1 {
			check(fmt.Sprintf("%d hosts closed", n+1), 1)
		}
	}
	check("all hosts closed", 0)
	if ids := ingressPrograms(t, devs[2]); len(ids) != 0 {
		t.Errorf("%s's TCX ingress still runs %v", devs[2], ids)
	}
	shares.Lock()
	left := len(shares.m)
	shares.Unlock()
	if left != 0 {
		t.Errorf("%d shared programs remembered after every Close", left)
	}
	// The kernel frees the maps after an RCU grace period: wait for it,
	// boundedly.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var alive []string
		if p, err := ebpf.NewProgramFromID(prog); err == nil {
			p.Close()
			alive = append(alive, fmt.Sprintf("program %d", prog))
		}
		for _, id := range maps {
			if m, err := ebpf.NewMapFromID(id); err == nil {
				m.Close()
				alive = append(alive, fmt.Sprintf("map %d", id))
			}
		}
		if len(alive) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every Close, still in the kernel: %v", alive)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := rps[0].AddQP(QPContext{QPN: 0x11, Local: addrSender, Peer: addrRecv}); err == nil {
		t.Error("AddQP after Close: no error")
	}
}

// TestSharedQPsOwnCNPs: two hosts share one program, their QPs numbered
// from their steering blocks (0x11 and 0x10011), toward one peer, and
// one over IPv6. Each QP counts only its own CNPs, 3, 5 and 2. A host that
// adds QPNs the other held (the other's port closed, its block given
// again) takes their CNPs, and the other's RemoveQP and Close leave them
// counting.
func TestSharedQPsOwnCNPs(t *testing.T) {
	labtest.RequireKernel(t, tcxKernel)
	labtest.EnterNetns(t)
	devs := devices(t, 1)
	a, b := attachTest(t, devs), attachTest(t, devs)
	if a.sh != b.sh {
		t.Fatal("two hosts on one device loaded two programs")
	}
	o := a.sh.objs
	add := func(rp *RP, c QPContext) CNPCounter {
		t.Helper()
		ctr, err := rp.AddQP(c)
		if err != nil {
			t.Fatal(err)
		}
		return ctr
	}
	qa := QPContext{QPN: 0x11, Local: addrSender, Peer: addrRecv}
	qb := QPContext{QPN: 0x10011, Local: addrSender, Peer: addrRecv}
	qb6 := QPContext{QPN: 0x10012, Local: addrSender6, Peer: addrRecv6}
	ca, cb, cb6 := add(a, qa), add(b, qb), add(b, qb6)
	send := func(c QPContext, n int) {
		t.Helper()
		f := cnp(t, c.Peer, c.Local, c.QPN)
		for range n {
			if _, err := o.RunIngress(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(qa, 3)
	send(qb, 5)
	send(qb6, 2)
	for _, x := range []struct {
		name string
		c    CNPCounter
		want uint64
	}{{"a's 0x11", ca, 3}, {"b's 0x10011", cb, 5}, {"b's 0x10012", cb6, 2}} {
		if got := x.c.Counted(); got != x.want {
			t.Errorf("%s counted %d CNPs, want %d", x.name, got, x.want)
		}
	}
	if s, err := b.Stats(); err != nil || s.Counted != 10 {
		t.Errorf("the shared program's stats: %+v, %v; want 10 counted, every host's", s, err)
	}
	if err := b.RemoveQP(qa.QPN); !errors.Is(err, ErrUnknownQP) {
		t.Errorf("b removes a's QP: %v, want ErrUnknownQP", err)
	}
	send(qa, 1)
	if got := ca.Counted(); got != 4 {
		t.Errorf("a's QP after b's RemoveQP of it counted %d CNPs, want 4", got)
	}

	// a's port closed; b's next QPs get a's QPNs: the one a then removes
	// and the one a's Close leaves.
	qa2 := QPContext{QPN: 0x12, Local: addrSender, Peer: addrRecv}
	add(a, qa2)
	cb2, cb3 := add(b, qa), add(b, qa2)
	if err := a.RemoveQP(qa.QPN); err != nil {
		t.Errorf("a removes the QP b took: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	send(qa, 2)
	send(qa2, 3)
	if got := cb2.Counted(); got != 2 {
		t.Errorf("b's QP %#x after a's RemoveQP of it counted %d CNPs, want 2", qa.QPN, got)
	}
	if got := cb3.Counted(); got != 3 {
		t.Errorf("b's QP %#x after a's Close counted %d CNPs, want 3", qa2.QPN, got)
	}
	if err := b.RemoveQP(qb.QPN); err != nil {
		t.Fatal(err)
	}
	send(qb, 1)
	if got := cb.Counted(); got != 5 {
		t.Errorf("b's removed QP counted %d CNPs, want 5", got)
	}
	if err := b.RemoveQP(qb.QPN); !errors.Is(err, ErrUnknownQP) {
		t.Errorf("removing twice: %v, want ErrUnknownQP", err)
	}
}

// TestAttachConcurrent: 8 hosts attaching at once from their own
// goroutines (a lab opens its flows' hosts so) load one program, and
// closing at once leaves none.
func TestAttachConcurrent(t *testing.T) {
	labtest.RequireKernel(t, tcxKernel)
	labtest.EnterNetns(t)
	devs := devices(t, 1)
	ns, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	const hosts = 8
	rps := make([]*RP, hosts)
	errs := make([]error, hosts)
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Go(func() { rps[i], errs[i] = Attach(ns, devs, LoadOptions{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("host %d: %v", i+1, err)
		}
	}
	for i, rp := range rps[1:] {
		if rp.sh != rps[0].sh {
			t.Errorf("host %d loaded its own program", i+2)
		}
	}
	if ids := ingressPrograms(t, devs[0]); len(ids) != 1 {
		t.Errorf("%d hosts: %s's TCX ingress runs %v, want one program", hosts, devs[0], ids)
	}
	for i := range hosts {
		wg.Go(func() { errs[i] = rps[i].Close() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("close host %d: %v", i+1, err)
		}
	}
	if ids := ingressPrograms(t, devs[0]); len(ids) != 0 {
		t.Errorf("every host closed: %s's TCX ingress runs %v", devs[0], ids)
	}
}
