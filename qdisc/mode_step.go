package qdisc

import (
	"fmt"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ECNStep marks every ECN-capable packet that finds more than K bytes
// queued (DCTCP-style; K is MinThBytes).
const ECNStep = ECNMode(bpf.PortEcnModeECN_MODE_STEP)

type stepMarker struct{}

func init() { register(ECNStep, []string{"step"}, false, stepMarker{}) }

func (stepMarker) validate(cc *ClassConfig) []error {
	if cc.MinThBytes >= cc.LimitBytes {
		return []error{fmt.Errorf("step: K (%s) must be below limit (%s)", cc.MinThBytes, cc.LimitBytes)}
	}
	return nil
}

func (stepMarker) encode(v *bpf.PortClassConfig, cc *ClassConfig) {
	v.MinThBytes = uint64(cc.MinThBytes)
}
func (stepMarker) decode(cc *ClassConfig, v *bpf.PortClassConfig) {
	cc.MinThBytes = units.ByteSize(v.MinThBytes)
}
func (stepMarker) text(cc *ClassConfig) string { return fmt.Sprintf("step K %s", cc.MinThBytes) }
func (stepMarker) example() string             { return "step:k=100kb" }

var stepKeys = []tcKey{sizeKey(tcKey{name: "k"}, func(cc *ClassConfig) *units.ByteSize { return &cc.MinThBytes })}

func (stepMarker) tcKeys() []tcKey { return stepKeys }

func (stepMarker) applyTC(cc *ClassConfig, set tcArgs, before ECNMode, class ClassID) error {
	// From wred, min_th is K; from off there is none.
	return needs(ECNStep, class, "", need{"k", "SIZE", !set.given("k") && before == ECNOff})
}

// tcHint: the WRED curve's keys in step mode, which has one threshold.
func (stepMarker) tcHint(key string, class ClassID) string {
	switch key {
	case "min", "max", "p":
		return fmt.Sprintf("min, max and p set the WRED curve but class %d is in step mode (step mode takes k=SIZE, e.g. %d:step:k=100kb)", class, class)
	}
	return ""
}

// tune: K = λ·C·RTT (seed 002 eq. 1) from RTT p90 (step-Tail) and from the
// mean RTT (step-AVG), the seed's two DCTCP-RED baselines (§5.2).
func (stepMarker) tune(out aqm.TuneOutput) []TuneOption {
	return []TuneOption{
		{Spec: fmt.Sprintf("step:k=%s", out.KTailBytes), Comment: "step-Tail (K from RTT p90)"},
		{Spec: fmt.Sprintf("step:k=%s", out.KAvgBytes), Comment: "step-AVG (K from mean RTT)"},
	}
}

func (stepMarker) ceCurve(cc *ClassConfig, backlog uint64) (float64, bool) {
	if backlog > uint64(cc.MinThBytes) {
		return 1, true
	}
	return 0, true
}

func (stepMarker) help() string {
	return "      step,k=SIZE                 mark every ECT packet that finds more than k\n" +
		"                                  bytes queued (DCTCP-style K)\n"
}
