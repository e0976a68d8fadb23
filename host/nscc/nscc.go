package nscc

import (
	"math"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
)

var _ cc.WindowController = (*Controller)(nil)

// Never is what NextEvent returns: NSCC has no timer.
const Never = time.Duration(math.MaxInt64)

// maxRcvCwndPend is the largest rcv_cwnd_pend: a 7-bit field (§3.6.13.2).
const maxRcvCwndPend = 127

// AckCCState is what an ACK_CC's NSCC cc_state says beyond cc.AckSample
// (uet.md "Wire format": rc, rcv_cwnd_pend).
type AckCCState struct {
	// RcvCwndPend (rcv_cwnd_pend) is the destination's flow-control
	// penalty, 0..127: 0 is none, 64 on every ACK for a round trip halves
	// cwnd, 127 leaves about one packet per round trip. Above 127 is taken
	// as 127.
	RcvCwndPend uint8
	// RestoreCwnd (rc) ends a penalty: cwnd goes back to the value saved
	// when it began.
	RestoreCwnd bool
}

// NackReason is what a NACK says about the packet, as NSCC needs it; the
// codec maps pds.nack_code onto it.
type NackReason uint8

const (
	// NackTrimmed: UET_TRIMMED (0x01), a packet trimmed in the fabric.
	// OnNack assumes it (htsim: every NACK is a trim).
	NackTrimmed NackReason = iota
	// NackTrimmedLastHop: UET_TRIMMED_LASTHOP (0x02), trimmed at the
	// destination's switch port; with Params.RCCC it is left to credits.
	NackTrimmedLastHop
	// NackOther: any other code (NO_PDC_AVAIL, NO_PKT_BUFFER, …): not a
	// congestion signal; only its RTT sample is used.
	NackOther
)

// NackSample is what one NACK tells NSCC (§3.6.13.5 NSCC.OnNACK).
type NackSample struct {
	// Size is the NACKed packet's nominal size in bytes.
	Size int
	// Reason is the NACK's code as NSCC reads it.
	Reason NackReason
	// RTT is the round trip of the NACKed packet; valid only if RTTValid
	// (as for an ACK: not an ambiguous retransmission).
	RTT      time.Duration
	RTTValid bool
	// InFlight is the bytes in flight after this NACK (the packet no longer
	// counted).
	InFlight int
}

// Stats are a Controller's counters. Byte amounts are what each rule
// added to or took from cwnd; the fair, proportional and eta amounts are
// counted before the MaxWnd clamp of the fulfill adjustment that applied
// them (as htsim's _nscc_overall_stats).
type Stats struct {
	Acks               uint64 // ACKs taken
	AcksNoRTT          uint64 // ACKs without a valid RTT: past the penalty nothing ran (§3.6.13.5)
	Ignored            uint64 // ECN ACKs and trim NACKs consumed after a quick adapt (bytes_to_ignore)
	FairAcks           uint64 // no ECN, delay ≥ tq: fair increase
	ProportionalAcks   uint64 // no ECN, delay < tq: proportional increase, fast increase not counted
	FastIncreaseAcks   uint64 // no ECN, delay ≈ 0 for a window: fast increase
	ECNBelowTargetAcks uint64 // ECN, delay < tq: no change (left to load balancing)
	ECNAboveTargetAcks uint64 // ECN, delay ≥ tq: multiplicative decrease candidates
	PenaltyAcks        uint64 // ACKs with rcv_cwnd_pend > 0 (increases suppressed)
	Restores           uint64 // rc restored a saved cwnd
	Decreases          uint64 // multiplicative decreases done (at most one per base RTT)
	QuickAdapts        uint64 // quick adapts done
	Fulfills           uint64 // fulfill adjustments
	EtaAdds            uint64 // fulfill adjustments that added eta (once per adjust period)
	Nacks              uint64 // NACKs taken
	NackDecreases      uint64 // NACKs that cut cwnd by the packet (no quick adapt)
	Losses             uint64 // inferred losses
	BaseRTTDrops       uint64 // RTT samples below base_rtt

	FairIncreaseBytes         float64
	ProportionalIncreaseBytes float64
	FastIncreaseBytes         float64
	EtaBytes                  float64
	MDBytes                   float64 // taken by multiplicative decreases
	QuickAdaptBytes           float64 // taken by quick adapts
	NackBytes                 float64 // taken by NACKs
	LossBytes                 float64 // taken by inferred losses
	PenaltyBytes              float64 // taken by rcv_cwnd_pend
}

