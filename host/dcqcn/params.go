package dcqcn

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/enum"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Params holds every DCQCN knob under its mlx5 name (MLNX_OFED
// /sys/class/net/<if>/ecn/roce_rp|roce_np/<name>, upstream debugfs
// cc_params), in typed units, plus the variant switches that pick a side
// where implementations disagree (see the package documentation).
//
// Rates are absolute: Set("rpg_ai_rate", "5") means 5 Mbit/s whatever the
// line rate. Only the profile constructors scale rate knobs to the line.
type Params struct {
	// LineRate is the port speed the profile is scaled to. Required > 0.
	LineRate units.Rate

	ClampTgtRate             bool          // clamp_tgt_rate: 1 ⇒ Rt = Rc on every cut
	ClampTgtRateAfterTimeInc bool          // clamp_tgt_rate_after_time_inc: Rt = Rc on a cut if the timer raised the rate since the last cut
	RPGTimeReset             time.Duration // rpg_time_reset: increase timer period T
	RPGByteReset             uint64        // rpg_byte_reset: byte counter B, bytes; 0 = byte counter off
	RPGThreshold             int           // rpg_threshold: F, fast-recovery stages
	RPGMaxRate               units.Rate    // rpg_max_rate: rate cap; 0 = LineRate
	RPGAIRate                units.Rate    // rpg_ai_rate: R_AI, additive increase of Rt
	RPGHAIRate               units.Rate    // rpg_hai_rate: R_HAI, hyper increase of Rt
	RPGGD                    int           // rpg_gd: cut = Rc·α·1024/2^gd; 11 ≡ the paper's α/2
	RPGMinDecFac             int           // rpg_min_dec_fac: percent of Rc one cut keeps at least
	RPGMinRate               units.Rate    // rpg_min_rate: Rmin
	RateToSetOnFirstCNP      units.Rate    // rate_to_set_on_first_cnp: Rc = Rt on the first CNP; 0 = keep
	DCETCPG                  int           // dce_tcp_g: of 1024; the α gain is g = 1 − G/1024
	DCETCPRTT                time.Duration // dce_tcp_rtt: α timer period K
	RateReduceMonitorPeriod  time.Duration // rate_reduce_monitor_period: at most one cut per period; 0 = every CNP cuts
	InitialAlphaValue        int           // initial_alpha_value: α on the first CNP, of 1024 (1024 = 1.0)
	MinTimeBetweenCNPs       time.Duration // min_time_between_cnps: NP coalescing period N
	CNPDSCP                  uint8         // cnp_dscp: DSCP of generated CNPs
	CNP802pPrio              uint8         // cnp_802p_prio: 802.1p priority of generated CNPs

	// Variant switches; Set and Get reach them by the names in VariantNames.
	AlphaRule         AlphaRule    // alpha_rule: when α moves relative to a cut
	AlphaTimerRestart bool         // alpha_timer_restart: a cut re-arms the α timer (paper); else it runs free from the first CNP (mlx5)
	IncreaseRule      IncreaseRule // increase_rule: stage thresholds of the increase state machine
	ReduceTiming      ReduceTiming // reduce_timing: how rate_reduce_monitor_period coalesces CNPs
	ClampRtAtMaxRate  bool         // clamp_rt_at_max_rate: cap Rt, not only Rc, at the max rate
	// RateValidation (rate_validation, percent; 0 = off) skips an increase
	// event, stage included, when the QP sent less than this share of
	// Rc·period since the previous increase event or cut. A departure from
	// firmware: a NIC always sends at Rc, a software sender may not (CPU,
	// window), and a rate it does not use must not grow (RFC 7661's
	// congestion window validation, applied to Rc).
	RateValidation int
}

// AlphaRule says when α moves relative to a rate cut.
type AlphaRule uint8

