package qdisc

import (
	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
)

// ECNOff never marks: the class only tail-drops at its limit.
const ECNOff = ECNMode(bpf.PortEcnModeECN_MODE_OFF)

type offMarker struct{}

func init() { register(ECNOff, []string{"off", "none"}, false, offMarker{}) }

func (offMarker) validate(*ClassConfig) []error                        { return nil }
func (offMarker) encode(*bpf.PortClassConfig, *ClassConfig)            {}
func (offMarker) decode(*ClassConfig, *bpf.PortClassConfig)            {}
func (offMarker) text(*ClassConfig) string                             { return "off" }
func (offMarker) tcKeys() []tcKey                                      { return nil }
func (offMarker) applyTC(*ClassConfig, tcArgs, ECNMode, ClassID) error { return nil }
func (offMarker) example() string                                      { return "off" }
func (offMarker) tune(aqm.TuneOutput) []TuneOption                     { return nil }
func (offMarker) ceCurve(*ClassConfig, uint64) (float64, bool)         { return 0, true }

func (offMarker) help() string {
	return "      off                         no ECN marking, tail drop at limit only\n"
}
