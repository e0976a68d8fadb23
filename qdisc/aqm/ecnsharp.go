package aqm

import (
	"fmt"
	"math"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ECNSharpConfig configures ECN♯ (seed 002 §3.2, Table 2).
//
// The signal is the departing packet's sojourn time in ns or the queue
// length in bytes, the caller's choice (seed 002 §3.5: equivalent in a
// single queue, length = time × C); InsTarget, InsMax and PstTarget are in
// the signal's unit. PstInterval is always time.
type ECNSharpConfig struct {
	// InsTarget is ins_target: with InsMax 0, mark when signal >
	// InsTarget (the cut-off, seed 002 §3.2). With InsMax set, it is Kmin
	// of the probabilistic curve.
	InsTarget uint64
	// InsMax is Kmax of the probabilistic instantaneous curve for DCQCN
	// (seed 002 §3.5). Optional: 0 keeps the cut-off at InsTarget.
	InsMax uint64
	// MaxPFixed is Pmax of the curve in fixed point, ProbOne = 1.0. Only
	// used with InsMax.
	MaxPFixed uint64
	// PstTarget is pst_target: the persistent queueing target.
	PstTarget uint64
	// PstInterval is pst_interval: how long the signal must stay at or
	// above PstTarget before the queue counts as persistent, and the first
	// gap between persistent marks.
	PstInterval time.Duration
	// SqrtLaw schedules the next persistent mark at now +
	// pst_interval/sqrt(marking_count) (ControlLaw), as the authors' ns-3
	// code does (snowzjx/ns3-ecn-sharp, ecn-sharp-queue-disc.cc), instead
	// of Algorithm 1's marking_next += pst_interval/marking_count.
	// Optional.
	SqrtLaw bool
}

// Validate checks the ranges the eBPF arithmetic needs. Errors name the
// field, its value and the allowed range.
func (c ECNSharpConfig) Validate() error {
	if c.PstInterval <= 0 || c.PstInterval > MaxInterval {
		return fmt.Errorf("ecnsharp: pst_interval (%s) must be 1ns to 2^48-1ns (about 78h)", units.FormatDuration(c.PstInterval))
	}
	if c.InsMax == 0 {
		return nil
	}
	if c.InsMax <= c.InsTarget {
		return fmt.Errorf("ecnsharp: ins_max (%d) must be greater than ins_target (%d), or 0 for a cut-off at ins_target", c.InsMax, c.InsTarget)
	}
	if c.MaxPFixed > ProbOne {
		return fmt.Errorf("ecnsharp: max_p (%d/2^32) must be 0 to 2^32 (1.0)", c.MaxPFixed)
	}
	// MaxPFixed·(signal − InsTarget) is a u64 product in the eBPF program.
	if span := c.InsMax - c.InsTarget - 1; c.MaxPFixed != 0 && span > math.MaxUint64/c.MaxPFixed {
		return fmt.Errorf("ecnsharp: ins_max − ins_target (%d) must be at most %d with max_p %d/2^32 (64-bit product)",
			span+1, math.MaxUint64/c.MaxPFixed+1, c.MaxPFixed)
	}
	return nil
}

// Verdict is ECN♯'s decision for one departing packet: which of its two
// conditions wants it marked.
type Verdict struct {
	Instantaneous bool // signal above ins_target (or drawn on the Kmin/Kmax curve)
	Persistent    bool // Algorithm 1 marks it
}

// Mark reports whether the packet is marked: seed 002 §3.2, "a packet is
// marked when either one of the following conditions decides to mark it".
func (v Verdict) Mark() bool { return v.Instantaneous || v.Persistent }

// ECNSharpState is the persistent-condition state, Algorithm 1's variables
// (seed 002 Table 2). Time 0 means unset.
type ECNSharpState struct {
	MarkingState   bool   // marking_state
	MarkingCount   uint64 // marking_count
	MarkingNext    Time   // marking_next
	FirstAboveTime Time   // first_above_time
}

// ECNSharp is one queue's ECN♯ marker. The zero state is the start state.
//
// Times are 64-bit ns, so the paper's workarounds for Tofino do not apply:
// no 32-bit time emulation (seed 002 §4.1) and no table-driven division
// approximation (§4.3, Algorithm 3); pst_interval/marking_count is an exact
// integer division.
type ECNSharp struct {
	Config ECNSharpConfig

	markingState   bool
	markingCount   uint64
	markingNext    Time
	firstAboveTime Time
}

// State returns the persistent-condition state.
func (e *ECNSharp) State() ECNSharpState {
	return ECNSharpState{e.markingState, e.markingCount, e.markingNext, e.firstAboveTime}
}

// OnDequeue decides for one departing packet. now is the dequeue time,
// signal its sojourn (ns) or the queue length (bytes), rnd a uniform random
// number (used only on the probabilistic curve). Both conditions always
// run: the persistent state machine sees every packet, also those the
// instantaneous condition already marks (seed 002 §3.2).
func (e *ECNSharp) OnDequeue(now Time, signal uint64, rnd uint32) Verdict {
	return Verdict{
		Instantaneous: e.instantaneous(signal, rnd),
		Persistent:    e.shouldPersistentMark(now, signal),
	}
}

// instantaneous is the burst-tolerance condition (seed 002 §3.2, "ECN
// marking based on instantaneous queue"; §3.5 "Probabilistic instantaneous
// marking" for the curve).
func (e *ECNSharp) instantaneous(signal uint64, rnd uint32) bool {
	c := &e.Config
	if c.InsMax == 0 {
		return signal > c.InsTarget // "if the sojourn time exceeds the threshold"
	}
	switch {
	case signal < c.InsTarget:
		return false
	case signal >= c.InsMax: // also catches InsMax ≤ InsTarget, which Validate rejects
		return true
	}
	// Linear from 0 at Kmin to Pmax at Kmax, as switch WRED draws it.
	p := c.MaxPFixed * (signal - c.InsTarget) / (c.InsMax - c.InsTarget)
	return uint64(rnd) < p
}

// shouldPersistentMark is Algorithm 1's ShouldPersistentMark (seed 002
// §3.2, lines 1–20).
func (e *ECNSharp) shouldPersistentMark(now Time, signal uint64) bool {
	detected := e.isPersistentQueueBuildups(now, signal) // line 2
	if e.markingState {                                  // line 3
		if !detected { // lines 4–6
			e.markingState = false
			return false
		}
		if now > e.markingNext { // line 7: strictly after
			e.markingCount++ // line 8
			if e.Config.SqrtLaw {
				// ns-3 code: CoDel's law from now, not from marking_next.
				e.markingNext = ControlLaw(now, e.Config.PstInterval, e.markingCount)
			} else {
				// line 9: integer ns division, exact (no §4.3 table).
				e.markingNext += Time(uint64(max(e.Config.PstInterval, 0)) / e.markingCount)
			}
			return true // line 10
		}
		return false
	}
	if detected { // lines 13–17: one mark on entry, next one an interval later
		e.markingState = true
		e.markingCount = 1
		e.markingNext = now.Add(e.Config.PstInterval)
		return true
	}
	return false // line 19
}

// isPersistentQueueBuildups is Algorithm 1's IsPersistentQueueBuildups
// (seed 002 §3.2, lines 21–33): has the signal stayed at or above
// pst_target for more than pst_interval?
func (e *ECNSharp) isPersistentQueueBuildups(now Time, signal uint64) bool {
	if signal < e.Config.PstTarget { // lines 22–24: the queue drained
		e.firstAboveTime = 0
		return false
	}
	if e.firstAboveTime == 0 { // lines 26–28; 0 is "unset"
		e.firstAboveTime = now
		return false
	}
	return now > e.firstAboveTime.Add(e.Config.PstInterval) // line 29: strictly
}
