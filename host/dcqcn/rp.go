package dcqcn

import (
	"math"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

var _ cc.RateController = (*RP)(nil)

// Never is what NextEvent returns when no timer event can change Rc.
const Never = time.Duration(math.MaxInt64)

// RPStats are an RP's counters and stage state.
type RPStats struct {
	CNPsHandled       uint64 // CNPs that caused or will cause a cut (rp_cnp_handled)
	CNPsIgnored       uint64 // CNPs coalesced into a monitor period (rp_cnp_ignored)
	RateCuts          uint64 // rate decreases done
	FastRecoverySteps uint64 // increase events in fast recovery
	AdditiveSteps     uint64 // increase events in additive increase
	HyperSteps        uint64 // increase events in hyper increase
	AlphaUpdates      uint64 // α timer events (decays, or per-period samples)
	ValidationHolds   uint64 // increase events skipped: the QP sent below rate_validation % of Rc
	IncreaseHolds     uint64 // increase events skipped: HoldIncreases (a PPFC alarm) was in force
	T                 uint64 // increase-timer stages since the last cut
	BC                uint64 // byte-counter stages since the last cut
	ByteCounter       uint64 // bytes counted toward the next BC stage
}

// RP is the reaction point of one QP: the sender's rate controller. It is a
// pure state machine: every method takes now, a monotonic time since an
// arbitrary epoch, and timer events due at or before now fire, in time
// order, inside the call. Time never runs backwards: an earlier now is
// taken as the latest one seen. Events at the same instant run α timer
// first, then the increase timer, then a deferred cut (the order HPCC's
// ns-3 scheduler gives them), then the caller's CNP or transmit.
//
// Until the first CNP the rate limiter is idle: Rc = Rt = the max rate and
// no timer runs. Rc, Rt, Alpha and Stats report the state as of the last
// call. An RP is not safe for concurrent use.
type RP struct {
	p Params

	// Derived from p. Rates in bits/s.
	maxRate, aiRate, haiRate, minRate, firstRate float64

	g        float64 // α gain, 1 − dce_tcp_g/1024
	cutScale float64 // 1024/2^rpg_gd: a cut takes Rc·α·cutScale
	decFloor float64 // rpg_min_dec_fac/100: share of Rc a cut keeps at least
	stageF   uint64  // F, or F−1 under IncreaseNS3

	rc, rt, alpha float64
	active        bool // a CNP has engaged the rate limiter

	t, bc, byteCounter uint64

	alphaNext time.Duration // next α timer event (active only)
	alphaSeen bool          // AlphaPerPeriod: a CNP arrived in this period

	incArmed bool          // the increase timer runs (after the first cut)
	incNext  time.Duration // next increase timer event

	cutAnchor  time.Duration // ReduceDeferred: the monitor period grid origin
	cutPending bool          // ReduceDeferred: a cut is due at cutNext
	cutNext    time.Duration
	cutDone    bool // ReduceLeadingEdge: lastCut is valid
	lastCut    time.Duration

	// rate_validation: bytes sent since periodStart, the last increase
	// event or cut (Rc is constant in between).
	sentBytes   uint64
	periodStart time.Duration

	// HoldIncreases: increase events before holdUntil are skipped.
	holdUntil time.Duration

	now   time.Duration
	stats RPStats

	loops    uint64 // tests: Advance loop iterations
	stepwise bool   // tests: never take the saturated closed form
}

// NewRP returns the reaction point of a new QP at time now: Rc = Rt =
// min(LineRate, rpg_max_rate if set), α = initial_alpha_value/1024. It
// panics if p.Validate fails; validate configuration before creating QPs.
func NewRP(p Params, now time.Duration) *RP {
	if err := p.Validate(); err != nil {
		panic(err)
	}
	f := uint64(p.RPGThreshold)
	if p.IncreaseRule == IncreaseNS3 {
		f-- // ns3-rdma compares stages with < F
	}
	r := &RP{
		p:         p,
		maxRate:   float64(p.MaxRate()),
		aiRate:    float64(p.RPGAIRate),
		haiRate:   float64(p.RPGHAIRate),
		minRate:   float64(p.RPGMinRate),
		firstRate: float64(p.RateToSetOnFirstCNP),
		g:         p.G(),
		// mlx5 rpg_gd: cut = Rc·(α·1024)/2^gd (dcqcn.md table).
		cutScale: math.Ldexp(1024, -p.RPGGD),
		decFloor: float64(p.RPGMinDecFac) / 100,
		stageF:   f,
		alpha:    float64(p.InitialAlphaValue) / 1024,
		now:      now,
	}
	r.rc, r.rt = r.maxRate, r.maxRate
	return r
}

// Params returns the parameters r was made with.
func (r *RP) Params() Params { return r.p }

// Rc returns the current rate, rounded to the nearest bit/s.
func (r *RP) Rc() units.Rate { return toRate(r.rc) }

// Rate is Rc, the rate the engine paces the QP at (cc.RateController).
func (r *RP) Rate() units.Rate { return r.Rc() }

// OnNotification is OnCNP (cc.RateController).
func (r *RP) OnNotification(now time.Duration) bool { return r.OnCNP(now) }

// Rt returns the target rate, rounded to the nearest bit/s.
func (r *RP) Rt() units.Rate { return toRate(r.rt) }

// Alpha returns α, the congestion estimate in [0, 1].
func (r *RP) Alpha() float64 { return r.alpha }

// Stats returns the counters.
func (r *RP) Stats() RPStats {
	s := r.stats
	s.T, s.BC, s.ByteCounter = r.t, r.bc, r.byteCounter
	return s
}

func toRate(f float64) units.Rate {
	if f >= math.MaxUint64 {
		return units.Rate(math.MaxUint64)
	}
	return units.Rate(math.Round(f))
}

// OnCNP handles a CNP for this QP. It returns false if the CNP was ignored
// because a cut is already due or done in the current
// rate_reduce_monitor_period (the caller counts it as rp_cnp_ignored).
func (r *RP) OnCNP(now time.Duration) (handled bool) {
	r.Advance(now)
	now = r.now
	if !r.active {
		r.activate(now)
	} else if r.p.AlphaRule == AlphaPerPeriod {
		r.alphaSeen = true
	}
	period := r.p.RateReduceMonitorPeriod
	handled = true
	switch {
	case period <= 0:
		// Paper: every CNP cuts.
		r.cut(now)
	case r.p.ReduceTiming == ReduceLeadingEdge:
		if r.cutDone && now-r.lastCut < period {
			handled = false
		} else {
			r.cut(now)
		}
	default:
		// HPCC CheckRateDecreaseMlx: a flag checked at the end of every
		// period of a grid started by the first CNP.
		if r.cutPending {
			handled = false
		} else {
			r.cutPending = true
			k := (now-r.cutAnchor)/period + 1
			r.cutNext = addSat(r.cutAnchor, mulSat(k, period))
		}
	}
	if handled {
		r.stats.CNPsHandled++
	} else {
		r.stats.CNPsIgnored++
	}
	return handled
}

// activate engages the rate limiter on the first CNP.
func (r *RP) activate(now time.Duration) {
	r.active = true
	// NVIDIA: initial_alpha_value is "the initial value of alpha to use
	// when receiving the first CNP for a flow"; HPCC sets α = 1 there and
	// does not count that CNP in the first α period.
	r.alpha = float64(r.p.InitialAlphaValue) / 1024
	if r.firstRate > 0 {
		// rate_to_set_on_first_cnp sets both rates (NVIDIA: "Rates
		// (current, target) on first CNP"); the cut still follows (HPCC
		// m_rateOnFirstCNP).
		r.rc = math.Min(r.firstRate, r.maxRate)
		r.rt = r.rc
	}
	r.alphaNext = addSat(now, r.p.DCETCPRTT)
	r.cutAnchor = now
}

// cut is the rate decrease (paper §3.1 eq. (1); mlx5 rpg_gd,
// rpg_min_dec_fac, rpg_min_rate, clamp flags).
func (r *RP) cut(now time.Duration) {
	if r.p.AlphaRule == AlphaBeforeCut {
		r.alpha = (1-r.g)*r.alpha + r.g // ns3-rdma rpr_cnm_received
	}
	// clamp_tgt_rate: always Rt = Rc. clamp_tgt_rate_after_time_inc: only
	// if the increase timer fired since the last cut (HPCC
	// CheckRateDecreaseMlx tests rpTimeStage != 0). Neither: Rt stays.
	if r.p.ClampTgtRate || (r.p.ClampTgtRateAfterTimeInc && r.t > 0) {
		r.rt = r.rc
	}
	f := 1 - r.alpha*r.cutScale
	if f < r.decFloor {
		f = r.decFloor
	}
	r.rc = math.Max(r.minRate, r.rc*f)
	if r.p.AlphaRule == AlphaAfterCut {
		r.alpha = (1-r.g)*r.alpha + r.g // paper eq. (1), after the cut
	}
	r.t, r.bc, r.byteCounter = 0, 0, 0
	r.sentBytes, r.periodStart = 0, now
	if r.p.AlphaTimerRestart {
		// Paper: α decays only after K without a CNP; ns3-rdma cancels and
		// reschedules ResumeAlpha on every CNP.
		r.alphaNext = addSat(now, r.p.DCETCPRTT)
	}
	r.incArmed = true
	r.incNext = addSat(now, r.p.RPGTimeReset)
	r.cutDone, r.lastCut = true, now
	r.stats.RateCuts++
}

// HoldIncreases skips every rate increase event (timer or byte counter)
// due before until: Rc and Rt stay where they are, or fall on a cut, and
// the stage counters stand still, as for an event rate_validation skips.
// A later until extends a running hold; an earlier one changes nothing.
// Not DCQCN: the reaction to a PPFC alarm (seed 003 names PT 10 "alarm"
// and defines nothing; host/agent/ppfc.go gives it this meaning), a brake
// that neither pauses the QP nor cuts its rate.
func (r *RP) HoldIncreases(now, until time.Duration) {
	r.Advance(now)
	r.holdUntil = max(r.holdUntil, until)
}

// HeldUntil returns the end of the hold HoldIncreases set (in the past if
// none runs).
func (r *RP) HeldUntil() time.Duration { return r.holdUntil }

// skipHeld skips the increase timer events in the hold due at or before t,
// in closed form: none of them can change anything but the counters.
func (r *RP) skipHeld(t time.Duration) {
	if !r.incArmed || r.incNext >= r.holdUntil || r.incNext > t {
		return
	}
	period := r.p.RPGTimeReset
	last := min(t, r.holdUntil-1)
	n := uint64((last-r.incNext)/period) + 1
	at := addSat(r.incNext, mulSat(time.Duration(n-1), period)) // the last one skipped
	r.incNext = addSat(at, period)
	r.stats.IncreaseHolds += n
	r.sentBytes, r.periodStart = 0, at
}

// OnTransmit counts bytes sent by this QP; every rpg_byte_reset bytes
// (B) is a byte-counter stage and a rate increase. The byte counter runs
// from the first cut on.
func (r *RP) OnTransmit(now time.Duration, bytes int) {
	r.Advance(now)
	b := r.p.RPGByteReset
	if !r.incArmed || bytes <= 0 {
		return
	}
	r.sentBytes += uint64(bytes)
	if b == 0 {
		return
	}
	r.byteCounter += uint64(bytes)
	n := r.byteCounter / b
	r.byteCounter %= b
	if n > 0 && r.now < r.holdUntil {
		r.stats.IncreaseHolds += n
		r.sentBytes, r.periodStart = 0, r.now // a new rate_validation period
		return
	}
	if n > 0 && !r.saturated() && !r.validated(r.now) {
		return // this transmit's stages are the sender's, not the rate's
	}
	for ; n > 0; n-- {
		if r.saturated() {
			r.countSaturatedSteps(false, n)
			return
		}
		r.bc++
		r.increase()
	}
}

// validated reports whether an increase event at may raise Rc: with
// rate_validation on, only if the QP sent at least that share of
// Rc·(at − periodStart) since the last increase event or cut. Either way a
// new period starts at at. A skipped event moves neither Rc, Rt nor the
// stage counters, so a QP held back by its window or its CPU neither
// drifts up to the line rate nor reaches hyper increase meanwhile.
func (r *RP) validated(at time.Duration) bool {
	sent, from := r.sentBytes, r.periodStart
	r.sentBytes, r.periodStart = 0, at
	if r.p.RateValidation == 0 || at <= from {
		return true
	}
	expected := r.rc / 8 * (at - from).Seconds()
	if float64(sent)*100 >= float64(r.p.RateValidation)*expected {
		return true
	}
	r.stats.ValidationHolds++
	return false
}

// Advance fires every timer event due at or before now. α timer events are
// applied in closed form (α·(1−g)^n). Increase events run one by one until
// Rc sits at the max rate with Rt at or above it; from then on until the
// next cut they cannot change Rc, and their effect on the stage counters
// and on an unclamped Rt is applied in closed form too. The cost is O(1)
// per increase event that can change Rc, however long the idle time.
func (r *RP) Advance(now time.Duration) {
	if now < r.now {
		now = r.now
	}
	if r.active {
		for {
			r.loops++
			at, isCut, ok := r.nextEvent()
			if !ok || at > now {
				break
			}
			r.skipHeld(at)
			r.catchUpSaturated(at)
			r.alphaTo(at)
			if isCut {
				r.cutPending = false
				r.cut(at)
			} else {
				r.incNext = addSat(at, r.p.RPGTimeReset)
				if r.validated(at) {
					r.t++
					r.increase()
				}
			}
		}
		r.skipHeld(now)
		r.catchUpSaturated(now)
		r.alphaTo(now)
	}
	r.now = now
}

// NextEvent returns the time of the next timer event that can change Rc
// (an increase step, or a deferred cut), or Never. Events that can only
// move α, the stage counters or an Rt above the cap are not reported: the
// next call brings them up to date in closed form.
func (r *RP) NextEvent() time.Duration {
	at, _, ok := r.nextEvent()
	if !ok {
		return Never
	}
	return at
}

// nextEvent is the earliest event that can change Rc; an increase wins a
// tie with a cut. Increase events in a hold cannot: the first one after it
// is the candidate.
func (r *RP) nextEvent() (at time.Duration, isCut, ok bool) {
	if r.incArmed && !r.saturated() {
		at, ok = r.incNext, true
		if at < r.holdUntil {
			period := r.p.RPGTimeReset
			at = addSat(at, mulSat((r.holdUntil-at+period-1)/period, period))
		}
	}
	if r.cutPending && (!ok || r.cutNext < at) {
		at, isCut, ok = r.cutNext, true, true
	}
	return at, isCut, ok
}

// alphaTo applies the α timer events due at or before t.
func (r *RP) alphaTo(t time.Duration) {
	if r.alphaNext > t {
		return
	}
	k := r.p.DCETCPRTT
	n := uint64((t-r.alphaNext)/k) + 1
	r.alphaNext = addSat(addSat(r.alphaNext, mulSat(time.Duration(n-1), k)), k)
	r.stats.AlphaUpdates += n
	decay := 1 - r.g
	if r.p.AlphaRule == AlphaPerPeriod {
		// mlx5: α ← (G/1024)·α + (1 − G/1024)·[CNP in the period].
		r.alpha *= decay
		if r.alphaSeen {
			r.alpha += r.g
		}
		r.alphaSeen = false
		n--
	}
	// Paper: α ← (1−g)·α per K without a CNP; n of them at once.
	r.alpha *= powUint(decay, n)
}

// increase is one rate increase event, after T or BC was incremented
// (paper §3.1 and dcqcn.md pseudo-code; thresholds per IncreaseRule).
func (r *RP) increase() {
	f := r.stageF
	hi, lo := max(r.t, r.bc), min(r.t, r.bc)
	switch {
	case hi <= f: // fast recovery
		r.stats.FastRecoverySteps++
	case lo > f: // hyper increase
		r.rt += float64(lo-f) * r.haiRate
		r.stats.HyperSteps++
	default: // additive increase
		r.rt += r.aiRate
		r.stats.AdditiveSteps++
	}
	if r.p.ClampRtAtMaxRate && r.rt > r.maxRate {
		r.rt = r.maxRate // HPCC ActiveIncreaseMlx
	}
	r.rc = (r.rt + r.rc) / 2
	if r.rc > r.maxRate {
		r.rc = r.maxRate // paper: Rc never exceeds the line rate
	}
	// Halving the distance in float64 may never land on the target;
	// differences below half a bit/s are invisible through Rc(), so snap.
	if d := math.Min(r.rt, r.maxRate) - r.rc; d > 0 && d < 0.5 {
		r.rc += d
	}
}

// saturated reports whether increase events can no longer change Rc: Rc
// sits at the cap and Rt at or above it, so (Rt + Rc)/2 ≥ cap until the
// next cut. Rt may still grow (unless clamped), by a closed form.
func (r *RP) saturated() bool {
	return r.rc >= r.maxRate && r.rt >= r.maxRate && !r.stepwise
}

// catchUpSaturated applies the increase timer events due at or before t
// while saturated.
func (r *RP) catchUpSaturated(t time.Duration) {
	if !r.incArmed || r.incNext > t || !r.saturated() {
		return
	}
	period := r.p.RPGTimeReset
	n := uint64((t-r.incNext)/period) + 1
	r.incNext = addSat(addSat(r.incNext, mulSat(time.Duration(n-1), period)), period)
	r.countSaturatedSteps(true, n)
}

// countSaturatedSteps does n increase events of one source in closed form
// while saturated: Rc stays at the cap, the stage counters and step counts
// move, and an unclamped Rt grows by n_additive·R_AI + Σ(min(T,BC)−F)·R_HAI.
func (r *RP) countSaturatedSteps(timer bool, n uint64) {
	moving, other := &r.bc, r.t
	if timer {
		moving, other = &r.t, r.bc
	}
	k0, f := *moving, r.stageF // the steps are k0+1 … k0+n; other stays
	var fast, hyper uint64
	var hyperSum float64 // Σ (min(k, other) − f) over the hyper steps
	if other <= f && k0 < f {
		fast = min(n, f-k0) // k ≤ f
	}
	if other > f {
		if first, last := max(k0+1, f+1), k0+n; last >= first {
			hyper = last - first + 1
			if hi := min(last, other); hi >= first { // min(k, other) = k
				a, b := float64(first-f), float64(hi-f)
				hyperSum += (a + b) * (b - a + 1) / 2
			}
			if lo := max(first, other+1); last >= lo { // min(k, other) = other
				hyperSum += float64(last-lo+1) * float64(other-f)
			}
		}
	}
	additive := n - fast - hyper
	r.stats.FastRecoverySteps += fast
	r.stats.HyperSteps += hyper
	r.stats.AdditiveSteps += additive
	*moving += n
	if !r.p.ClampRtAtMaxRate {
		r.rt += float64(additive)*r.aiRate + hyperSum*r.haiRate
	}
}

// powUint returns x^n by squaring: exact for n = 1, deterministic, O(log n).
func powUint(x float64, n uint64) float64 {
	y := 1.0
	for n > 0 {
		if n&1 == 1 {
			y *= x
		}
		x *= x
		n >>= 1
	}
	return y
}

func addSat(a, b time.Duration) time.Duration {
	if b > 0 && a > Never-b {
		return Never
	}
	return a + b
}

func mulSat(n, d time.Duration) time.Duration {
	if n <= 0 || d <= 0 {
		return 0
	}
	if n > Never/d {
		return Never
	}
	return n * d
}