// Controller is NSCC at one sender CCC (§3.6.13; htsim UecSrc): a window
// of bytes in flight that ACKs move by the four ECN × delay quadrants,
// quick adapt and NACKs. It is a pure state machine: every method takes
// now, a monotonic time since an arbitrary epoch; an earlier now is taken
// as the latest one seen. It owns no timer (NextEvent is Never): the ACK
// clock runs it. Not safe for concurrent use.
//
// After every event MTU ≤ cwnd ≤ MaxWnd (htsim set_cwnd_bounds).
type Controller struct {
	p   Params
	mtu float64

	cwnd    float64 // bytes; Window() is its floor
	maxWnd  int     // ccc.max_wnd: MaxWnd at base_rtt
	baseRTT time.Duration

	avgDelay float64 // ns: htsim _avg_delay

	// §3.6.13.4 Table 3-77.
	inFlight      int // last known: ACK/NACK samples, less losses since
	savedCwnd     float64
	saved         bool
	achievedBytes int64
	receivedBytes int64
	fiCount       int64
	triggerQA     bool
	qaStarted     bool // qa_endtime != 0
	qaEnd         time.Duration
	bytesToIgnore int64
	bytesIgnored  int64
	incBytes      float64 // inc_bytes = incFair + incProp, divided by cwnd at fulfill
	incFair       float64
	incProp       float64
	lastAdjust    time.Duration
	increase      bool // fast increase mode
	lastDec       time.Duration

	now   time.Duration
	stats Stats
}

// New returns the NSCC state of a CCC initialised at now (Table 3-77):
// cwnd = InitialCwndBytes or MaxWnd, base_rtt = ConfigBaseRTT,
// last_adjust_time = last_dec_time = now. It panics if p.Validate fails;
// validate configuration first.
func New(p Params, now time.Duration) *Controller {
	if err := p.Validate(); err != nil {
		panic(err)
	}
	c := &Controller{
		p:          p,
		mtu:        float64(p.MTUBytes),
		maxWnd:     p.MaxWndBytes(),
		baseRTT:    p.ConfigBaseRTT,
		lastAdjust: now,
		lastDec:    now,
		now:        now,
	}
	c.cwnd = float64(c.maxWnd)
	if p.InitialCwndBytes > 0 {
		c.cwnd = float64(p.InitialCwndBytes)
	}
	return c
}

// Params returns the parameters c was made with.
func (c *Controller) Params() Params { return c.p }

// Window is cwnd in whole bytes (cc.WindowController).
func (c *Controller) Window() int { return int(c.cwnd) }

// MaxWnd is the window's ceiling, 1.5 BDP at the current base_rtt.
func (c *Controller) MaxWnd() int { return c.maxWnd }

// BaseRTT is the smallest RTT seen, or ConfigBaseRTT if none was smaller.
func (c *Controller) BaseRTT() time.Duration { return c.baseRTT }

// AvgDelay is the average queueing delay that multiplicative decrease
// reads (htsim get_avg_delay), rounded to the nanosecond.
func (c *Controller) AvgDelay() time.Duration { return time.Duration(math.Round(c.avgDelay)) }

// Stats returns the counters.
func (c *Controller) Stats() Stats { return c.stats }

// CanSend reports whether a packet of size bytes may leave with inFlight
// bytes in flight: inflight + size ≤ cwnd (§3.6.13.5 NSCC.CanSend with
// the packet's size for MTU, as htsim can_send_NSCC).
func (c *Controller) CanSend(inFlight, size int) bool {
	return float64(inFlight)+float64(size) <= c.cwnd
}

// AckRequest reports whether the next packet should carry an ACK request
// (§3.6.13.5 NSCC.AckRequest): less than an MTU of window left, or a
// window below the destination's ACK_Gen_Trigger (bytes). inFlight
// includes the packet.
func (c *Controller) AckRequest(inFlight, ackGenTrigger int) bool {
	return c.cwnd-float64(inFlight) < c.mtu || c.cwnd < float64(ackGenTrigger)
}

