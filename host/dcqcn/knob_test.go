package dcqcn

import (
	"errors"
	"testing"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestNew: the profile, the knobs in order and Validate, with errors whose
// fields name the setting so that no caller rewrites the text.
func TestNew(t *testing.T) {
	p, err := New("paper", 40*units.Gbit, Knob{"rpg_ai_rate", "10"}, Knob{"rpg_time_reset", "100"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Get("rpg_time_reset"); v != "100" {
		t.Errorf("rpg_time_reset %s, want 100", v)
	}
	for _, tc := range []struct {
		profile string
		knobs   []Knob
		want    KnobError
		detail  string
	}{
		{"hpcc", nil, KnobError{Profile: true, Value: "hpcc"}, `profile "hpcc": must be one of lab, mlx5, paper`},
		{"paper", []Knob{{"rpg_bogus", "1"}}, KnobError{Knob: "rpg_bogus", Unknown: true}, `unknown knob "rpg_bogus" (valid: `},
		{"paper", []Knob{{"rpg_threshold", "0"}}, KnobError{Knob: "rpg_threshold", Value: "0"}, "rpg_threshold=0: must be 1..255 (stages)"},
		{"paper", []Knob{{"dce_tcp_rtt", "10"}, {"min_time_between_cnps", "50"}}, KnobError{Knob: "dce_tcp_rtt", Value: "10"}, "dce_tcp_rtt=10: must be greater than"},
	} {
		_, err := New(tc.profile, 40*units.Gbit, tc.knobs...)
		kes := KnobErrors(err)
		if len(kes) != 1 {
			t.Fatalf("%s %v: %v, want one KnobError", tc.profile, tc.knobs, err)
		}
		ke := kes[0]
		if ke.Profile != tc.want.Profile || ke.Knob != tc.want.Knob || ke.Value != tc.want.Value || ke.Unknown != tc.want.Unknown {
			t.Errorf("%s %v: %+v, want %+v", tc.profile, tc.knobs, *ke, tc.want)
		}
		if d := ke.Detail(); len(d) < len(tc.detail) || d[:len(tc.detail)] != tc.detail {
			t.Errorf("Detail %q, want %q…", d, tc.detail)
		}
		if err.Error()[:7] != "dcqcn: " {
			t.Errorf("Error %q has no package prefix", err)
		}
	}
	if _, err := ParseKnob("rpg_ai_rate"); err == nil {
		t.Error(`ParseKnob("rpg_ai_rate") accepted a knob without a value`)
	}
	if k, err := ParseKnob(" rpg_ai_rate = 5 "); err != nil || k != (Knob{"rpg_ai_rate", "5"}) {
		t.Errorf("ParseKnob = %v, %v", k, err)
	}
	if KnobErrors(errors.New("other")) != nil {
		t.Error("KnobErrors found one in an unrelated error")
	}
}
