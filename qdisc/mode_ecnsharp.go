package qdisc

import (
	"fmt"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ECNSharp is ECN♯ (seed 002): instantaneous marking above InsTarget OR
// the persistent-queue marking of Algorithm 1 (PstTarget, PstInterval),
// decided at dequeue.
const ECNSharp = ECNMode(bpf.PortEcnModeECN_MODE_ECNSHARP)

type sharpMarker struct{}

func init() {
	register(ECNSharp, []string{"ecnsharp", "ecn#", "ecn♯", "ecn-sharp"}, true, sharpMarker{})
}

func (sharpMarker) validate(cc *ClassConfig) []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(checkDuration("pst_interval", cc.PstInterval, ECNSharp))
	if cc.QueueSignal {
		if cc.InsTarget != 0 || cc.InsMax != 0 || cc.PstTarget != 0 {
			add(fmt.Errorf("ecnsharp: queue_signal compares bytes: give ins_target_bytes, ins_max_bytes and pst_target_bytes, not durations (ins_target %s, ins_max %s, pst_target %s)",
				units.FormatDuration(cc.InsTarget), units.FormatDuration(cc.InsMax), units.FormatDuration(cc.PstTarget)))
		}
		if cc.InsTargetBytes == 0 || cc.InsTargetBytes >= cc.LimitBytes {
			add(fmt.Errorf("ecnsharp: ins_target_bytes (%s) must be greater than 0 and below limit (%s)", cc.InsTargetBytes, cc.LimitBytes))
		}
		if cc.InsMaxBytes != 0 && (cc.InsMaxBytes <= cc.InsTargetBytes || cc.InsMaxBytes > cc.LimitBytes) {
			add(fmt.Errorf("ecnsharp: ins_max_bytes (%s) must be 0 (cut-off) or above ins_target_bytes (%s) and at most limit (%s)", cc.InsMaxBytes, cc.InsTargetBytes, cc.LimitBytes))
		}
		if cc.PstTargetBytes == 0 {
			add(fmt.Errorf("ecnsharp: pst_target_bytes (%s) must be greater than 0", cc.PstTargetBytes))
		} else if cc.PstTargetBytes >= cc.InsTargetBytes && !cc.ForceTargets {
			add(fmt.Errorf("ecnsharp: pst_target_bytes (%s) must be below ins_target_bytes (%s) (force_targets to allow)", cc.PstTargetBytes, cc.InsTargetBytes))
		}
	} else {
		if cc.InsTargetBytes != 0 || cc.InsMaxBytes != 0 || cc.PstTargetBytes != 0 {
			add(fmt.Errorf("ecnsharp: the byte thresholds (ins_target_bytes %s, ins_max_bytes %s, pst_target_bytes %s) need queue_signal; the sojourn signal takes durations",
				cc.InsTargetBytes, cc.InsMaxBytes, cc.PstTargetBytes))
		}
		add(checkDuration("ins_target", cc.InsTarget, ECNSharp))
		add(checkDuration("pst_target", cc.PstTarget, ECNSharp))
		if cc.InsMax != 0 && (cc.InsMax <= cc.InsTarget || cc.InsMax > maxAQMTime) {
			add(fmt.Errorf("ecnsharp: ins_max (%s) must be 0 (cut-off) or above ins_target (%s) and at most %s",
				units.FormatDuration(cc.InsMax), units.FormatDuration(cc.InsTarget), units.FormatDuration(maxAQMTime)))
		}
		if cc.PstTarget > 0 && cc.PstTarget >= cc.InsTarget && !cc.ForceTargets {
			add(fmt.Errorf("ecnsharp: pst_target (%s) must be below ins_target (%s) (force_targets to allow)",
				units.FormatDuration(cc.PstTarget), units.FormatDuration(cc.InsTarget)))
		}
	}
	if (cc.InsMax != 0 || cc.InsMaxBytes != 0) && !(cc.MaxP > 0 && cc.MaxP <= 1) {
		add(fmt.Errorf("ecnsharp: max_p (%g) must be in (0, 1] for the probabilistic curve", cc.MaxP))
	}
	return errs
}