// Advance only records now: NSCC is ACK-clocked. Quick adapt's window and
// the adjust period end on the first ACK after them, as in the spec.
func (c *Controller) Advance(now time.Duration) { c.advance(now) }

// NextEvent is Never: no NSCC rule fires between ACKs.
func (c *Controller) NextEvent() time.Duration { return Never }

func (c *Controller) advance(now time.Duration) time.Duration {
	if now < c.now {
		now = c.now
	}
	c.now = now
	return now
}

// OnAck takes one ACK received at now with no destination flow control
// (rcv_cwnd_pend 0, rc clear).
func (c *Controller) OnAck(now time.Duration, s cc.AckSample) {
	c.OnAckCC(now, s, AckCCState{})
}

// OnAckCC takes one ACK received at now with the NSCC cc_state of an
// ACK_CC (§3.6.13.5 NSCC.OnACK). An RTT ≤ 0 counts as invalid.
func (c *Controller) OnAckCC(now time.Duration, s cc.AckSample, st AckCCState) {
	now = c.advance(now)
	defer c.bound()
	c.stats.Acks++
	newly := int64(max(s.NewlyAcked, 0))
	c.inFlight = s.InFlight
	c.bytesIgnored += newly
	c.receivedBytes += newly
	c.achievedBytes += newly

	limited := c.applyCwndPenalty(st, newly, s.InFlight)
	if !s.RTTValid || s.RTT <= 0 {
		// §3.6.13.5: no RTT sample, no congestion response (htsim goes on
		// with the average delay instead).
		c.stats.AcksNoRTT++
		return
	}
	c.updateBaseRTT(s.RTT)
	delay := s.RTT - c.baseRTT
	c.updateDelay(delay, s.ECN)

	if c.quickAdapt(now, false, s.ECN, delay) {
		return
	}
	tq := c.p.TargetQDelay
	switch {
	case !s.ECN && delay >= tq:
		// The queue was there but ECN says it drained behind the packet.
		if !limited {
			c.fairIncrease(newly)
		}
	case !s.ECN:
		if !limited {
			c.proportionalIncrease(newly, delay)
		}
	case delay >= tq:
		c.stats.ECNAboveTargetAcks++
		c.multiplicativeDecrease(now)
	default:
		// ECN without delay: the start of congestion, or one bad path;
		// left to load balancing (§3.6.13 quadrant 3).
		c.stats.ECNBelowTargetAcks++
	}
	if now-c.lastAdjust >= c.p.AdjustPeriodThreshold || c.receivedBytes > int64(c.p.AdjustBytesThreshold) {
		c.fulfillAdjustment(now)
	}
}

// OnNack takes a NACK of size bytes received at now, read as a trim
// (htsim: every NACK is one) with no RTT sample; in-flight bytes are the
// last known less size. OnNackSample takes the whole NACK.
func (c *Controller) OnNack(now time.Duration, size int) {
	c.OnNackSample(now, NackSample{Size: size, Reason: NackTrimmed, InFlight: c.inFlight - size})
}

// OnNackSample takes one NACK received at now (§3.6.13.5 NSCC.OnNACK;
// htsim updateCwndOnNack_NSCC): a trim feeds the average delay a sample
// of config_base_rtt and arms quick adapt; if quick adapt does not fire
// (or ignore it), cwnd loses the packet. A last-hop trim does neither
// when RCCC runs; other reasons only give their RTT to base_rtt.
func (c *Controller) OnNackSample(now time.Duration, n NackSample) {
	now = c.advance(now)
	defer c.bound()
	c.stats.Nacks++
	size := int64(max(n.Size, 0))
	c.inFlight = n.InFlight
	if n.RTTValid && n.RTT > 0 {
		c.updateBaseRTT(n.RTT)
	}
	trim := n.Reason == NackTrimmed || n.Reason == NackTrimmedLastHop
	if trim {
		// The trimmed packet stood in a full queue: estimate its delay as
		// config_base_rtt (htsim: _network_rtt; fed raw, as with ECN).
		c.updateDelay(c.p.ConfigBaseRTT, true)
		c.bytesIgnored += size
	}
	if n.Reason == NackTrimmed || (n.Reason == NackTrimmedLastHop && !c.p.RCCC) {
		c.triggerQA = true
		// A trim counts as ECN-marked for the ignore phase; is_loss makes
		// the delay moot.
		if c.quickAdapt(now, true, true, 0) {
			return
		}
		before := c.cwnd
		c.cwnd = max(c.cwnd-float64(size), c.mtu)
		c.stats.NackDecreases++
		c.stats.NackBytes += before - c.cwnd
	}
}

