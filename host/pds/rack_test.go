package pds

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
)

// pathOf is the "ECMP hash" of the tests: an EV's path of n.
func pathOf(ev uint16, n int) int { return int(uint32(ev)*2654435761>>16) % n }

// delayLine is a fabric of paths of different delays in fake time, for a
// pipe's packets from a: each EV takes one path (pathOf), whose packets
// arrive its delay after they left, in order on the path; those from the
// other side pass at once. Its filter holds a packet (the pipe counts it
// as dropped) and a goroutine on the fake clock writes it again through
// a's end when it is due, which the filter then lets pass. With loss > 0
// it drops that share of a's data packets.
type delayLine struct {
	clock  *engine.FakeClock
	waker  *engine.FakeWaker
	delays []time.Duration
	loss   float64
	conn   *pktio.PipeConn // a's end, set before the first packet
	// spareRetx loses first transmissions only (set before the first
	// packet).
	spareRetx bool

	mu      sync.Mutex
	rng     *rand.Rand
	seq     uint64
	held    []heldPacket // by due time, then seq
	passing map[string]int
	perPath []int
	lost    int
}

type heldPacket struct {
	due     time.Duration
	seq     uint64
	buf     []byte
	to      netip.AddrPort
	srcPort uint16
	tos     uint8
}

func newDelayLine(clock *engine.FakeClock, delays []time.Duration, loss float64) *delayLine {
	return &delayLine{clock: clock, waker: clock.NewWaker(), delays: delays, loss: loss,
		rng: rand.New(rand.NewPCG(5, 6)), passing: map[string]int{}, perPath: make([]int, len(delays))}
}

func (d *delayLine) filter(from netip.AddrPort, m *pktio.Message) bool {
	if from.Addr() != addrA.Addr() {
		return false
	}
	b := m.Buffers[0][:m.N]
	d.mu.Lock()
	defer d.mu.Unlock()
	if k := string(b); d.passing[k] > 0 {
		if d.passing[k]--; d.passing[k] == 0 {
			delete(d.passing, k)
		}
		return false // the held copy, now due
	}
	if m.N > 1000 && !(d.spareRetx && isRetx(b)) && d.rng.Float64() < d.loss {
		d.lost++
		return true
	}
	path := pathOf(from.Port(), len(d.delays))
	d.perPath[path]++
	if d.delays[path] == 0 {
		return false
	}
	h := heldPacket{due: d.clock.Now() + d.delays[path], seq: d.seq, buf: slices.Clone(b), to: m.Addr, srcPort: from.Port(), tos: m.TOS}
	d.seq++
	i, _ := slices.BinarySearchFunc(d.held, h, func(a, b heldPacket) int {
		if a.due != b.due {
			return int(a.due - b.due)
		}
		return int(a.seq) - int(b.seq)
	})
	d.held = slices.Insert(d.held, i, h)
	if i == 0 {
		d.waker.Kick() // due before the one the loop sleeps for
	}
	return true
}

// isRetx reports whether b is a PDS request sent again.
func isRetx(b []byte) bool {
	var h uet.Header
	_, err := uet.Parse(b, &h)
	return err == nil && h.Request.Retx
}

// run writes the held packets as they fall due, until the waker closes.
func (d *delayLine) run() {
	var msgs []pktio.Message
	for {
		now := d.clock.Now()
		msgs = msgs[:0]
		next := time.Duration(-1)
		d.mu.Lock()
		for len(d.held) > 0 && d.held[0].due <= now {
			h := d.held[0]
			d.held = d.held[1:]
			d.passing[string(h.buf)]++
			msgs = append(msgs, pktio.Message{Buffers: [][]byte{h.buf}, N: len(h.buf), Addr: h.to, SrcPort: h.srcPort, TOS: h.tos})
		}
		if len(d.held) > 0 {
			next = d.held[0].due - now
		}
		d.mu.Unlock()
		if len(msgs) > 0 {
			if _, err := d.conn.WriteBatch(msgs); err != nil {
				return
			}
		}
		if err := d.waker.Sleep(next); err != nil {
			return
		}
	}
}