const (
	// AlphaAfterCut cuts with the old α, then sets α ← (1−g)·α + g; α
	// decays by (1−g) on every α timer event (paper §3.1, eq. (1) order;
	// the dcqcn.md pseudo-code).
	AlphaAfterCut AlphaRule = iota
	// AlphaBeforeCut sets α ← (1−g)·α + g, then cuts with the new α
	// (ns3-rdma rpr_cnm_received).
	AlphaBeforeCut
	// AlphaPerPeriod samples α once every K: α ← (1−g)·α + g·[a CNP arrived
	// in the period], the CNP that starts the flow's rate limiter not
	// counted; cuts use α as it stands (mlx5 dce_tcp_g/dce_tcp_rtt per the
	// NVIDIA DCQCN parameter table; HPCC ns-3 UpdateAlphaMlx).
	AlphaPerPeriod
)

var alphaRuleNames = enum.Names{AlphaAfterCut: {"after_cut"}, AlphaBeforeCut: {"before_cut"}, AlphaPerPeriod: {"per_period"}}

func (a AlphaRule) String() string { return enum.Format(a, alphaRuleNames, "%d") }

// IncreaseRule picks the stage thresholds of the rate increase state
// machine. T counts increase-timer events and BC byte-counter events since
// the last cut; F is rpg_threshold.
type IncreaseRule uint8

const (
	// IncreasePaper: fast recovery while max(T, BC) ≤ F (F steps), hyper
	// increase Rt += (min(T, BC) − F)·R_HAI once min(T, BC) > F, additive
	// increase Rt += R_AI in between (paper §3.1; QCN rpg_threshold
	// semantics, Linux dcbnl.h ieee_qcn).
	IncreasePaper IncreaseRule = iota
	// IncreaseNS3: the same with F−1 in place of F: F−1 fast-recovery steps
	// and Rt += (min(T, BC) − F + 1)·R_HAI (ns3-rdma rpr_fast_time,
	// rpr_active_select, rpr_hyper_increase). Its other quirks are not
	// copied: Rt /= 8 on the first stage, halved timer and byte thresholds
	// in hyper increase.
	IncreaseNS3
)

var increaseRuleNames = enum.Names{IncreasePaper: {"paper"}, IncreaseNS3: {"ns3"}}

func (i IncreaseRule) String() string { return enum.Format(i, increaseRuleNames, "%d") }

// ReduceTiming says how rate_reduce_monitor_period coalesces CNPs. With a
// period of 0 both cut on every CNP at once.
type ReduceTiming uint8

const (
	// ReduceDeferred cuts at the end of each monitor period in which a CNP
	// arrived; periods are a grid anchored at the first CNP; later CNPs of
	// the same period are ignored (HPCC ns-3 CheckRateDecreaseMlx). Needed
	// for the mlx5 first-CNP factor 0.50777 in dcqcn.md.
	ReduceDeferred ReduceTiming = iota
	// ReduceLeadingEdge cuts at once on a CNP and ignores CNPs until one
	// period has passed since that cut.
	ReduceLeadingEdge
)

var reduceTimingNames = enum.Names{ReduceDeferred: {"deferred"}, ReduceLeadingEdge: {"leading_edge"}}

func (r ReduceTiming) String() string { return enum.Format(r, reduceTimingNames, "%d") }

// Reference port speeds the profiles' rate knobs are given at.
const (
	// PaperLineRate is the testbed speed of the DCQCN paper and of the
	// author's ns-3 configuration (R_AI 40 Mbit/s, R_HAI 200 Mbit/s).
	PaperLineRate = 40 * units.Gbit
	// MLX5RefLineRate is the port speed the mlx5 firmware defaults are
	// taken at: a ConnectX-4 Lx at 25 Gbit/s, the NIC of the reference
	// CNP capture. The firmware's rates are absolute Mbit/s; MLX5Params
	// scales them by lineRate/MLX5RefLineRate.
	MLX5RefLineRate = 25 * units.Gbit
)

