package cc

import (
	"errors"
	"strings"
)

// Knob is one setting of a controller by its name, with a value as the
// controller's Set takes it (dcqcn.Params.Set, nscc.Params.Set): how a
// flag, a lab file or the daemon hands it over.
type Knob struct {
	Name  string
	Value string
}

func (k Knob) String() string { return k.Name + "=" + k.Value }

// ErrKnobSyntax: a knob is not written name=value.
var ErrKnobSyntax = errors.New("want name=value")

// ParseKnob reads "name=value", the spelling of a command line.
func ParseKnob(s string) (Knob, error) {
	name, value, ok := strings.Cut(s, "=")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || name == "" || value == "" {
		return Knob{}, ErrKnobSyntax
	}
	return Knob{Name: name, Value: value}, nil
}
