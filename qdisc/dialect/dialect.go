package dialect

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Dialect is a switch configuration language.
type Dialect string

// The dialects, with the OS versions their output targets (see the
// package documentation).
const (
	SONiC Dialect = "sonic" // SONiC 202305 config_db.json
	EOS   Dialect = "eos"   // Arista EOS 4.30
	NXOS  Dialect = "nxos"  // Cisco NX-OS 10.3, Nexus 9000
	Junos Dialect = "junos" // Junos OS 23.4, QFX5000
)

// Dialects lists every dialect, in the order help texts give them.
func Dialects() []Dialect { return []Dialect{SONiC, EOS, NXOS, Junos} }

// Names is "sonic, eos, nxos or junos".
func Names() string {
	var ns []string
	for _, d := range Dialects() {
		ns = append(ns, string(d))
	}
	return strings.Join(ns[:len(ns)-1], ", ") + " or " + ns[len(ns)-1]
}

// Parse reads a dialect's name, case-insensitively.
func Parse(s string) (Dialect, error) {
	d := Dialect(strings.ToLower(strings.TrimSpace(s)))
	if slices.Contains(Dialects(), d) {
		return d, nil
	}
	return "", fmt.Errorf("dialect %q: want %s", s, Names())
}

// Target is the OS and version the dialect's output is written for.
func (d Dialect) Target() string {
	switch d {
	case SONiC:
		return "SONiC 202305 config_db.json (config load)"
	case EOS:
		return "Arista EOS 4.30 (7050X3/7280R3)"
	case NXOS:
		return "Cisco NX-OS 10.3 (Nexus 9000, 8q templates)"
	case Junos:
		return "Junos OS 23.4 (QFX5000, ELS)"
	}
	return string(d)
}

// DefaultInterface is the port's name in the output when Options gives
// none.
func (d Dialect) DefaultInterface() string {
	switch d {
	case SONiC:
		return "Ethernet0"
	case EOS:
		return "Ethernet1"
	case NXOS:
		return "Ethernet1/1"
	case Junos:
		return "et-0/0/0"
	}
	return ""
}

// Options are the settings of a rendering.
type Options struct {
	// Interface is the switch port's name in the output. Optional:
	// Dialect.DefaultInterface.
	Interface string
	// PortBufferBytes is the port's buffer that Junos's buffer-size
	// percentages are of. Optional: the sum of the rendered classes'
	// limits. Only Junos reads it.
	PortBufferBytes units.ByteSize
	// Source says where the configuration comes from, for the header
	// ("port swp0 (netns sw)"). Optional.
	Source string
}

// Output is a rendering.
type Output struct {
	// Text is the configuration in the dialect, its header comment first.
	Text string
	// Notes are what the dialect could not say and the rendering left
	// out or rounded; Text's header holds them too. None: Text says the
	// whole configuration.
	Notes []string
}

// UnsupportedError is a setting a dialect cannot express.
type UnsupportedError struct {
	Dialect Dialect
	// Class is the class the field belongs to; -1 for the port's.
	Class     int
	ClassName string
	// Field is named as qdisc.Config's JSON names it (ecn, max_p, rate).
	Field  string
	Value  string
	Reason string
}

func (e *UnsupportedError) Error() string {
	where := ""
	if e.Class >= 0 {
		where = "class " + strconv.Itoa(e.Class)
		if e.ClassName != "" {
			where += " (" + e.ClassName + ")"
		}
		where += ": "
	}
	return fmt.Sprintf("%s: %s%s (%s): %s", e.Dialect, where, e.Field, e.Value, e.Reason)
}

// Render says cfg in dialect d. A setting d cannot express is an
// *UnsupportedError (several are joined); an invalid cfg is its
// Validate error.
func Render(cfg *qdisc.Config, d Dialect, opt Options) (*Output, error) {
	p, err := newPort(cfg, d, opt)
	if err != nil {
		return nil, err
	}
	var text string
	switch d {
	case SONiC:
		text, err = p.sonic()
	case EOS:
		text, err = p.eos()
	case NXOS:
		text, err = p.nxos()
	case Junos:
		text, err = p.junos()
	default:
		return nil, fmt.Errorf("dialect %q: want %s", d, Names())
	}
	if err != nil {
		return nil, err
	}
	return &Output{Text: text, Notes: p.notes}, nil
}