// DefaultProfile is every tool's profile when none is named (roceperf,
// the daemon, lab files): LabParams, the paper's loop for hosts whose
// round trips are milliseconds, which a port of this lab carries. mlx5's
// timers, made for µs round trips, let a 100 Mbit/s port fill its buffer
// here (the daemon's shipped config held 896 KB, a 134 ms p50 sojourn;
// roceperf through a 500 Mbit/s port: 32,049 CNPs against lab's 803).
const DefaultProfile = "lab"

// Profile returns the named profile scaled to lineRate: "paper", "mlx5"
// or "lab".
func Profile(name string, lineRate units.Rate) (Params, error) {
	if lineRate == 0 {
		return Params{}, &KnobError{Reason: "line rate 0: must be > 0"}
	}
	switch name {
	case "paper":
		return PaperParams(lineRate), nil
	case "mlx5":
		return MLX5Params(lineRate), nil
	case "lab":
		return LabParams(lineRate), nil
	}
	return Params{}, &KnobError{Profile: true, Value: name, Reason: "must be one of " + strings.Join(ProfileNames(), ", ")}
}

// ProfileNames lists the names Profile accepts, sorted.
func ProfileNames() []string { return []string{"lab", "mlx5", "paper"} }

// LabParams is the paper profile for a lab of software hosts whose round
// trips are milliseconds (network namespaces on shared cores: the netns
// tests, the experiment). PaperParams already scales R_AI, R_HAI and Rmin
// with the line rate (at 1 Gbit/s: 40 -> 1, 200 -> 5, 100 -> 2.5 Mbit/s); on
// top:
//
//   - Every time constant stretched by the same factor 40: the increase
//     timer T (rpg_time_reset) and the alpha timer K (dce_tcp_rtt) 55 µs ->
//     2.2 ms. Rates / 40 with times × 40 is the paper's 40 Gbit/s testbed
//     slowed down 40 times: bytes per timer period, R_AI per T relative to
//     the line, B and K > N stay as they were. Keeping the 40 Gbit/s times
//     puts T and N far below such a fabric's feedback delay (a CE mark made
//     at enqueue reaches the NP a queue sojourn later, 4-8 ms for 0.5-1 MB
//     at 1 Gbit/s, plus the hosts' scheduling): measured with T = K = 55 or
//     300 µs the queue swung between empty and the limit, with drops, at
//     0.71-0.97 utilization.
//   - N (min_time_between_cnps) 1 ms rather than the stretched 2 ms: with
//     the NP in the kernel the CNPs leave at once, and two senders could
//     then get too few of them to hold the queue under max_th (the netns
//     tests: p99 of the backlog arrivals found 380-530 KiB of max_th 512
//     KiB in 10 runs at 500 Mbit/s, one over; with 1 ms, 378-428 KiB in 6).
//     K = 2.2 ms still exceeds N.
//   - clamp_tgt_rate 0 and clamp_tgt_rate_after_time_inc 1 (the mlx5
//     firmware defaults) instead of the paper's Rt = Rc on every cut: the
//     marks made before the senders slow down arrive a sojourn later, so a
//     congestion episode brings a burst of CNPs; with Rt following each cut
//     the burst ratchets Rt down 20-30 % and the additive increase leaves
//     the link partly idle for hundreds of ms (0.93-0.98 utilization).
//   - rate_validation 75: a software sender that did not send at its Rc
//     (CPU, window) does not raise it.
func LabParams(lineRate units.Rate) Params {
	p := PaperParams(lineRate)
	p.RPGTimeReset = 2200 * time.Microsecond
	p.DCETCPRTT = 2200 * time.Microsecond
	p.MinTimeBetweenCNPs = time.Millisecond
	p.ClampTgtRate = false
	p.ClampTgtRateAfterTimeInc = true
	p.RateValidation = 75
	return p
}

