package qdisc

import (
	"fmt"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ECNWRED marks with a probability rising linearly from 0 at MinThBytes to
// MaxP at MaxThBytes, and marks every packet at or above MaxThBytes (seed
// 000's switch WRED, on the instantaneous backlog).
const ECNWRED = ECNMode(bpf.PortEcnModeECN_MODE_WRED)

type wredMarker struct{}

func init() { register(ECNWRED, []string{"wred", "red"}, false, wredMarker{}) }

func (wredMarker) validate(cc *ClassConfig) []error {
	var errs []error
	if cc.MinThBytes >= cc.MaxThBytes {
		errs = append(errs, fmt.Errorf("wred: max_th (%s) must be greater than min_th (%s)", cc.MaxThBytes, cc.MinThBytes))
	}
	if cc.MaxThBytes > cc.LimitBytes {
		errs = append(errs, fmt.Errorf("wred: max_th (%s) must not exceed limit (%s)", cc.MaxThBytes, cc.LimitBytes))
	}
	if !(cc.MaxP > 0 && cc.MaxP <= 1) {
		errs = append(errs, fmt.Errorf("wred: max_p (%g) must be in (0, 1]", cc.MaxP))
	}
	return errs
}

func (wredMarker) encode(v *bpf.PortClassConfig, cc *ClassConfig) {
	v.MinThBytes, v.MaxThBytes, v.MaxP = uint64(cc.MinThBytes), uint64(cc.MaxThBytes), probToFixed(cc.MaxP)
}

func (wredMarker) decode(cc *ClassConfig, v *bpf.PortClassConfig) {
	cc.MinThBytes, cc.MaxThBytes, cc.MaxP = units.ByteSize(v.MinThBytes), units.ByteSize(v.MaxThBytes), probFromFixed(v.MaxP)
}

func (wredMarker) text(cc *ClassConfig) string {
	return fmt.Sprintf("wred min %s max %s probability %s", cc.MinThBytes, cc.MaxThBytes, formatProb(cc.MaxP))
}

var keyMaxP = probKey(tcKey{name: "p", aliases: []string{"probability", "max_p", "maxp"}},
	func(cc *ClassConfig) *float64 { return &cc.MaxP })

var wredKeys = []tcKey{
	sizeKey(tcKey{name: "min", aliases: []string{"min_th", "minth"}},
		func(cc *ClassConfig) *units.ByteSize { return &cc.MinThBytes }),
	sizeKey(tcKey{name: "max", aliases: []string{"max_th", "maxth"}},
		func(cc *ClassConfig) *units.ByteSize { return &cc.MaxThBytes }),
	keyMaxP,
}

func (wredMarker) tcKeys() []tcKey { return wredKeys }

func (wredMarker) example() string { return "wred:min=50kb,max=1mb,p=0.1" }

func (wredMarker) applyTC(cc *ClassConfig, set tcArgs, before ECNMode, class ClassID) error {
	if before == ECNWRED {
		return nil
	}
	// Entering wred from a mode whose thresholds mean nothing to it; a
	// step class's K is min_th.
	return needs(ECNWRED, class, "", need{"min", "SIZE", !set.given("min") && before != ECNStep},
		need{"max", "SIZE", !set.given("max")}, need{"p", "PROB", !set.given("p")})
}

// tune: none; the experiment's WRED baseline runs from K_avg to K_tail.
func (wredMarker) tune(aqm.TuneOutput) []TuneOption { return nil }

func (wredMarker) ceCurve(cc *ClassConfig, backlog uint64) (float64, bool) {
	return linear(backlog, uint64(cc.MinThBytes), uint64(cc.MaxThBytes), cc.MaxP), true
}

func (wredMarker) help() string {
	return "      wred,min=SIZE,max=SIZE,p=PROB\n" +
		"                                  WRED/ECN: marking probability rises from 0\n" +
		"                                  at min to p at max; all marked at/above max\n"
}
