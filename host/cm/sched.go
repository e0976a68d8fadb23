package cm

import (
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Check refuses a matrix htsim would refuse or abort on, and one in
// which a flow would never start: nodes and sizes in range, ids unique,
// every trigger named defined once, a oneshot activated at most once, a
// barrier by exactly its count, a trigger that fires with a flow to
// start, and every flow started (no cycle, no missing activation).
func (m *Matrix) Check() error {
	if m.Nodes < 1 {
		return &Error{Msg: fmt.Sprintf("nodes %d: must be at least 1", m.Nodes)}
	}
	if len(m.Conns) > maxConns {
		return &Error{Msg: fmt.Sprintf("%d connections: at most %d", len(m.Conns), maxConns)}
	}
	ids := map[int]int{}
	for i, c := range m.Conns {
		line := c.Line
		switch {
		case c.Src < 0 || c.Src >= m.Nodes || c.Dst < 0 || c.Dst >= m.Nodes:
			return &Error{Line: line, Msg: fmt.Sprintf("connection %d: %d->%d: nodes are 0..%d", i+1, c.Src, c.Dst, m.Nodes-1)}
		case c.Src == c.Dst:
			return &Error{Line: line, Msg: fmt.Sprintf("connection %d: a flow from node %d to itself", i+1, c.Src)}
		case c.Size == 0:
			return &Error{Line: line, Msg: fmt.Sprintf("connection %d: size 0", i+1)}
		case c.Trigger != 0 && c.ID == 0:
			return &Error{Line: line, Msg: fmt.Sprintf("connection %d: a triggered flow needs an id", i+1)}
		case c.Start < 0:
			return &Error{Line: line, Msg: fmt.Sprintf("connection %d: start %v before 0", i+1, c.Start)}
		}
		if c.ID != 0 {
			if j, dup := ids[c.ID]; dup {
				return &Error{Line: line, Msg: fmt.Sprintf("flow id %d also on connection %d%s", c.ID, j+1, at(m.Conns[j].Line))}
			}
			ids[c.ID] = i
		}
	}
	defs := map[int]int{}
	for i, t := range m.Triggers {
		switch {
		case t.ID < 1:
			return &Error{Line: t.Line, Msg: fmt.Sprintf("trigger id %d: must be at least 1", t.ID)}
		case t.Kind < Oneshot || t.Kind > Barrier:
			return &Error{Line: t.Line, Msg: fmt.Sprintf("trigger %d: kind %v", t.ID, t.Kind)}
		case t.Kind == Barrier && t.Count < 1:
			return &Error{Line: t.Line, Msg: fmt.Sprintf("barrier %d: count %d: must be at least 1", t.ID, t.Count)}
		}
		if j, dup := defs[t.ID]; dup {
			return &Error{Line: t.Line, Msg: fmt.Sprintf("trigger %d defined again (first%s)", t.ID, at(m.Triggers[j].Line))}
		}
		defs[t.ID] = i
	}
	targets := map[int]int{}
	var activators = map[int][]int{}
	for i, c := range m.Conns {
		for _, ref := range []struct {
			id   int
			word string
		}{{c.Trigger, "trigger"}, {c.SendDone, "send_done_trigger"}, {c.RecvDone, "recv_done_trigger"}} {
			if ref.id == 0 {
				continue
			}
			if _, ok := defs[ref.id]; !ok {
				return &Error{Line: c.Line, Word: ref.word, Msg: fmt.Sprintf("connection %d names trigger %d, which no trigger line defines", i+1, ref.id)}
			}
		}
		if c.Trigger != 0 {
			targets[c.Trigger]++
		}
		if c.SendDone != 0 {
			activators[c.SendDone] = append(activators[c.SendDone], i)
		}
		if c.RecvDone != 0 {
			activators[c.RecvDone] = append(activators[c.RecvDone], i)
		}
	}
	for _, t := range m.Triggers {
		a := activators[t.ID]
		switch {
		case len(a) > 0 && targets[t.ID] == 0 && t.Kind != Multishot:
			return &Error{Line: t.Line, Msg: fmt.Sprintf("trigger %d fires with no flow to start (htsim aborts)", t.ID)}
		case t.Kind == Oneshot && len(a) > 1:
			return &Error{Line: t.Line, Msg: fmt.Sprintf("oneshot trigger %d is activated by %d flows (%s): htsim aborts on the second; use a barrier", t.ID, len(a), m.connLines(a))}
		case t.Kind == Barrier && len(a) != t.Count:
			return &Error{Line: t.Line, Msg: fmt.Sprintf("barrier %d waits for %d activations, %d flows activate it (%s)", t.ID, t.Count, len(a), m.connLines(a))}
		}
	}
	// Every flow starts: replay with every flow taking 1 µs.
	start, _, err := m.Replay(func(int) (time.Duration, time.Duration) { return time.Microsecond, time.Microsecond })
	if err != nil {
		return err
	}
	for i, s := range start {
		if s < 0 {
			c := m.Conns[i]
			return &Error{Line: c.Line, Msg: fmt.Sprintf("connection %d (id %d) never starts: trigger %d never fires (a cycle, or too few activations)", i+1, c.ID, c.Trigger)}
		}
	}
	return nil
}

func at(line int) string {
	if line == 0 {
		return ""
	}
	return fmt.Sprintf(" at line %d", line)
}

// connLines names connections by their lines (or places).
func (m *Matrix) connLines(idx []int) string {
	var s []string
	for k, i := range idx {
		if k == 4 {
			s = append(s, "…")
			break
		}
		if l := m.Conns[i].Line; l != 0 {
			s = append(s, fmt.Sprintf("line %d", l))
		} else {
			s = append(s, fmt.Sprintf("connection %d", i+1))
		}
	}
	return strings.Join(s, ", ")
}

// Scheduler runs a matrix's triggers: told that a flow's sender or
// receiver is done, it returns the flows to start now. It is a pure
// state machine; the caller owns the clock.
type Scheduler struct {
	m        *Matrix
	kind     map[int]Trigger
	targets  map[int][]int // trigger id → connections it starts, in file order
	left     map[int]int   // a barrier's activations still needed
	next     map[int]int   // a multishot's next target
	fired    map[int]bool  // a oneshot or barrier that fired
	sendDone []bool
	recvDone []bool
}

// NewScheduler returns a scheduler for a Checked matrix.
func NewScheduler(m *Matrix) *Scheduler {
	s := &Scheduler{m: m, kind: map[int]Trigger{}, targets: map[int][]int{}, left: map[int]int{}, next: map[int]int{}, fired: map[int]bool{},
		sendDone: make([]bool, len(m.Conns)), recvDone: make([]bool, len(m.Conns))}
	for _, t := range m.Triggers {
		s.kind[t.ID] = t
		s.left[t.ID] = t.Count
	}
	for i, c := range m.Conns {
		if c.Trigger != 0 {
			s.targets[c.Trigger] = append(s.targets[c.Trigger], i)
		}
	}
	return s
}

// Timed returns the connections that start at their time, in file
// order.
func (s *Scheduler) Timed() []int {
	var out []int
	for i, c := range s.m.Conns {
		if c.Trigger == 0 {
			out = append(out, i)
		}
	}
	return out
}

// SendDone records that connection i's sender is done (every byte
// acknowledged) and returns the connections its trigger starts now.
func (s *Scheduler) SendDone(i int) ([]int, error) {
	if s.sendDone[i] {
		return nil, fmt.Errorf("cm: connection %d: sender done twice", i+1)
	}
	s.sendDone[i] = true
	return s.activate(s.m.Conns[i].SendDone)
}

// RecvDone records that connection i's receiver has every byte and
// returns the connections its trigger starts now.
func (s *Scheduler) RecvDone(i int) ([]int, error) {
	if s.recvDone[i] {
		return nil, fmt.Errorf("cm: connection %d: receiver done twice", i+1)
	}
	s.recvDone[i] = true
	return s.activate(s.m.Conns[i].RecvDone)
}

// activate is htsim's Trigger::activate of trigger id.
func (s *Scheduler) activate(id int) ([]int, error) {
	if id == 0 {
		return nil, nil
	}
	t := s.kind[id]
	switch t.Kind {
	case Oneshot:
		if s.fired[id] {
			return nil, fmt.Errorf("cm: oneshot trigger %d activated twice", id)
		}
		s.fired[id] = true
		return s.targets[id], nil
	case Multishot:
		k := s.next[id]
		if k >= len(s.targets[id]) {
			return nil, nil // htsim: "no one left to activate"
		}
		s.next[id]++
		return s.targets[id][k : k+1], nil
	case Barrier:
		if s.fired[id] {
			return nil, fmt.Errorf("cm: barrier %d activated past its count %d", id, t.Count)
		}
		s.left[id]--
		if s.left[id] > 0 {
			return nil, nil
		}
		s.fired[id] = true
		return s.targets[id], nil
	}
	return nil, fmt.Errorf("cm: trigger %d not defined", id)
}

// Replay runs the matrix's triggers over each flow's durations from its
// start to its sender's and its receiver's completion, and returns each
// flow's start and end (its sender's completion); a flow that never
// starts has start and end -1. Events at one instant run in connection
// order, receivers before senders (a receiver has every byte before its
// sender hears so).
func (m *Matrix) Replay(durations func(i int) (send, recv time.Duration)) (start, end []time.Duration, err error) {
	s := NewScheduler(m)
	start = make([]time.Duration, len(m.Conns))
	end = make([]time.Duration, len(m.Conns))
	for i := range start {
		start[i], end[i] = -1, -1
	}
	var q events
	begin := func(i int, t time.Duration) {
		start[i] = t
		send, recv := durations(i)
		heap.Push(&q, event{t: t + recv, conn: i, recv: true})
		heap.Push(&q, event{t: t + send, conn: i})
	}
	for _, i := range s.Timed() {
		begin(i, m.Conns[i].Start)
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(event)
		var next []int
		if e.recv {
			next, err = s.RecvDone(e.conn)
		} else {
			end[e.conn] = e.t
			next, err = s.SendDone(e.conn)
		}
		if err != nil {
			return nil, nil, err
		}
		for _, j := range next {
			begin(j, e.t)
		}
	}
	return start, end, nil
}

type event struct {
	t    time.Duration
	conn int
	recv bool
}

type events []event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if q[i].t != q[j].t {
		return q[i].t < q[j].t
	}
	if q[i].recv != q[j].recv {
		return q[i].recv
	}
	return q[i].conn < q[j].conn
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Groups partitions the connections into collectives: two flows are in
// one group when one's completion activates a trigger that starts the
// other, or both are started by one trigger. A flow no trigger ties to
// another is a group of its own. Groups are in order of their first
// connection; each lists its connections in file order.
func (m *Matrix) Groups() [][]int {
	parent := make([]int, len(m.Conns))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, b int) {
		ra, rb := find(a), find(b)
		if ra < rb {
			parent[rb] = ra
		} else if rb < ra {
			parent[ra] = rb
		}
	}
	// Tie each trigger's activators and targets to its first member.
	first := map[int]int{}
	tie := func(id, i int) {
		if id == 0 {
			return
		}
		if f, ok := first[id]; ok {
			union(f, i)
		} else {
			first[id] = i
		}
	}
	for i, c := range m.Conns {
		tie(c.Trigger, i)
		tie(c.SendDone, i)
		tie(c.RecvDone, i)
	}
	byRoot := map[int][]int{}
	var roots []int
	for i := range m.Conns {
		r := find(i)
		if _, ok := byRoot[r]; !ok {
			roots = append(roots, r)
		}
		byRoot[r] = append(byRoot[r], i)
	}
	slices.Sort(roots)
	out := make([][]int, 0, len(roots))
	for _, r := range roots {
		out = append(out, byRoot[r])
	}
	return out
}
