package netnstests

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// mpEntropyConn opens a per-datagram source-port endpoint (what a UET sender
// uses) on addr:4793 inside n.
func mpEntropyConn(t *testing.T, n *lab.Node, addr netip.Addr) *pktio.EntropyConn {
	t.Helper()
	var c *pktio.EntropyConn
	if err := n.Do(func() (err error) {
		c, err = pktio.ListenEntropy(netip.AddrPortFrom(addr, uet.Port), pktio.RoCEOptions{})
		return err
	}); err != nil {
		t.Fatalf("%s: listen: %v", n.Name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// mpSend sends each datagrams of 200 bytes to dst from every source port
// in ports, 64 per sendmmsg with a pause of 1 ms between batches (the
// per-CPU backlogs hold 1000 packets).
func mpSend(t *testing.T, c pktio.Conn, dst netip.AddrPort, ports []uint16, each int) int {
	t.Helper()
	payload := make([]byte, 200)
	var batch []pktio.Message
	sent := 0
	flush := func() {
		if len(batch) == 0 {
			return
		}
		n, err := c.WriteBatch(batch)
		if err != nil {
			t.Fatalf("send: %d of %d: %v", n, len(batch), err)
		}
		sent += n
		batch = batch[:0]
		time.Sleep(time.Millisecond)
	}
	for range each {
		for _, p := range ports {
			batch = append(batch, pktio.Message{Buffers: [][]byte{payload}, Addr: dst, SrcPort: p})
			if len(batch) == 64 {
				flush()
			}
		}
	}
	flush()
	return sent
}

// mpWait polls cond every 10 ms for up to 5 s.
func mpWait(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func mpDeltas(t *testing.T, m *lab.Multipath, before []lab.PathCounters) []lab.PathCounters {
	t.Helper()
	now, err := m.PathCounters()
	if err != nil {
		t.Fatal(err)
	}
	d := make([]lab.PathCounters, len(now))
	for j := range now {
		d[j] = now[j].Sub(before[j])
	}
	return d
}

func mpCounters(t *testing.T, m *lab.Multipath) []lab.PathCounters {
	t.Helper()
	c, err := m.PathCounters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mpLinkTx is the transmit counter of dev in n.
func mpLinkTx(t *testing.T, n *lab.Node, dev string) uint64 {
	t.Helper()
	l, err := n.Netlink().LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Statistics.TxPackets
}

// mpARPNoise bounds the frames a path's link counters may show that the
// test did not send (ARP requests and replies).
const mpARPNoise = 4

// The multipath fabric: 4 spines, each with a 1 Gbit/s port toward leaf2,
// a cross-traffic host on spine 3. Source ports spread over every path
// near uniformly; one source port always takes one path; the return path
// spreads too; the cross host's traffic takes its spine's port only.
func TestMultipath(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	const paths = 4
	rates := make([]units.Rate, paths)
	for j := range rates {
		rates[j] = units.Gbit
	}
	m := lab.NewMultipathT(t, lab.MultipathSpec{Paths: paths, DisableOffloads: true, PathRates: rates, CrossSpine: 3})
	sk := newSink(t, m.Receiver)
	dst := netip.AddrPortFrom(m.ReceiverAddr, uint16(sk.port))
	conn := mpEntropyConn(t, m.Senders[0], m.SenderAddrs[0])
	for j := range paths {
		if m.Ports[j] == nil {
			t.Fatalf("path %d has no port", j)
		}
	}

	// Warm-up: resolve every neighbour on the way (a packet waiting for
	// ARP is not lost, but it would land in the middle of a count).
	warm := make([]uint16, 64)
	for i := range warm {
		warm[i] = 0x8000 + uint16(i)
	}
	n := mpSend(t, conn, dst, warm, 1)
	if !mpWait(func() bool { return sk.total() >= uint64(n) }) {
		t.Fatalf("warm-up: the receiver got %d of %d datagrams", sk.total(), n)
	}
	for j, c := range mpCounters(t, m) {
		if c.UplinkPackets == 0 {
			t.Fatalf("warm-up: 64 source ports never took path %d", j)
		}
	}

	t.Run("spread", func(t *testing.T) {
		const ports, each = 1024, 4
		src := make([]uint16, ports)
		for i := range src {
			src[i] = 0xC000 + uint16(i)
		}
		before, got0 := mpCounters(t, m), sk.total()
		portsBefore, err := m.PortStats()
		if err != nil {
			t.Fatal(err)
		}
		sent := mpSend(t, conn, dst, src, each)
		if !mpWait(func() bool { return sk.total()-got0 >= uint64(sent) }) {
			t.Errorf("the receiver got %d of %d datagrams", sk.total()-got0, sent)
		}
		d := mpDeltas(t, m, before)
		portsAfter, err := m.PortStats()
		if err != nil {
			t.Fatal(err)
		}
		total := uint64(0)
		for _, c := range d {
			total += c.UplinkPackets
		}
		for j, c := range d {
			share := float64(c.UplinkPackets) / float64(sent)
			enq := portsAfter[j].Total().EnqueuedPackets - portsBefore[j].Total().EnqueuedPackets
			t.Logf("path %d: leaf1 sent %d (%.1f %%), its port enqueued %d, its spine sent %d toward leaf2",
				j, c.UplinkPackets, 100*share, enq, c.EgressPackets)
			if share < 0.18 || share > 0.32 {
				t.Errorf("path %d carried %.1f %% of %d datagrams from %d source ports, want 18-32 %% (uniform: 25 %%)", j, 100*share, sent, ports)
			}
			// Each source port sends `each` datagrams down one path.
			if c.UplinkPackets%each > mpARPNoise {
				t.Errorf("path %d: %d packets, not a multiple of %d", j, c.UplinkPackets, each)
			}
			if enq > c.UplinkPackets || c.UplinkPackets-enq > mpARPNoise || c.EgressPackets < enq {
				t.Errorf("path %d: port enqueued %d, leaf1 sent %d, spine sent %d: they should agree", j, enq, c.UplinkPackets, c.EgressPackets)
			}
		}
		if total < uint64(sent) || total > uint64(sent)+paths*mpARPNoise {
			t.Errorf("the paths carried %d packets, %d were sent", total, sent)
		}
	})

	t.Run("fixed port", func(t *testing.T) {
		const each = 200
		used := map[int]bool{}
		for _, port := range []uint16{0xC000, 0xC001, 0xC0DE, 0xD00D, 0xE000, 0xF123, 0xFFFE, 0xFFFF} {
			var first int
			for round := range 2 {
				before := mpCounters(t, m)
				mpSend(t, conn, dst, []uint16{port}, each)
				var d []lab.PathCounters
				path := -1
				mpWait(func() bool {
					d = mpDeltas(t, m, before)
					for j, c := range d {
						if c.EgressPackets >= each {
							path = j
						}
					}
					return path >= 0
				})
				if path < 0 {
					t.Fatalf("port %d: no path carried its %d datagrams: %+v", port, each, d)
				}
				for j, c := range d {
					if j != path && c.UplinkPackets > mpARPNoise {
						t.Errorf("port %d round %d: path %d carried %d packets besides path %d", port, round, j, c.UplinkPackets, path)
					}
				}
				if round == 0 {
					first = path
				} else if path != first {
					t.Errorf("port %d took path %d, then path %d", port, first, path)
				}
			}
			used[first] = true
			t.Logf("source port %d: path %d", port, first)
		}
		if len(used) < 2 {
			t.Errorf("8 source ports all took path %v", used)
		}
	})

	t.Run("return path", func(t *testing.T) {
		back := mpEntropyConn(t, m.Receiver, m.ReceiverAddr)
		leaf2Tx := func() []uint64 {
			out := make([]uint64, paths)
			for j, sp := range m.Spines {
				out[j] = mpLinkTx(t, m.Leaf2, sp.Name)
			}
			return out
		}
		src := make([]uint16, 256)
		for i := range src {
			src[i] = 0xC000 + uint16(i)
		}
		before := leaf2Tx()
		sent := mpSend(t, back, netip.AddrPortFrom(m.SenderAddrs[0], uet.Port), src, 1)
		msgs := make([]pktio.Message, 64)
		for i := range msgs {
			msgs[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		got := 0
		deadline := time.Now().Add(5 * time.Second)
		for got < sent && time.Now().Before(deadline) {
			if err := conn.SetReadDeadline(deadline); err != nil {
				t.Fatal(err)
			}
			n, err := conn.ReadBatch(msgs)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if got != sent {
			t.Errorf("s1 got %d of %d datagrams from the receiver", got, sent)
		}
		after := leaf2Tx()
		for j := range paths {
			d := after[j] - before[j]
			t.Logf("leaf2 → spine %d: %d of %d", j+1, d, sent)
			if d == 0 {
				t.Errorf("leaf2's ECMP never used spine %d for 256 source ports", j+1)
			}
		}
	})

	t.Run("cross traffic", func(t *testing.T) {
		const each = 300
		x := mpEntropyConn(t, m.Cross, m.CrossAddr)
		cross := 2 // spine 3
		before, got0 := mpCounters(t, m), sk.total()
		sent := mpSend(t, x, dst, []uint16{0xC000, 0xC100, 0xC200}, each/3)
		if !mpWait(func() bool { return sk.total()-got0 >= uint64(sent) }) {
			t.Errorf("the receiver got %d of %d datagrams from x", sk.total()-got0, sent)
		}
		d := mpDeltas(t, m, before)
		for j, c := range d {
			t.Logf("path %d: %+v", j, c)
			if c.UplinkPackets > mpARPNoise {
				t.Errorf("path %d: leaf1 sent %d packets; x's traffic does not cross leaf1", j, c.UplinkPackets)
			}
			switch {
			case j == cross && c.EgressPackets < uint64(sent):
				t.Errorf("path %d (x's spine) sent %d toward leaf2, want ≥ %d", j, c.EgressPackets, sent)
			case j != cross && c.EgressPackets > mpARPNoise:
				t.Errorf("path %d carried %d of x's packets", j, c.EgressPackets)
			}
		}
	})
}

// Two paths, one a bare veth and one a 100 Mbit/s port, and two senders:
// the second sender's source ports spread over both paths too, and only
// the path with a port counts in port stats.
func TestMultipathBareAndPort(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	m := lab.NewMultipathT(t, lab.MultipathSpec{Paths: 2, Senders: 2, DisableOffloads: true, PathRates: []units.Rate{0, 100 * units.Mbit}})
	if m.Paths() != 2 || m.Ports[0] != nil || m.Ports[1] == nil || m.Cross != nil || len(m.Senders) != 2 {
		t.Fatalf("paths %d, ports %v, cross %v, %d senders", m.Paths(), m.Ports, m.Cross, len(m.Senders))
	}
	sk := newSink(t, m.Receiver)
	dst := netip.AddrPortFrom(m.ReceiverAddr, uint16(sk.port))
	conn := mpEntropyConn(t, m.Senders[1], m.SenderAddrs[1])
	src := make([]uint16, 128)
	for i := range src {
		src[i] = 0xC000 + uint16(i)
	}
	before := mpCounters(t, m)
	sent := mpSend(t, conn, dst, src, 2)
	if !mpWait(func() bool { return sk.total() >= uint64(sent) }) {
		t.Errorf("the receiver got %d of %d datagrams", sk.total(), sent)
	}
	d := mpDeltas(t, m, before)
	ps, err := m.PortStats()
	if err != nil {
		t.Fatal(err)
	}
	if ps[0] != nil || ps[1] == nil {
		t.Fatalf("port stats %v: want none for path 0, some for path 1", ps)
	}
	for j, c := range d {
		t.Logf("path %d: %+v", j, c)
		if c.UplinkPackets < uint64(sent)/4 {
			t.Errorf("path %d carried %d of %d", j, c.UplinkPackets, sent)
		}
	}
	if enq := ps[1].Total().EnqueuedPackets; enq > d[1].UplinkPackets || d[1].UplinkPackets-enq > mpARPNoise {
		t.Errorf("path 1's port enqueued %d, leaf1 sent %d on it", enq, d[1].UplinkPackets)
	}
}

// Specs the fabric refuses before touching the kernel.
func TestMultipathSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		ms   lab.MultipathSpec
		want string
	}{
		{lab.MultipathSpec{Paths: 1}, "MultipathSpec.Paths: 1 outside 2..8"},
		{lab.MultipathSpec{Paths: 9}, "MultipathSpec.Paths: 9 outside 2..8"},
		{lab.MultipathSpec{Paths: 2, Senders: 64}, "MultipathSpec.Senders: 64 outside 0..63 (0 is 1)"},
		{lab.MultipathSpec{Paths: 2, PathRates: make([]units.Rate, 3)}, "MultipathSpec.PathRates: 3 entries for 2 paths"},
		{lab.MultipathSpec{Paths: 2, PathRates: []units.Rate{units.Kbit}}, "MultipathSpec.PathRates[0]: port at"},
		{lab.MultipathSpec{Paths: 2, CrossSpine: 3}, "MultipathSpec.CrossSpine: 3 outside 0..2"},
	} {
		_, err := lab.MultipathTopology(tc.ms)
		if !errors.Is(err, lab.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.ms, err, tc.want)
		}
	}
	spec, err := lab.MultipathTopology(lab.MultipathSpec{Paths: 8, Senders: 63, CrossSpine: 8})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(spec.Nodes); n != 63+1+8+1+1+1 {
		t.Errorf("%d nodes, want %d", n, 63+12)
	}
}
