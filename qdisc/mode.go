package qdisc

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
)

// A marker is the Go home of one ECN mode: its names, the checks of its
// settings, their place in the class's map value, how portctl shows them,
// the --tc keys that set them and the rule that derives them from RTTs.
// Each mode has one file, mode_NAME.go: its ECNMode (a value of enum
// ecn_mode in bpf/port.h), its settings if they are its own (TwoThreshold),
// and its marker, which registers itself from init; optionally a tcHinter
// and a strayChecker. Its C is in bpf/port.c. The code shared by every mode
// (the class limit, PPFC, trimming, the --tc grammar, portctl) asks the
// marker of the class's mode and knows no mode by name.
type marker interface {
	// validate checks the mode's settings of cc (cc.ECN is this mode).
	// Errors name the field, the value and the allowed range.
	validate(cc *ClassConfig) []error
	// encode puts the mode's settings into the class's map value;
	// decode reads them back into cc.
	encode(v *bpf.PortClassConfig, cc *ClassConfig)
	decode(cc *ClassConfig, v *bpf.PortClassConfig)
	// text is the class's marking policy in tc spelling, for portctl
	// show: "wred min 50kb max 1000kb probability 0.1".
	text(cc *ClassConfig) string
	// tcKeys are the --tc settings the mode owns besides the class-wide
	// ones. TCSpec.Apply sets the ones an option gave that are bound to a
	// field (tcKey.set); applyTC then reads the others from set and
	// reports what a class entering the mode from before still needs.
	tcKeys() []tcKey
	applyTC(cc *ClassConfig, set tcArgs, before ECNMode, class ClassID) error
	// help is the mode's entry in portctl's --tc help: the items at
	// column 6, what they do at column 34, within 80 columns.
	help() string
	// example is a --tc option that sets the mode, after "CLASS:".
	example() string
	// ceCurve is the configured probability that an ECN-capable packet
	// finding backlog bytes queued is marked CE (the curve the enqueue
	// program implements); false for modes that decide on something else
	// (the dequeue AQMs).
	ceCurve(cc *ClassConfig, backlog uint64) (float64, bool)
	// tune derives the mode's --tc options from the port rate and the
	// RTTs (aqm.Tune); none if the mode has no rule.
	tune(out aqm.TuneOutput) []TuneOption
}

// strayChecker is a marker with settings that mean nothing to any other
// mode and are likely a mistake there: stray reports them for a class in
// another mode.
type strayChecker interface {
	stray(cc *ClassConfig) error
}

// mode is a registered ECN mode: its marker, its names for ParseECNMode,
// --tc and JSON (the first is the canonical one String returns), and
// whether it decides where packets leave the queue (on their sojourn),
// which needs the veth queue mode.
type mode struct {
	marker
	names   []string
	dequeue bool
}

// markers holds every mode at its ECNMode; each mode_NAME.go registers
// its own.
var markers []*mode

// register makes mk the marker of mode m (from the mode's file's init).
func register(m ECNMode, names []string, dequeue bool, mk marker) {
	for uint64(len(markers)) <= uint64(m) {
		markers = append(markers, nil)
	}
	if markers[m] != nil {
		panic(fmt.Sprintf("qdisc: ecn mode %d registered twice", m))
	}
	markers[m] = &mode{marker: mk, names: names, dequeue: dequeue}
}

// markerOf returns mode m, or nil for an unknown mode.
func markerOf(m ECNMode) *mode {
	if uint64(m) < uint64(len(markers)) {
		return markers[m] // nil for a gap in the numbering
	}
	return nil
}

// ECNModes lists every mode, in ECNMode order.
func ECNModes() []ECNMode {
	ms := make([]ECNMode, len(markers))
	for i := range markers {
		ms[i] = ECNMode(i)
	}
	return ms
}

// ECNModeNames lists the modes as ParseECNMode spells them: "off, step,
// ... or two-threshold".
func ECNModeNames() string {
	var ns []string
	for _, mk := range markers {
		ns = append(ns, mk.names[0])
	}
	return strings.Join(ns[:len(ns)-1], ", ") + " or " + ns[len(ns)-1]
}

// Dequeue reports whether the mode decides where packets leave the queue
// (on their sojourn), which needs the veth queue mode's dequeue hook.
func (m ECNMode) Dequeue() bool {
	mk := markerOf(m)
	return mk != nil && mk.dequeue
}

func (m ECNMode) String() string {
	if mk := markerOf(m); mk != nil {
		return mk.names[0]
	}
	return fmt.Sprintf("ecn-mode(%d)", uint32(m))
}

// ParseECNMode reads a mode by any of its names (ECNModeNames lists the
// canonical ones), case-insensitively.
func ParseECNMode(s string) (ECNMode, error) {
	l := strings.ToLower(s)
	for i, mk := range markers {
		if slices.Contains(mk.names, l) {
			return ECNMode(i), nil
		}
	}
	return 0, fmt.Errorf("ecn mode %q: want %s", s, ECNModeNames())
}

func (m ECNMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m *ECNMode) UnmarshalText(b []byte) error {
	v, err := ParseECNMode(string(b))
	if err == nil {
		*m = v
	}
	return err
}

// ECNText is the class's marking policy in tc spelling, as portctl show
// prints it: "wred min 50kb max 1000kb probability 0.1", "step K 100kb",
// "off".
func (cc *ClassConfig) ECNText() string {
	if mk := markerOf(cc.ECN); mk != nil {
		return mk.text(cc)
	}
	return cc.ECN.String()
}

// CEProbability is the configured probability that an ECN-capable packet
// finding backlog bytes queued is marked CE, for the modes that decide on
// the backlog at enqueue (ok false for the others).
func (cc *ClassConfig) CEProbability(backlog uint64) (p float64, ok bool) {
	if mk := markerOf(cc.ECN); mk != nil {
		return mk.ceCurve(cc, backlog)
	}
	return 0, false
}

// linear is a RED curve: 0 below lo, rising to maxP at hi, 1 at or above
// hi.
func linear(backlog, lo, hi uint64, maxP float64) float64 {
	switch {
	case backlog < lo:
		return 0
	case backlog >= hi:
		return 1
	}
	return maxP * float64(backlog-lo) / float64(hi-lo)
}

// TCModesHelp is every mode's entry in the --tc help, in ECNMode order.
func TCModesHelp() string {
	var b strings.Builder
	for _, mk := range markers {
		b.WriteString(mk.help())
	}
	return b.String()
}

// A TuneOption is a derived --tc option: Spec after "CLASS:" (e.g.
// "step:k=250000b"), and a comment for the reader. Optional: Comment.
type TuneOption struct {
	Spec    string
	Comment string
}

// TuneOptions lists every mode's --tc options derived from out (aqm.Tune),
// in ECNMode order.
func TuneOptions(out aqm.TuneOutput) []TuneOption {
	var opts []TuneOption
	for _, mk := range markers {
		opts = append(opts, mk.tune(out)...)
	}
	return opts
}

// formatProb spells a probability as tc and the --tc grammar read it.
func formatProb(p float64) string { return strconv.FormatFloat(p, 'g', 6, 64) }
