package qdisc

import (
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ECNCoDel runs CoDel's control law (Target, Interval) at dequeue and
// marks instead of dropping (RFC 8289 with ECN).
const ECNCoDel = ECNMode(bpf.PortEcnModeECN_MODE_CODEL)

type codelMarker struct{}

func init() { register(ECNCoDel, []string{"codel"}, true, codelMarker{}) }

func (codelMarker) validate(cc *ClassConfig) []error {
	var errs []error
	for _, err := range []error{
		checkDuration("target", cc.Target, ECNCoDel),
		checkDuration("interval", cc.Interval, ECNCoDel),
	} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (codelMarker) encode(v *bpf.PortClassConfig, cc *ClassConfig) {
	v.AqmTarget, v.AqmIntervalNs = uint64(cc.Target), uint64(cc.Interval)
}

func (codelMarker) decode(cc *ClassConfig, v *bpf.PortClassConfig) {
	cc.Target, cc.Interval = time.Duration(v.AqmTarget), time.Duration(v.AqmIntervalNs)
}

func (codelMarker) text(cc *ClassConfig) string {
	return fmt.Sprintf("codel target %s interval %s", units.FormatDuration(cc.Target), units.FormatDuration(cc.Interval))
}

// keyInterval is CoDel's interval and ECN♯'s pst_interval.
var keyInterval = tcKey{name: "interval", aliases: []string{"pst_interval", "pst-interval"}}

var codelKeys = []tcKey{
	durKey(tcKey{name: "target"}, func(cc *ClassConfig) *time.Duration { return &cc.Target }),
	durKey(keyInterval, func(cc *ClassConfig) *time.Duration { return &cc.Interval }),
}

func (codelMarker) tcKeys() []tcKey { return codelKeys }

func (codelMarker) example() string { return "codel:target=85us,interval=200us" }

func (codelMarker) applyTC(cc *ClassConfig, set tcArgs, before ECNMode, class ClassID) error {
	if before == ECNCoDel {
		return nil
	}
	return needs(ECNCoDel, class, tuneHint,
		need{"target", "DUR", cc.Target == 0}, need{"interval", "DUR", cc.Interval == 0})
}

// tune: target = ECN♯'s pst_target, interval = RTT_p90 (seed 002 §5.2).
func (codelMarker) tune(out aqm.TuneOutput) []TuneOption {
	fd := units.FormatDuration
	return []TuneOption{{Spec: fmt.Sprintf("codel:target=%s,interval=%s", fd(out.CoDelTarget), fd(out.CoDelInterval))}}
}

func (codelMarker) ceCurve(*ClassConfig, uint64) (float64, bool) { return 0, false }

func (codelMarker) help() string {
	return "      codel,target=DUR,interval=DUR\n" +
		"                                  CoDel's control law at dequeue, marking\n" +
		"                                  instead of dropping (RFC 8289; veth mode)\n"
}