// PaperParams is the paper-style profile (dcqcn.md "Constants"): N = 50 µs,
// K = 55 µs, g = 1/256, F = 5, B = 10 MB, T = 55 µs, α starts at 1, no CNP
// coalescing at the RP. R_AI = 40 Mbit/s, R_HAI = 200 Mbit/s (the author's
// ns-3 config) and Rmin = 100 Mbit/s (ns3-rdma MinRate) are given at 40
// Gbit/s and scaled by lineRate/40G; times and B are not scaled.
func PaperParams(lineRate units.Rate) Params {
	return Params{
		LineRate:                lineRate,
		ClampTgtRate:            true, // paper: Rt = Rc on every CNP
		RPGTimeReset:            55 * time.Microsecond,
		RPGByteReset:            10_000_000, // 10 MB, SI as in the paper
		RPGThreshold:            5,
		RPGAIRate:               scaleRate(40*units.Mbit, lineRate, PaperLineRate),
		RPGHAIRate:              scaleRate(200*units.Mbit, lineRate, PaperLineRate),
		RPGGD:                   11, // α/2
		RPGMinDecFac:            0,  // the paper has no floor
		RPGMinRate:              scaleRate(100*units.Mbit, lineRate, PaperLineRate),
		DCETCPG:                 1020, // g = 4/1024 = 1/256
		DCETCPRTT:               55 * time.Microsecond,
		RateReduceMonitorPeriod: 0,
		InitialAlphaValue:       1024, // α = 1.0
		MinTimeBetweenCNPs:      50 * time.Microsecond,
		CNPDSCP:                 48, // common convention; not in the paper
		CNP802pPrio:             6,

		AlphaRule:         AlphaAfterCut,
		AlphaTimerRestart: true,
		IncreaseRule:      IncreasePaper,
		ReduceTiming:      ReduceLeadingEdge, // moot with period 0
		ClampRtAtMaxRate:  false,             // dcqcn.md vector 1: Rt 40.04 G
	}
}

// MLX5Params is the mlx5 firmware default profile (dcqcn.md table, NVIDIA
// DCQCN parameters). The firmware's rate knobs are absolute Mbit/s; taken
// as defaults of a 25 Gbit/s ConnectX-4 Lx, rpg_ai_rate 5, rpg_hai_rate 50
// and rpg_min_rate 1 Mbit/s are scaled by lineRate/25G (0.2, 2 and 0.04
// Mbit/s at 1 Gbit/s). Times and rpg_byte_reset are not scaled.
func MLX5Params(lineRate units.Rate) Params {
	return Params{
		LineRate:                 lineRate,
		ClampTgtRate:             false,
		ClampTgtRateAfterTimeInc: true,
		RPGTimeReset:             300 * time.Microsecond,
		RPGByteReset:             32767,
		RPGThreshold:             1,
		RPGMaxRate:               0,
		RPGAIRate:                scaleRate(5*units.Mbit, lineRate, MLX5RefLineRate),
		RPGHAIRate:               scaleRate(50*units.Mbit, lineRate, MLX5RefLineRate),
		RPGGD:                    11,
		RPGMinDecFac:             50,
		RPGMinRate:               scaleRate(1*units.Mbit, lineRate, MLX5RefLineRate),
		RateToSetOnFirstCNP:      0,
		DCETCPG:                  1019,
		DCETCPRTT:                1 * time.Microsecond,
		RateReduceMonitorPeriod:  4 * time.Microsecond,
		InitialAlphaValue:        1023,
		MinTimeBetweenCNPs:       4 * time.Microsecond,
		CNPDSCP:                  48,
		CNP802pPrio:              6,

		AlphaRule:         AlphaPerPeriod,
		AlphaTimerRestart: false,
		IncreaseRule:      IncreasePaper,
		ReduceTiming:      ReduceDeferred,
		ClampRtAtMaxRate:  true, // HPCC ActiveIncreaseMlx/HyperIncreaseMlx
	}
}

// scaleRate returns r·lineRate/ref rounded to nearest, at least 1 bit/s if
// r > 0.
func scaleRate(r, lineRate, ref units.Rate) units.Rate {
	if r == 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(r), uint64(lineRate))
	if hi >= uint64(ref) {
		return units.Rate(math.MaxUint64)
	}
	q, rem := bits.Div64(hi, lo, uint64(ref))
	if rem >= uint64(ref)-rem && q < math.MaxUint64 {
		q++
	}
	return units.Rate(max(q, 1))
}