// OnLoss takes a loss of size bytes the sender inferred at now (a
// timeout): cwnd = max(cwnd − size, MTU) (§3.6.13.5 NSCC.OnInferredLoss;
// htsim mark_packet_for_retransmission). No quick adapt.
func (c *Controller) OnLoss(now time.Duration, size int) {
	c.advance(now)
	defer c.bound()
	c.stats.Losses++
	size = max(size, 0)
	before := c.cwnd
	c.cwnd = max(c.cwnd-float64(size), c.mtu)
	c.stats.LossBytes += before - c.cwnd
	c.bytesIgnored += int64(size)
	c.inFlight -= size
}

// bound keeps MTU ≤ cwnd ≤ MaxWnd (htsim set_cwnd_bounds after every ACK
// and NACK): a restore, or a base_rtt that lowered MaxWnd, may leave cwnd
// above it.
func (c *Controller) bound() {
	c.cwnd = min(max(c.cwnd, c.mtu), float64(c.maxWnd))
}

// applyCwndPenalty is §3.6.13.6 apply_cwnd_penalty: while rcv_cwnd_pend >
// 0, save cwnd once, then cwnd = max(MTU, min(cwnd, inflight) −
// (pend·newly >> 7)); rc restores the saved cwnd. It reports whether the
// destination limits the window (no increase on this ACK).
func (c *Controller) applyCwndPenalty(st AckCCState, newly int64, inFlight int) bool {
	pend := min(st.RcvCwndPend, maxRcvCwndPend)
	if pend > 0 {
		c.stats.PenaltyAcks++
		if !c.saved {
			c.saved, c.savedCwnd = true, c.cwnd
		}
		dec := (int64(pend) * newly) >> 7
		before := c.cwnd
		c.cwnd = max(c.mtu, min(c.cwnd, float64(inFlight))-float64(dec))
		c.stats.PenaltyBytes += before - c.cwnd
		return true
	}
	if st.RestoreCwnd && c.saved {
		c.cwnd = c.savedCwnd
		c.saved = false
		c.stats.Restores++
	}
	return false
}

// updateBaseRTT is §3.6.13.6 update_base_rtt (htsim update_base_rtt):
// base_rtt is the smallest sample, and MaxWnd follows it.
func (c *Controller) updateBaseRTT(rtt time.Duration) {
	rtt = max(rtt, c.p.BaseRTTFloor)
	if rtt < c.baseRTT {
		c.baseRTT = rtt
		c.maxWnd = c.p.maxWndAt(rtt)
		c.stats.BaseRTTDrops++
	}
}

// updateDelay feeds the average-delay EWMA (htsim update_delay; the spec
// leaves it to the implementation). A sample above tq without ECN says
// the queue has drained behind the packet: it is fed as 0.25·base_rtt,
// so a past queue does not keep the average up.
func (c *Controller) updateDelay(delay time.Duration, ecn bool) {
	sample := float64(delay)
	if !ecn && delay > c.p.TargetQDelay {
		sample = 0.25 * float64(c.baseRTT)
	}
	g := c.p.DelayAlpha
	c.avgDelay = g*sample + (1-g)*c.avgDelay
}

// quickAdapt is §3.6.13.6 quick_adapt (htsim quick_adapt). It reports
// whether it consumed the event: it ran, or the event is an ECN signal of
// data that was in flight when it last ran.
func (c *Controller) quickAdapt(now time.Duration, isLoss, ecn bool, delay time.Duration) bool {
	if c.p.DisableQuickAdapt {
		return false
	}
	done := false
	if c.bytesIgnored < c.bytesToIgnore && ecn {
		// Still acking what was queued before the cut: its marks are old
		// news, and MD must not cut again for them.
		done = true
		c.stats.Ignored++
	} else if !c.qaStarted || now >= c.qaEnd {
		// One window of base_rtt + tq ended: if it saw a trim or a very
		// long delay and delivered less than MaxWnd/2^qa_gate, cwnd =
		// what it delivered.
		if c.qaStarted && (c.triggerQA || isLoss || delay > c.p.QAThreshold) &&
			c.achievedBytes < int64(c.maxWnd>>c.p.QAGate) {
			before := c.cwnd
			c.cwnd = max(float64(c.achievedBytes), c.mtu)
			c.stats.QuickAdapts++
			c.stats.QuickAdaptBytes += before - c.cwnd
			c.bytesToIgnore = int64(max(c.inFlight, 0))
			c.bytesIgnored = 0
			c.triggerQA = false
			done = true
		}
		c.achievedBytes = 0
		c.qaStarted = true
		c.qaEnd = now + c.baseRTT + c.p.TargetQDelay
	}
	if done {
		c.incBytes, c.incFair, c.incProp = 0, 0, 0
		c.receivedBytes = 0
	}
	return done
}

