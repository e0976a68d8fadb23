package engine

import (
	"time"
)

// sched is the transmit loop's view of the flows: which to visit in a
// pass. A NIC's scheduler serves the queue pairs that have work, not every
// queue pair it holds; so does this one. A flow is in
//
//   - run: kicked (FlowHandle.Kick), new, or its deadline came; visited in
//     the next pass, once;
//   - port: it wants to send now and the port, or its turn, is what it
//     waits for (its Fill asked PortLimit.Ready and was refused, or it
//     returned next = now); served first in, first out while the port
//     takes packets, and put back at the end: the round robin;
//   - timers: a deadline of its own (pacing, a timeout, a CNP held back)
//     after now;
//
// or none of them: nothing until a kick. A flow can be in run and port at
// once (kicked while it waits for the port: visited for what the port does
// not limit, such as a CNP, keeping its place in the port's queue), and in
// timers beside either.
//
// A pass costs the flows it visits: with 10,000 queue pairs sharing a
// port, each pass visits the few the port serves and the ones kicked, not
// 10,000 (issue 28's scale rows: the CPU per packet was 7–8.6 × one QP's
// when every pass asked every flow).
type sched struct {
	run, port fifo
	timers    Timers[*FlowHandle]
	spare     []*FlowHandle // the kick list's other buffer
	// served are this pass's flows that sent and want more: they join the
	// port's queue at the end of the pass, behind the ones it turned away.
	served []*FlowHandle
	// sent are this pass's flows that sent and need nothing now: they are
	// asked once more in the next pass, as every flow was after a pass
	// that sent, since a Fill that sent a flow's first packets may return
	// before it armed the timer for them (the requester's ACK timeout
	// runs from its next Fill).
	sent []*FlowHandle
}

// pass is one pass of the round robin: the runnable flows, each once
// (while others wait for the port, the port is held for them: they send
// only what it does not limit, and queue for the rest), then the port's
// queue, each flow at most its burst, while the port takes packets and
// pkts has room.
func (e *Engine) pass(now time.Duration, pkts []Packet, port *PortLimit) (n int, next time.Duration) {
	s := &e.sched
	if port != nil {
		port.Refill(now)
	}
	e.collect(now)
	if k := s.run.len(); k > 0 {
		hold := port != nil && s.port.len() > 0
		if hold {
			port.held = true
		}
		for ; k > 0 && n < len(pkts); k-- {
			h := s.run.pop()
			h.inRun = false
			n += e.visit(h, now, pkts[n:], port, false)
		}
		if hold {
			port.held = false
		}
	}
	for k := s.port.len(); k > 0 && n < len(pkts) && (port == nil || port.b.Ready()); k-- {
		h := s.port.pop()
		h.inPort = false
		n += e.visit(h, now, pkts[n:], port, true)
	}
	for i, h := range s.served {
		if !h.inPort && !h.removed.Load() {
			h.inPort = true
			s.port.push(h)
		}
		s.served[i] = nil
	}
	s.served = s.served[:0]
	for i, h := range s.sent {
		s.runnable(h)
		s.sent[i] = nil
	}
	s.sent = s.sent[:0]
	next = s.timers.Next()
	switch {
	case s.run.len() > 0:
		next = now
	case s.port.len() == 0:
	case port == nil || port.b.Ready():
		next = now
	default:
		next = min(next, port.NextWake(now))
	}
	return n, next
}

// collect moves the kicked flows, every flow after a Kick, and the flows
// whose deadline came into run.
func (e *Engine) collect(now time.Duration) {
	s := &e.sched
	e.kickMu.Lock()
	kicks := e.kicks
	e.kicks = s.spare
	e.kickMu.Unlock()
	for i, h := range kicks {
		h.kicked.Store(false) // a kick from here on queues it again
		s.runnable(h)
		kicks[i] = nil
	}
	s.spare = kicks[:0]
	if e.kickAll.Swap(false) {
		e.mu.Lock()
		for _, h := range e.mu.flows {
			s.runnable(h)
		}
		e.mu.Unlock()
	}
	for {
		h, ok := s.timers.PopDue(now)
		if !ok {
			break
		}
		s.runnable(h)
	}
}

// runnable puts h in run.
func (s *sched) runnable(h *FlowHandle) {
	if !h.inRun && !h.removed.Load() {
		h.inRun = true
		s.run.push(h)
	}
}

// visit asks h's flow for packets and files it by what it said: one that
// wants the port joins its queue (at the end of the pass if it sent; back
// at the head if it was the port queue's head, fromPort, and the port
// turned it away before it sent anything: its turn is not over).
func (e *Engine) visit(h *FlowHandle, now time.Duration, out []Packet, port *PortLimit, fromPort bool) int {
	s := &e.sched
	if h.removed.Load() {
		s.timers.Remove(h)
		return 0
	}
	turnSent := 0
	if fromPort {
		turnSent, h.cutSent = h.cutSent, 0
	}
	if port != nil {
		port.refused = false
		port.turnSent, port.spent = turnSent, 0
	}
	n, due := h.f.Fill(now, out, port)
	refused := port != nil && port.refused
	spent := 0
	if port != nil {
		spent = port.spent
	}
	if n > 0 && !refused && due > now {
		s.sent = append(s.sent, h)
	}
	if (refused || due <= now) && !h.inPort {
		switch {
		case refused && spent > 0 && turnSent+spent < maxTurn:
			// The port ran dry in the middle of the flow's turn: the
			// rest of the turn (PortLimit.TurnSent) is the flow's,
			// next. A turn lost to the port's credit made the turns of
			// 10,000 QPs half a burst on average, and each turn paid
			// the QP's cold state (issue 28).
			h.cutSent = turnSent + spent
			h.inPort = true
			s.port.pushFront(h)
		case n > 0:
			s.served = append(s.served, h)
		case fromPort:
			h.inPort = true
			s.port.pushFront(h)
		default:
			h.inPort = true
			s.port.push(h)
		}
	}
	if due > now {
		s.timers.Set(h, due)
	} else {
		s.timers.Remove(h)
	}
	return n
}

// maxTurn is the most packets a flow sends in one turn at the port, asked
// again and again as the port's credit comes: a QP's longest burst.
const maxTurn = 256

// fifo is a queue of flows in a ring.
type fifo struct {
	buf        []*FlowHandle
	head, size int
}

func (q *fifo) len() int { return q.size }

func (q *fifo) push(h *FlowHandle) {
	if q.size == len(q.buf) {
		buf := make([]*FlowHandle, max(16, 2*len(q.buf)))
		for i := range q.size {
			buf[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = buf, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = h
	q.size++
}

func (q *fifo) pushFront(h *FlowHandle) {
	q.push(h) // grows the ring if full
	q.size--
	q.head = (q.head - 1 + len(q.buf)) % len(q.buf)
	q.buf[q.head] = h
	q.size++
}

func (q *fifo) pop() *FlowHandle {
	h := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return h
}
