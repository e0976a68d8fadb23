package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Scheme is one marking scheme of the comparison (seed 002 §5.1) with the
// parameters Tune derived for it.
type Scheme struct {
	Name   string `json:"name"`  // as -schemes spells it
	Label  string `json:"label"` // as the seed names it
	Params Params `json:"params"`
}

// Params is what a scheme puts in the class config. Durations are µs.
type Params struct {
	Mode          string  `json:"ecn_mode"`
	LimitBytes    uint64  `json:"limit_bytes"`
	KBytes        uint64  `json:"k_bytes,omitempty"`           // step K; WRED min_th
	MaxThBytes    uint64  `json:"max_th_bytes,omitempty"`      // WRED max_th
	MaxP          float64 `json:"max_p,omitempty"`             // WRED, ECN♯'s probabilistic curve
	InsTargetUs   float64 `json:"ins_target_us,omitempty"`     // TCN threshold, ECN♯ ins_target (Kmin of its curve)
	InsMaxUs      float64 `json:"ins_max_us,omitempty"`        // ECN♯'s probabilistic curve: Kmax
	PstTargetUs   float64 `json:"pst_target_us,omitempty"`     // ECN♯
	PstIntervalUs float64 `json:"pst_interval_us,omitempty"`   // ECN♯
	TargetUs      float64 `json:"codel_target_us,omitempty"`   // CoDel
	IntervalUs    float64 `json:"codel_interval_us,omitempty"` // CoDel
	ForceTargets  bool    `json:"force_targets,omitempty"`     // ECN♯ pst_target ≥ ins_target accepted
	SqrtLaw       bool    `json:"sqrt_law,omitempty"`          // ECN♯ persistent marks at interval/sqrt(count)
	// Two-threshold (seed 001): ECT(1) from T1, CE from T2 to T2max.
	T1Bytes    uint64  `json:"t1_bytes,omitempty"`
	T2Bytes    uint64  `json:"t2_bytes,omitempty"`
	T2MaxBytes uint64  `json:"t2_max_bytes,omitempty"`
	LightMaxP  float64 `json:"light_max_p,omitempty"`
	HeavyMaxP  float64 `json:"heavy_max_p,omitempty"`
	// Overridden lists the parameters set by flag instead of aqm.Tune.
	Overridden []string `json:"overridden,omitempty"`
}

// sharpOverride holds ECN♯ parameters given by flag; 0 keeps aqm.Tune's.
// SqrtLaw spaces the persistent marks by CoDel's law.
type sharpOverride struct {
	InsTarget, PstTarget, PstInterval time.Duration
	SqrtLaw                           bool
}

// dcqcnMaxP is the marking probability at Kmax of DCQCN's RED curve: the
// production practice dcqcn.md quotes (HPCC's authors: 20 %; the paper's
// 1 % is for 40 Gbit/s and microsecond RTTs).
const dcqcnMaxP = 0.2

