package nscc

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// htsim initNsccParams scales every increase to a reference network of
// 100 Gbit/s and 12 µs: a = BDP / 150 000 B, b = target_qdelay / 12 µs.
const (
	referenceBDPBytes = 150_000 // 100 Gbit/s × 12 µs
	referenceRTT      = 12 * time.Microsecond
)

// Params holds NSCC's configuration (UE 1.0 §3.6.13.3, Table 3-76; the
// names in the comments are the spec's and htsim's). DefaultParams derives
// them as htsim's initNsccParams does; a field may be changed afterwards,
// and nothing else is re-derived from it.
type Params struct {
	// LinkRate is min(sender, receiver) link speed: BDP = LinkRate ×
	// ConfigBaseRTT, and MaxWnd follows base_rtt at this rate.
	LinkRate units.Rate
	// ConfigBaseRTT (config_base_rtt) is the round trip of an MTU packet
	// over the longest path with no queues: the CCC's first base_rtt.
	ConfigBaseRTT time.Duration
	// BaseRTTFloor is the least base_rtt falls to (0: no floor, the
	// spec's min of the samples). A software lab sets it to its
	// ConfigBaseRTT: there the round trip is mostly the hosts' scheduling,
	// its minimum (tens of µs) a rare best case, and a MaxWnd that follows
	// the minimum starves every flow whose typical RTT is ten times it.
	BaseRTTFloor time.Duration
	// MTUBytes is the MTU: the minimum cwnd and CanSend's packet unit.
	MTUBytes int
	// MaxWndBDPs is MaxWnd in BDPs (htsim initNscc: 1.5); MaxWnd is
	// recomputed from it whenever base_rtt falls.
	MaxWndBDPs float64
	// InitialCwndBytes is the window a new CCC starts with. Optional: 0 is
	// MaxWnd (Table 3-77).
	InitialCwndBytes int

	TargetQDelay          time.Duration // target_qdelay (tq): the queueing delay the quadrants test against
	AlphaBytesPerSecond   float64       // alpha: proportional increase, inc_bytes += alpha·newly·(tq − delay)
	FIBytes               float64       // fi: fair increase, inc_bytes += fi·newly
	FIScale               float64       // fi_scale: fast increase, cwnd += newly·fi_scale
	EtaBytes              float64       // eta: added to cwnd once per adjust period
	Gamma                 float64       // gamma: MD cuts by gamma·(avg − tq)/avg
	MaxMDJump             float64       // max_md_jump: the smallest factor one MD leaves cwnd at
	QAGate                uint          // qa_gate: quick adapt only if achieved < MaxWnd >> qa_gate
	QAThreshold           time.Duration // qa_threshold: a delay above it triggers quick adapt
	DisableQuickAdapt     bool          // disable_quick_adapt
	AdjustBytesThreshold  int           // adjust_bytes_threshold: fulfill once more than this was received
	AdjustPeriodThreshold time.Duration // adjust_period_threshold: fulfill (and eta) once per period
	// NoDelay is where "delay ≈ 0" ends for fast increase (htsim
	// fast_increase: delay < 1 µs).
	NoDelay time.Duration
	// DelayAlpha (htsim _delay_alpha) is the gain of the average-delay
	// EWMA that multiplicative decrease reads.
	DelayAlpha float64
	// RCCC says the receiver-credit algorithm runs beside NSCC: a
	// last-hop trim is then left to credits and does not cut cwnd
	// (§3.6.13.5 NSCC.OnNACK).
	RCCC bool
}

// DefaultParams returns NSCC's defaults for a path of linkRate (the slower
// end), config_base_rtt baseRTT and an MTU of mtu bytes, derived as htsim's
// initNsccParams and §3.6.13.3 do without packet trimming (Linux has
// none): target_qdelay = baseRTT, qa_threshold = 4·target_qdelay,
// a = BDP/150 000 B, b = target_qdelay/12 µs, alpha = 4·MTU·a·b/tq,
// fi = 5·MTU·a, fi_scale = 0.25·a, eta = 0.15·MTU·a, gamma 0.8,
// max_md_jump 0.5, qa_gate 3, adjust_bytes_threshold 8·MTU,
// adjust_period_threshold = baseRTT, MaxWnd 1.5·BDP, "no delay" < 1 µs, EWMA
// gain 0.0125. The package documentation tabulates them for this lab.
func DefaultParams(linkRate units.Rate, baseRTT time.Duration, mtu int) Params {
	tq := baseRTT // §3.6.13.3: config_base_rtt × 1.0 without trimming
	a, b := Scaling(linkRate, baseRTT, tq)
	m := float64(mtu)
	var alpha float64
	if tq > 0 {
		alpha = 4 * m * a * b / tq.Seconds()
	}
	return Params{
		LinkRate:              linkRate,
		ConfigBaseRTT:         baseRTT,
		MTUBytes:              mtu,
		MaxWndBDPs:            1.5,
		TargetQDelay:          tq,
		AlphaBytesPerSecond:   alpha,
		FIBytes:               5 * m * a,
		FIScale:               0.25 * a,
		EtaBytes:              0.15 * m * a,
		Gamma:                 0.8,
		MaxMDJump:             0.5,
		QAGate:                3,
		QAThreshold:           4 * tq, // 5·BDP tail drop: (5 − 1)·tq
		AdjustBytesThreshold:  8 * mtu,
		AdjustPeriodThreshold: baseRTT,
		NoDelay:               time.Microsecond,
		DelayAlpha:            0.0125,
	}
}