// MaxRate is the rate cap: rpg_max_rate if set and below the line rate,
// else the line rate.
func (p Params) MaxRate() units.Rate {
	if p.RPGMaxRate == 0 || p.RPGMaxRate > p.LineRate {
		return p.LineRate
	}
	return p.RPGMaxRate
}

// G is the α gain g = 1 − dce_tcp_g/1024.
func (p Params) G() float64 { return 1 - float64(p.DCETCPG)/1024 }

type knobKind uint8

const (
	kindRate  knobKind = iota // units.Rate; plain numbers are Mbit/s
	kindTime                  // time.Duration; plain numbers are µs
	kindBytes                 // bytes; tc sizes accepted
	kindInt                   // plain integers
	kindBool                  // 0/1/true/false
	kindEnum                  // one of names
)

// knob describes one settable name. Values are int64 in base units: bit/s,
// ns, bytes, counts, 0/1, enum index.
type knob struct {
	name     string
	kind     knobKind
	unit     string // shown in range errors
	min, max int64
	maxLine  bool // max is the line rate
	names    enum.Names
	get      func(*Params) int64
	set      func(*Params, int64)
}

const usNS = int64(time.Microsecond)

func rateKnob(name string, min int64, f func(*Params) *units.Rate) knob {
	return knob{name: name, kind: kindRate, unit: "Mbit/s", min: min, maxLine: true,
		get: func(p *Params) int64 { return clampInt64(uint64(*f(p))) },
		set: func(p *Params, v int64) { *f(p) = units.Rate(v) }}
}

func timeKnob(name string, min, max int64, f func(*Params) *time.Duration) knob {
	return knob{name: name, kind: kindTime, unit: "µs", min: min, max: max,
		get: func(p *Params) int64 { return int64(*f(p)) },
		set: func(p *Params, v int64) { *f(p) = time.Duration(v) }}
}

func intKnob(name, unit string, min, max int64, f func(*Params) *int) knob {
	return knob{name: name, kind: kindInt, unit: unit, min: min, max: max,
		get: func(p *Params) int64 { return int64(*f(p)) },
		set: func(p *Params, v int64) { *f(p) = int(v) }}
}

func u8Knob(name, unit string, max int64, f func(*Params) *uint8) knob {
	return knob{name: name, kind: kindInt, unit: unit, min: 0, max: max,
		get: func(p *Params) int64 { return int64(*f(p)) },
		set: func(p *Params, v int64) { *f(p) = uint8(v) }}
}

func boolKnob(name string, f func(*Params) *bool) knob {
	return knob{name: name, kind: kindBool, unit: "0 or 1", min: 0, max: 1,
		get: func(p *Params) int64 {
			if *f(p) {
				return 1
			}
			return 0
		},
		set: func(p *Params, v int64) { *f(p) = v != 0 }}
}

func enumKnob[E ~uint8](name string, names enum.Names, f func(*Params) *E) knob {
	return knob{name: name, kind: kindEnum, min: 0, max: int64(len(names) - 1), names: names,
		get: func(p *Params) int64 { return int64(*f(p)) },
		set: func(p *Params, v int64) { *f(p) = E(v) }}
}

