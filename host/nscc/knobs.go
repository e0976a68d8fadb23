package nscc

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// knob is one Params field settable by its spec name (UE 1.0 Table 3-76,
// htsim's names), for config files and --nscc.
type knob struct {
	name string
	set  func(p *Params, v string) error
}

func timeKnob(f func(*Params) *time.Duration) func(*Params, string) error {
	return func(p *Params, v string) error {
		d, err := units.ParseDuration(v)
		if err != nil {
			return err
		}
		*f(p) = d
		return nil
	}
}

func floatKnob(f func(*Params) *float64) func(*Params, string) error {
	return func(p *Params, v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("want a number")
		}
		*f(p) = x
		return nil
	}
}

func intKnob(f func(*Params) *int) func(*Params, string) error {
	return func(p *Params, v string) error {
		s, err := units.ParseSize(v)
		if err != nil || uint64(s) > 1<<31 {
			return fmt.Errorf("want bytes like 4096 or 64kb")
		}
		*f(p) = int(s)
		return nil
	}
}

var knobs = []knob{
	{"target_qdelay", timeKnob(func(p *Params) *time.Duration { return &p.TargetQDelay })},
	{"qa_threshold", timeKnob(func(p *Params) *time.Duration { return &p.QAThreshold })},
	{"adjust_period_threshold", timeKnob(func(p *Params) *time.Duration { return &p.AdjustPeriodThreshold })},
	{"base_rtt_floor", timeKnob(func(p *Params) *time.Duration { return &p.BaseRTTFloor })},
	{"no_delay", timeKnob(func(p *Params) *time.Duration { return &p.NoDelay })},
	{"max_wnd", floatKnob(func(p *Params) *float64 { return &p.MaxWndBDPs })},
	{"initial_cwnd", intKnob(func(p *Params) *int { return &p.InitialCwndBytes })},
	{"adjust_bytes_threshold", intKnob(func(p *Params) *int { return &p.AdjustBytesThreshold })},
	{"alpha", floatKnob(func(p *Params) *float64 { return &p.AlphaBytesPerSecond })},
	{"fi", floatKnob(func(p *Params) *float64 { return &p.FIBytes })},
	{"fi_scale", floatKnob(func(p *Params) *float64 { return &p.FIScale })},
	{"eta", floatKnob(func(p *Params) *float64 { return &p.EtaBytes })},
	{"gamma", floatKnob(func(p *Params) *float64 { return &p.Gamma })},
	{"max_md_jump", floatKnob(func(p *Params) *float64 { return &p.MaxMDJump })},
	{"delay_alpha", floatKnob(func(p *Params) *float64 { return &p.DelayAlpha })},
	{"qa_gate", func(p *Params, v string) error {
		n, err := strconv.ParseUint(v, 10, 8)
		if err != nil {
			return fmt.Errorf("want an integer 0..%d", maxQAGate)
		}
		p.QAGate = uint(n)
		return nil
	}},
	{"disable_quick_adapt", func(p *Params, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false")
		}
		p.DisableQuickAdapt = b
		return nil
	}},
}

// KnobNames lists the names Set takes.
func KnobNames() []string {
	out := make([]string, len(knobs))
	for i, k := range knobs {
		out[i] = k.name
	}
	return out
}

// Set sets the knob name (its spec name, as Validate words it) from value:
// times with a unit ("500us"), byte counts ("64kb", bare is bytes),
// plain numbers for the gains (alpha in bytes/s, fi and eta in bytes,
// max_wnd in BDPs). The value is range-checked with the rest of p: on
// error p is unchanged.
func (p *Params) Set(name, value string) error {
	i := slices.IndexFunc(knobs, func(k knob) bool { return k.name == name })
	if i < 0 {
		return fmt.Errorf("nscc: unknown knob %q (valid: %s)", name, strings.Join(KnobNames(), ", "))
	}
	q := *p
	if err := knobs[i].set(&q, value); err != nil {
		return fmt.Errorf("nscc: %s=%s: %v", name, value, err)
	}
	if err := q.Validate(); err != nil {
		return err
	}
	*p = q
	return nil
}
