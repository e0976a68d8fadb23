package qdisc

import (
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ECNTwoThreshold is the two-threshold marking of seed 001
// (draft-hu-rtgwg-pre-ecn-wan-00, "Two Threshold ECN Mechanism") on the
// backlog a packet finds (ClassConfig.TwoThreshold). It marks the first IP
// header the port parses, which for IP-in-IP is the outer one, as the seed
// wants: the tunnel's egress PE reads the outer codepoint.
const ECNTwoThreshold = ECNMode(bpf.PortEcnModeECN_MODE_TWO_THRESHOLD)

// TwoThreshold are the settings of ECNTwoThreshold:
//
//   - below T1Bytes nothing is marked;
//   - from T1Bytes an ECT(0) packet is marked ECT(1), "light congestion",
//     with a probability rising linearly with the queue (seed 001 step 1):
//     0 at T1Bytes, LightMaxP at T2Bytes, LightMaxP above;
//   - from T2Bytes an ECT(0) or ECT(1) packet is marked CE on a RED-like
//     curve (step 2): 0 at T2Bytes, HeavyMaxP at T2MaxBytes, every packet
//     at or above T2MaxBytes, as this port's WRED. Above T2Bytes the ECT(0)
//     packets the CE curve spares are light-marked with LightMaxP (the
//     seed is silent there; the queue has passed T1 too).
//
// Only ECT(0) is light-marked: the seed gives ECT(1) the meaning "light
// congestion", so an ECT(1) arrival already says it. Not-ECT packets are
// never marked; WREDDrop drops them where the CE curve would mark. CE
// arrivals stay CE. The seed gives no numbers; Tune's rule is this
// project's (see tune).
type TwoThreshold struct {
	T1Bytes    units.ByteSize `json:"t1"`
	T2Bytes    units.ByteSize `json:"t2"`
	T2MaxBytes units.ByteSize `json:"t2_max"`
	// LightMaxP is the ECT(1) probability at T2Bytes, in (0, 1].
	LightMaxP float64 `json:"light_max_p"`
	// HeavyMaxP is the CE probability at T2MaxBytes, in (0, 1].
	HeavyMaxP float64 `json:"heavy_max_p"`
	// NotifyInterval turns on the seed's notification: a tunnelled (IPv4
	// protocol 4) packet marked light or heavy makes the port send a
	// RoCEv2 CNP to its outer source, the tunnel-ingress PE (L bit set
	// for light; bpf/port_wancnp.h wan_cnp), at most one per PE, class and kind
	// per NotifyInterval. 0: off.
	NotifyInterval time.Duration `json:"notify_interval,omitempty"`
}

// MaxNotifyInterval bounds TwoThreshold.NotifyInterval.
const MaxNotifyInterval = time.Second

type twoThresholdMarker struct{}

func init() {
	register(ECNTwoThreshold, []string{"two-threshold", "twothreshold", "two_threshold", "2t"}, false, twoThresholdMarker{})
}

func (twoThresholdMarker) validate(cc *ClassConfig) []error {
	t := &cc.TwoThreshold
	var errs []error
	if t.T1Bytes >= t.T2Bytes {
		errs = append(errs, fmt.Errorf("two-threshold: t2 (%s) must be greater than t1 (%s)", t.T2Bytes, t.T1Bytes))
	}
	if t.T2MaxBytes <= t.T2Bytes || t.T2MaxBytes > cc.LimitBytes {
		errs = append(errs, fmt.Errorf("two-threshold: t2_max (%s) must be greater than t2 (%s) and at most limit (%s)", t.T2MaxBytes, t.T2Bytes, cc.LimitBytes))
	}
	if !(t.LightMaxP > 0 && t.LightMaxP <= 1) {
		errs = append(errs, fmt.Errorf("two-threshold: light_max_p (%g) must be in (0, 1]", t.LightMaxP))
	}
	if !(t.HeavyMaxP > 0 && t.HeavyMaxP <= 1) {
		errs = append(errs, fmt.Errorf("two-threshold: heavy_max_p (%g) must be in (0, 1]", t.HeavyMaxP))
	}
	if t.NotifyInterval < 0 || t.NotifyInterval > MaxNotifyInterval || t.NotifyInterval > 0 && t.NotifyInterval < time.Microsecond {
		errs = append(errs, fmt.Errorf("two-threshold: notify_interval (%v) must be 0 (off) or 1µs to %v", t.NotifyInterval, MaxNotifyInterval))
	}
	return errs
}

func (twoThresholdMarker) encode(v *bpf.PortClassConfig, cc *ClassConfig) {
	t := &cc.TwoThreshold
	v.T1Bytes, v.T2Bytes, v.T2MaxBytes = uint64(t.T1Bytes), uint64(t.T2Bytes), uint64(t.T2MaxBytes)
	v.LightMaxP, v.HeavyMaxP = probToFixed(t.LightMaxP), probToFixed(t.HeavyMaxP)
	v.WanCnpIntervalNs = uint64(t.NotifyInterval.Nanoseconds())
}

func (twoThresholdMarker) decode(cc *ClassConfig, v *bpf.PortClassConfig) {
	cc.TwoThreshold = TwoThreshold{
		T1Bytes: units.ByteSize(v.T1Bytes), T2Bytes: units.ByteSize(v.T2Bytes), T2MaxBytes: units.ByteSize(v.T2MaxBytes),
		LightMaxP: probFromFixed(v.LightMaxP), HeavyMaxP: probFromFixed(v.HeavyMaxP),
		NotifyInterval: time.Duration(v.WanCnpIntervalNs),
	}
}

func (twoThresholdMarker) text(cc *ClassConfig) string {
	t := &cc.TwoThreshold
	s := fmt.Sprintf("two-threshold t1 %s t2 %s light_probability %s t2_max %s heavy_probability %s",
		t.T1Bytes, t.T2Bytes, formatProb(t.LightMaxP), t.T2MaxBytes, formatProb(t.HeavyMaxP))
	if t.NotifyInterval > 0 {
		s += fmt.Sprintf(" notify_pe every %v", t.NotifyInterval)
	}
	return s
}

var twoThresholdKeys = []tcKey{
	sizeKey(tcKey{name: "t1"}, func(cc *ClassConfig) *units.ByteSize { return &cc.TwoThreshold.T1Bytes }),
	sizeKey(tcKey{name: "t2"}, func(cc *ClassConfig) *units.ByteSize { return &cc.TwoThreshold.T2Bytes }),
	sizeKey(tcKey{name: "t2-max", aliases: []string{"t2_max", "t2max"}},
		func(cc *ClassConfig) *units.ByteSize { return &cc.TwoThreshold.T2MaxBytes }),
	probKey(tcKey{name: "p1", aliases: []string{"light-p", "light_p", "light_max_p"}},
		func(cc *ClassConfig) *float64 { return &cc.TwoThreshold.LightMaxP }),
	probKey(tcKey{name: "p2", aliases: []string{"heavy-p", "heavy_p", "heavy_max_p"}},
		func(cc *ClassConfig) *float64 { return &cc.TwoThreshold.HeavyMaxP }),
	durKey(tcKey{name: "notify", aliases: []string{"notify-pe", "notify_interval"}},
		func(cc *ClassConfig) *time.Duration { return &cc.TwoThreshold.NotifyInterval }),
}

func (twoThresholdMarker) tcKeys() []tcKey { return twoThresholdKeys }

const twoThresholdExample = "2t:t1=50kb,t2=200kb,p1=1,t2-max=400kb,p2=0.2"

func (twoThresholdMarker) example() string { return twoThresholdExample }

func (twoThresholdMarker) applyTC(cc *ClassConfig, set tcArgs, before ECNMode, class ClassID) error {
	if before == ECNTwoThreshold {
		return nil
	}
	t := &cc.TwoThreshold
	// A setting given as 0 is Validate's to refuse.
	unset := func(key string, zero bool) bool { return zero && !set.given(key) }
	return needs(ECNTwoThreshold, class, tuneHint,
		need{"t1", "SIZE", unset("t1", t.T1Bytes == 0)}, need{"t2", "SIZE", unset("t2", t.T2Bytes == 0)},
		need{"p1", "PROB", unset("p1", t.LightMaxP == 0)}, need{"t2-max", "SIZE", unset("t2-max", t.T2MaxBytes == 0)},
		need{"p2", "PROB", unset("p2", t.HeavyMaxP == 0)})
}

// TwoThresholdTune is this project's rule for seed 001's thresholds (the
// seed gives none): CE from T2 = K_tail = λ·C·RTT_p90, where step-Tail
// marks (seed 002 eq. 1), rising to HeavyMaxP 0.2 (the production WRED
// practice dcqcn.md quotes) at 2·K_tail; the early warning from T1 =
// K_avg = λ·C·RTT_avg, the mean flow's BDP, but at most K_tail/2 so that
// the light region has room, reaching every ECT(0) packet at T2.
func TwoThresholdTune(out aqm.TuneOutput) TwoThreshold {
	return TwoThreshold{
		T1Bytes: min(out.KAvgBytes, out.KTailBytes/2), T2Bytes: out.KTailBytes, T2MaxBytes: 2 * out.KTailBytes,
		LightMaxP: 1, HeavyMaxP: 0.2,
	}
}

func (twoThresholdMarker) tune(out aqm.TuneOutput) []TuneOption {
	t := TwoThresholdTune(out)
	return []TuneOption{{
		Spec: fmt.Sprintf("2t:t1=%s,t2=%s,p1=%s,t2-max=%s,p2=%s",
			t.T1Bytes, t.T2Bytes, formatProb(t.LightMaxP), t.T2MaxBytes, formatProb(t.HeavyMaxP)),
	}}
}

// ceCurve is the heavy (CE) curve from T2; LightProbability gives the
// light one.
func (twoThresholdMarker) ceCurve(cc *ClassConfig, backlog uint64) (float64, bool) {
	t := &cc.TwoThreshold
	return linear(backlog, uint64(t.T2Bytes), uint64(t.T2MaxBytes), t.HeavyMaxP), true
}

func (twoThresholdMarker) help() string {
	return "      2t,t1=SIZE,t2=SIZE,p1=PROB,t2-max=SIZE,p2=PROB\n" +
		"                                  two thresholds (seed 001, WAN tunnels):\n" +
		"                                  from t1 ECT(0) becomes ECT(1) (\"light\")\n" +
		"                                  with probability rising to p1 at t2; from\n" +
		"                                  t2 CE with probability rising to p2 at\n" +
		"                                  t2-max, all at/above it. Marks the outer\n" +
		"                                  header of IP-in-IP. notify=DURATION: a\n" +
		"                                  marked tunnelled packet sends a CNP to\n" +
		"                                  its ingress PE (L bit: light), at most\n" +
		"                                  one per PE and kind per DURATION\n"
}
