package linkq

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

func load(t *testing.T) *Objects {
	t.Helper()
	labtest.RequireRoot(t)
	o, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// TestCountsBothEnds: what a host sends on its link is counted leaving it
// and arriving at the switch; once it has arrived the queue has all its
// room again.
func TestCountsBothEnds(t *testing.T) {
	o := load(t)
	d := lab.NewDumbbellT(t, lab.DumbbellSpec{Senders: 1})
	sp := d.SenderPorts[0]
	i, err := o.AttachLink(End{NS: d.Senders[0].NsHandle(), Dev: sp.PeerDev}, End{NS: sp.Node.NsHandle(), Dev: sp.Dev})
	if err != nil {
		t.Fatal(err)
	}
	q := o.Queue(0, i)
	if q.Limit() != DefaultLimit || q.Room() != DefaultLimit {
		t.Fatalf("limit %d, room %d; want %d both before any traffic", q.Limit(), q.Room(), DefaultLimit)
	}
	const n, size = 300, 1000
	err = d.Senders[0].Do(func() error {
		// Unconnected: the receiver's port unreachable must not stop it.
		c, err := net.ListenUDP("udp", nil)
		if err != nil {
			return err
		}
		defer c.Close()
		b, to := make([]byte, size), net.UDPAddrFromAddrPort(netip.AddrPortFrom(d.ReceiverAddr, 9))
		for range n {
			if _, err := c.WriteToUDP(b, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var c Counters
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if c = o.Counters(i); c.RecvPackets >= n && c.RecvBytes == c.SentBytes {
			break
		}
	}
	// Ethernet + IPv4 + UDP headers: 42 bytes a datagram. The host also
	// sends what it must (ARP, IPv6 ND): at least n datagrams, each counted
	// once at each end.
	if c.SentPackets < n || c.SentBytes < n*(size+42) || c.RecvPackets != c.SentPackets || c.RecvBytes != c.SentBytes {
		t.Fatalf("counters %+v: want at least %d datagrams of %d bytes sent, all received", c, n, size+42)
	}
	if c.MaxBytes > c.SentBytes {
		t.Errorf("max queue %d bytes, more than was ever sent", c.MaxBytes)
	}
	if r := q.Room(); r != DefaultLimit {
		t.Errorf("room %d after everything arrived, want %d", r, DefaultLimit)
	}
	t.Logf("counters %+v", c)
}

// TestStuckQueueWrittenOff: bytes counted sent that never arrive (a drop
// between the ends) close the gate until StuckAfter passes with nothing
// arriving; then they are written off, once.
func TestStuckQueueWrittenOff(t *testing.T) {
	o := load(t)
	type slot struct {
		Sent, SentPkt, Recv, RecvPkt, Max uint64
		_                                 [3]uint64
	}
	if err := o.m.Update(uint32(5), slot{Sent: 1 << 20, SentPkt: 256}, 0); err != nil {
		t.Fatal(err)
	}
	q := o.Queue(64<<10, 5)
	q.stuck = 20 * time.Millisecond
	if r := q.Room(); r != 0 {
		t.Fatalf("room %d with 1 MB held, want 0", r)
	}
	time.Sleep(10 * time.Millisecond)
	if r := q.Room(); r != 0 || q.Leaks() != 0 {
		t.Fatalf("room %d, leaks %d before StuckAfter; want 0, 0", r, q.Leaks())
	}
	time.Sleep(15 * time.Millisecond)
	if r := q.Room(); r != 64<<10 || q.Leaks() != 1 {
		t.Fatalf("room %d, leaks %d after StuckAfter; want %d, 1", r, q.Leaks(), 64<<10)
	}
	// Arrivals keep a full queue alive: not written off while they come.
	if err := o.m.Update(uint32(5), slot{Sent: 3 << 20, Recv: 1 << 20}, 0); err != nil {
		t.Fatal(err)
	}
	for k := range 4 {
		if r := q.Room(); r != 0 {
			t.Fatalf("room %d with 1 MB held, want 0", r)
		}
		if err := o.m.Update(uint32(5), slot{Sent: 3 << 20, Recv: 1<<20 + uint64(k+1)*1000}, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if q.Leaks() != 1 {
		t.Errorf("leaks %d: a queue that drains was written off", q.Leaks())
	}
}
