package qdisc

import (
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ECNTCN marks a packet whose sojourn exceeds InsTarget when it leaves the
// queue (TCN; what codel's ce_threshold does).
const ECNTCN = ECNMode(bpf.PortEcnModeECN_MODE_TCN)

type tcnMarker struct{}

func init() { register(ECNTCN, []string{"tcn"}, true, tcnMarker{}) }

func (tcnMarker) validate(cc *ClassConfig) []error {
	if err := checkDuration("ins_target", cc.InsTarget, ECNTCN); err != nil {
		return []error{err}
	}
	return nil
}

func (tcnMarker) encode(v *bpf.PortClassConfig, cc *ClassConfig) { v.InsLo = uint64(cc.InsTarget) }
func (tcnMarker) decode(cc *ClassConfig, v *bpf.PortClassConfig) {
	cc.InsTarget = time.Duration(v.InsLo)
}

func (tcnMarker) text(cc *ClassConfig) string {
	return fmt.Sprintf("tcn ins_target %s", units.FormatDuration(cc.InsTarget))
}

// keyIns is TCN's threshold and ECN♯'s ins_target.
var keyIns = tcKey{name: "ins", aliases: []string{"ins_target", "ins-target", "threshold", "thresh"}}

var tcnKeys = []tcKey{durKey(keyIns, func(cc *ClassConfig) *time.Duration { return &cc.InsTarget })}

func (tcnMarker) tcKeys() []tcKey { return tcnKeys }
func (tcnMarker) example() string { return "tcn:ins=200us" }

func (tcnMarker) applyTC(cc *ClassConfig, set tcArgs, before ECNMode, class ClassID) error {
	if before == ECNTCN {
		return nil
	}
	return needs(ECNTCN, class, tuneHint, need{"ins", "DUR", cc.InsTarget == 0})
}

// tune: the threshold is ECN♯'s ins_target, λ·RTT_p90 (seed 002 eq. 2).
func (tcnMarker) tune(out aqm.TuneOutput) []TuneOption {
	return []TuneOption{{Spec: "tcn:ins=" + units.FormatDuration(out.TCNThreshold)}}
}

func (tcnMarker) ceCurve(*ClassConfig, uint64) (float64, bool) { return 0, false }

func (tcnMarker) help() string {
	return "      tcn,ins=DUR                 mark a packet whose sojourn exceeds ins as\n" +
		"                                  it leaves (TCN; veth mode)\n"
}