// LabParams are DefaultParams for a software lab whose round trip is the
// hosts' scheduling: htsim's reference network (100 Gbit/s, 12 µs) slowed
// down in time, as the DCQCN profiles slow the paper's testbed, so that
// NSCC's moves keep their size relative to the BDP:
//
//   - b = 1: alpha = 4·MTU·a/tq. DefaultParams' b = tq/12 µs makes a
//     lab's tq of hundreds of µs a b of tens, and the proportional increase
//     (alpha·tq = 4·MTU·a·b per round trip) several BDPs per round trip
//     instead of the reference's 0.11: windows jump between MTU and MaxWnd
//     and the queue swings from empty to hundreds of KB (measured: an
//     8 → 1 incast at 500 Mbit/s, tq 500 µs, 9-13 % above the ideal FCT).
//   - BaseRTTFloor = baseRTT: the rare fast round trip of an idle host does
//     not shrink MaxWnd.
func LabParams(linkRate units.Rate, baseRTT time.Duration, mtu int) Params {
	p := DefaultParams(linkRate, baseRTT, mtu)
	if _, b := Scaling(linkRate, baseRTT, p.TargetQDelay); b > 0 {
		p.AlphaBytesPerSecond /= b
	}
	p.BaseRTTFloor = baseRTT
	return p
}

// Trimming is p for a fabric whose switches trim (UE 1.0 §3.6.13.3;
// htsim initNsccParams with trimming enabled): target_qdelay 0.75 ×
// config_base_rtt, qa_threshold 4·tq. With tq at a whole base RTT and a
// queue of one BDP (what a trimming port holds), the queueing delay never
// passes tq: ECN then never cuts the window (the quadrant "ECN, delay <
// tq" leaves it to path selection), only trims do, one packet each, and
// the proportional increase keeps refilling the queue (measured: 16 → 1
// at 500 Mbit/s trimmed 6761 of 15 530 packets, htsim 409–455). alpha
// stays: htsim's 4·MTU·a·b/tq with b = tq/12 µs does not depend on tq,
// nor does LabParams' slowed reference.
func (p Params) Trimming() Params {
	p.TargetQDelay = p.ConfigBaseRTT * 3 / 4
	p.QAThreshold = 4 * p.TargetQDelay
	return p
}

// Scaling returns htsim initNsccParams' scaling factors: a = BDP/150 000 B
// (the BDP of 100 Gbit/s × 12 µs) with BDP = linkRate × baseRTT, and
// b = targetQDelay/12 µs. DefaultParams scales alpha, fi, fi_scale and eta
// by them.
func Scaling(linkRate units.Rate, baseRTT, targetQDelay time.Duration) (a, b float64) {
	return cc.BDPBytes(linkRate, baseRTT) / referenceBDPBytes,
		float64(targetQDelay) / float64(referenceRTT)
}

// BDPBytes is LinkRate × ConfigBaseRTT in bytes.
func (p Params) BDPBytes() float64 { return cc.BDPBytes(p.LinkRate, p.ConfigBaseRTT) }

// MaxWndBytes is MaxWnd at ConfigBaseRTT: MaxWndBDPs × BDP, whole bytes.
func (p Params) MaxWndBytes() int { return p.maxWndAt(p.ConfigBaseRTT) }

// maxWndAt is MaxWnd for a base RTT (§3.6.13.6 update_base_rtt: 1.5 ×
// linkspeed × base_rtt), never below one MTU.
func (p Params) maxWndAt(baseRTT time.Duration) int {
	return cc.MaxWndBytes(p.MaxWndBDPs, p.LinkRate, baseRTT, p.MTUBytes)
}

