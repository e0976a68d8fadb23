package aqm

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TuneInput is what Tune derives marking parameters from: the link and the
// RTT distribution of the flows through it.
type TuneInput struct {
	// Rate is the link capacity C.
	Rate units.Rate
	// RTTp50 and RTTp90 are the median and 90th-percentile base RTTs.
	RTTp50, RTTp90 time.Duration
	// RTTAvg is the mean RTT. Optional: 0 uses RTTp50 (and a note says so).
	RTTAvg time.Duration
	// Lambda is λ of seed 002 eq. 1 for the instantaneous thresholds (K,
	// ins_target, TCN's): 1 for classic ECN TCP; the seed's testbed also
	// ran DCTCP behind thresholds of λ = 1 (§5.2: DCTCP-RED-Tail 250 KB at
	// 10 Gbit/s and a 210 µs RTT_p90), today's practice.
	Lambda float64
	// PstLambda is λ of the persistent target (pst_target and CoDel's
	// target ≥ λ·RTT_avg, §3.4, "λ is determined by the transport
	// protocol"): about 0.17 for DCTCP (§2.1). Optional: 0 uses Lambda.
	PstLambda float64
}

// TuneOutput holds the derived parameters, durations rounded to whole µs
// (to ns below 1 µs) and sizes to bytes.
type TuneOutput struct {
	InsTarget     time.Duration  `json:"ins_target_ns"`     // ECN♯ ins_target = λ·RTT_p90
	PstTarget     time.Duration  `json:"pst_target_ns"`     // ECN♯ pst_target = λ·RTT_avg, the lower bound
	PstInterval   time.Duration  `json:"pst_interval_ns"`   // ECN♯ pst_interval ≈ RTT_p90
	KTailBytes    units.ByteSize `json:"k_tail"`            // step K = λ·C·RTT_p90 (DCTCP-RED-Tail)
	KAvgBytes     units.ByteSize `json:"k_avg"`             // step K = λ·C·RTT_avg (DCTCP-RED-AVG)
	CoDelTarget   time.Duration  `json:"codel_target_ns"`   // = pst_target
	CoDelInterval time.Duration  `json:"codel_interval_ns"` // = RTT_p90
	TCNThreshold  time.Duration  `json:"tcn_threshold_ns"`  // = ins_target
	// RTTAvg is the mean RTT the formulas used: TuneInput.RTTAvg, or
	// RTTp50 when that was 0.
	RTTAvg time.Duration `json:"rtt_avg_ns"`
	// Notes explain choices and warn about parameters that fight.
	Notes []string `json:"notes,omitempty"`
}

