package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// A tcSpec is one --tc option: settings for one traffic class.
//
//	CLASS:ITEM[,ITEM]...   (':' and ',' both separate items)
//
// CLASS is 0-7 (or tc0-tc7). An ITEM is a word (off, step, wred, strict,
// no-strict, wred-drop, no-wred-drop) or KEY=VALUE (limit, min, max, p, k,
// name, rate). Fields the spec does not mention keep their value.
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

const tcKeysHelp = "words: off, step, wred, strict, no-strict, wred-drop, no-wred-drop; " +
	"keys: limit=SIZE, min=SIZE, max=SIZE, p=PROB, k=SIZE, name=NAME, rate=RATE"

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
			case "wred-drop", "no-wred-drop", "nowred-drop":
				field = "wred-drop"
				v := key == "wred-drop"
				s.wredDrop = &v
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
	switch {
	case s.k != nil && mode != qdisc.ECNStep:
		return specError("--tc", s.raw, "k is the step-mode threshold but class %d is in %s mode (write %d:step:k=%s)", s.class, mode, s.class, *s.k)
	case (s.min != nil || s.max != nil || s.p != nil) && mode != qdisc.ECNWRED:
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