// Ranges: the NVIDIA DCQCN parameter table where it gives one (dce_tcp_g
// 0..1023, dce_tcp_rtt 1..131071 µs, rpg_min_dec_fac 0..100,
// rate_reduce_monitor_period ≤ UINT32 µs, rates up to the line rate);
// otherwise chosen here and wide. rpg_min_rate may go below the firmware's
// 1 Mbit/s (down to 1 bit/s) because the profiles scale it to slow lines.
// Extensions for the paper profile: initial_alpha_value 1024 (α = 1.0),
// rate_reduce_monitor_period 0 (no coalescing); rpg_byte_reset 0 turns the
// byte counter off.
var mlx5Knobs = []knob{
	boolKnob("clamp_tgt_rate", func(p *Params) *bool { return &p.ClampTgtRate }),
	boolKnob("clamp_tgt_rate_after_time_inc", func(p *Params) *bool { return &p.ClampTgtRateAfterTimeInc }),
	timeKnob("rpg_time_reset", 1*usNS, 131071*usNS, func(p *Params) *time.Duration { return &p.RPGTimeReset }),
	{name: "rpg_byte_reset", kind: kindBytes, unit: "bytes; 0 = off", min: 0, max: math.MaxUint32,
		get: func(p *Params) int64 { return clampInt64(p.RPGByteReset) },
		set: func(p *Params, v int64) { p.RPGByteReset = uint64(v) }},
	intKnob("rpg_threshold", "stages", 1, 255, func(p *Params) *int { return &p.RPGThreshold }),
	rateKnob("rpg_max_rate", 0, func(p *Params) *units.Rate { return &p.RPGMaxRate }),
	rateKnob("rpg_ai_rate", 0, func(p *Params) *units.Rate { return &p.RPGAIRate }),
	rateKnob("rpg_hai_rate", 0, func(p *Params) *units.Rate { return &p.RPGHAIRate }),
	intKnob("rpg_gd", "log2 divisor of α·1024", 1, 15, func(p *Params) *int { return &p.RPGGD }),
	intKnob("rpg_min_dec_fac", "percent", 0, 100, func(p *Params) *int { return &p.RPGMinDecFac }),
	rateKnob("rpg_min_rate", 1, func(p *Params) *units.Rate { return &p.RPGMinRate }),
	rateKnob("rate_to_set_on_first_cnp", 0, func(p *Params) *units.Rate { return &p.RateToSetOnFirstCNP }),
	intKnob("dce_tcp_g", "of 1024", 0, 1023, func(p *Params) *int { return &p.DCETCPG }),
	timeKnob("dce_tcp_rtt", 1*usNS, 131071*usNS, func(p *Params) *time.Duration { return &p.DCETCPRTT }),
	timeKnob("rate_reduce_monitor_period", 0, math.MaxUint32*usNS, func(p *Params) *time.Duration { return &p.RateReduceMonitorPeriod }),
	intKnob("initial_alpha_value", "of 1024", 0, 1024, func(p *Params) *int { return &p.InitialAlphaValue }),
	timeKnob("min_time_between_cnps", 0, math.MaxUint32*usNS, func(p *Params) *time.Duration { return &p.MinTimeBetweenCNPs }),
	u8Knob("cnp_dscp", "DSCP", 63, func(p *Params) *uint8 { return &p.CNPDSCP }),
	u8Knob("cnp_802p_prio", "802.1p priority", 7, func(p *Params) *uint8 { return &p.CNP802pPrio }),
}

var variantKnobs = []knob{
	enumKnob("alpha_rule", alphaRuleNames, func(p *Params) *AlphaRule { return &p.AlphaRule }),
	boolKnob("alpha_timer_restart", func(p *Params) *bool { return &p.AlphaTimerRestart }),
	enumKnob("increase_rule", increaseRuleNames, func(p *Params) *IncreaseRule { return &p.IncreaseRule }),
	enumKnob("reduce_timing", reduceTimingNames, func(p *Params) *ReduceTiming { return &p.ReduceTiming }),
	boolKnob("clamp_rt_at_max_rate", func(p *Params) *bool { return &p.ClampRtAtMaxRate }),
	intKnob("rate_validation", "percent of Rc; 0 = off", 0, 100, func(p *Params) *int { return &p.RateValidation }),
}

func init() {
	less := func(a, b knob) int { return strings.Compare(a.name, b.name) }
	slices.SortFunc(mlx5Knobs, less)
	slices.SortFunc(variantKnobs, less)
}

// KnobNames returns the mlx5 knob names, sorted.
func KnobNames() []string { return knobNames(mlx5Knobs) }