// stray: sqrt_law and queue_signal are flags no other mode reads.
func (sharpMarker) stray(cc *ClassConfig) error {
	if cc.SqrtLaw || cc.QueueSignal {
		return fmt.Errorf("%s: sqrt_law and queue_signal are ecnsharp options", cc.ECN)
	}
	return nil
}

func (sharpMarker) encode(v *bpf.PortClassConfig, cc *ClassConfig) {
	v.AqmIntervalNs = uint64(cc.PstInterval)
	v.MaxP = probToFixed(cc.MaxP)
	if cc.QueueSignal {
		v.AqmFlags |= aqmFlagQueueSignal
		v.InsLo, v.InsHi, v.AqmTarget = uint64(cc.InsTargetBytes), uint64(cc.InsMaxBytes), uint64(cc.PstTargetBytes)
	} else {
		v.InsLo, v.InsHi, v.AqmTarget = uint64(cc.InsTarget), uint64(cc.InsMax), uint64(cc.PstTarget)
	}
	if cc.SqrtLaw {
		v.AqmFlags |= aqmFlagSqrtLaw
	}
}

func (sharpMarker) decode(cc *ClassConfig, v *bpf.PortClassConfig) {
	cc.PstInterval = time.Duration(v.AqmIntervalNs)
	cc.MaxP = probFromFixed(v.MaxP)
	cc.QueueSignal = v.AqmFlags&aqmFlagQueueSignal != 0
	cc.SqrtLaw = v.AqmFlags&aqmFlagSqrtLaw != 0
	if cc.QueueSignal {
		cc.InsTargetBytes, cc.InsMaxBytes, cc.PstTargetBytes = units.ByteSize(v.InsLo), units.ByteSize(v.InsHi), units.ByteSize(v.AqmTarget)
	} else {
		cc.InsTarget, cc.InsMax, cc.PstTarget = time.Duration(v.InsLo), time.Duration(v.InsHi), time.Duration(v.AqmTarget)
	}
}

func (sharpMarker) text(cc *ClassConfig) string {
	var ins, pst string
	if cc.QueueSignal {
		ins, pst = "ins_target "+cc.InsTargetBytes.String(), cc.PstTargetBytes.String()
		if cc.InsMaxBytes != 0 {
			ins = fmt.Sprintf("ins_min %s ins_max %s probability %s", cc.InsTargetBytes, cc.InsMaxBytes, formatProb(cc.MaxP))
		}
	} else {
		ins, pst = "ins_target "+units.FormatDuration(cc.InsTarget), units.FormatDuration(cc.PstTarget)
		if cc.InsMax != 0 {
			ins = fmt.Sprintf("ins_min %s ins_max %s probability %s", units.FormatDuration(cc.InsTarget), units.FormatDuration(cc.InsMax), formatProb(cc.MaxP))
		}
	}
	t := fmt.Sprintf("ecnsharp %s pst_target %s pst_interval %s", ins, pst, units.FormatDuration(cc.PstInterval))
	if cc.QueueSignal {
		t += " signal qlen"
	}
	if cc.SqrtLaw {
		t += " sqrt"
	}
	return t
}

var sharpKeys = []tcKey{
	{name: keyIns.name, aliases: keyIns.aliases, arg: "DUR|SIZE"},
	{name: "ins-max", aliases: []string{"ins_max", "insmax", "kmax"}, arg: "DUR|SIZE"},
	{name: "pst", aliases: []string{"pst_target", "pst-target"}, arg: "DUR|SIZE"},
	durKey(keyInterval, func(cc *ClassConfig) *time.Duration { return &cc.PstInterval }),
	keyMaxP,
	{name: "signal", arg: "sojourn|qlen|time|queue|bytes"},
	flagKey(tcKey{name: "sqrt"}, func(cc *ClassConfig) *bool { return &cc.SqrtLaw }),
	flagKey(tcKey{name: "force"}, func(cc *ClassConfig) *bool { return &cc.ForceTargets }),
}