// newSprayPair is newPair with a's packets over a delayLine and a
// balancer of kind k at a, then mods on a's config; its idle check
// counts the delay line's waker.
func newSprayPair(t *testing.T, k lb.Kind, delays []time.Duration, loss float64, mods ...func(a *Config)) (*pair, *delayLine) {
	t.Helper()
	var d *delayLine
	p := newPair(t, func(from netip.AddrPort, m *pktio.Message) bool { return d.filter(from, m) }, func(a, b *Config) {
		// The window covers the slowest path's round trip (MaxWnd is
		// 1.5 BaseRTT at the line rate): enough in flight to reorder.
		a.BaseRTT = 800 * time.Microsecond
		a.NewBalancer = func(pdc uint16) lb.Balancer {
			b, err := lb.New(k, lb.DefaultParams(), rand.New(rand.NewPCG(uint64(pdc), 7)))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		for _, m := range mods {
			m(a)
		}
	})
	d = newDelayLine(p.clock, delays, loss)
	d.conn = p.pa
	go d.run()
	t.Cleanup(func() { _ = d.waker.Close() })
	return p, d
}

// sprayWait is pair.wait with the delay line's waker among the sleepers.
func sprayWait(t *testing.T, p *pair, d time.Duration, s *Sender) {
	t.Helper()
	idle := func() bool {
		return p.clock.Sleeping() == 3 && inFlight(p.pa, p.pb) == 0 && inFlight(p.pb, p.pa) == 0 &&
			p.a.eng.ReceiveIdle() && p.b.eng.ReceiveIdle()
	}
	done := func() bool {
		select {
		case <-s.Done():
			return true
		default:
			return false
		}
	}
	if err := p.clock.Drive(done, idle, p.clock.Now()+d); err != nil {
		t.Fatalf("%v; a %+v; b %+v", err, p.a.Counters(), p.b.Counters())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
}

// pathDelays are the four paths of the RACK tests: 0, 200, 400 and 600 µs
// on top of the pipe.
var pathDelays = []time.Duration{0, 200 * time.Microsecond, 400 * time.Microsecond, 600 * time.Microsecond}

// TestRACKReordering: a PDC sprays its packets over 4 paths whose delays
// differ by up to 600 µs (18 packet times at the line rate), nothing
// lost. Every message arrives intact, and RACK takes almost no late
// packet for lost: the retransmissions (all of them needless here) stay
// under 1 % of the packets, the ones made while reo_wnd grows to the
// paths' skew on the duplicates the target reports. (The three-packets
// rule RACK replaced resent 11 % and carried 182 Mbit/s of the line's
// 976, with 351 probes.)
func TestRACKReordering(t *testing.T) {
	const msgs, size = 300, 64 << 10
	p, d := newSprayPair(t, lb.KindOblivious, pathDelays, 0)
	start := p.clock.Now()
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: size, Messages: msgs, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	sprayWait(t, p, 5*time.Second, s)
	elapsed := p.clock.Now() - start
	ca, cb := p.a.Counters(), p.b.Counters()
	d.mu.Lock()
	perPath := slices.Clone(d.perPath)
	d.mu.Unlock()
	data := ca.TxPackets - ca.ProbesSent - ca.ClosesSent
	t.Logf("%d packets per path %v in %v (goodput %.1f Mbit/s); a: %d retransmits (%.2f %%), %d inferred losses, %d timeouts, %d probes, %d spurious retransmits reported, reo_wnd %v; b: %d duplicates, %d out of order",
		data, perPath, elapsed, float64(msgs*size*8)/elapsed.Seconds()/1e6, ca.Retransmits, 100*float64(ca.Retransmits)/float64(data),
		ca.InferredLosses, ca.Timeouts, ca.ProbesSent, ca.SpuriousRetransmits, ca.ReoWnd, cb.Duplicates, p.b.Targets()[0].OutOfOrder)
	if cb.MessagesReceived != msgs || cb.VerifyErrors != 0 {
		t.Fatalf("b received %d messages, %d verify errors: want %d, 0", cb.MessagesReceived, cb.VerifyErrors, msgs)
	}
	for i, n := range perPath {
		if n < int(data)/8 {
			t.Fatalf("path %d carried %d of %d packets: the test does not reorder", i, n, data)
		}
	}
	if 100*ca.Retransmits > data || ca.Timeouts != 0 {
		t.Errorf("%d retransmits of %d packets, %d timeouts, nothing lost: want < 1 %%, 0", ca.Retransmits, data, ca.Timeouts)
	}
	if ca.ReoWnd < 200*time.Microsecond {
		t.Errorf("reo_wnd %v: want it grown to the paths' skew", ca.ReoWnd)
	}
}

// TestRACKReorderingLoss: the same 4 paths, and 1 % of a's data packets
// lost on top: every message arrives intact, without an RTO, and the
// retransmissions stay close to the losses: the needless ones at most
// 1 % of the packets, as without loss.
func TestRACKReorderingLoss(t *testing.T) {
	const msgs, size = 300, 64 << 10
	p, d := newSprayPair(t, lb.KindOblivious, pathDelays, 0.01)
	start := p.clock.Now()
	s, err := p.a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: size, Messages: msgs, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	sprayWait(t, p, 10*time.Second, s)
	elapsed := p.clock.Now() - start
	ca, cb := p.a.Counters(), p.b.Counters()
	d.mu.Lock()
	lost := d.lost
	d.mu.Unlock()
	data := ca.TxPackets - ca.ProbesSent - ca.ClosesSent
	t.Logf("%d packets, %d lost in %v (goodput %.1f Mbit/s); a: %d retransmits, %d inferred losses, %d timeouts, %d probes, nacks %v, %d spurious retransmits reported, reo_wnd %v; b: %d duplicates",
		data, lost, elapsed, float64(msgs*size*8)/elapsed.Seconds()/1e6, ca.Retransmits, ca.InferredLosses, ca.Timeouts, ca.ProbesSent, ca.NacksReceived, ca.SpuriousRetransmits, ca.ReoWnd, cb.Duplicates)
	if cb.MessagesReceived != msgs || cb.VerifyErrors != 0 {
		t.Fatalf("b received %d messages, %d verify errors: want %d, 0", cb.MessagesReceived, cb.VerifyErrors, msgs)
	}
	if lost == 0 || ca.Retransmits < uint64(lost) || ca.Retransmits > uint64(lost)+data/100 || ca.Timeouts != 0 {
		t.Errorf("%d lost: %d retransmits, %d timeouts; want %d..%d, 0", lost, ca.Retransmits, ca.Timeouts, lost, uint64(lost)+data/100)
	}
}
