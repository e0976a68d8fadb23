package lb

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Params configure every balancer; each reads the fields it needs.
// DefaultParams gives htsim's values.
type Params struct {
	// FirstPort and Ports are the EV space: the UDP source ports
	// FirstPort .. FirstPort+Ports−1 (default 0xC000..0xFFFF, the
	// dynamic range, as host/pds already uses).
	FirstPort uint16
	Ports     int
	// EVs is how many EVs one balancer uses (htsim -paths,
	// path_entropy_size): a power of two that divides Ports. A balancer
	// uses an aligned block of EVs ports drawn at random when it is made
	// (htsim's random upper bits), so that flows differ.
	EVs int

	// Bitmap (and Mixed): the penalty an ECN-marked ACK and a NACK add to
	// their EV, and the cap, which a timeout sets at once (htsim
	// UecMpBitmap: 1, 4, 15).
	ECNPenalty  uint8
	NackPenalty uint8
	MaxPenalty  uint8

	// REPS: the circular buffer of clean EVs (htsim repsBufferSize, 8).
	REPSBufferSize int
	// REPSFreeze enables freezing mode (htsim repsUseFreezing, on): a
	// timeout, outside exploration, makes REPS reuse the EVs in its buffer
	// round robin until the first feedback after REPSFreezeTime
	// (exit_freeze_after, 10 ms), which empties the buffer and explores
	// REPSExploreAfterFreeze (16) random EVs.
	REPSFreeze             bool
	REPSFreezeTime         time.Duration
	REPSExploreAfterFreeze int

	// MixedRecycleLimit bounds Mixed's list of clean EVs waiting to be
	// reused (htsim's is a std::list without bound; it holds at most one
	// entry per packet in flight when the sender calls Next for each
	// packet). When full the oldest is dropped (Stats.Overflow).
	MixedRecycleLimit int
}

// htsim's values (uec_mp.cpp, buffer_reps.cpp at 40ccb05).
const (
	DefaultFirstPort = 0xC000
	DefaultPorts     = 0x4000
	// DefaultEVs is the EV count of the published htsim runs uet.md
	// quotes (128 EVs against 1); main_uec's -paths defaults to 64.
	DefaultEVs = 128
)

// DefaultParams returns htsim's settings over the ports 0xC000..0xFFFF
// with 128 EVs per balancer.
func DefaultParams() Params {
	return Params{
		FirstPort:              DefaultFirstPort,
		Ports:                  DefaultPorts,
		EVs:                    DefaultEVs,
		ECNPenalty:             1,
		NackPenalty:            4,
		MaxPenalty:             15,
		REPSBufferSize:         8,
		REPSFreeze:             true,
		REPSFreezeTime:         10 * time.Millisecond, // 10 000 000 000 ps
		REPSExploreAfterFreeze: 16,
		MixedRecycleLimit:      4096,
	}
}

// Ranges chosen here; htsim checks none.
const (
	minFirstPort     = 1024 // not a well-known port
	maxREPSBuffer    = 4096
	maxFreezeTime    = 10 * time.Second
	maxMixedRecycles = 1 << 20
)

// Validate checks every field; the error joins one line per problem, each
// naming the field (by htsim's name where it has one), the value and the
// allowed range.
func (p Params) Validate() error {
	var errs []error
	bad := func(name string, v any, rule string) {
		errs = append(errs, fmt.Errorf("lb: %s=%v: must be %s", name, v, rule))
	}
	if p.FirstPort < minFirstPort {
		bad("first_port", p.FirstPort, fmt.Sprintf("%d..65535", minFirstPort))
	}
	maxPorts := 65536 - int(p.FirstPort)
	portsOK := p.Ports >= 1 && p.Ports <= maxPorts
	if !portsOK {
		bad("ports", p.Ports, fmt.Sprintf("1..%d (first_port %d + ports − 1 ≤ 65535)", maxPorts, p.FirstPort))
	}
	switch {
	case p.EVs < 1 || bits.OnesCount(uint(p.EVs)) != 1:
		bad("evs", p.EVs, "a power of two ≥ 1 (htsim path_entropy_size)")
	case portsOK && (p.EVs > p.Ports || p.Ports%p.EVs != 0):
		bad("evs", p.EVs, fmt.Sprintf("a power of two dividing ports (%d)", p.Ports))
	}
	if p.MaxPenalty < 1 {
		bad("max_penalty", p.MaxPenalty, "1..255")
	} else {
		if p.ECNPenalty < 1 || p.ECNPenalty > p.MaxPenalty {
			bad("ecn_penalty", p.ECNPenalty, fmt.Sprintf("1..max_penalty (%d)", p.MaxPenalty))
		}
		if p.NackPenalty < 1 || p.NackPenalty > p.MaxPenalty {
			bad("nack_penalty", p.NackPenalty, fmt.Sprintf("1..max_penalty (%d)", p.MaxPenalty))
		}
	}
	if p.REPSBufferSize < 1 || p.REPSBufferSize > maxREPSBuffer {
		bad("reps_buffer_size", p.REPSBufferSize, fmt.Sprintf("1..%d", maxREPSBuffer))
	}
	if p.REPSFreezeTime < 0 || p.REPSFreezeTime > maxFreezeTime {
		bad("exit_freeze_after", p.REPSFreezeTime, fmt.Sprintf("0s..%v", maxFreezeTime))
	}
	if p.REPSExploreAfterFreeze < 0 || p.REPSExploreAfterFreeze > 65535 {
		bad("explore_counter", p.REPSExploreAfterFreeze, "0..65535")
	}
	if p.MixedRecycleLimit < 1 || p.MixedRecycleLimit > maxMixedRecycles {
		bad("mixed_recycle_limit", p.MixedRecycleLimit, fmt.Sprintf("1..%d", maxMixedRecycles))
	}
	return errors.Join(errs...)
}
