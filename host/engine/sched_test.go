package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// schedFlow is a flow as the requester is: while it has packets it sends
// up to burst of them, each charged to the port, stopping when the port
// says no; it may owe an exempt packet (a CNP: not charged to the port)
// and have a deadline of its own.
type schedFlow struct {
	left, burst int
	wire        int
	exempt      int           // packets the port does not limit, sent first
	deadline    time.Duration // returned while it has nothing else; Never
	visits      int
	sent        int
	order       *[]*schedFlow // appended to on every data packet
}

func (f *schedFlow) Fill(now time.Duration, out []Packet, port *PortLimit) (int, time.Duration) {
	f.visits++
	n := 0
	for ; f.exempt > 0 && n < len(out); f.exempt-- {
		out[n].N = 1
		n++
	}
	sent := 0
	if port != nil {
		sent = port.TurnSent()
	}
	for ; f.left > 0 && n < len(out) && sent < f.burst; sent++ {
		if port != nil && !port.Ready() {
			return n, f.deadline // the engine asks again when the port has credit
		}
		out[n].N = 1
		if port != nil {
			port.Spend(f.wire)
		}
		if f.order != nil {
			*f.order = append(*f.order, f)
		}
		f.left--
		f.sent++
		n++
	}
	if f.left > 0 {
		return n, now
	}
	return n, f.deadline
}

