package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// A tcSpec is one --tc option: settings for one traffic class.
//
//	CLASS:ITEM[,ITEM]...   (':' and ',' both separate items)
//
// CLASS is 0-7 (or tc0-tc7). An ITEM is a word (a mode: off, step, wred,
// tcn, codel, ecnsharp; strict, no-strict, wred-drop, no-wred-drop, sqrt,
// no-sqrt, force, no-force, no-ppfc, trim, no-trim) or KEY=VALUE (limit,
// min, max, p, k, name, rate; ins, ins-max, pst, interval, signal for
// ecnsharp; ins for tcn; target, interval for codel; xoff, xon, alarm;
// trim, trim-dscp, trim-class). Fields the spec does not mention keep their
// value.
type tcSpec struct {
	raw      string
	class    qdisc.ClassID
	mode     *qdisc.ECNMode
	limit    *units.ByteSize
	min      *units.ByteSize
	max      *units.ByteSize
	k        *units.ByteSize
	p        *float64
	name     *string
	rate     *units.Rate
	strict   *bool
	wredDrop *bool
	// Dequeue AQMs. ins, insMax and pst are durations, or sizes when
	// ecnsharp compares the queue length (signal=qlen): kept raw until
	// apply knows which.
	ins, insMax, pst *string
	interval, target *time.Duration
	sqrt, force      *bool
	queueSignal      *bool
	// PPFC thresholds; noPPFC turns it off.
	xoff, xon, alarm *units.ByteSize
	noPPFC           bool
	// Trimming: trim is the size (the word alone: the default), noTrim
	// turns it off.
	trim      *units.ByteSize
	trimDSCP  *qdisc.DSCP
	trimClass *qdisc.ClassID
	noTrim    bool
}

// A dscpSpec is one --dscp option: DSCP values mapped to a class.
//
//	DSCP[-DSCP][,DSCP[-DSCP]]...=CLASS
type dscpSpec struct {
	raw   string
	dscps []qdisc.DSCP
	class qdisc.ClassID
}

// specError names the option and its value, then what is wrong.
func specError(opt, raw, format string, args ...any) error {
	return fmt.Errorf("%s %s: %s", opt, raw, fmt.Sprintf(format, args...))
}

const tcKeysHelp = "words: off, step, wred, tcn, codel, ecnsharp, strict, no-strict, wred-drop, no-wred-drop, " +
	"sqrt, no-sqrt, force, no-force, no-ppfc, trim, no-trim; keys: limit=SIZE, min=SIZE, max=SIZE, p=PROB, k=SIZE, name=NAME, rate=RATE, " +
	"ins=DUR, ins-max=DUR, pst=DUR, interval=DUR, target=DUR, signal=sojourn|qlen, xoff=SIZE, xon=SIZE, alarm=SIZE, " +
	"trim=SIZE, trim-dscp=DSCP, trim-class=CLASS"

// parseClass reads a class number, 0-7, optionally spelled tcN.
func parseClass(s string) (qdisc.ClassID, error) {
	t := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "tc")
	n, err := strconv.ParseUint(t, 10, 8)
	if err != nil {
		if t == "" {
			return 0, fmt.Errorf("missing class (want 0-%d)", qdisc.NumClasses-1)
		}
		return 0, fmt.Errorf("class %q is not a number (want 0-%d)", s, qdisc.NumClasses-1)
	}
	if n >= qdisc.NumClasses {
		return 0, fmt.Errorf("class %d out of range 0-%d", n, qdisc.NumClasses-1)
	}
	return qdisc.ClassID(n), nil
}

