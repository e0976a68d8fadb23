package qdisc

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The --tc grammar, one parser for portctl, the demo and the experiment:
//
//	CLASS:ITEM[,ITEM]...   (':' and ',' both separate items)
//
// CLASS is 0-7 (or tc0-tc7). An ITEM is a word or KEY=VALUE. The class-wide
// words are a mode (ECNModeNames), strict, no-strict, wred-drop,
// no-wred-drop, no-ppfc, trim, no-trim, no-remark; the class-wide keys ecn
// (a mode), limit, name, rate, xoff, xon, alarm, trim, trim-dscp,
// trim-class, remark, flows. Every
// other word or key belongs to a mode (its marker's tcKeys) and is only
// accepted for a class in that mode. Fields the spec does not mention keep
// their value. TCKeysHelp lists them all.

// A tcKey is a --tc setting a mode owns: KEY=VALUE with arg the value's
// kind for the help ("SIZE", "DUR", "PROB"), or a word (arg "") that comes
// with its no- form (sqrt, no-sqrt).
type tcKey struct {
	name    string // canonical: errors and "given twice" use it
	aliases []string
	arg     string
	// set stores the value in the class's field of a key bound to one
	// (sizeKey, durKey, probKey, flagKey), so that the field, the key and
	// its kind are declared together; nil for a key the marker's applyTC
	// reads itself.
	set func(cc *ClassConfig, val string) error
}

func (k tcKey) is(s string) bool { return s == k.name || slices.Contains(k.aliases, s) }

// bind makes k a setting of the field field returns, of kind arg, read
// with parse; an error names the key.
func bind[T any](k tcKey, arg string, parse func(string) (T, error), field func(*ClassConfig) *T) tcKey {
	k.arg = arg
	k.set = func(cc *ClassConfig, val string) error {
		v, err := parse(val)
		if err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		*field(cc) = v
		return nil
	}
	return k
}

func sizeKey(k tcKey, field func(*ClassConfig) *units.ByteSize) tcKey {
	return bind(k, "SIZE", units.ParseSize, field)
}

func durKey(k tcKey, field func(*ClassConfig) *time.Duration) tcKey {
	return bind(k, "DUR", units.ParseDuration, field)
}

func probKey(k tcKey, field func(*ClassConfig) *float64) tcKey {
	return bind(k, "PROB", units.ParseProbability, field)
}

// flagKey is a word: the parser gives "true", or "false" for its no- form.
func flagKey(k tcKey, field func(*ClassConfig) *bool) tcKey {
	return bind(k, "", func(v string) (bool, error) { return v == "true", nil }, field)
}

// modeKey finds the canonical name of a mode's key or word (with its no-
// form), in any mode.
func modeKey(key string, word bool) (name, val string, ok bool) {
	for _, mk := range markers {
		for _, k := range mk.tcKeys() {
			if (k.arg == "") != word {
				continue
			}
			if !word && k.is(key) {
				return k.name, "", true
			}
			if word && k.is(key) {
				return k.name, "true", true
			}
			if word && (k.is(strings.TrimPrefix(key, "no-")) && strings.HasPrefix(key, "no-")) {
				return k.name, "false", true
			}
		}
	}
	return "", "", false
}