// VariantNames returns the names of the variant switches Set and Get
// accept besides the mlx5 knobs, sorted.
func VariantNames() []string { return knobNames(variantKnobs) }

func knobNames(ks []knob) []string {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.name
	}
	return names
}

func lookupKnob(name string) (*knob, error) {
	for _, ks := range [][]knob{mlx5Knobs, variantKnobs} {
		for i := range ks {
			if ks[i].name == name {
				return &ks[i], nil
			}
		}
	}
	return nil, &KnobError{Knob: name, Unknown: true, Reason: fmt.Sprintf("valid: %s; variants: %s",
		strings.Join(KnobNames(), ", "), strings.Join(VariantNames(), ", "))}
}

// Set sets the knob or variant switch name from value. Values are plain
// numbers in the mlx5 unit (Mbit/s for rates, µs for times, bytes,
// percent, of-1024; decimals allowed for rates and times) or tc spellings
// with a unit ("40mbit", "55us", "10mb"); bools are 0/1/true/false;
// variant switches take the names their String methods print. Rate knobs
// may not exceed LineRate if it is set. On error p is unchanged.
func (p *Params) Set(name, value string) error {
	k, err := lookupKnob(name)
	if err != nil {
		return err
	}
	v, err := k.parse(value)
	if err != nil {
		return &KnobError{Knob: name, Value: value, Reason: err.Error()}
	}
	if err := k.check(p, v); err != nil {
		return &KnobError{Knob: name, Value: value, Reason: err.Error()}
	}
	k.set(p, v)
	return nil
}

// Get returns the knob or variant switch name as Set accepts it: plain
// numbers in the mlx5 unit, exact (Set(name, Get(name)) changes nothing).
func (p *Params) Get(name string) (string, error) {
	k, err := lookupKnob(name)
	if err != nil {
		return "", err
	}
	return k.format(k.get(p)), nil
}

// Validate checks every knob's range and the rules across knobs. The error
// joins one line per problem.
func (p Params) Validate() error {
	var errs []error
	if p.LineRate == 0 {
		errs = append(errs, &KnobError{Reason: "line rate 0: must be > 0"})
	}
	for _, ks := range [][]knob{mlx5Knobs, variantKnobs} {
		for i := range ks {
			k := &ks[i]
			v := k.get(&p)
			if err := k.check(&p, v); err != nil {
				errs = append(errs, &KnobError{Knob: k.name, Value: k.format(v), Reason: err.Error()})
			}
		}
	}
	maxRate := p.MaxRate()
	if p.LineRate > 0 && p.RPGMinRate > maxRate {
		errs = append(errs, &KnobError{Knob: "rpg_min_rate", Value: formatMbit(int64(p.RPGMinRate)),
			Reason: fmt.Sprintf("must not exceed the max rate (%s Mbit/s)", formatMbit(int64(maxRate)))})
	}
	if r := p.RateToSetOnFirstCNP; r != 0 && (r < p.RPGMinRate || (p.LineRate > 0 && r > maxRate)) {
		errs = append(errs, &KnobError{Knob: "rate_to_set_on_first_cnp", Value: formatMbit(int64(r)),
			Reason: fmt.Sprintf("must be 0 or between rpg_min_rate (%s) and the max rate (%s Mbit/s)",
				formatMbit(int64(p.RPGMinRate)), formatMbit(int64(maxRate)))})
	}
	// Paper §3.1: the α timer fires only after K without a CNP, and an NP
	// sends at most one CNP per N, so K must exceed N or a continuously
	// marked flow sees α decay between its CNPs. Moot when α is sampled
	// per period (mlx5: K = 1 µs < N = 4 µs by design).
	if p.AlphaRule != AlphaPerPeriod && p.AlphaTimerRestart && p.DCETCPRTT <= p.MinTimeBetweenCNPs {
		errs = append(errs, &KnobError{Knob: "dce_tcp_rtt", Value: formatMicros(int64(p.DCETCPRTT)),
			Reason: fmt.Sprintf("must be greater than min_time_between_cnps (%s µs) when the α timer restarts on every cut (paper: K > N)",
				formatMicros(int64(p.MinTimeBetweenCNPs)))})
	}
	return errors.Join(errs...)
}

