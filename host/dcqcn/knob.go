package dcqcn

import (
	"errors"
	"fmt"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// KnobError is a setting Profile, Set, New or Validate refuses. Its fields
// let a caller name the setting in its own words (a flag, a YAML key);
// Error prefixes the package, Detail does not.
type KnobError struct {
	// Profile: the error is about the profile's name (Value).
	Profile bool
	// Knob is the knob's name; "" for none (the line rate, a malformed
	// setting).
	Knob string
	// Value is as given (Set) or as Get prints it (Validate); "" for none.
	Value string
	// Reason is what the value must be.
	Reason string
	// Unknown: no knob has the name Knob; Reason lists the valid ones.
	Unknown bool
}

func (e *KnobError) Error() string { return "dcqcn: " + e.Detail() }

// Detail is the refusal without the package's name: "rpg_ai_rate=0: must
// be ...", `profile "x": must be one of ...`.
func (e *KnobError) Detail() string {
	switch {
	case e.Profile:
		return fmt.Sprintf("profile %q: %s", e.Value, e.Reason)
	case e.Unknown:
		return fmt.Sprintf("unknown knob %q (%s)", e.Knob, e.Reason)
	case e.Knob == "" && e.Value == "":
		return e.Reason
	case e.Knob == "":
		return fmt.Sprintf("%s: %s", quoteIfNeeded(e.Value), e.Reason)
	}
	return fmt.Sprintf("%s=%s: %s", e.Knob, quoteIfNeeded(e.Value), e.Reason)
}

// KnobErrors lists the refusals in err (Validate joins one per problem);
// nil if err holds none.
func KnobErrors(err error) []*KnobError {
	var out []*KnobError
	var walk func(error)
	walk = func(err error) {
		var ke *KnobError
		switch {
		case err == nil:
		case errors.As(err, &ke) && ke == err:
			out = append(out, ke)
		default:
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					walk(e)
				}
			} else if errors.As(err, &ke) {
				out = append(out, ke)
			}
		}
	}
	walk(err)
	return out
}

// New is a sender's parameters as every tool builds them: the profile
// scaled to lineRate, the knobs set in order, the whole validated. An
// error is a *KnobError, or several joined (KnobErrors lists them).
func New(profile string, lineRate units.Rate, knobs ...cc.Knob) (Params, error) {
	p, err := Profile(profile, lineRate)
	if err != nil {
		return p, err
	}
	for _, k := range knobs {
		if err := p.Set(k.Name, k.Value); err != nil {
			return p, err
		}
	}
	return p, p.Validate()
}