// checkValue checks a mode key's value at parse time, by its kind: it
// passes if any mode that has the key would read it (ECN♯'s ins is a
// duration or, with signal=qlen, a size).
func checkValue(name, val string) error {
	var first error
	for _, mk := range markers {
		for _, k := range mk.tcKeys() {
			if k.name != name {
				continue
			}
			var err error
			for _, kind := range strings.Split(k.arg, "|") {
				switch kind {
				case "SIZE":
					_, err = units.ParseSize(val)
				case "PROB":
					_, err = units.ParseProbability(val)
				case "DUR":
					_, err = units.ParseDuration(val)
				default: // a literal word: signal=qlen
					if err = nil; !strings.EqualFold(val, kind) {
						err = fmt.Errorf("%q: want %s", val, k.arg)
					}
				}
				if err == nil {
					return nil
				}
			}
			if first == nil {
				first = fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return first
}

// owns reports whether mk has the setting name.
func owns(mk marker, name string) bool {
	return slices.ContainsFunc(mk.tcKeys(), func(k tcKey) bool { return k.name == name })
}

// TCKeysHelp lists the words and keys of the --tc grammar.
func TCKeysHelp() string {
	words := []string{}
	for _, mk := range markers {
		words = append(words, mk.names[0])
	}
	words = append(words, "strict", "no-strict", "wred-drop", "no-wred-drop")
	keys := []string{"limit=SIZE", "name=NAME", "rate=RATE"}
	seen := map[string]bool{}
	for _, mk := range markers {
		for _, k := range mk.tcKeys() {
			if seen[k.name] {
				continue
			}
			seen[k.name] = true
			if k.arg == "" {
				words = append(words, k.name, "no-"+k.name)
			} else {
				keys = append(keys, k.name+"="+k.arg)
			}
		}
	}
	words = append(words, "no-ppfc", "trim", "no-trim", "no-remark")
	keys = append(keys, "xoff=SIZE", "xon=SIZE", "alarm=SIZE", "trim=SIZE", "trim-dscp=DSCP", "trim-class=CLASS", "remark=DSCP", "flows=N")
	return "words: " + strings.Join(words, ", ") + "; keys: " + strings.Join(keys, ", ")
}

// A TCSpec is one parsed --tc option: settings for one traffic class.
type TCSpec struct {
	raw      string
	class    ClassID
	mode     *ECNMode
	limit    *units.ByteSize
	name     *string
	rate     *units.Rate
	strict   *bool
	wredDrop *bool
	// The mode's settings, canonical key → value, in the order given.
	modeSet  tcArgs
	modeKeys []string
	// PPFC thresholds; noPPFC turns it off.
	xoff, xon, alarm *units.ByteSize
	noPPFC           bool
	// Trimming: trim is the size (the word alone: the default), noTrim
	// turns it off.
	trim      *units.ByteSize
	trimDSCP  *DSCP
	trimClass *ClassID
	noTrim    bool
	// Remarking: the DSCP the class's packets leave with; noRemark turns
	// it off.
	remark   *DSCP
	noRemark bool
	// flows is ClassConfig.FlowQueues (flows=N; 0 is one FIFO).
	flows *int
}

// Class is the traffic class the option sets.
func (s *TCSpec) Class() ClassID { return s.class }

// specError names the option and its value, then what is wrong.
func specError(opt, raw, format string, args ...any) error {
	return fmt.Errorf("%s %s: %s", opt, raw, fmt.Sprintf(format, args...))
}

// ParseClass reads a class number, 0-7, optionally spelled tcN.
func ParseClass(s string) (ClassID, error) {
	t := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "tc")
	n, err := strconv.ParseUint(t, 10, 8)
	if err != nil {
		if t == "" {
			return 0, fmt.Errorf("missing class (want 0-%d)", NumClasses-1)
		}
		return 0, fmt.Errorf("class %q is not a number (want 0-%d)", s, NumClasses-1)
	}
	if n >= NumClasses {
		return 0, fmt.Errorf("class %d out of range 0-%d", n, NumClasses-1)
	}
	return ClassID(n), nil
}

// ParseTC parses the value of one --tc option.
func ParseTC(raw string) (*TCSpec, error) {
	fail := func(format string, args ...any) (*TCSpec, error) {
		return nil, specError("--tc", raw, format, args...)
	}
	classStr, rest, _ := strings.Cut(raw, ":")
	cl, err := ParseClass(classStr)
	if err != nil {
		return fail("%v", err)
	}
	s := &TCSpec{raw: raw, class: cl, modeSet: tcArgs{}}
	items := strings.FieldsFunc(rest, func(r rune) bool { return r == ':' || r == ',' })
	if len(items) == 0 {
		return fail("nothing to set for class %d (e.g. --tc %d:wred:min=50kb,max=1mb,p=0.1; %s)", cl, cl, TCKeysHelp())
	}
	seen := map[string]bool{}
	once := func(field string) error {
		if seen[field] {
			return fmt.Errorf("%s given twice", field)
		}
		seen[field] = true
		return nil
	}
	setMode := func(name, val string) error {
		if err := once(name); err != nil {
			return err
		}
		s.modeSet[name] = val
		s.modeKeys = append(s.modeKeys, name)
		return nil
	}
	for _, it := range items {
		it = strings.TrimSpace(it)
		key, val, hasVal := strings.Cut(it, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		val = strings.TrimSpace(val)
		if !hasVal {
			var field string
			switch key {
			case "strict", "no-strict", "nostrict":
				field = "strict"
				v := key == "strict"
				s.strict = &v
			case "wred-drop", "no-wred-drop", "nowred-drop", "drop-not-ect", "no-drop-not-ect":
				field = "wred-drop"
				v := key == "wred-drop" || key == "drop-not-ect"
				s.wredDrop = &v
			case "no-ppfc", "noppfc":
				field = "ppfc"
				s.noPPFC = true
			case "trim":
				field = "trim"
				v := DefaultTrimBytes
				s.trim = &v
			case "no-trim", "notrim":
				field = "trim"
				s.noTrim = true
			case "no-remark", "noremark":
				field = "remark"
				s.noRemark = true
			default:
				if name, v, ok := modeKey(key, true); ok {
					if err := setMode(name, v); err != nil {
						return fail("%v", err)
					}
					continue
				}
				m, err := ParseECNMode(key)
				if err != nil {
					return fail("unknown setting %q (%s)", it, TCKeysHelp())
				}
				field = "ecn mode"
				s.mode = &m
			}
			if err := once(field); err != nil {
				return fail("%v", err)
			}
			continue
		}
		size := func(dst **units.ByteSize, field string) error {
			if err := once(field); err != nil {
				return err
			}
			v, err := units.ParseSize(val)
			if err != nil {
				return fmt.Errorf("%s: %w", field, err)
			}
			*dst = &v
			return nil
		}
		var err error
		switch key {
		case "limit":
			err = size(&s.limit, "limit")
		case "xoff":
			err = size(&s.xoff, "xoff")
		case "xon":
			err = size(&s.xon, "xon")
		case "alarm":
			err = size(&s.alarm, "alarm")
		case "trim", "trim-bytes", "trim_bytes":
			if err = size(&s.trim, "trim"); err == nil && *s.trim == 0 {
				s.trim, s.noTrim = nil, true // trim=0: off
			}
		case "trim-dscp", "trim_dscp":
			if err = once("trim-dscp"); err == nil {
				s.trimDSCP, err = dscpValue("trim-dscp", val, 1)
			}
		case "remark", "remark-dscp", "remark_dscp":
			if err = once("remark"); err == nil {
				s.remark, err = dscpValue("remark", val, 0)
			}
		case "trim-class", "trim_class":
			if err = once("trim-class"); err == nil {
				var c ClassID
				if c, err = ParseClass(val); err != nil {
					err = fmt.Errorf("trim-class: %w", err)
				} else {
					s.trimClass = &c
				}
			}
		case "flows", "flow-queues", "flow_queues":
			if err = once("flows"); err == nil {
				var n int
				if n, err = strconv.Atoi(val); err != nil {
					err = fmt.Errorf("flows: %q is not a whole number of queues (0 to %d)", val, MaxFlowQueues)
				} else {
					s.flows = &n
				}
			}
		case "name":
			if err = once("name"); err == nil {
				if err = CheckName(val); err == nil {
					s.name = &val
				}
			}
		case "rate":
			if err = once("rate"); err == nil {
				var v units.Rate
				if v, err = units.ParseRate(val); err != nil {
					err = fmt.Errorf("rate: %w", err)
				} else {
					s.rate = &v
				}
			}
		case "ecn", "mode":
			if err = once("ecn mode"); err == nil {
				var m ECNMode
				if m, err = ParseECNMode(val); err == nil {
					s.mode = &m
				}
			}
		default:
			name, _, ok := modeKey(key, false)
			if !ok {
				return fail("unknown key %q (%s)", key, TCKeysHelp())
			}
			if err = checkValue(name, val); err == nil {
				err = setMode(name, val)
			}
		}
		if err != nil {
			return fail("%v", err)
		}
	}
	return s, nil
}

// CheckName checks a class name: 1 to 32 letters, digits, '-', '_', '.'.
func CheckName(n string) error {
	if n == "" {
		return errors.New("name is empty")
	}
	if len(n) > 32 {
		return fmt.Errorf("name %q is longer than 32 characters", n)
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("name %q: only letters, digits, '-', '_' and '.' are allowed", n)
		}
	}
	return nil
}

// tcHinter is a marker that explains a setting of another mode given to a
// class in its mode better than "KEY is a setting of MODES".
type tcHinter interface {
	tcHint(key string, class ClassID) string
}

// Apply changes the class it names in cfg. Errors are about how the
// settings fit together; Config.Validate checks the values afterwards.
func (s *TCSpec) Apply(cfg *Config) error {
	cc := &cfg.Classes[s.class]
	before := cc.ECN
	mode := cc.ECN
	if s.mode != nil {
		mode = *s.mode
	}
	mk := markerOf(mode)
	if mk == nil {
		return specError("--tc", s.raw, "class %d has ecn mode %d: want %s", s.class, uint32(mode), ECNModeNames())
	}
	for _, key := range s.modeKeys {
		if owns(mk, key) {
			continue
		}
		if h, ok := mk.marker.(tcHinter); ok {
			if hint := h.tcHint(key, s.class); hint != "" {
				return specError("--tc", s.raw, "%s", hint)
			}
		}
		var modes []string
		var example string
		for _, o := range markers {
			if owns(o, key) {
				if example == "" {
					example = o.example()
				}
				modes = append(modes, o.names[0])
			}
		}
		return specError("--tc", s.raw, "%s is a setting of %s but class %d is in %s mode (e.g. %d:%s)",
			key, strings.Join(modes, " and "), s.class, mode, s.class, example)
	}
	set := func(dst *units.ByteSize, v *units.ByteSize) {
		if v != nil {
			*dst = *v
		}
	}
	set(&cc.LimitBytes, s.limit)
	if s.name != nil {
		cc.Name = *s.name
	}
	if s.rate != nil {
		cc.Rate = *s.rate
	}
	if s.strict != nil {
		cc.Strict = *s.strict
	}
	if s.wredDrop != nil {
		cc.WREDDrop = *s.wredDrop
	}
	switch {
	case s.noPPFC && (s.xoff != nil || s.xon != nil || s.alarm != nil):
		return specError("--tc", s.raw, "no-ppfc turns PPFC off: give it without xoff, xon and alarm")
	case s.noPPFC:
		cc.XoffBytes, cc.XonBytes, cc.AlarmBytes = 0, 0, 0
	case s.xon != nil && s.xoff == nil && cc.XoffBytes == 0:
		return specError("--tc", s.raw, "xon needs xoff: class %d has no PPFC (e.g. %d:xoff=1mb,xon=512kb)", s.class, s.class)
	case s.alarm != nil && *s.alarm != 0 && s.xoff == nil && cc.XoffBytes == 0:
		return specError("--tc", s.raw, "alarm needs xoff: class %d has no PPFC (e.g. %d:xoff=1mb,xon=512kb,alarm=768kb)", s.class, s.class)
	default:
		set(&cc.XoffBytes, s.xoff)
		set(&cc.XonBytes, s.xon)
		set(&cc.AlarmBytes, s.alarm)
	}
	if err := s.applyTrim(cc); err != nil {
		return err
	}
	if s.remark != nil {
		cc.Remark, cc.RemarkDSCP = true, *s.remark
	}
	if s.noRemark {
		cc.Remark, cc.RemarkDSCP = false, 0
	}
	if s.flows != nil {
		cc.FlowQueues = *s.flows
	}
	cc.ECN = mode
	for _, k := range mk.tcKeys() {
		if v, ok := s.modeSet[k.name]; ok && k.set != nil {
			if err := k.set(cc, v); err != nil {
				return specError("--tc", s.raw, "%v", err)
			}
		}
	}
	if err := mk.applyTC(cc, s.modeSet, before, s.class); err != nil {
		return specError("--tc", s.raw, "%v", err)
	}
	return nil
}

// dscpValue reads a key's DSCP, 0 to 63; the error says the key's own
// range, lo to 63 (trim-dscp's 0 is refused by Validate, with its reason).
func dscpValue(key, val string, lo int) (*DSCP, error) {
	n, err := strconv.ParseUint(val, 10, 8)
	if err != nil || n >= NumDSCP {
		return nil, fmt.Errorf("%s %q: want a DSCP, %d-%d", key, val, lo, NumDSCP-1)
	}
	d := DSCP(n)
	return &d, nil
}

// applyTrim sets cc's trimming. Turning it on fills trim-dscp and
// trim-class the spec does not give with the defaults.
func (s *TCSpec) applyTrim(cc *ClassConfig) error {
	keys := s.trimDSCP != nil || s.trimClass != nil
	switch {
	case s.noTrim && (s.trim != nil || keys):
		return specError("--tc", s.raw, "no-trim turns trimming off: give it without trim, trim-dscp and trim-class")
	case s.noTrim:
		cc.TrimBytes, cc.TrimDSCP, cc.TrimClass = 0, 0, 0
		return nil
	case s.trim == nil && keys && cc.TrimBytes == 0:
		return specError("--tc", s.raw, "trim-dscp and trim-class need trim: class %d does not trim (e.g. %d:trim=%d,trim-dscp=%d,trim-class=%d)",
			s.class, s.class, DefaultTrimBytes, DefaultTrimDSCP, DefaultTrimClass)
	}
	if s.trim != nil {
		if cc.TrimBytes == 0 {
			cc.SetTrim()
		}
		cc.TrimBytes = *s.trim
	}
	if s.trimDSCP != nil {
		cc.TrimDSCP = *s.trimDSCP
	}
	if s.trimClass != nil {
		cc.TrimClass = *s.trimClass
	}
	return nil
}

// tcArgs are a mode's settings of one --tc option, canonical key → value
// (a word's value is "true" or "false").
type tcArgs map[string]string

// given reports whether the option gave key.
func (a tcArgs) given(key string) bool {
	_, ok := a[key]
	return ok
}

// A need is a setting a class entering a mode must have, KEY=ARG, and
// whether the class lacks it.
type need struct {
	key, arg string
	unset    bool
}

// tuneHint ends the needs error of a mode whose settings portctl tune
// derives.
const tuneHint = "; portctl tune derives them from RTTs"

// needs is the error of a class entering mode without settings it needs:
// the unset ones of ns, with the mode's example and more after it.
func needs(mode ECNMode, class ClassID, more string, ns ...need) error {
	var missing []string
	for _, n := range ns {
		if n.unset {
			missing = append(missing, n.key+"="+n.arg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("switching class %d to %s needs %s (e.g. %d:%s%s)",
		class, mode, strings.Join(missing, ", "), class, markerOf(mode).example(), more)
}

// A DSCPSpec is one parsed --dscp option: DSCP values mapped to a class.
//
//	DSCP[-DSCP][,DSCP[-DSCP]]...=CLASS
type DSCPSpec struct {
	raw   string
	dscps []DSCP
	class ClassID
}

// ParseDSCPSpec parses the value of one --dscp option.
func ParseDSCPSpec(raw string) (*DSCPSpec, error) {
	fail := func(format string, args ...any) (*DSCPSpec, error) {
		return nil, specError("--dscp", raw, format, args...)
	}
	lhs, rhs, ok := strings.Cut(raw, "=")
	if !ok {
		return fail("want DSCP=CLASS, e.g. --dscp 26=3 or --dscp 24-31=3")
	}
	cl, err := ParseClass(rhs)
	if err != nil {
		return fail("%v", err)
	}
	s := &DSCPSpec{raw: raw, class: cl}
	one := func(t string) (int, error) {
		t = strings.TrimSpace(t)
		n, err := strconv.Atoi(t)
		if err != nil {
			if t == "" {
				return 0, fmt.Errorf("missing dscp (want 0-%d)", NumDSCP-1)
			}
			return 0, fmt.Errorf("dscp %q is not a number (want 0-%d)", t, NumDSCP-1)
		}
		if n < 0 || n >= NumDSCP {
			return 0, fmt.Errorf("dscp %d out of range 0-%d", n, NumDSCP-1)
		}
		return n, nil
	}
	for _, part := range strings.Split(lhs, ",") {
		loS, hiS, isRange := strings.Cut(part, "-")
		lo, err := one(loS)
		if err != nil {
			return fail("%v", err)
		}
		hi := lo
		if isRange {
			if hi, err = one(hiS); err != nil {
				return fail("%v", err)
			}
			if hi < lo {
				return fail("dscp range %d-%d is backwards", lo, hi)
			}
		}
		for d := lo; d <= hi; d++ {
			s.dscps = append(s.dscps, DSCP(d))
		}
	}
	return s, nil
}

// Apply maps the DSCPs to the class in cfg.
func (s *DSCPSpec) Apply(cfg *Config) {
	for _, d := range s.dscps {
		cfg.DSCPClass[d] = s.class
	}
}

// Edits are the class options of a command line (--tc, --dscp,
// --default-class), in the order given.
type Edits struct {
	TC           []*TCSpec
	DSCP         []*DSCPSpec
	DefaultClass *ClassID
}

// ParseEdits parses the raw --tc, --dscp and --default-class values; it
// reports every bad one.
func ParseEdits(tcs, dscps []string, defaultClass string) (*Edits, error) {
	var errs []error
	e := &Edits{TC: parseEach(tcs, ParseTC, &errs), DSCP: parseEach(dscps, ParseDSCPSpec, &errs)}
	if defaultClass != "" {
		cl, err := ParseClass(defaultClass)
		if err != nil {
			errs = append(errs, specError("--default-class", defaultClass, "%v", err))
		} else {
			e.DefaultClass = &cl
		}
	}
	return e, errors.Join(errs...)
}

// parseEach parses every raw value: the good ones in order, the errors
// added to errs.
func parseEach[T any](raws []string, parse func(string) (T, error), errs *[]error) []T {
	var out []T
	for _, r := range raws {
		v, err := parse(r)
		if err != nil {
			*errs = append(*errs, err)
			continue
		}
		out = append(out, v)
	}
	return out
}

// Apply changes cfg and validates the result.
func (e *Edits) Apply(cfg *Config) error {
	var errs []error
	for _, s := range e.TC {
		if err := s.Apply(cfg); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range e.DSCP {
		s.Apply(cfg)
	}
	if e.DefaultClass != nil {
		cfg.DefaultClass = *e.DefaultClass
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return cfg.Validate()
}

// Empty reports whether there is nothing to change.
func (e *Edits) Empty() bool {
	return len(e.TC) == 0 && len(e.DSCP) == 0 && e.DefaultClass == nil
}
