package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Timescale slows a fabric down so the host's stalls shrink beside it
// (issue 26 §2): at k every rate is divided by k and every time (round
// trips, link delays, controllers' timers and periods, AQM targets, run
// lengths) multiplied by k, while every amount of bytes stays (BDPs,
// buffers, thresholds, messages). The fabric is the same in dimensionless
// terms (FCT / ideal, queue / BDP, marks per packet), but a 1 ms stall of
// this VM is k times smaller against its round trip, and a packet costs
// the host the same CPU over k times the time.
//
// What does not scale: the host's per-packet CPU cost and timer
// granularity (both shrink relative to the fabric, which is the point),
// and constants of the kernel's own (HTB's minimum burst, a 1 µs "no
// delay" floor in NSCC): small against any scaled time here.
//
// The zero value is 1: no scaling.
type Timescale float64

// MaxTimescale bounds k: at 1000 a 1 Gbit/s fabric runs at 1 Mbit/s.
const MaxTimescale = 1000

// K is the factor, 1 for the zero value.
func (k Timescale) K() float64 {
	if k == 0 {
		return 1
	}
	return float64(k)
}

// Validate checks 1 <= k <= MaxTimescale (or the zero value).
func (k Timescale) Validate() error {
	if k == 0 || (k >= 1 && k <= MaxTimescale) {
		return nil
	}
	if math.IsNaN(float64(k)) {
		return fmt.Errorf("timescale NaN: must be 1..%d", MaxTimescale)
	}
	return fmt.Errorf("timescale %g: must be 1..%d", float64(k), MaxTimescale)
}

// Rate is r on the slowed fabric: r / k.
func (k Timescale) Rate(r Rate) Rate {
	if k.K() == 1 {
		return r
	}
	return Rate(math.Round(float64(r) / k.K()))
}

// Time is d on the slowed fabric: d × k.
func (k Timescale) Time(d time.Duration) time.Duration {
	if k.K() == 1 {
		return d
	}
	return time.Duration(math.Round(float64(d) * k.K()))
}

// Fabric turns a time measured on the slowed fabric back into the
// fabric's own: d / k.
func (k Timescale) Fabric(d time.Duration) time.Duration {
	if k.K() == 1 {
		return d
	}
	return time.Duration(math.Round(float64(d) / k.K()))
}

// String is "1" or the factor, as a lab file writes it.
func (k Timescale) String() string { return fmt.Sprintf("%g", k.K()) }

// Set parses a factor and validates it: *Timescale is a flag.Value, so
// every lab program's -timescale reads and refuses it alike.
func (k *Timescale) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return fmt.Errorf("timescale %q: want a factor 1..%d", s, MaxTimescale)
	}
	v := Timescale(f)
	if err := v.Validate(); err != nil {
		return err
	}
	*k = v
	return nil
}