// port is a configuration on its way into a dialect: checked for what no
// dialect can say, with what every dialect needs worked out.
type port struct {
	cfg   *qdisc.Config
	d     Dialect
	opt   Options
	iface string
	// dscps are each class's DSCPs, ascending.
	dscps [qdisc.NumClasses][]int
	// used: traffic reaches the class (a DSCP or non-IP frames).
	used  [qdisc.NumClasses]bool
	notes []string
	errs  []error
	// curves memoizes curveOf, so that a refusal is made once.
	curves [qdisc.NumClasses]*curveResult
}

type curveResult struct {
	c  curve
	ok bool
}

func newPort(cfg *qdisc.Config, d Dialect, opt Options) (*port, error) {
	if !slices.Contains(Dialects(), d) {
		return nil, fmt.Errorf("dialect %q: want %s", d, Names())
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	p := &port{cfg: cfg, d: d, opt: opt, iface: opt.Interface}
	if p.iface == "" {
		p.iface = d.DefaultInterface()
	}
	for ds, c := range cfg.DSCPClass {
		p.dscps[c] = append(p.dscps[c], ds)
		p.used[c] = true
	}
	p.used[cfg.DefaultClass] = true
	for i := range cfg.Classes {
		cc := &cfg.Classes[i]
		switch {
		case cc.ECN == qdisc.ECNOff, cc.ECN == qdisc.ECNWRED, cc.ECN == qdisc.ECNStep:
		case cc.ECN.Dequeue():
			p.refuse(i, "ecn", cc.ECN.String(), "no vendor equivalent: it marks on a packet's sojourn as it leaves, switches on the queue's depth as it arrives (WRED)")
		default:
			p.refuse(i, "ecn", cc.ECN.String(), "no vendor equivalent: switches mark on one WRED curve of the queue's depth")
		}
		if cc.TrimBytes != 0 {
			p.refuse(i, "trim_bytes", cc.TrimBytes.String(), "packet trimming has no form in "+d.Target())
		}
		if cc.Remark {
			// Seed 000's misconfiguration as a lab (a middle switch that
			// rewrites DSCP): not a setting to carry to a fabric.
			p.refuse(i, "remark_dscp", strconv.Itoa(int(cc.RemarkDSCP)), "the lab's DSCP rewrite on egress is a fault to study, not written out")
		}
		if cc.Rate != 0 {
			p.refuse(i, "rate", cc.Rate.String(), "the drain rate of the lab's virtual queue; a switch queue drains at the port's speed")
		}
		if cc.AlarmBytes != 0 {
			p.note("%s: PPFC alarm %s left out: PFC has no early warning", p.class(i), cc.AlarmBytes)
		}
	}
	if cfg.DefaultClass != 0 {
		p.note("non-IP frames go to %s in the lab; the switch puts them in its default class, 0", p.class(int(cfg.DefaultClass)))
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// refuse records a setting the dialect cannot express; class -1 is the
// port.
func (p *port) refuse(class int, field, value, reason string) {
	e := &UnsupportedError{Dialect: p.d, Class: class, Field: field, Value: value, Reason: reason}
	if class >= 0 {
		e.ClassName = p.cfg.Classes[class].Name
	}
	p.errs = append(p.errs, e)
}

func (p *port) note(format string, args ...any) {
	p.notes = append(p.notes, fmt.Sprintf(format, args...))
}

// class is "class 3 (roce)".
func (p *port) class(i int) string {
	s := "class " + strconv.Itoa(i)
	if n := p.cfg.Classes[i].Name; n != "" {
		s += " (" + n + ")"
	}
	return s
}

// lossless reports whether class i is PFC no-drop: PPFC on (see the
// package documentation for why strict is not).
func (p *port) lossless(i int) bool { return p.cfg.Classes[i].XoffBytes != 0 }

// losslessClasses lists the no-drop classes.
func (p *port) losslessClasses() []int {
	var ls []int
	for i := range p.cfg.Classes {
		if p.lossless(i) {
			ls = append(ls, i)
		}
	}
	return ls
}

// usedClasses lists the classes traffic reaches.
func (p *port) usedClasses() []int {
	var us []int
	for i, u := range p.used {
		if u {
			us = append(us, i)
		}
	}
	return us
}

// unusedNote notes the classes a CLI dialect leaves out because nothing
// reaches them.
func (p *port) unusedNote() {
	var un []string
	for i, u := range p.used {
		if !u {
			un = append(un, strconv.Itoa(i))
		}
	}
	if len(un) > 0 {
		p.note("%s: no DSCP and no non-IP frames reach them; not rendered", classList(un))
	}
}

// sharedClasses lists the used classes that are not strict: they share
// what the strict ones leave, equally.
func (p *port) sharedClasses() []int {
	var s []int
	for _, i := range p.usedClasses() {
		if !p.cfg.Classes[i].Strict {
			s = append(s, i)
		}
	}
	return s
}

// strictNote notes that several strict classes share in the lab but are
// ordered by queue number on a switch.
func (p *port) strictNote() {
	var st []string
	for _, i := range p.usedClasses() {
		if p.cfg.Classes[i].Strict {
			st = append(st, strconv.Itoa(i))
		}
	}
	if len(st) > 1 {
		p.note("%s: strict; the lab shares its strict priority between them equally, the switch serves the higher queue first", classList(st))
	}
}

// equalShares splits 100 % into n whole percents, the first ones taking
// the remainder: the lab's equal DRR share as a bandwidth percentage.
func equalShares(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 100 / n
		if i < 100%n {
			s[i]++
		}
	}
	return s
}

// wholePercent is prob as a whole percent 1..100, or false if it is not
// one (within float noise).
func wholePercent(prob float64) (int, bool) {
	pc := math.Round(prob * 100)
	if math.Abs(prob*100-pc) > 1e-9 || pc < 1 || pc > 100 {
		return 0, false
	}
	return int(pc), true
}

// curve is a class's marking curve as a vendor WRED: min and max in
// bytes, probability at max in whole percent. A step class is min = max
// = K at 100 %.
type curve struct {
	minBytes, maxBytes uint64
	percent            int
}

// curveOf checks class i's curve against whole percents (field names the
// dialect's); ok false for a class that does not mark (or was refused).
func (p *port) curveOf(i int, field string) (curve, bool) {
	if r := p.curves[i]; r != nil {
		return r.c, r.ok
	}
	c, ok := p.newCurve(i, field)
	p.curves[i] = &curveResult{c, ok}
	return c, ok
}

func (p *port) newCurve(i int, field string) (curve, bool) {
	cc := &p.cfg.Classes[i]
	switch cc.ECN {
	case qdisc.ECNWRED:
		pc, ok := wholePercent(cc.MaxP)
		if !ok {
			p.refuse(i, "max_p", strconv.FormatFloat(cc.MaxP, 'g', -1, 64), "must be a whole percent, 0.01 to 1 ("+field+")")
			return curve{}, false
		}
		return curve{uint64(cc.MinThBytes), uint64(cc.MaxThBytes), pc}, true
	case qdisc.ECNStep:
		return curve{uint64(cc.MinThBytes), uint64(cc.MinThBytes), 100}, true
	}
	return curve{}, false
}

// kbytes spells a size as EOS and NX-OS take it: "50 kbytes" when whole
// kbytes (1024 bytes), else "51201 bytes".
func kbytes(b uint64) string {
	if b%1024 == 0 {
		return strconv.FormatUint(b/1024, 10) + " kbytes"
	}
	return strconv.FormatUint(b, 10) + " bytes"
}

// classList is "class 3" or "classes 3, 5".
func classList(ids []string) string {
	if len(ids) == 1 {
		return "class " + ids[0]
	}
	return "classes " + strings.Join(ids, ", ")
}

// indented is the text of a dialect whose nested commands are indented
// (EOS, NX-OS), step a level.
type indented struct {
	b    strings.Builder
	step string
}

// line writes one command at level indent.
func (t *indented) line(indent int, format string, args ...any) {
	t.b.WriteString(strings.Repeat(t.step, indent) + fmt.Sprintf(format, args...) + "\n")
}

// header is the comment block every CLI dialect starts with, each line
// after prefix.
func (p *port) header(prefix string) string {
	var b strings.Builder
	line := func(format string, args ...any) {
		b.WriteString(strings.TrimRight(prefix+fmt.Sprintf(format, args...), " ") + "\n")
	}
	src := p.opt.Source
	if src == "" {
		src = "a fabriclab port"
	}
	line("%s, rendered by fabriclab for %s", src, p.d.Target())
	line("port rate %s; interface %s", p.cfg.Rate, p.iface)
	if ls := p.losslessClasses(); len(ls) > 0 {
		var s []string
		for _, i := range ls {
			s = append(s, p.class(i))
		}
		line("lossless (PFC no-drop): %s, the classes with PPFC", strings.Join(s, ", "))
	} else {
		line("lossless (PFC no-drop): none (no class has PPFC)")
	}
	if len(p.notes) > 0 {
		line("not expressed or rounded:")
		for _, n := range p.notes {
			line("  %s", n)
		}
	}
	return b.String()
}