// schemes builds the schemes named in names (canonical order) from Tune's
// output, with the class buffer limit. With prob (DCQCN flows, seed 002
// §3.5), ECN♯'s instantaneous marking is the probabilistic curve of the
// WRED baseline, in sojourn: from λ·RTT_avg (K_avg/C) with probability 0
// to λ·RTT_p90 (K_tail/C) with dcqcnMaxP, every packet above.
func schemes(names []string, t aqm.TuneOutput, limit units.ByteSize, ov sharpOverride, prob bool) ([]Scheme, error) {
	var out []Scheme
	for _, n := range names {
		s := Scheme{Name: n, Params: Params{LimitBytes: uint64(limit)}}
		p := &s.Params
		switch n {
		case "wred":
			s.Label = "WRED"
			p.Mode, p.KBytes, p.MaxThBytes, p.MaxP = qdisc.ECNWRED.String(), uint64(t.KAvgBytes), uint64(t.KTailBytes), dcqcnMaxP
		case "step-tail":
			s.Label = "step-Tail"
			p.Mode, p.KBytes = qdisc.ECNStep.String(), uint64(t.KTailBytes)
		case "step-avg":
			s.Label = "step-AVG"
			p.Mode, p.KBytes = qdisc.ECNStep.String(), uint64(t.KAvgBytes)
		case "codel":
			s.Label = "CoDel"
			p.Mode, p.TargetUs, p.IntervalUs = qdisc.ECNCoDel.String(), us(t.CoDelTarget), us(t.CoDelInterval)
		case "tcn":
			s.Label = "TCN"
			p.Mode, p.InsTargetUs = qdisc.ECNTCN.String(), us(t.TCNThreshold)
		case "ecnsharp":
			s.Label = "ECN♯"
			p.Mode = qdisc.ECNSharp.String()
			ins, pst, iv := t.InsTarget, t.PstTarget, t.PstInterval
			for _, o := range []struct {
				name string
				v    time.Duration
				dst  *time.Duration
			}{{"ins_target", ov.InsTarget, &ins}, {"pst_target", ov.PstTarget, &pst}, {"pst_interval", ov.PstInterval, &iv}} {
				if o.v != 0 {
					*o.dst = o.v
					p.Overridden = append(p.Overridden, o.name)
				}
			}
			p.InsTargetUs, p.PstTargetUs, p.PstIntervalUs = us(ins), us(pst), us(iv)
			if ov.SqrtLaw {
				p.SqrtLaw = true
				p.Overridden = append(p.Overridden, "sqrt")
			}
			if prob {
				s.Label = "ECN♯ (prob.)"
				// The curve's Kmin is the WRED baseline's, in time; an
				// ins_target set by flag moves Kmax.
				p.InsTargetUs, p.InsMaxUs, p.MaxP = us(avgTime(t)), us(ins), dcqcnMaxP
			}
			// With no RTT spread the mean reaches the p90 and the
			// persistent target is not below the instantaneous one: run
			// it anyway (the tune notes say so) rather than refuse.
			p.ForceTargets = pst >= fromUs(p.InsTargetUs)
		case "two-threshold":
			// The lab's endpoints take ECT(1) for ECT: only the CE
			// curve acts on them (no tunnel ingress PE reacts to the
			// light marks), so this is WRED from K_tail with the light
			// marks counted.
			s.Label = "2T"
			tt := qdisc.TwoThresholdTune(t)
			p.Mode = qdisc.ECNTwoThreshold.String()
			p.T1Bytes, p.T2Bytes, p.T2MaxBytes = uint64(tt.T1Bytes), uint64(tt.T2Bytes), uint64(tt.T2MaxBytes)
			p.LightMaxP, p.HeavyMaxP = tt.LightMaxP, tt.HeavyMaxP
			if p.T2MaxBytes > p.LimitBytes {
				return nil, fmt.Errorf("%s: t2_max (%s) must be at most the class limit (%s): raise -limit", s.Label, units.ByteSize(p.T2MaxBytes), limit)
			}
		default:
			return nil, fmt.Errorf("unknown scheme %q", n)
		}
		if p.KBytes != 0 && p.KBytes >= p.LimitBytes {
			return nil, fmt.Errorf("%s: K (%s) must be below the class limit (%s): raise -limit", s.Label, units.ByteSize(p.KBytes), limit)
		}
		out = append(out, s)
	}
	return out, nil
}