// Ranges: chosen here, wide, and such that the arithmetic stays finite;
// the spec gives none.
const (
	minMTU      = 64
	maxMTU      = 65535
	maxTime     = time.Second
	maxQAGate   = 31
	maxMaxWnd   = 1000 // BDPs
	maxAdjBytes = 1 << 30
)

// Validate checks every field's range and the rules across fields. The
// error joins one line per problem; each names the field (by its spec
// name), the value and the allowed range.
func (p Params) Validate() error {
	var errs []error
	bad := func(name string, v any, rule string) {
		errs = append(errs, fmt.Errorf("nscc: %s=%v: must be %s", name, v, rule))
	}
	if p.LinkRate == 0 {
		bad("link_rate", p.LinkRate, "> 0")
	}
	checkTime := func(name string, d, lo time.Duration) {
		if d < lo || d > maxTime {
			bad(name, d, fmt.Sprintf("%v..%v", lo, maxTime))
		}
	}
	checkTime("config_base_rtt", p.ConfigBaseRTT, 1)
	if p.BaseRTTFloor < 0 || p.BaseRTTFloor > p.ConfigBaseRTT {
		bad("base_rtt_floor", p.BaseRTTFloor, fmt.Sprintf("0..config_base_rtt (%v)", p.ConfigBaseRTT))
	}
	checkTime("target_qdelay", p.TargetQDelay, 1)
	checkTime("qa_threshold", p.QAThreshold, 0)
	checkTime("adjust_period_threshold", p.AdjustPeriodThreshold, 1)
	tqOK := p.TargetQDelay >= 1 && p.TargetQDelay <= maxTime
	mtuOK := p.MTUBytes >= minMTU && p.MTUBytes <= maxMTU
	if tqOK && (p.NoDelay < 0 || p.NoDelay > p.TargetQDelay) {
		bad("no_delay", p.NoDelay, fmt.Sprintf("0..target_qdelay (%v)", p.TargetQDelay))
	}
	if !mtuOK {
		bad("mtu", p.MTUBytes, fmt.Sprintf("%d..%d (bytes)", minMTU, maxMTU))
	}
	if !(p.MaxWndBDPs > 0 && p.MaxWndBDPs <= maxMaxWnd) {
		bad("max_wnd", p.MaxWndBDPs, fmt.Sprintf("in (0, %d] (BDPs)", maxMaxWnd))
	} else if p.LinkRate > 0 && p.ConfigBaseRTT > 0 && mtuOK {
		if err := cc.MaxWndCheck("nscc", p.MaxWndBDPs, p.LinkRate, p.ConfigBaseRTT, p.MTUBytes); err != nil {
			errs = append(errs, err)
		}
	}
	if c := p.InitialCwndBytes; c != 0 && mtuOK {
		if hi := p.MaxWndBytes(); c < p.MTUBytes || c > hi {
			bad("initial_cwnd", c, fmt.Sprintf("0 (MaxWnd) or mtu..MaxWnd (%d..%d bytes)", p.MTUBytes, hi))
		}
	}
	nonNeg := func(name string, v float64, unit string) {
		if !(v >= 0) || math.IsInf(v, 1) {
			bad(name, v, "a finite number ≥ 0"+unit)
		}
	}
	nonNeg("alpha", p.AlphaBytesPerSecond, " (bytes/s)")
	nonNeg("fi", p.FIBytes, " (bytes)")
	nonNeg("fi_scale", p.FIScale, "")
	nonNeg("eta", p.EtaBytes, " (bytes)")
	if !(p.Gamma > 0 && p.Gamma <= 1) {
		bad("gamma", p.Gamma, "in (0, 1]")
	}
	if !(p.MaxMDJump >= 0 && p.MaxMDJump <= 1) {
		bad("max_md_jump", p.MaxMDJump, "in [0, 1]")
	}
	if p.QAGate > maxQAGate {
		bad("qa_gate", p.QAGate, fmt.Sprintf("0..%d (log2 divisor of MaxWnd)", maxQAGate))
	}
	if p.AdjustBytesThreshold < 0 || p.AdjustBytesThreshold > maxAdjBytes {
		bad("adjust_bytes_threshold", p.AdjustBytesThreshold, fmt.Sprintf("0..%d (bytes)", maxAdjBytes))
	}
	if !(p.DelayAlpha > 0 && p.DelayAlpha <= 1) {
		bad("delay_alpha", p.DelayAlpha, "in (0, 1]")
	}
	return errors.Join(errs...)
}