func (k *knob) parse(s string) (int64, error) {
	s = strings.TrimSpace(s)
	switch k.kind {
	case kindRate:
		spelled := s
		if isPlainNumber(s) {
			spelled = s + "mbit" // mlx5 unit
		}
		r, err := units.ParseRate(spelled)
		if err != nil {
			return 0, err
		}
		return clampInt64(uint64(r)), nil
	case kindTime:
		d, err := units.ParseDuration(s) // a bare number is µs, the mlx5 unit
		return int64(d), err
	case kindBytes:
		b, err := units.ParseSize(s)
		return clampInt64(uint64(b)), err
	case kindInt:
		if k.unit == "percent" {
			s = strings.TrimSuffix(s, "%")
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("not an integer")
		}
		return v, nil
	case kindBool:
		switch strings.ToLower(s) {
		case "0", "false":
			return 0, nil
		case "1", "true":
			return 1, nil
		}
		return 0, fmt.Errorf("must be 0, 1, true or false")
	case kindEnum:
		if v, err := enum.Parse[int](s, k.names, k.name); err == nil {
			return int64(v), nil
		}
		return 0, k.enumError()
	}
	panic("dcqcn: unknown knob kind")
}

func (k *knob) check(p *Params, v int64) error {
	max := k.max
	if k.maxLine {
		max = math.MaxInt64
		if p.LineRate > 0 {
			max = clampInt64(uint64(p.LineRate))
		}
	}
	if v >= k.min && v <= max {
		return nil
	}
	switch k.kind {
	case kindEnum:
		return k.enumError()
	case kindBool:
		return fmt.Errorf("must be 0 or 1")
	}
	unit := k.unit
	if k.maxLine {
		unit += ", at most the line rate"
	}
	return fmt.Errorf("must be %s..%s (%s)", k.format(k.min), k.format(max), unit)
}

// enumError names a variant switch's values, as its String methods print
// them.
func (k *knob) enumError() error {
	return fmt.Errorf("must be one of %s", strings.Join(k.names.Canonical(), ", "))
}

func (k *knob) format(v int64) string {
	switch k.kind {
	case kindRate:
		return formatMbit(v)
	case kindTime:
		return formatMicros(v)
	case kindEnum:
		return enum.Format(int(v), k.names, "%d")
	}
	return strconv.FormatInt(v, 10)
}

// formatMbit prints bits/s as exact decimal Mbit/s: 40000000 → "40",
// 2500000 → "2.5", 40000 → "0.04".
func formatMbit(v int64) string { return formatScaled(v, 1_000_000) }

// formatMicros prints ns as exact decimal µs: 55000 → "55", 1500 → "1.5".
func formatMicros(v int64) string { return formatScaled(v, 1000) }

func formatScaled(v, scale int64) string {
	sign := ""
	u := uint64(v)
	if v < 0 {
		sign, u = "-", uint64(-(v+1))+1
	}
	s := sign + strconv.FormatUint(u/uint64(scale), 10)
	if f := u % uint64(scale); f != 0 {
		digits := len(strconv.FormatInt(scale, 10)) - 1
		frac := strconv.FormatUint(f, 10)
		frac = strings.Repeat("0", digits-len(frac)) + frac
		s += "." + strings.TrimRight(frac, "0")
	}
	return s
}

// isPlainNumber reports whether s is a decimal number without a unit:
// digits, an optional fraction and an optional exponent.
func isPlainNumber(s string) bool {
	i, digits := 0, 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i, digits = i+1, digits+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i, digits = i+1, digits+1
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		start := j
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j > start {
			i = j
		}
	}
	return i == len(s)
}

func clampInt64(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\r\"=") || !strconv.CanBackquote(s) {
		return strconv.Quote(s)
	}
	return s
}