// parseTC parses the value of one --tc option.
func parseTC(raw string) (*tcSpec, error) {
	fail := func(format string, args ...any) (*tcSpec, error) {
		return nil, specError("--tc", raw, format, args...)
	}
	classStr, rest, _ := strings.Cut(raw, ":")
	cl, err := parseClass(classStr)
	if err != nil {
		return fail("%v", err)
	}
	s := &tcSpec{raw: raw, class: cl}
	items := strings.FieldsFunc(rest, func(r rune) bool { return r == ':' || r == ',' })
	if len(items) == 0 {
		return fail("nothing to set for class %d (e.g. --tc %d:wred:min=50kb,max=1mb,p=0.1; %s)", cl, cl, tcKeysHelp)
	}
	seen := map[string]bool{}
	once := func(field string) error {
		if seen[field] {
			return fmt.Errorf("%s given twice", field)
		}
		seen[field] = true
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
			case "sqrt", "no-sqrt":
				field = "sqrt"
				v := key == "sqrt"
				s.sqrt = &v
			case "force", "no-force":
				field = "force"
				v := key == "force"
				s.force = &v
			case "no-ppfc", "noppfc":
				field = "ppfc"
				s.noPPFC = true
			case "trim":
				field = "trim"
				v := qdisc.DefaultTrimBytes
				s.trim = &v
			case "no-trim", "notrim":
				field = "trim"
				s.noTrim = true
			default:
				m, err := qdisc.ParseECNMode(key)
				if err != nil {
					return fail("unknown setting %q (%s)", it, tcKeysHelp)
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
		case "min", "min_th", "minth":
			err = size(&s.min, "min")
		case "max", "max_th", "maxth":
			err = size(&s.max, "max")
		case "k":
			err = size(&s.k, "k")
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
				var n uint64
				if n, err = strconv.ParseUint(val, 10, 8); err != nil || n >= qdisc.NumDSCP {
					err = fmt.Errorf("trim-dscp %q: want a DSCP, 1-%d", val, qdisc.NumDSCP-1)
				} else {
					d := qdisc.DSCP(n)
					s.trimDSCP = &d
				}
			}
		case "trim-class", "trim_class":
			if err = once("trim-class"); err == nil {
				var c qdisc.ClassID
				if c, err = parseClass(val); err != nil {
					err = fmt.Errorf("trim-class: %w", err)
				} else {
					s.trimClass = &c
				}
			}
		case "p", "probability", "max_p", "maxp":
			if err = once("p"); err == nil {
				var v float64
				if v, err = units.ParseProbability(val); err != nil {
					err = fmt.Errorf("p: %w", err)
				} else {
					s.p = &v
				}
			}
		case "name":
			if err = once("name"); err == nil {
				if err = checkName(val); err == nil {
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
		case "ins", "ins_target", "ins-target", "threshold", "thresh":
			if err = once("ins"); err == nil {
				s.ins = &val
			}
		case "ins-max", "ins_max", "insmax", "kmax":
			if err = once("ins-max"); err == nil {
				s.insMax = &val
			}
		case "pst", "pst_target", "pst-target":
			if err = once("pst"); err == nil {
				s.pst = &val
			}
		case "interval", "pst_interval", "pst-interval":
			err = duration(&s.interval, "interval", val, once)
		case "target":
			err = duration(&s.target, "target", val, once)
		case "signal":
			if err = once("signal"); err == nil {
				switch strings.ToLower(val) {
				case "sojourn", "time":
					v := false
					s.queueSignal = &v
				case "qlen", "queue", "bytes":
					v := true
					s.queueSignal = &v
				default:
					err = fmt.Errorf("signal %q: want sojourn or qlen", val)
				}
			}
		case "ecn", "mode":
			if err = once("ecn mode"); err == nil {
				var m qdisc.ECNMode
				if m, err = qdisc.ParseECNMode(val); err == nil {
					s.mode = &m
				}
			}
		default:
			return fail("unknown key %q (%s)", key, tcKeysHelp)
		}
		if err != nil {
			return fail("%v", err)
		}
	}
	return s, nil
}

// duration parses a tc-style duration (200us, 1.5ms) into *dst.
func duration(dst **time.Duration, field, val string, once func(string) error) error {
	if err := once(field); err != nil {
		return err
	}
	d, err := units.ParseDuration(val)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	*dst = &d
	return nil
}

func checkName(n string) error {
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

// apply changes the class it names in cfg. Errors are about how the
// settings fit together; Config.Validate checks the values afterwards.
func (s *tcSpec) apply(cfg *qdisc.Config) error {
	cc := &cfg.Classes[s.class]
	before := cc.ECN
	mode := cc.ECN
	if s.mode != nil {
		mode = *s.mode
	}
	if err := s.checkAQMKeys(mode); err != nil {
		return err
	}
	switch {
	case s.k != nil && mode != qdisc.ECNStep:
		return specError("--tc", s.raw, "k is the step-mode threshold but class %d is in %s mode (write %d:step:k=%s)", s.class, mode, s.class, *s.k)
	case (s.min != nil || s.max != nil) && mode != qdisc.ECNWRED,
		s.p != nil && mode != qdisc.ECNWRED && mode != qdisc.ECNSharp:
		hint := fmt.Sprintf("write %d:wred:min=...,max=...,p=...", s.class)
		if mode == qdisc.ECNStep {
			hint = fmt.Sprintf("step mode takes k=SIZE, e.g. %d:step:k=100kb", s.class)
		}
		return specError("--tc", s.raw, "min, max and p set the WRED curve but class %d is in %s mode (%s)", s.class, mode, hint)
	}
	cc.ECN = mode
	set := func(dst *units.ByteSize, v *units.ByteSize) {
		if v != nil {
			*dst = *v
		}
	}
	set(&cc.LimitBytes, s.limit)
	set(&cc.MinThBytes, s.min)
	set(&cc.MaxThBytes, s.max)
	set(&cc.MinThBytes, s.k)
	if s.p != nil {
		cc.MaxP = *s.p
	}
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
	if err := s.applyAQM(cc, before); err != nil {
		return err
	}
	// Entering a mode from one whose thresholds mean nothing to it.
	if mode == qdisc.ECNWRED && before != qdisc.ECNWRED {
		var missing []string
		if s.min == nil && before != qdisc.ECNStep {
			missing = append(missing, "min=SIZE")
		}
		if s.max == nil {
			missing = append(missing, "max=SIZE")
		}
		if s.p == nil {
			missing = append(missing, "p=PROB")
		}
		if len(missing) > 0 {
			return specError("--tc", s.raw, "switching class %d to wred needs %s (e.g. %d:wred:min=50kb,max=1mb,p=0.1)", s.class, strings.Join(missing, ", "), s.class)
		}
	}
	if mode == qdisc.ECNStep && before == qdisc.ECNOff && s.k == nil {
		return specError("--tc", s.raw, "switching class %d to step needs k=SIZE (e.g. %d:step:k=100kb)", s.class, s.class)
	}
	return nil
}

// applyTrim sets cc's trimming. Turning it on fills trim-dscp and
// trim-class the spec does not give with the defaults.
func (s *tcSpec) applyTrim(cc *qdisc.ClassConfig) error {
	keys := s.trimDSCP != nil || s.trimClass != nil
	switch {
	case s.noTrim && (s.trim != nil || keys):
		return specError("--tc", s.raw, "no-trim turns trimming off: give it without trim, trim-dscp and trim-class")
	case s.noTrim:
		cc.TrimBytes, cc.TrimDSCP, cc.TrimClass = 0, 0, 0
		return nil
	case s.trim == nil && keys && cc.TrimBytes == 0:
		return specError("--tc", s.raw, "trim-dscp and trim-class need trim: class %d does not trim (e.g. %d:trim=%d,trim-dscp=%d,trim-class=%d)",
			s.class, s.class, qdisc.DefaultTrimBytes, qdisc.DefaultTrimDSCP, qdisc.DefaultTrimClass)
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

// checkAQMKeys rejects AQM keys the class's mode does not use.
func (s *tcSpec) checkAQMKeys(mode qdisc.ECNMode) error {
	bad := func(key, modes, example string) error {
		return specError("--tc", s.raw, "%s is a setting of %s but class %d is in %s mode (e.g. %d:%s)", key, modes, s.class, mode, s.class, example)
	}
	sharpEx := "ecnsharp:ins=200us,pst=85us,interval=200us"
	switch {
	case s.ins != nil && mode != qdisc.ECNTCN && mode != qdisc.ECNSharp:
		return bad("ins", "tcn and ecnsharp", "tcn:ins=200us")
	case s.insMax != nil && mode != qdisc.ECNSharp:
		return bad("ins-max", "ecnsharp", "ecnsharp:ins=100us,ins-max=400us,p=0.2,pst=85us,interval=200us")
	case s.pst != nil && mode != qdisc.ECNSharp:
		return bad("pst", "ecnsharp", sharpEx)
	case s.sqrt != nil && mode != qdisc.ECNSharp:
		return bad("sqrt", "ecnsharp", sharpEx+",sqrt")
	case s.force != nil && mode != qdisc.ECNSharp:
		return bad("force", "ecnsharp", sharpEx+",force")
	case s.queueSignal != nil && mode != qdisc.ECNSharp:
		return bad("signal", "ecnsharp", "ecnsharp:signal=qlen,ins=250kb,pst=100kb,interval=200us")
	case s.interval != nil && mode != qdisc.ECNSharp && mode != qdisc.ECNCoDel:
		return bad("interval", "ecnsharp and codel", "codel:target=85us,interval=200us")
	case s.target != nil && mode != qdisc.ECNCoDel:
		if mode == qdisc.ECNSharp {
			return specError("--tc", s.raw, "ecnsharp's persistent target is pst=, not target= (e.g. %d:%s)", s.class, sharpEx)
		}
		return bad("target", "codel", "codel:target=85us,interval=200us")
	}
	return nil
}

// applyAQM sets the dequeue AQM fields of cc and checks that a class
// entering a dequeue mode gets the settings it needs.
func (s *tcSpec) applyAQM(cc *qdisc.ClassConfig, before qdisc.ECNMode) error {
	if s.sqrt != nil {
		cc.SqrtLaw = *s.sqrt
	}
	if s.force != nil {
		cc.ForceTargets = *s.force
	}
	if s.queueSignal != nil && *s.queueSignal != cc.QueueSignal {
		// The thresholds change unit: the old ones mean nothing now.
		cc.QueueSignal = *s.queueSignal
		cc.InsTarget, cc.InsMax, cc.PstTarget = 0, 0, 0
		cc.InsTargetBytes, cc.InsMaxBytes, cc.PstTargetBytes = 0, 0, 0
	}
	qlen := cc.ECN == qdisc.ECNSharp && cc.QueueSignal
	threshold := func(raw *string, key string, d *time.Duration, b *units.ByteSize) error {
		if raw == nil {
			return nil
		}
		if qlen {
			v, err := units.ParseSize(*raw)
			if err != nil {
				return specError("--tc", s.raw, "%s: with signal=qlen thresholds are sizes: %v", key, err)
			}
			*b = v
			return nil
		}
		v, err := units.ParseDuration(*raw)
		if err != nil {
			return specError("--tc", s.raw, "%s: %v", key, err)
		}
		*d = v
		return nil
	}
	if err := threshold(s.ins, "ins", &cc.InsTarget, &cc.InsTargetBytes); err != nil {
		return err
	}
	if err := threshold(s.insMax, "ins-max", &cc.InsMax, &cc.InsMaxBytes); err != nil {
		return err
	}
	if err := threshold(s.pst, "pst", &cc.PstTarget, &cc.PstTargetBytes); err != nil {
		return err
	}
	switch cc.ECN {
	case qdisc.ECNSharp:
		if s.interval != nil {
			cc.PstInterval = *s.interval
		}
	case qdisc.ECNCoDel:
		if s.interval != nil {
			cc.Interval = *s.interval
		}
		if s.target != nil {
			cc.Target = *s.target
		}
	}
	if cc.ECN == before || !cc.ECN.Dequeue() {
		return nil
	}
	var missing []string
	need := func(unset bool, key string) {
		if unset {
			missing = append(missing, key)
		}
	}
	var example string
	switch cc.ECN {
	case qdisc.ECNTCN:
		need(cc.InsTarget == 0, "ins=DUR")
		example = "tcn:ins=200us"
	case qdisc.ECNCoDel:
		need(cc.Target == 0, "target=DUR")
		need(cc.Interval == 0, "interval=DUR")
		example = "codel:target=85us,interval=200us"
	case qdisc.ECNSharp:
		if qlen {
			need(cc.InsTargetBytes == 0, "ins=SIZE")
			need(cc.PstTargetBytes == 0, "pst=SIZE")
		} else {
			need(cc.InsTarget == 0, "ins=DUR")
			need(cc.PstTarget == 0, "pst=DUR")
		}
		need(cc.PstInterval == 0, "interval=DUR")
		example = "ecnsharp:ins=200us,pst=85us,interval=200us"
	}
	if len(missing) > 0 {
		return specError("--tc", s.raw, "switching class %d to %s needs %s (e.g. %d:%s; portctl tune derives them from RTTs)",
			s.class, cc.ECN, strings.Join(missing, ", "), s.class, example)
	}
	return nil
}

// parseDSCP parses the value of one --dscp option.
func parseDSCP(raw string) (*dscpSpec, error) {
	fail := func(format string, args ...any) (*dscpSpec, error) {
		return nil, specError("--dscp", raw, format, args...)
	}
	lhs, rhs, ok := strings.Cut(raw, "=")
	if !ok {
		return fail("want DSCP=CLASS, e.g. --dscp 26=3 or --dscp 24-31=3")
	}
	cl, err := parseClass(rhs)
	if err != nil {
		return fail("%v", err)
	}
	s := &dscpSpec{raw: raw, class: cl}
	one := func(t string) (int, error) {
		t = strings.TrimSpace(t)
		n, err := strconv.Atoi(t)
		if err != nil {
			if t == "" {
				return 0, fmt.Errorf("missing dscp (want 0-%d)", qdisc.NumDSCP-1)
			}
			return 0, fmt.Errorf("dscp %q is not a number (want 0-%d)", t, qdisc.NumDSCP-1)
		}
		if n < 0 || n >= qdisc.NumDSCP {
			return 0, fmt.Errorf("dscp %d out of range 0-%d", n, qdisc.NumDSCP-1)
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
			s.dscps = append(s.dscps, qdisc.DSCP(d))
		}
	}
	return s, nil
}

func (s *dscpSpec) apply(cfg *qdisc.Config) {
	for _, d := range s.dscps {
		cfg.DSCPClass[d] = s.class
	}
}

// edits are the class options of a command line, in the order given.
type edits struct {
	tc           []*tcSpec
	dscp         []*dscpSpec
	defaultClass *qdisc.ClassID
}

// parseEdits parses the raw --tc, --dscp and --default-class values.
func parseEdits(tcs, dscps []string, defaultClass string) (*edits, error) {
	e := &edits{}
	var errs []error
	for _, r := range tcs {
		s, err := parseTC(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e.tc = append(e.tc, s)
	}
	for _, r := range dscps {
		s, err := parseDSCP(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e.dscp = append(e.dscp, s)
	}
	if defaultClass != "" {
		cl, err := parseClass(defaultClass)
		if err != nil {
			errs = append(errs, specError("--default-class", defaultClass, "%v", err))
		} else {
			e.defaultClass = &cl
		}
	}
	return e, errors.Join(errs...)
}

// apply changes cfg and validates the result.
func (e *edits) apply(cfg *qdisc.Config) error {
	var errs []error
	for _, s := range e.tc {
		if err := s.apply(cfg); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range e.dscp {
		s.apply(cfg)
	}
	if e.defaultClass != nil {
		cfg.DefaultClass = *e.defaultClass
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return cfg.Validate()
}

// empty reports whether there is nothing to change.
func (e *edits) empty() bool {
	return len(e.tc) == 0 && len(e.dscp) == 0 && e.defaultClass == nil
}
