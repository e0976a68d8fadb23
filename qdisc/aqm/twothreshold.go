package aqm

import (
	"fmt"

	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// ECN is an ECN codepoint, the low two bits of the IPv4 TOS / IPv6 traffic
// class (RFC 3168). The one type of the marking AQMs and the tunnel PEs
// (qdisc/tunnel).
type ECN uint8

const (
	NotECT ECN = 0
	ECT1   ECN = 1
	ECT0   ECN = 2
	CE     ECN = 3
)

var ecnNames = enum.Names{NotECT: {"Not-ECT"}, ECT1: {"ECT(1)"}, ECT0: {"ECT(0)"}, CE: {"CE"}}

func (e ECN) String() string { return enum.String(e, ecnNames, "ecn") }

// TwoThresholdConfig is the two-threshold marking of seed 001
// (draft-hu-rtgwg-pre-ecn-wan-00, "Two Threshold ECN Mechanism") in the
// eBPF program's units: bytes of backlog and probabilities in 2^32 fixed
// point (ProbOne = 1.0).
type TwoThresholdConfig struct {
	// T1 is the lower threshold: from it ECT(0) becomes ECT(1) with a
	// probability rising linearly to LightMaxP at T2 (step 1).
	T1 uint64
	// T2 is the higher threshold: from it ECT packets become CE with a
	// probability rising linearly to HeavyMaxP at T2Max, every one at or
	// above T2Max (step 2, "a RED-like curve").
	T2, T2Max            uint64
	LightMaxP, HeavyMaxP uint64
	// DropNotECT drops a Not-ECT packet where the CE curve would mark an
	// ECT one (the class's wred_drop).
	DropNotECT bool
}

// Validate checks what TwoThresholdDecide assumes: T1 < T2 < T2Max and
// probabilities up to ProbOne. Errors name the field, the value and the
// allowed range.
func (c *TwoThresholdConfig) Validate() error {
	switch {
	case c.T1 >= c.T2:
		return fmt.Errorf("two-threshold: t2 (%d bytes) must be greater than t1 (%d bytes)", c.T2, c.T1)
	case c.T2Max <= c.T2:
		return fmt.Errorf("two-threshold: t2_max (%d bytes) must be greater than t2 (%d bytes)", c.T2Max, c.T2)
	case c.T2Max > 1<<32:
		return fmt.Errorf("two-threshold: t2_max (%d bytes) must be at most 2^32 (64-bit products)", c.T2Max)
	case c.LightMaxP > ProbOne:
		return fmt.Errorf("two-threshold: light_max_p (%d/2^32) must be 0 to 2^32 (1.0)", c.LightMaxP)
	case c.HeavyMaxP > ProbOne:
		return fmt.Errorf("two-threshold: heavy_max_p (%d/2^32) must be 0 to 2^32 (1.0)", c.HeavyMaxP)
	}
	return nil
}

// TwoThresholdVerdict is the decision for one arriving packet.
type TwoThresholdVerdict uint8

const (
	TwoThresholdPass  TwoThresholdVerdict = iota
	TwoThresholdLight                     // ECT(0) -> ECT(1)
	TwoThresholdHeavy                     // ECT(0)/ECT(1) -> CE
	TwoThresholdDrop                      // Not-ECT where CE would be marked, with DropNotECT
)

var verdictNames = enum.Names{TwoThresholdPass: {"pass"}, TwoThresholdLight: {"light"}, TwoThresholdHeavy: {"heavy"}, TwoThresholdDrop: {"drop"}}

func (v TwoThresholdVerdict) String() string { return enum.String(v, verdictNames, "verdict") }

// HeavyP is the CE probability at backlog, fixed point: 0 below T2,
// HeavyMaxP·(backlog−T2)/(T2Max−T2) up to T2Max, ProbOne from it.
func (c *TwoThresholdConfig) HeavyP(backlog uint64) uint64 {
	switch {
	case backlog < c.T2:
		return 0
	case backlog >= c.T2Max:
		return ProbOne
	}
	return c.HeavyMaxP * (backlog - c.T2) / (c.T2Max - c.T2)
}

// LightP is the ECT(1) probability at backlog for an ECT(0) packet the CE
// curve spares, fixed point: 0 below T1, LightMaxP·(backlog−T1)/(T2−T1)
// up to T2, LightMaxP from it (the seed is silent above T2; the queue has
// passed T1 too).
func (c *TwoThresholdConfig) LightP(backlog uint64) uint64 {
	switch {
	case backlog < c.T1:
		return 0
	case backlog >= c.T2:
		return c.LightMaxP
	}
	return c.LightMaxP * (backlog - c.T1) / (c.T2 - c.T1)
}

// TwoThresholdDecide decides for a packet of codepoint ecn that finds
// backlog bytes queued, with rnd a uniform 32-bit random number, as
// port_mark.h's two_threshold does, to the bit. One draw decides both marks:
// CE when rnd < HeavyP; otherwise ECT(1) when rnd − HeavyP is below
// LightP·(1 − HeavyP), which given no CE happens with probability LightP.
// Only ECT(0) is light-marked (ECT(1) already says "light congestion");
// ECT(0) and ECT(1) may be marked CE; CE stays CE; Not-ECT is never
// marked.
func TwoThresholdDecide(c *TwoThresholdConfig, backlog uint64, ecn ECN, rnd uint32) TwoThresholdVerdict {
	if backlog < c.T1 {
		return TwoThresholdPass
	}
	u, pce := uint64(rnd), c.HeavyP(backlog)
	if u < pce {
		switch {
		case ecn == ECT0 || ecn == ECT1:
			return TwoThresholdHeavy
		case ecn == NotECT && c.DropNotECT:
			return TwoThresholdDrop
		}
		return TwoThresholdPass
	}
	if ecn != ECT0 {
		return TwoThresholdPass
	}
	pl := c.LightP(backlog)
	if pce != 0 {
		pl = pl * (ProbOne - pce) >> 32
	}
	if u-pce < pl {
		return TwoThresholdLight
	}
	return TwoThresholdPass
}
