package cc

import (
	"errors"
	"testing"
)

func TestParseKnob(t *testing.T) {
	if k, err := ParseKnob(" rpg_ai_rate = 5 "); err != nil || k != (Knob{Name: "rpg_ai_rate", Value: "5"}) || k.String() != "rpg_ai_rate=5" {
		t.Errorf("ParseKnob = %v, %v", k, err)
	}
	for _, s := range []string{"rpg_ai_rate", "=5", "rpg_ai_rate=", ""} {
		if _, err := ParseKnob(s); !errors.Is(err, ErrKnobSyntax) {
			t.Errorf("ParseKnob(%q) = %v, want ErrKnobSyntax", s, err)
		}
	}
}