// classConfig is the class configuration of the scheme.
func (s *Scheme) classConfig(name string) (qdisc.ClassConfig, error) {
	p := &s.Params
	mode, err := qdisc.ParseECNMode(p.Mode)
	if err != nil {
		return qdisc.ClassConfig{}, err
	}
	return qdisc.ClassConfig{
		Name:         name,
		LimitBytes:   units.ByteSize(p.LimitBytes),
		ECN:          mode,
		MinThBytes:   units.ByteSize(p.KBytes),
		MaxThBytes:   units.ByteSize(p.MaxThBytes),
		MaxP:         p.MaxP,
		InsMax:       fromUs(p.InsMaxUs),
		InsTarget:    fromUs(p.InsTargetUs),
		PstTarget:    fromUs(p.PstTargetUs),
		PstInterval:  fromUs(p.PstIntervalUs),
		Target:       fromUs(p.TargetUs),
		Interval:     fromUs(p.IntervalUs),
		ForceTargets: p.ForceTargets,
		SqrtLaw:      p.SqrtLaw,
		TwoThreshold: qdisc.TwoThreshold{T1Bytes: units.ByteSize(p.T1Bytes), T2Bytes: units.ByteSize(p.T2Bytes),
			T2MaxBytes: units.ByteSize(p.T2MaxBytes), LightMaxP: p.LightMaxP, HeavyMaxP: p.HeavyMaxP},
	}, nil
}

// describe is the scheme's parameters in one short line for the table.
func (p *Params) describe(rate units.Rate) string {
	q := func(b uint64) string {
		return fmt.Sprintf("%.1fKB=%.0fµs", float64(b)/1000, bytesToUs(float64(b), rate))
	}
	switch p.Mode {
	case "wred":
		return fmt.Sprintf("min %s max %s p %.2g", q(p.KBytes), q(p.MaxThBytes), p.MaxP)
	case "step":
		return "K " + q(p.KBytes)
	case "two-threshold":
		return fmt.Sprintf("t1 %s t2 %s p1 %.2g t2max %s p2 %.2g", q(p.T1Bytes), q(p.T2Bytes), p.LightMaxP, q(p.T2MaxBytes), p.HeavyMaxP)
	case "tcn":
		return fmt.Sprintf("T %.0fµs", p.InsTargetUs)
	case "codel":
		return fmt.Sprintf("target %.0fµs interval %.0fµs", p.TargetUs, p.IntervalUs)
	case "ecnsharp":
		d := fmt.Sprintf("ins %.0fµs pst %.0fµs/%.0fµs", p.InsTargetUs, p.PstTargetUs, p.PstIntervalUs)
		if p.InsMaxUs > 0 {
			d = fmt.Sprintf("ins %.0f-%.0fµs p %.2g pst %.0fµs/%.0fµs", p.InsTargetUs, p.InsMaxUs, p.MaxP, p.PstTargetUs, p.PstIntervalUs)
		}
		if len(p.Overridden) > 0 {
			d += " (" + strings.Join(p.Overridden, ",") + " by flag)"
		}
		return d
	}
	return p.Mode
}

// avgTime is K_avg in time: λ·RTT_avg (aqm.Tune's K_avg over C).
func avgTime(t aqm.TuneOutput) time.Duration {
	if t.KTailBytes == 0 {
		return 0
	}
	return time.Duration(float64(t.InsTarget) * float64(t.KAvgBytes) / float64(t.KTailBytes))
}

// autoLimit is the class buffer: 4·K_tail, so that the step-Tail queue
// never reaches it, and at least minLimit for the slow-start overshoot.
func autoLimit(kTail units.ByteSize) units.ByteSize {
	return max(4*kTail, minLimit)
}

// tuneFrom derives every scheme's parameters from the measured RTTs: the
// pooled distribution stands for the flows' RTTs (each sender probed the
// same number of times, and carries the same number of flows).
func tuneFrom(rtt *RTTReport, rate units.Rate, lambda, pstLambda float64) (aqm.TuneOutput, error) {
	p := &rtt.PooledUs
	if p.N == 0 {
		return aqm.TuneOutput{}, fmt.Errorf("tune: no RTT samples")
	}
	return aqm.Tune(aqm.TuneInput{Rate: rate, RTTp50: fromUs(p.P50), RTTp90: fromUs(p.P90), RTTAvg: fromUs(p.Mean), Lambda: lambda, PstLambda: pstLambda})
}
