package dcqcn

import (
	"errors"
	"testing"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestNew: the profile, the knobs in order and Validate, with errors whose
// fields name the setting so that no caller rewrites the text.
func TestNew(t *testing.T) {
	p, err := New("paper", 40*units.Gbit, cc.Knob{Name: "rpg_ai_rate", Value: "10"}, cc.Knob{Name: "rpg_time_reset", Value: "100"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Get("rpg_time_reset"); v != "100" {
		t.Errorf("rpg_time_reset %s, want 100", v)
	}
	for _, tc := range []struct {
		profile string
		knobs   []cc.Knob
		want    KnobError
		detail  string
	}{
		{"hpcc", nil, KnobError{Profile: true, Value: "hpcc"}, `profile "hpcc": must be one of lab, mlx5, paper`},
		{"paper", []cc.Knob{{Name: "rpg_bogus", Value: "1"}}, KnobError{Knob: "rpg_bogus", Unknown: true}, `unknown knob "rpg_bogus" (valid: `},
		{"paper", []cc.Knob{{Name: "rpg_threshold", Value: "0"}}, KnobError{Knob: "rpg_threshold", Value: "0"}, "rpg_threshold=0: must be 1..255 (stages)"},
		{"paper", []cc.Knob{{Name: "dce_tcp_rtt", Value: "10"}, {Name: "min_time_between_cnps", Value: "50"}}, KnobError{Knob: "dce_tcp_rtt", Value: "10"}, "dce_tcp_rtt=10: must be greater than"},
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
	if KnobErrors(errors.New("other")) != nil {
		t.Error("KnobErrors found one in an unrelated error")
	}
}