// Tune applies seed 002's rule of thumb (§3.4, eq. 1 K = λ·C·RTT and eq. 2
// T = K/C = λ·RTT) and its testbed's choices for the baselines (§5.2:
// DCTCP-RED-Tail/-AVG, and CoDel with target = pst_target and interval =
// pst_interval). Errors name the field, the value and the allowed range.
func Tune(in TuneInput) (TuneOutput, error) {
	var out TuneOutput
	fd := units.FormatDuration
	switch {
	case in.Rate == 0:
		return out, fmt.Errorf("tune: rate (%s) must be greater than 0", in.Rate)
	case in.RTTp50 <= 0:
		return out, fmt.Errorf("tune: rtt_p50 (%s) must be greater than 0", fd(in.RTTp50))
	case in.RTTp90 <= 0:
		return out, fmt.Errorf("tune: rtt_p90 (%s) must be greater than 0", fd(in.RTTp90))
	case in.RTTp50 > in.RTTp90:
		return out, fmt.Errorf("tune: rtt_p50 (%s) must not exceed rtt_p90 (%s)", fd(in.RTTp50), fd(in.RTTp90))
	case in.RTTAvg < 0:
		return out, fmt.Errorf("tune: rtt_avg (%s) must be greater than 0, or 0 to use rtt_p50", fd(in.RTTAvg))
	case !(in.Lambda > 0 && in.Lambda <= 10): // also NaN
		return out, fmt.Errorf("tune: lambda (%s) must be in (0, 10] (1 for classic ECN TCP, 0.17 for DCTCP)",
			strconv.FormatFloat(in.Lambda, 'g', -1, 64))
	case !(in.PstLambda >= 0 && in.PstLambda <= 10): // also NaN
		return out, fmt.Errorf("tune: pst_lambda (%s) must be in [0, 10] (0: lambda's)",
			strconv.FormatFloat(in.PstLambda, 'g', -1, 64))
	}
	out.RTTAvg = in.RTTAvg
	if out.RTTAvg == 0 {
		out.RTTAvg = in.RTTp50
		out.Notes = append(out.Notes, fmt.Sprintf(
			"no average RTT given: pst_target, K_avg and the CoDel target use RTT p50 (%s) as the mean", fd(in.RTTp50)))
	}
	l, lp := in.Lambda, in.PstLambda
	if lp == 0 {
		lp = l
	}
	var err error
	// eq. 2 with the high-percentile RTT: tolerate bursts without
	// throughput loss (§3.2, §3.4).
	if out.InsTarget, err = roundDuration("ins_target = λ·RTT_p90", l*float64(in.RTTp90)); err != nil {
		return TuneOutput{}, err
	}
	// §3.4: "larger than or equal to λ × RTT, where ... RTT is the average
	// RTT"; the bound itself is the most the persistent rule can trim.
	if out.PstTarget, err = roundDuration("pst_target = λ_pst·RTT_avg", lp*float64(out.RTTAvg)); err != nil {
		return TuneOutput{}, err
	}
	// §3.4: "around the high percentile RTT"; §3.3: one worst-case RTT is
	// what TCP needs to react to a mark.
	if out.PstInterval, err = roundDuration("pst_interval = RTT_p90", float64(in.RTTp90)); err != nil {
		return TuneOutput{}, err
	}
	// eq. 1, K = λ·C·RTT, in bytes: C is bits/s.
	bytesFor := func(rtt time.Duration) float64 { return l * float64(in.Rate) / 8 * float64(rtt) / 1e9 }
	if out.KTailBytes, err = roundBytes("K_tail = λ·C·RTT_p90", bytesFor(in.RTTp90)); err != nil {
		return TuneOutput{}, err
	}
	if out.KAvgBytes, err = roundBytes("K_avg = λ·C·RTT_avg", bytesFor(out.RTTAvg)); err != nil {
		return TuneOutput{}, err
	}
	out.CoDelTarget = out.PstTarget
	out.CoDelInterval = out.PstInterval
	out.TCNThreshold = out.InsTarget

	out.Notes = append(out.Notes,
		"pst_target is the lower bound (seed 002 §3.4: pst_target ≥ λ·RTT_avg); raise it if GSO/LSO bursts make the queue oscillate",
		"pst_interval ≈ RTT_p90; a smaller one reacts faster to bursty traffic (seed 002 §3.4)")
	if out.PstTarget >= out.InsTarget {
		out.Notes = append(out.Notes, fmt.Sprintf(
			"pst_target (%s) is not below ins_target (%s): the instantaneous condition always marks first",
			fd(out.PstTarget), fd(out.InsTarget)))
	}
	const mtu = 1500
	for _, k := range []struct {
		name string
		v    units.ByteSize
	}{{"K_tail", out.KTailBytes}, {"K_avg", out.KAvgBytes}} {
		if k.v < mtu {
			out.Notes = append(out.Notes, fmt.Sprintf(
				"%s (%s) is below one %d-byte packet: a step queue marks nearly every packet", k.name, k.v, mtu))
		}
	}
	return out, nil
}

// roundDuration rounds ns to whole µs, or to whole ns below 1 µs.
func roundDuration(what string, ns float64) (time.Duration, error) {
	var r float64
	if ns < 1000 {
		r = math.Round(ns)
	} else {
		r = math.Round(ns/1000) * 1000
	}
	switch {
	case r >= math.MaxInt64:
		return 0, fmt.Errorf("tune: %s (%.3gs) is too long (max %s)", what, ns/1e9, units.FormatDuration(math.MaxInt64))
	case r < 1:
		return 0, fmt.Errorf("tune: %s (%.3gns) is below 1ns", what, ns)
	}
	return time.Duration(r), nil
}

// roundBytes rounds to whole bytes.
func roundBytes(what string, b float64) (units.ByteSize, error) {
	r := math.Round(b)
	if r >= math.MaxUint64 {
		return 0, fmt.Errorf("tune: %s (%.3g bytes) is too large (max %s)", what, b, units.ByteSize(math.MaxUint64))
	}
	return units.ByteSize(r), nil
}
