//go:build linux

package link

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// TestDelaySpecErrors: bad delays are refused, with the field, the value
// and the range in the message.
func TestDelaySpecErrors(t *testing.T) {
	for _, tc := range []struct {
		s    DelaySpec
		want string
	}{
		{DelaySpec{Delay: -1}, "DelaySpec.Delay: -1ns outside 0..10s"},
		{DelaySpec{Delay: time.Minute}, "DelaySpec.Delay: 1m0s outside 0..10s"},
		{DelaySpec{Jitter: -time.Millisecond}, "DelaySpec.Jitter: -1ms outside 0..10s"},
		{DelaySpec{Limit: -1}, "DelaySpec.Limit: -1 outside 0..1048576 (0 means 10000)"},
		{DelaySpec{Limit: MaxDelayLimit + 1}, "DelaySpec.Limit: 1048577 outside"},
	} {
		err := tc.s.Validate()
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidSpec with %q", tc.s, err, tc.want)
		}
	}
	if err := (DelaySpec{Delay: MaxDelay, Jitter: MaxDelay, Limit: MaxDelayLimit}).Validate(); err != nil {
		t.Errorf("limits themselves refused: %v", err)
	}
}

func TestDelayParseFlow(t *testing.T) {
	a4, b4 := netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("198.19.0.2")
	a6, b6 := netip.MustParseAddr("2001:db8:1::2"), netip.MustParseAddr("2001:db8:ff::2")
	ip4 := func(proto byte, frag uint16, l4 ...byte) []byte {
		b := make([]byte, 20, 20+len(l4))
		b[0] = 0x45
		binary.BigEndian.PutUint16(b[6:], frag)
		b[9] = proto
		copy(b[12:], a4.AsSlice())
		copy(b[16:], b4.AsSlice())
		return append(b, l4...)
	}
	ip6 := func(nh byte, rest ...byte) []byte {
		b := make([]byte, 40, 40+len(rest))
		b[0] = 0x60
		b[6] = nh
		copy(b[8:], a6.AsSlice())
		copy(b[24:], b6.AsSlice())
		return append(b, rest...)
	}
	ports := []byte{0x1f, 0x40, 0x1b, 0x58}  // 8000 -> 7000
	hbh := []byte{17, 0, 0, 0, 0, 0, 0, 0}   // hop-by-hop, next UDP, 8 bytes
	frag6 := []byte{17, 0, 0, 1, 0, 0, 0, 1} // fragment, next UDP, M=1
	for _, tc := range []struct {
		name string
		pkt  []byte
		want FlowKey
	}{
		{"udp4", ip4(17, 0, ports...), FlowKey{a4, b4, 17, 8000, 7000}},
		{"tcp4 DF", ip4(6, 0x4000, ports...), FlowKey{a4, b4, 6, 8000, 7000}},
		{"icmp4", ip4(1, 0, 8, 0, 0, 0), FlowKey{a4, b4, 1, 0, 0}},
		{"udp4 first fragment", ip4(17, 0x2000, ports...), FlowKey{a4, b4, 17, 0, 0}},
		{"udp4 later fragment", ip4(17, 0x0010, ports...), FlowKey{a4, b4, 17, 0, 0}},
		{"udp4 no ports", ip4(17, 0, 0x1f), FlowKey{a4, b4, 17, 0, 0}},
		{"udp6", ip6(17, ports...), FlowKey{a6, b6, 17, 8000, 7000}},
		{"udp6 hop-by-hop", ip6(0, append(hbh, ports...)...), FlowKey{a6, b6, 17, 8000, 7000}},
		{"udp6 fragment", ip6(44, append(frag6, ports...)...), FlowKey{a6, b6, 17, 0, 0}},
		{"ipv6 truncated ext", ip6(0, 17), FlowKey{Src: a6, Dst: b6}},
		{"ipv4 truncated", ip4(17, 0)[:19], FlowKey{}},
		{"ipv4 bad ihl", append([]byte{0x4f}, make([]byte, 30)...), FlowKey{}},
		{"not ip", []byte{0x00, 1, 2, 3}, FlowKey{}},
		{"empty", nil, FlowKey{}},
	} {
		if got := parseFlow(tc.pkt); got != tc.want {
			t.Errorf("%s: parseFlow = %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { parseFlow(ip6(17, ports...)) }); n > 1 {
		t.Errorf("parseFlow allocates %v times", n)
	}
}

func TestDelayReleaseHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h releaseHeap
	for i := range 2000 {
		h.push(heldPacket{release: r.Int64N(100), seq: uint64(i)})
		if i%3 == 0 {
			h.pop()
		}
	}
	prev := heldPacket{release: -1}
	for len(h) > 0 {
		x := h.pop()
		if x.release < prev.release || x.release == prev.release && x.seq < prev.seq {
			t.Fatalf("popped %+v after %+v", x, prev)
		}
		prev = x
	}
}

// TestDelayFlowRelease: jitter and per-flow delays never reorder a flow,
// never release early, PerFlow results are clamped, and the flow table is
// pruned.
func TestDelayFlowRelease(t *testing.T) {
	const delay, jitter = 1000, 500 // ns
	calls := 0
	d := &Delay{spec: DelaySpec{Delay: delay, Jitter: jitter, PerFlow: func(k FlowKey) time.Duration {
		calls++
		switch k.DstPort {
		case 1:
			return -time.Second
		case 2:
			return time.Hour
		}
		return delay
	}}, flows: map[FlowKey]*flowState{}, pruneAt: minFlowPrune, rng: rand.New(rand.NewPCG(3, 4))}
	pkt := func(dport uint16) []byte {
		b := make([]byte, 28)
		b[0], b[9] = 0x45, 17
		binary.BigEndian.PutUint16(b[22:], dport)
		return b
	}
	last := map[uint16]int64{}
	for i := range 1000 {
		arrival := int64(i * 100)
		for _, port := range []uint16{7000, 7001} {
			rel := d.flowRelease(pkt(port), arrival)
			if rel < arrival+delay {
				t.Fatalf("port %d released at %d, before arrival %d + delay", port, rel, arrival)
			}
			if rel < last[port] {
				t.Fatalf("port %d reordered: %d after %d", port, rel, last[port])
			}
			if rel > max(last[port], arrival+delay+jitter) {
				t.Fatalf("port %d held too long: %d", port, rel)
			}
			last[port] = rel
		}
	}
	if calls != 2 {
		t.Errorf("PerFlow called %d times for 2 flows", calls)
	}
	if rel := d.flowRelease(pkt(1), 0); rel < 0 || rel > jitter {
		t.Errorf("negative PerFlow delay not clamped to 0: release %d", rel)
	}
	if rel := d.flowRelease(pkt(2), 0); rel < int64(MaxDelay) || rel > int64(MaxDelay)+jitter {
		t.Errorf("PerFlow delay of an hour not clamped to MaxDelay: release %d", rel)
	}
	// Many short flows, long past: the table stays bounded.
	for i := range 10 * minFlowPrune {
		d.flowRelease(pkt(uint16(10000+i)), int64(1e12)+int64(i)*int64(time.Millisecond))
	}
	if len(d.flows) > 2*minFlowPrune {
		t.Errorf("flow table holds %d flows", len(d.flows))
	}
}

// TestDelayProgRun runs the two programs on crafted frames through
// BPF_PROG_TEST_RUN (which returns the verdict without redirecting). The
// kernel refuses to run an IP frame shorter than its IP header, so the
// malformed path is reached with a bad IHL and a headerless ICMPv6 packet.
func TestDelayProgRun(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	const tunIndex, devIndex = 77, 78
	cs, err := bpf.LoadDelay()
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Variables[bpf.DelayVarTunIfindex].Set(uint32(tunIndex)); err != nil {
		t.Fatal(err)
	}
	if err := cs.Variables[bpf.DelayVarDevIfindex].Set(uint32(devIndex)); err != nil {
		t.Fatal(err)
	}
	var objs bpf.DelayObjects
	if err := cs.LoadAndAssign(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()

	const (
		pass     = ^uint32(0) // TC_ACT_UNSPEC (-1): next program, then the qdisc
		shot     = 2
		redirect = 7
	)
	unicast := []byte{0x02, 0, 0, 0, 0, 1}
	eth := func(dst []byte, proto uint16, l3 ...byte) []byte {
		b := append(append(slices.Clone(dst), 0x02, 0, 0, 0, 0, 2), byte(proto>>8), byte(proto))
		return append(b, l3...)
	}
	ip4 := make([]byte, 28) // IPv4 + UDP header, 198.18.1.2 -> 198.19.0.2
	ip4[0], ip4[9] = 0x45, 17
	copy(ip4[12:], []byte{198, 18, 1, 2, 198, 19, 0, 2})
	ip6 := func(dst0, nh byte, rest ...byte) []byte {
		b := make([]byte, 40)
		b[0], b[6], b[24] = 0x60, nh, dst0
		return append(b, rest...)
	}
	run := func(prog *ebpf.Program, frame []byte, ingress uint32) uint32 {
		t.Helper()
		ctx := bpf.SkBuff{IngressIfidx: ingress}
		ret, err := prog.Run(&ebpf.RunOptions{Data: frame, Context: &ctx})
		if err != nil {
			t.Fatalf("run %v on % x: %v", prog, frame, err)
		}
		return ret
	}
	counters := func() bpf.DelayDelayStats {
		var per []bpf.DelayDelayStats
		if err := objs.DelayCounters.Lookup(uint32(0), &per); err != nil {
			t.Fatal(err)
		}
		var s bpf.DelayDelayStats
		for _, c := range per {
			s.Diverted += c.Diverted
			s.Returned += c.Returned
			s.Reentered += c.Reentered
			s.Bypassed += c.Bypassed
			s.Malformed += c.Malformed
			s.ReturnDropped += c.ReturnDropped
			s.RedirectErrors += c.RedirectErrors
		}
		return s
	}

	for _, tc := range []struct {
		name    string
		frame   []byte
		ingress uint32
		want    uint32
	}{
		{"ipv4 udp", eth(unicast, 0x0800, ip4...), 0, redirect},
		{"ipv4 forwarded", eth(unicast, 0x0800, ip4...), 3, redirect},
		{"ipv4 back from the tun", eth(unicast, 0x0800, ip4...), tunIndex, pass},
		{"arp", eth([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0806, make([]byte, 28)...), 0, pass},
		{"arp reply", eth(unicast, 0x0806, make([]byte, 28)...), 0, pass},
		{"ipv4 to an L2 multicast", eth([]byte{0x01, 0, 0x5e, 0, 0, 1}, 0x0800, ip4...), 0, pass},
		{"ipv6 udp", eth(unicast, 0x86dd, ip6(0x20, 17, make([]byte, 8)...)...), 0, redirect},
		{"ipv6 neighbour solicitation", eth(unicast, 0x86dd, ip6(0xfe, 58, 135, 0, 0, 0)...), 0, pass},
		{"ipv6 echo request", eth(unicast, 0x86dd, ip6(0x20, 58, 128, 0, 0, 0)...), 0, redirect},
		{"ipv6 to ff02::", eth(unicast, 0x86dd, ip6(0xff, 17, make([]byte, 8)...)...), 0, pass},
		{"ipv4 bad ihl", eth(unicast, 0x0800, append([]byte{0x44}, ip4[1:]...)...), 0, pass},
		{"icmpv6 without type", eth(unicast, 0x86dd, ip6(0x20, 58)...), 0, pass},
	} {
		if got := run(objs.DelayDivert, tc.frame, tc.ingress); got != tc.want {
			t.Errorf("delay_divert(%s) = %d, want %d", tc.name, int32(got), int32(tc.want))
		}
	}
	s := counters()
	if s.Diverted != 4 || s.Reentered != 1 || s.Bypassed != 5 || s.Malformed != 2 {
		t.Errorf("divert counters %+v, want diverted 4, reentered 1, bypassed 5, malformed 2", s)
	}

	// At the TUN, skb->protocol comes from the frame BPF_PROG_TEST_RUN builds.
	if got := run(objs.DelayReturn, eth(unicast, 0x0800, ip4...), 0); got != redirect {
		t.Errorf("delay_return(ipv4) = %d, want %d", int32(got), redirect)
	}
	if got := run(objs.DelayReturn, eth(unicast, 0x86dd, ip6(0x20, 17, make([]byte, 8)...)...), 0); got != redirect {
		t.Errorf("delay_return(ipv6) = %d, want %d", int32(got), redirect)
	}
	if got := run(objs.DelayReturn, eth(unicast, 0x0806, make([]byte, 28)...), 0); got != shot {
		t.Errorf("delay_return(arp) = %d, want %d", int32(got), shot)
	}
	s = counters()
	if s.Returned != 2 || s.ReturnDropped != 1 || s.RedirectErrors != 0 {
		t.Errorf("return counters %+v, want returned 2, return_dropped 1", s)
	}

	// A marked packet (a CNP clone of the kernel NP, say) keeps its mark
	// and Ethernet header for its return, keyed by its L3 bytes with the
	// UDP checksum zeroed: the TUN's way in completes a partial checksum,
	// so the bytes that come back differ there.
	const npMark = 0x4e50434e
	marked := eth(unicast, 0x0800, ip4...)
	marked[14+20+6], marked[14+20+7] = 0xab, 0xcd
	for i, csum := range []byte{0xcd, 0xce} {
		marked[14+20+7] = csum
		ctx := bpf.SkBuff{Mark: npMark}
		if ret, err := objs.DelayDivert.Run(&ebpf.RunOptions{Data: marked, Context: &ctx}); err != nil || ret != redirect {
			t.Fatalf("delay_divert(marked) = %d, %v; want %d", int32(ret), err, redirect)
		}
		var per []bpf.DelayDelayStats
		if err := objs.DelayCounters.Lookup(uint32(0), &per); err != nil {
			t.Fatal(err)
		}
		var kept uint64
		for _, c := range per {
			kept += c.MarksKept
		}
		if kept != uint64(i+1) {
			t.Errorf("marks_kept %d after %d marked packets", kept, i+1)
		}
	}
	var (
		key     bpf.DelayMarkKey
		val     bpf.DelayMarked
		entries int
	)
	it := objs.DelayMarks.Iterate()
	for it.Next(&key, &val) {
		entries++
		want := make([]byte, len(key.Head))
		copy(want, ip4)
		if key.Len != uint32(len(ip4)) || !slices.Equal(key.Head[:], want) {
			t.Errorf("mark key: length %d, head % x; want %d, % x (checksum zeroed)", key.Len, key.Head, len(ip4), want)
		}
		e := make([]byte, 0, 14)
		e = append(append(append(e, val.Eth.H_dest[:]...), val.Eth.H_source[:]...), byte(val.Eth.H_proto), byte(val.Eth.H_proto>>8))
		if val.Mark != npMark || !slices.Equal(e, marked[:14]) {
			t.Errorf("kept mark %#x, Ethernet % x; want %#x, % x", val.Mark, e, npMark, marked[:14])
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if entries != 1 {
		t.Errorf("%d kept marks, want 1: the two packets differ only in their UDP checksum", entries)
	}
}

// TestHeldRun: a batch's late packets give the log one interval per
// stretch the writer was behind: overlapping holds merge, a gap splits.
func TestHeldRun(t *testing.T) {
	l := hostlost.NewLog()
	r := heldRun{log: l}
	r.add(10, 30) // released at 10, written at 30
	r.add(12, 31)
	r.add(31, 32) // touches the stretch
	r.add(40, 45) // on time in between: a new stretch
	r.flush()
	r.flush() // nothing left
	got := l.Drain(nil)
	want := []hostlost.Interval{{From: 10, To: 32}, {From: 40, To: 45}}
	if !slices.Equal(got, want) {
		t.Errorf("held %v, want %v", got, want)
	}
	(&heldRun{}).add(1, 2) // no log: nothing measured, no panic
}

// TestLagMeter: a steady or jittering lateness is no hold; a growth past
// heldJitter is, from the lateness before it; a slow creep counts once
// it adds up; a catch-up lowers the base.
func TestLagMeter(t *testing.T) {
	us := func(n int64) int64 { return n * 1000 }
	var m lagMeter
	for _, c := range []struct {
		late, from int64
		ok         bool
	}{
		{us(30), 0, false},         // the timer's own lateness
		{us(80), 0, false},         // jitter
		{us(2000), 0, true},        // a 2 ms stall, from 0 late
		{us(2050), 0, false},       // steady at 2 ms: a shift, no hold
		{us(2000), 0, false},       // base 2 ms
		{us(2060), 0, false},       // creeping...
		{us(2120), us(2000), true}, // ...past 100 µs from the base
		{us(50), 0, false},         // caught up
		{us(1050), us(50), true},   // the next stall, from the new base
		{-5, 0, false},             // early is on time
	} {
		from, ok := m.grow(c.late)
		if ok != c.ok || from != c.from {
			t.Errorf("grow(%d µs) = %d, %v; want %d, %v", c.late/1000, from, ok, c.from, c.ok)
		}
	}
}