func (sharpMarker) tcKeys() []tcKey { return sharpKeys }

const sharpExample = "ecnsharp:ins=200us,pst=85us,interval=200us"

func (sharpMarker) example() string { return sharpExample }

// tcHint: CoDel's target= on an ECN♯ class.
func (sharpMarker) tcHint(key string, class ClassID) string {
	if key == "target" {
		return fmt.Sprintf("ecnsharp's persistent target is pst=, not target= (e.g. %d:%s)", class, sharpExample)
	}
	return ""
}

func (sharpMarker) applyTC(cc *ClassConfig, set tcArgs, before ECNMode, class ClassID) error {
	if sig, ok := set["signal"]; ok {
		var qlen bool
		switch strings.ToLower(sig) {
		case "sojourn", "time":
		case "qlen", "queue", "bytes":
			qlen = true
		default:
			return fmt.Errorf("signal %q: want sojourn or qlen", sig)
		}
		if qlen != cc.QueueSignal {
			// The thresholds change unit: the old ones mean nothing now.
			cc.QueueSignal = qlen
			cc.InsTarget, cc.InsMax, cc.PstTarget = 0, 0, 0
			cc.InsTargetBytes, cc.InsMaxBytes, cc.PstTargetBytes = 0, 0, 0
		}
	}
	for _, t := range []struct {
		key string
		d   *time.Duration
		b   *units.ByteSize
	}{{"ins", &cc.InsTarget, &cc.InsTargetBytes}, {"ins-max", &cc.InsMax, &cc.InsMaxBytes}, {"pst", &cc.PstTarget, &cc.PstTargetBytes}} {
		raw, ok := set[t.key]
		if !ok {
			continue
		}
		if cc.QueueSignal {
			v, err := units.ParseSize(raw)
			if err != nil {
				return fmt.Errorf("%s: with signal=qlen thresholds are sizes: %v", t.key, err)
			}
			*t.b = v
			continue
		}
		v, err := units.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", t.key, err)
		}
		*t.d = v
	}
	if before == ECNSharp {
		return nil
	}
	// With signal=qlen the targets are sizes.
	arg, noIns, noPst := "DUR", cc.InsTarget == 0, cc.PstTarget == 0
	if cc.QueueSignal {
		arg, noIns, noPst = "SIZE", cc.InsTargetBytes == 0, cc.PstTargetBytes == 0
	}
	return needs(ECNSharp, class, tuneHint,
		need{"ins", arg, noIns}, need{"pst", arg, noPst}, need{"interval", "DUR", cc.PstInterval == 0})
}

// tune: ins_target = λ·RTT_p90 (eq. 2), pst_target = λ·RTT_avg, pst_interval
// ≈ RTT_p90 (seed 002 §3.4).
func (sharpMarker) tune(out aqm.TuneOutput) []TuneOption {
	fd := units.FormatDuration
	return []TuneOption{{Spec: fmt.Sprintf("ecnsharp:ins=%s,pst=%s,interval=%s", fd(out.InsTarget), fd(out.PstTarget), fd(out.PstInterval))}}
}

func (sharpMarker) ceCurve(*ClassConfig, uint64) (float64, bool) { return 0, false }

func (sharpMarker) help() string {
	return "      ecnsharp,ins=DUR,pst=DUR,interval=DUR\n" +
		"                                  ECN# (seed 002): sojourn above ins, or the\n" +
		"                                  persistent-queue logic (pst, interval);\n" +
		"                                  options sqrt, force, signal=qlen (sizes),\n" +
		"                                  ins-max=DUR,p=PROB (veth mode)\n"
}