func newSchedEngine(t *testing.T) *Engine {
	t.Helper()
	a, b := pktio.NewPipe(pktio.PipeOptions{Depth: 16})
	t.Cleanup(func() { a.Close(); b.Close() })
	e, err := New(Config{Conn: a, MaxPacket: 100, Clock: NewFakeClock(0)}, nopRx{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestSchedVisitsOnlyDueFlows: a new flow is asked once; after that only
// the flows with work are: 1,000 idle flows cost a sending flow's passes
// nothing. A kick brings one back, Kick every one.
func TestSchedVisitsOnlyDueFlows(t *testing.T) {
	e := newSchedEngine(t)
	idle := make([]*schedFlow, 1000)
	handles := make([]*FlowHandle, len(idle))
	for i := range idle {
		idle[i] = &schedFlow{deadline: Never}
		handles[i] = e.AddFlow(idle[i])
	}
	busy := &schedFlow{left: 1 << 30, burst: 8, deadline: Never}
	e.AddFlow(busy)
	pkts, _ := e.NewSlots(64)
	for range 100 {
		e.pass(0, pkts, nil)
	}
	for i, f := range idle {
		if f.visits != 1 {
			t.Fatalf("idle flow %d visited %d times in 100 passes; want once (when added)", i, f.visits)
		}
	}
	if busy.visits != 100 || busy.sent != 800 {
		t.Fatalf("busy flow: %d visits, %d sent; want 100 and 800", busy.visits, busy.sent)
	}
	handles[7].Kick()
	e.pass(0, pkts, nil)
	if idle[7].visits != 2 || idle[8].visits != 1 {
		t.Fatalf("after a kick of flow 7: visits %d (flow 7), %d (flow 8); want 2, 1", idle[7].visits, idle[8].visits)
	}
	e.Kick()
	e.pass(0, pkts, nil)
	for i, f := range idle {
		if want := 2 + btoi(i == 7); f.visits != want {
			t.Fatalf("after Kick: idle flow %d visited %d times, want %d", i, f.visits, want)
		}
	}
	e.RemoveFlow(handles[3])
	e.Kick()
	e.pass(0, pkts, nil)
	if idle[3].visits != 2 || e.Flows() != 1000 {
		t.Fatalf("removed flow visited %d times (want 2, none after), %d flows left (want 1000)", idle[3].visits, e.Flows())
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSchedPortRoundRobin: 1,000 flows with more to send than a slow port
// takes are served in turn, a burst each, first come first served: after
// every flow had its turns they have sent the same within one burst, and
// the loop asked a flow less than twice per packet sent (it asked all
// 1,000 on every pass before).
func TestSchedPortRoundRobin(t *testing.T) {
	e := newSchedEngine(t)
	const flows, burst, wire = 1000, 4, 1000
	fs := make([]*schedFlow, flows)
	for i := range fs {
		fs[i] = &schedFlow{left: 1 << 30, burst: burst, wire: wire, deadline: Never}
		e.AddFlow(fs[i])
	}
	port := NewPortLimit(0, 80*units.Mbit, 2*burst*wire, 0) // 10 packets per ms
	pkts, _ := e.NewSlots(64)
	now, sent := time.Duration(0), 0
	for now < 2*time.Second {
		n, next := e.fill(now, pkts, port)
		sent += n
		if next <= now {
			continue
		}
		now = next
	}
	visits, least, most := 0, 1<<30, 0
	for _, f := range fs {
		visits += f.visits
		least, most = min(least, f.sent), max(most, f.sent)
	}
	t.Logf("%d packets in 2 s, %d visits (%.2f per packet), per flow %d..%d", sent, visits, float64(visits)/float64(sent), least, most)
	if sent < 19000 || sent > 21000 {
		t.Errorf("sent %d packets in 2 s at 10 per ms", sent)
	}
	if most-least > burst {
		t.Errorf("per flow %d..%d packets: want within a burst (%d)", least, most, burst)
	}
	if float64(visits) > 2*float64(sent) {
		t.Errorf("%d visits for %d packets: the loop asks flows that cannot send", visits, sent)
	}
}

// TestSchedKickKeepsPlace: a flow kicked while it waits for the port sends
// what the port does not limit (a CNP) at once, and keeps its place in the
// port's queue: the data order is the round robin's.
func TestSchedKickKeepsPlace(t *testing.T) {
	e := newSchedEngine(t)
	var order []*schedFlow
	const wire = 1000
	fs := make([]*schedFlow, 4)
	hs := make([]*FlowHandle, 4)
	for i := range fs {
		fs[i] = &schedFlow{left: 1 << 30, burst: 1, wire: wire, deadline: Never, order: &order}
		hs[i] = e.AddFlow(fs[i])
	}
	port := NewPortLimit(0, 8*units.Mbit, wire, 0) // a packet per ms, one at a time
	pkts, _ := e.NewSlots(64)
	e.pass(0, pkts, port) // flow 0 sends; 1..3 queue for the port behind it
	if len(order) != 1 || order[0] != fs[0] {
		t.Fatalf("first pass: %d data packets; want flow 0's", len(order))
	}
	// Flow 2 owes a CNP: kicked, it sends it though the port is empty,
	// and then waits its turn where it was.
	fs[2].exempt = 1
	hs[2].Kick()
	n, _ := e.pass(0, pkts, port)
	if n != 1 || fs[2].exempt != 0 || len(order) != 1 {
		t.Fatalf("kicked flow 2 with a CNP due and the port empty: %d packets, CNP left %d, %d data; want the CNP alone", n, fs[2].exempt, len(order))
	}
	for ms := 1; ms <= 6; ms++ {
		e.pass(time.Duration(ms)*time.Millisecond, pkts, port)
	}
	var got []int
	for _, f := range order {
		for i := range fs {
			if f == fs[i] {
				got = append(got, i)
			}
		}
	}
	want := []int{0, 1, 2, 3, 0, 1, 2}
	if len(got) != len(want) {
		t.Fatalf("data order %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("data order %v, want %v", got, want)
		}
	}
}

// TestSchedCutTurn: the port's credit runs out in the middle of a flow's
// turn; the flow sends the rest of it first when the port has credit
// again (PortLimit.TurnSent), then the next flow has its turn: turns of a
// burst each, step by step.
func TestSchedCutTurn(t *testing.T) {
	e := newSchedEngine(t)
	var order []*schedFlow
	const burst, wire = 4, 1000
	fs := make([]*schedFlow, 3)
	for i := range fs {
		fs[i] = &schedFlow{left: 1 << 30, burst: burst, wire: wire, deadline: Never, order: &order}
		e.AddFlow(fs[i])
	}
	// 6 packets of credit at once, then one a millisecond.
	port := NewPortLimit(0, 8*units.Mbit, 6*wire, 0)
	pkts, _ := e.NewSlots(64)
	steps := []struct {
		at   time.Duration
		want []int // flows of the pass's data packets
	}{
		{0, []int{0, 0, 0, 0, 1, 1}}, // flow 1's turn is cut after 2
		{1 * time.Millisecond, []int{1}},
		{2 * time.Millisecond, []int{1}}, // its turn's 4th: over
		{3 * time.Millisecond, []int{2}},
		{6 * time.Millisecond, []int{2, 2, 2}},
		{9 * time.Millisecond, []int{0, 0, 0}},
	}
	for _, st := range steps {
		order = order[:0]
		e.pass(st.at, pkts, port)
		var got []int
		for _, f := range order {
			for i := range fs {
				if f == fs[i] {
					got = append(got, i)
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Fatalf("pass at %v: data from flows %v, want %v", st.at, got, st.want)
		}
	}
}

// TestSchedTimers: a flow's own deadline brings it back then, not before;
// a flow that has nothing until a kick is not asked; a kick with a new
// deadline counts from its visit.
func TestSchedTimers(t *testing.T) {
	e := newSchedEngine(t)
	f := &schedFlow{deadline: 5 * time.Millisecond}
	h := e.AddFlow(f)
	pkts, _ := e.NewSlots(8)
	step := func(now time.Duration, visits int, wantNext time.Duration) {
		t.Helper()
		if _, next := e.pass(now, pkts, nil); f.visits != visits || next != wantNext {
			t.Fatalf("pass at %v: %d visits, next %v; want %d, %v", now, f.visits, next, visits, wantNext)
		}
	}
	step(0, 1, 5*time.Millisecond)
	step(4*time.Millisecond, 1, 5*time.Millisecond)
	f.deadline = Never
	step(5*time.Millisecond, 2, Never)
	step(6*time.Millisecond, 2, Never)
	f.deadline = 8 * time.Millisecond
	h.Kick()
	step(6*time.Millisecond, 3, 8*time.Millisecond)
	step(7*time.Millisecond, 3, 8*time.Millisecond)
}

// armFlow sends its packets on its first visit and returns Never, and
// arms its timeout only when a visit finds them in flight: the
// requester's ACK timeout.
type armFlow struct {
	visits   int
	inFlight bool
	timeout  time.Duration
}

func (f *armFlow) Fill(now time.Duration, out []Packet, _ *PortLimit) (int, time.Duration) {
	f.visits++
	if !f.inFlight {
		f.inFlight = true
		out[0].N, out[1].N = 1, 1
		return 2, Never
	}
	return 0, now + f.timeout
}

// TestSchedAsksAgainAfterSend: a flow that sent and needs nothing now is
// asked once more, so the timer for what it sent is armed (a flow whose
// whole window went out in one Fill would otherwise never time out if
// every packet was lost).
func TestSchedAsksAgainAfterSend(t *testing.T) {
	e := newSchedEngine(t)
	f := &armFlow{timeout: 4 * time.Millisecond}
	e.AddFlow(f)
	pkts, _ := e.NewSlots(8)
	n, next := e.fill(0, pkts, nil)
	if n != 2 || f.visits != 2 || next != 4*time.Millisecond {
		t.Fatalf("fill: %d packets, %d visits, next %v; want 2, 2, 4ms (the timeout armed)", n, f.visits, next)
	}
	if _, next = e.pass(time.Millisecond, pkts, nil); f.visits != 2 || next != 4*time.Millisecond {
		t.Fatalf("a pass before the timeout: %d visits, next %v; want 2, 4ms", f.visits, next)
	}
}