// fairIncrease is §3.6.13.6 fair_increase: every CCC that sees the signal
// gains the same fi per window, whatever its cwnd (inc_bytes is divided
// by cwnd at fulfill).
func (c *Controller) fairIncrease(newly int64) {
	inc := c.p.FIBytes * float64(newly)
	c.incBytes += inc
	c.incFair += inc
	c.stats.FairAcks++
}

// proportionalIncrease is §3.6.13.6 proportional_increase: the further
// below tq, the faster; fast increase takes over after a window at ≈ 0.
func (c *Controller) proportionalIncrease(newly int64, delay time.Duration) {
	c.fastIncrease(newly, delay)
	if c.increase {
		return
	}
	inc := c.p.AlphaBytesPerSecond * float64(newly) * (c.p.TargetQDelay - delay).Seconds()
	c.incBytes += inc
	c.incProp += inc
	c.stats.ProportionalAcks++
}

// fastIncrease is §3.6.13.6 fast_increase (htsim: delay < 1 µs is ≈ 0):
// once more than a cwnd of bytes came back without delay, every such ACK
// adds newly·fi_scale at once, until a delay or an MD ends it.
func (c *Controller) fastIncrease(newly int64, delay time.Duration) {
	if delay < c.p.NoDelay {
		c.fiCount += newly
		if float64(c.fiCount) > c.cwnd || c.increase {
			before := c.cwnd
			c.cwnd = min(c.cwnd+float64(newly)*c.p.FIScale, float64(c.maxWnd))
			c.stats.FastIncreaseAcks++
			c.stats.FastIncreaseBytes += c.cwnd - before
			c.increase = true
			return
		}
	} else {
		c.fiCount = 0
	}
	c.increase = false
}

// multiplicativeDecrease is §3.6.13.6 multiplicative_decrease: at most once
// per base_rtt, and only if the average delay is above tq, cwnd ×=
// max(1 − gamma·(avg − tq)/avg, max_md_jump) — the share of the queue
// above target goes, so that all CCCs doing it drain it in about an RTT.
func (c *Controller) multiplicativeDecrease(now time.Duration) {
	c.increase = false
	c.fiCount = 0
	avg, tq := c.avgDelay, float64(c.p.TargetQDelay)
	if avg <= tq || now-c.lastDec <= c.baseRTT {
		return
	}
	f := max(1-c.p.Gamma*(avg-tq)/avg, c.p.MaxMDJump)
	before := c.cwnd
	c.cwnd = max(c.cwnd*f, c.mtu)
	c.lastDec = now
	c.stats.Decreases++
	c.stats.MDBytes += before - c.cwnd
}

// fulfillAdjustment is §3.6.13.6 fulfill_adjustment: the increases
// gathered since the last one go into cwnd, divided by cwnd, and eta once
// per adjust period (htsim PR #129).
func (c *Controller) fulfillAdjustment(now time.Duration) {
	c.stats.Fulfills++
	c.stats.FairIncreaseBytes += c.incFair / c.cwnd
	c.stats.ProportionalIncreaseBytes += c.incProp / c.cwnd
	c.cwnd += c.incBytes / c.cwnd
	if now-c.lastAdjust >= c.p.AdjustPeriodThreshold {
		c.lastAdjust = now
		c.cwnd += c.p.EtaBytes
		c.stats.EtaAdds++
		c.stats.EtaBytes += c.p.EtaBytes
	}
	c.cwnd = min(c.cwnd, float64(c.maxWnd))
	c.incBytes, c.incFair, c.incProp = 0, 0, 0
	c.receivedBytes = 0
}
