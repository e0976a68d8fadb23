package pds

import (
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
)

// A CCC's PDCs as its Fill sees them: the engine visits only the flows
// with work (engine's sched.go), and a CCC does the same inside for its
// PDCs. A PDC's timers (RTO, RACK, probe, hold, idle close) run in a Fill
// only when they are due (pdcTimers, by the deadline its last run
// returned) or when an event changed what they depend on (touch: an ACK,
// a NACK, a send, a Sender started or stopped); and what update() needs
// of every PDC, whether it has new data and retransmissions waiting, is
// counted per CCC and brought up to date for the PDCs touched since. With
// 10,000 PDCs in one CCC, every Fill ran 10,000 PDCs' timers and every
// ACK scanned 10,000 PDCs (fabricbench's UET scale rows: 42 × one PDC's
// CPU per packet, 47 % and 28 % of it those two).

// pdcSched is a CCC's schedule of its PDCs.
type pdcSched struct {
	timers     engine.Timers[*initiator]
	timerDirty []*initiator // touched since their timers last ran
	flagDirty  []*initiator // touched since their backlog flags were counted
	// nNew and nRetx count the PDCs whose counted flags say new data and
	// retransmissions waiting (backlog()).
	nNew, nRetx int
}

// touch says an event changed p: its timers run at the CCC's next Fill,
// and its backlog flags are counted again before they are next read.
func (p *initiator) touch() {
	s := &p.ccc.sched
	if !p.timerDirty {
		p.timerDirty = true
		s.timerDirty = append(s.timerDirty, p)
	}
	if !p.flagDirty {
		p.flagDirty = true
		s.flagDirty = append(s.flagDirty, p)
	}
}

// countFlags brings the counted backlog flags of the touched PDCs up to
// date.
func (c *ccc) countFlags() {
	s := &c.sched
	for i, p := range s.flagDirty {
		p.flagDirty = false
		s.flagDirty[i] = nil
		newData, retx := false, false
		if !p.closed {
			newData, retx = p.hasNewData(), len(p.retxQ) > 0
		}
		s.nNew += btoi(newData) - btoi(p.countedNew)
		s.nRetx += btoi(retx) - btoi(p.countedRetx)
		p.countedNew, p.countedRetx = newData, retx
	}
	s.flagDirty = s.flagDirty[:0]
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runTimers runs the timers of the PDCs touched or due, writing what they
// send into out, and returns the packets written.
func (c *ccc) runTimers(now time.Duration, out []engine.Packet) (n int) {
	s := &c.sched
	due := s.timerDirty
	s.timerDirty = nil
	for {
		p, ok := s.timers.PopDue(now)
		if !ok {
			break
		}
		if !p.timerDirty {
			due = append(due, p)
		}
	}
	for _, p := range due {
		p.timerDirty = false
	}
	for _, p := range due {
		if p.closed {
			continue
		}
		k, next := p.timers(now, out[n:])
		n += k
		if p.closed { // the timers freed it
			continue
		}
		if p.holdUntil > now {
			next = min(next, p.holdUntil)
		}
		s.timers.Set(p, next)
	}
	if len(s.timerDirty) == 0 && cap(due) <= 1024 {
		s.timerDirty = due[:0] // reuse the buffer (unless the timers touched a PDC)
	}
	return n
}

// nextTimer is the earliest PDC deadline of the CCC: now while PDCs wait
// for their timers to run.
func (c *ccc) nextTimer(now time.Duration) time.Duration {
	s := &c.sched
	if len(s.timerDirty) > 0 {
		return now
	}
	return s.timers.Next()
}

// forget takes a freed PDC out of its CCC's schedule and counts.
func (c *ccc) forget(p *initiator) {
	s := &c.sched
	s.timers.Remove(p)
	s.nNew -= btoi(p.countedNew)
	s.nRetx -= btoi(p.countedRetx)
	p.countedNew, p.countedRetx = false, false
}
