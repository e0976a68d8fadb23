package aqm

import (
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// CoDelConfig configures CoDel (RFC 8289 §4; tc codel target, interval).
type CoDelConfig struct {
	// Target is the acceptable standing sojourn time (tc codel target).
	Target time.Duration
	// Interval is how long the sojourn must stay at or above Target before
	// CoDel acts, and the first gap between signals (tc codel interval).
	Interval time.Duration
	// MTUBytes: a backlog of at most this many bytes never counts as a
	// standing queue (Linux codel_should_drop, params->mtu). Linux uses
	// the device MTU.
	MTUBytes uint64
}

// Validate checks the ranges the eBPF arithmetic needs. Errors name the
// field, its value and the allowed range.
func (c CoDelConfig) Validate() error {
	if c.Target <= 0 {
		return fmt.Errorf("codel: target (%s) must be greater than 0", units.FormatDuration(c.Target))
	}
	if c.Interval <= 0 || c.Interval > MaxInterval {
		return fmt.Errorf("codel: interval (%s) must be 1ns to 2^48-1ns (about 78h)", units.FormatDuration(c.Interval))
	}
	return nil
}

// CoDelState is CoDel's per-queue state (Linux struct codel_vars, without
// rec_inv_sqrt: ControlLaw takes count itself). Time 0 means unset.
type CoDelState struct {
	Dropping       bool   // dropping: in the signalling state
	Count          uint64 // count: signals since entering it
	LastCount      uint64 // lastcount: count when it was last entered
	FirstAboveTime Time   // first_above_time: when the standing queue counts
	DropNext       Time   // drop_next: when the next signal is due
}

// CoDel is one queue's CoDel with ECN: where Linux would drop it signals,
// and the caller marks CE on an ECT packet or drops a Not-ECT one; the
// state update is the same either way. The zero state is the start state.
//
// It follows Linux codel_should_drop and codel_dequeue with 64-bit ns times
// (Linux uses u32 units of 1024 ns) and ControlLaw instead of Linux's
// Newton-iterated reciprocal square root.
type CoDel struct {
	Config CoDelConfig

	dropping       bool
	count          uint64
	lastcount      uint64
	firstAboveTime Time
	dropNext       Time
}

// State returns CoDel's state.
func (c *CoDel) State() CoDelState {
	return CoDelState{c.dropping, c.count, c.lastcount, c.firstAboveTime, c.dropNext}
}

// OnDequeue decides for one departing packet: sojourn is its time in the
// queue, backlogBytes what is still queued after it left. It returns true
// when CoDel signals this packet.
//
// Linux's dropping state drops in a loop within one dequeue until drop_next
// is in the future (each drop pulls the next packet). A dequeue hook sees
// one departing packet and cannot pull the next, so here it is one signal
// per packet; Linux with ECN does the same for a packet it can mark (it
// marks, reschedules and returns it).
func (c *CoDel) OnDequeue(now Time, sojourn time.Duration, backlogBytes uint64) bool {
	okToDrop := c.shouldDrop(now, sojourn, backlogBytes)
	if c.dropping {
		if !okToDrop { // sojourn below target: leave the dropping state
			c.dropping = false
			return false
		}
		if now >= c.dropNext { // codel_time_after_eq
			c.count++
			c.dropNext = ControlLaw(c.dropNext, c.Config.Interval, c.count)
			return true
		}
		return false
	}
	if okToDrop {
		c.dropping = true
		// If we were dropping recently (within 16 intervals of the last
		// scheduled signal), start from the signal rate that controlled
		// the queue last time instead of from 1 (RFC 8289 §5 dequeue
		// pseudocode; Linux codel_dequeue).
		delta := c.count - c.lastcount
		if delta > 1 && int64(now-c.dropNext) < int64(16*c.Config.Interval) {
			c.count = delta
		} else {
			c.count = 1
		}
		c.lastcount = c.count
		c.dropNext = ControlLaw(now, c.Config.Interval, c.count)
		return true
	}
	return false
}

// shouldDrop is Linux codel_should_drop (RFC 8289 §5, "ok_to_drop"): the
// sojourn has stayed at or above target, with more than one MTU queued, for
// more than an interval.
func (c *CoDel) shouldDrop(now Time, sojourn time.Duration, backlogBytes uint64) bool {
	if sojourn < c.Config.Target || backlogBytes <= c.Config.MTUBytes {
		c.firstAboveTime = 0
		return false
	}
	if c.firstAboveTime == 0 {
		c.firstAboveTime = now.Add(c.Config.Interval)
		return false
	}
	return now > c.firstAboveTime // codel_time_after: strictly
}
