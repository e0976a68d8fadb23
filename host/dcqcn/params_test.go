package dcqcn

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The mlx5 knob names of dcqcn.md's table.
var wantKnobs = []string{
	"clamp_tgt_rate", "clamp_tgt_rate_after_time_inc", "cnp_802p_prio", "cnp_dscp",
	"dce_tcp_g", "dce_tcp_rtt", "initial_alpha_value", "min_time_between_cnps",
	"rate_reduce_monitor_period", "rate_to_set_on_first_cnp", "rpg_ai_rate",
	"rpg_byte_reset", "rpg_gd", "rpg_hai_rate", "rpg_max_rate", "rpg_min_dec_fac",
	"rpg_min_rate", "rpg_threshold", "rpg_time_reset",
}

func TestKnobNames(t *testing.T) {
	if got := KnobNames(); !slices.Equal(got, wantKnobs) {
		t.Errorf("KnobNames = %v\nwant %v", got, wantKnobs)
	}
	if got := VariantNames(); !slices.IsSorted(got) || len(got) != 6 {
		t.Errorf("VariantNames = %v", got)
	}
}

func TestProfiles(t *testing.T) {
	tests := []struct {
		name          string
		line          units.Rate
		ai, hai, rmin units.Rate
	}{
		{"paper", 40 * units.Gbit, 40 * units.Mbit, 200 * units.Mbit, 100 * units.Mbit},
		{"paper", units.Gbit, 1 * units.Mbit, 5 * units.Mbit, 2500 * units.Kbit},
		{"paper", 100 * units.Gbit, 100 * units.Mbit, 500 * units.Mbit, 250 * units.Mbit},
		{"mlx5", 25 * units.Gbit, 5 * units.Mbit, 50 * units.Mbit, 1 * units.Mbit},
		{"mlx5", units.Gbit, 200 * units.Kbit, 2 * units.Mbit, 40 * units.Kbit},
		{"mlx5", 800 * units.Gbit, 160 * units.Mbit, 1600 * units.Mbit, 32 * units.Mbit},
		{"mlx5", units.Mbit, 200, 2000, 40},
	}
	for _, tc := range tests {
		p, err := Profile(tc.name, tc.line)
		if err != nil {
			t.Fatalf("Profile(%q, %v): %v", tc.name, tc.line, err)
		}
		if p.RPGAIRate != tc.ai || p.RPGHAIRate != tc.hai || p.RPGMinRate != tc.rmin {
			t.Errorf("%s at %v: ai %v hai %v min %v; want %v %v %v", tc.name, tc.line,
				p.RPGAIRate, p.RPGHAIRate, p.RPGMinRate, tc.ai, tc.hai, tc.rmin)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s at %v: %v", tc.name, tc.line, err)
		}
	}
	paper := PaperParams(40 * units.Gbit)
	if paper.MinTimeBetweenCNPs != 50*usec || paper.DCETCPRTT != 55*usec || paper.G() != 1.0/256 ||
		paper.RPGThreshold != 5 || paper.RPGByteReset != 10_000_000 || paper.RPGTimeReset != 55*usec ||
		paper.InitialAlphaValue != 1024 {
		t.Errorf("paper profile constants: %+v", paper)
	}
	mlx5 := MLX5Params(25 * units.Gbit)
	if mlx5.G() != 5.0/1024 || mlx5.DCETCPRTT != usec || mlx5.RateReduceMonitorPeriod != 4*usec ||
		mlx5.MinTimeBetweenCNPs != 4*usec || mlx5.RPGTimeReset != 300*usec || mlx5.CNPDSCP != 48 || mlx5.CNP802pPrio != 6 {
		t.Errorf("mlx5 profile defaults: %+v", mlx5)
	}
	_, err := Profile("dctcp", units.Gbit)
	if err == nil || !strings.Contains(err.Error(), `"dctcp"`) || !strings.Contains(err.Error(), "mlx5, paper") {
		t.Errorf("unknown profile error = %v", err)
	}
	if _, err := Profile("paper", 0); err == nil {
		t.Error("Profile with line rate 0: no error")
	}
}

// Set(name, Get(name)) is the identity for every name in both profiles.
func TestSetGetRoundTrip(t *testing.T) {
	for _, name := range ProfileNames() {
		for _, line := range []units.Rate{units.Gbit, 25 * units.Gbit, 40 * units.Gbit} {
			p, _ := Profile(name, line)
			for _, k := range append(KnobNames(), VariantNames()...) {
				v, err := p.Get(k)
				if err != nil {
					t.Fatalf("Get(%q): %v", k, err)
				}
				q := p
				if err := q.Set(k, v); err != nil {
					t.Errorf("%s at %v: Set(%q, %q): %v", name, line, k, v, err)
				}
				if q != p {
					t.Errorf("%s at %v: Set(%q, Get = %q) changed the params", name, line, k, v)
				}
			}
		}
	}
}

func TestSet(t *testing.T) {
	tests := []struct {
		name, value string
		check       func(p Params) bool
		get         string
	}{
		{"rpg_ai_rate", "40", func(p Params) bool { return p.RPGAIRate == 40*units.Mbit }, "40"},
		{"rpg_ai_rate", "40mbit", func(p Params) bool { return p.RPGAIRate == 40*units.Mbit }, "40"},
		{"rpg_ai_rate", "0.2", func(p Params) bool { return p.RPGAIRate == 200*units.Kbit }, "0.2"},
		{"rpg_ai_rate", "1e1", func(p Params) bool { return p.RPGAIRate == 10*units.Mbit }, "10"},
		{"rpg_hai_rate", "40000kbit", func(p Params) bool { return p.RPGHAIRate == 40*units.Mbit }, "40"},
		{"rpg_max_rate", "1gbit", func(p Params) bool { return p.RPGMaxRate == units.Gbit }, "1000"},
		{"rpg_min_rate", "40kbit", func(p Params) bool { return p.RPGMinRate == 40*units.Kbit }, "0.04"},
		{"rate_to_set_on_first_cnp", " 500 ", func(p Params) bool { return p.RateToSetOnFirstCNP == 500*units.Mbit }, "500"},
		{"rpg_time_reset", "55", func(p Params) bool { return p.RPGTimeReset == 55*usec }, "55"},
		{"rpg_time_reset", "55us", func(p Params) bool { return p.RPGTimeReset == 55*usec }, "55"},
		{"rpg_time_reset", "1.5ms", func(p Params) bool { return p.RPGTimeReset == 1500*usec }, "1500"},
		{"dce_tcp_rtt", "1.5", func(p Params) bool { return p.DCETCPRTT == 1500*time.Nanosecond }, "1.5"},
		{"rate_reduce_monitor_period", "0", func(p Params) bool { return p.RateReduceMonitorPeriod == 0 }, "0"},
		{"min_time_between_cnps", "50usec", func(p Params) bool { return p.MinTimeBetweenCNPs == 50*usec }, "50"},
		{"rpg_byte_reset", "10mb", func(p Params) bool { return p.RPGByteReset == 10<<20 }, "10485760"},
		{"rpg_byte_reset", "32767", func(p Params) bool { return p.RPGByteReset == 32767 }, "32767"},
		{"rpg_threshold", "5", func(p Params) bool { return p.RPGThreshold == 5 }, "5"},
		{"rpg_gd", "12", func(p Params) bool { return p.RPGGD == 12 }, "12"},
		{"rpg_min_dec_fac", "25%", func(p Params) bool { return p.RPGMinDecFac == 25 }, "25"},
		{"dce_tcp_g", "1020", func(p Params) bool { return p.DCETCPG == 1020 }, "1020"},
		{"initial_alpha_value", "1024", func(p Params) bool { return p.InitialAlphaValue == 1024 }, "1024"},
		{"cnp_dscp", "26", func(p Params) bool { return p.CNPDSCP == 26 }, "26"},
		{"cnp_802p_prio", "3", func(p Params) bool { return p.CNP802pPrio == 3 }, "3"},
		{"clamp_tgt_rate", "true", func(p Params) bool { return p.ClampTgtRate }, "1"},
		{"clamp_tgt_rate", "1", func(p Params) bool { return p.ClampTgtRate }, "1"},
		{"clamp_tgt_rate_after_time_inc", "FALSE", func(p Params) bool { return !p.ClampTgtRateAfterTimeInc }, "0"},
		{"alpha_rule", "before_cut", func(p Params) bool { return p.AlphaRule == AlphaBeforeCut }, "before_cut"},
		{"increase_rule", "ns3", func(p Params) bool { return p.IncreaseRule == IncreaseNS3 }, "ns3"},
		{"reduce_timing", "leading_edge", func(p Params) bool { return p.ReduceTiming == ReduceLeadingEdge }, "leading_edge"},
		{"reduce_timing", "Leading_Edge", func(p Params) bool { return p.ReduceTiming == ReduceLeadingEdge }, "leading_edge"},
		{"alpha_timer_restart", "1", func(p Params) bool { return p.AlphaTimerRestart }, "1"},
		{"clamp_rt_at_max_rate", "0", func(p Params) bool { return !p.ClampRtAtMaxRate }, "0"},
	}
	for _, tc := range tests {
		p := MLX5Params(25 * units.Gbit)
		if err := p.Set(tc.name, tc.value); err != nil {
			t.Errorf("Set(%q, %q): %v", tc.name, tc.value, err)
			continue
		}
		if !tc.check(p) {
			t.Errorf("Set(%q, %q): wrong value %+v", tc.name, tc.value, p)
		}
		if got, _ := p.Get(tc.name); got != tc.get {
			t.Errorf("after Set(%q, %q): Get = %q, want %q", tc.name, tc.value, got, tc.get)
		}
	}
}

func TestSetErrors(t *testing.T) {
	tests := []struct{ name, value, want string }{
		{"rpg_min_dec_fac", "150", "dcqcn: rpg_min_dec_fac=150: must be 0..100 (percent)"},
		{"rpg_min_dec_fac", "-1", "dcqcn: rpg_min_dec_fac=-1: must be 0..100 (percent)"},
		{"rpg_threshold", "0", "dcqcn: rpg_threshold=0: must be 1..255 (stages)"},
		{"rpg_threshold", "1.5", "dcqcn: rpg_threshold=1.5: not an integer"},
		{"dce_tcp_g", "1024", "dcqcn: dce_tcp_g=1024: must be 0..1023 (of 1024)"},
		{"initial_alpha_value", "1025", "dcqcn: initial_alpha_value=1025: must be 0..1024 (of 1024)"},
		{"rpg_gd", "16", "dcqcn: rpg_gd=16: must be 1..15 (log2 divisor of α·1024)"},
		{"cnp_dscp", "64", "dcqcn: cnp_dscp=64: must be 0..63 (DSCP)"},
		{"cnp_802p_prio", "8", "dcqcn: cnp_802p_prio=8: must be 0..7 (802.1p priority)"},
		{"rpg_ai_rate", "30000", "dcqcn: rpg_ai_rate=30000: must be 0..25000 (Mbit/s, at most the line rate)"},
		{"rpg_max_rate", "30gbit", "dcqcn: rpg_max_rate=30gbit: must be 0..25000 (Mbit/s, at most the line rate)"},
		{"rpg_min_rate", "0", "dcqcn: rpg_min_rate=0: must be 0.000001..25000 (Mbit/s, at most the line rate)"},
		{"rpg_ai_rate", "5furlongs", `dcqcn: rpg_ai_rate=5furlongs: invalid rate "5furlongs": unknown unit "furlongs"`},
		{"rpg_ai_rate", "5mbps", `dcqcn: rpg_ai_rate=5mbps: invalid rate "5mbps": unit "mbps" is ambiguous`},
		{"rpg_ai_rate", "-5", `dcqcn: rpg_ai_rate=-5: invalid rate "-5": must not be negative`},
		{"rpg_time_reset", "0", "dcqcn: rpg_time_reset=0: must be 1..131071 (µs)"},
		{"dce_tcp_rtt", "200ms", "dcqcn: dce_tcp_rtt=200ms: must be 1..131071 (µs)"},
		{"rpg_time_reset", "abc", `dcqcn: rpg_time_reset=abc: invalid time "abc": not a number`},
		{"rpg_byte_reset", "5gb", "dcqcn: rpg_byte_reset=5gb: must be 0..4294967295 (bytes; 0 = off)"},
		{"clamp_tgt_rate", "yes", "dcqcn: clamp_tgt_rate=yes: must be 0, 1, true or false"},
		{"alpha_rule", "sometimes", "dcqcn: alpha_rule=sometimes: must be one of after_cut, before_cut, per_period"},
		{"rpg_threshold", "", `dcqcn: rpg_threshold="": not an integer`},
		{"rpg_tme_reset", "55", `dcqcn: unknown knob "rpg_tme_reset" (valid: clamp_tgt_rate, clamp_tgt_rate_after_time_inc, `},
	}
	for _, tc := range tests {
		p := MLX5Params(25 * units.Gbit)
		orig := p
		err := p.Set(tc.name, tc.value)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Set(%q, %q) = %v\nwant %s…", tc.name, tc.value, err, tc.want)
		}
		if p != orig {
			t.Errorf("failed Set(%q, %q) changed the params", tc.name, tc.value)
		}
	}
	var p Params
	err := p.Set("nope", "1")
	for _, name := range append(KnobNames(), VariantNames()...) {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("unknown-knob error does not list %s: %v", name, err)
		}
	}
	if _, err := p.Get("nope"); err == nil {
		t.Error("Get of an unknown knob: no error")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(p *Params)
		want   string // "" = valid
	}{
		{"paper", func(p *Params) {}, ""},
		{"line rate 0", func(p *Params) { p.LineRate = 0 }, "dcqcn: line rate 0: must be > 0"},
		{"K = N", func(p *Params) { p.DCETCPRTT = 50 * usec },
			"dcqcn: dce_tcp_rtt=50: must be greater than min_time_between_cnps (50 µs) when the α timer restarts on every cut (paper: K > N)"},
		{"K < N per period", func(p *Params) { p.DCETCPRTT = usec; p.AlphaRule = AlphaPerPeriod }, ""},
		{"K < N no restart", func(p *Params) { p.DCETCPRTT = usec; p.AlphaTimerRestart = false }, ""},
		{"negative threshold", func(p *Params) { p.RPGThreshold = -1 }, "dcqcn: rpg_threshold=-1: must be 1..255 (stages)"},
		{"negative time", func(p *Params) { p.RPGTimeReset = -time.Microsecond }, "dcqcn: rpg_time_reset=-1: must be 1..131071 (µs)"},
		{"rmin above max rate", func(p *Params) { p.RPGMaxRate = 50 * units.Mbit; p.RPGMinRate = 60 * units.Mbit },
			"dcqcn: rpg_min_rate=60: must not exceed the max rate (50 Mbit/s)"},
		{"first rate below rmin", func(p *Params) { p.RateToSetOnFirstCNP = 50 * units.Mbit },
			"dcqcn: rate_to_set_on_first_cnp=50: must be 0 or between rpg_min_rate (100) and the max rate (40000 Mbit/s)"},
		{"first rate above max", func(p *Params) { p.RPGMaxRate = 10 * units.Gbit; p.RateToSetOnFirstCNP = 20 * units.Gbit },
			"dcqcn: rate_to_set_on_first_cnp=20000: must be 0 or between rpg_min_rate (100) and the max rate (10000 Mbit/s)"},
		{"bad enum", func(p *Params) { p.AlphaRule = 7 }, "dcqcn: alpha_rule=7: must be one of after_cut, before_cut, per_period"},
	}
	for _, tc := range tests {
		p := PaperParams(40 * units.Gbit)
		tc.modify(&p)
		err := p.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate = %v\nwant %s", tc.name, err, tc.want)
		}
	}
	// All problems are reported, one per line.
	p := PaperParams(40 * units.Gbit)
	p.RPGGD, p.CNPDSCP = 0, 99
	if err := p.Validate(); err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("Validate with two problems = %v", err)
	}
}

func FuzzParamsSet(f *testing.F) {
	for _, k := range append(KnobNames(), VariantNames()...) {
		f.Add(k, "1")
	}
	for _, v := range []string{"0", "150", "-1", "1e400", "1.5", "55us", "40mbit", "10mb", "true", "per_period",
		"", " ", "1e", ".", "9999999999999999999999", "0x10", "NaN", "inf", "5%", "1e-9", "18446744073709551616"} {
		f.Add("rpg_ai_rate", v)
		f.Add("rpg_time_reset", v)
		f.Add("rpg_byte_reset", v)
		f.Add("rpg_min_dec_fac", v)
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		for _, profile := range ProfileNames() {
			p, _ := Profile(profile, 25*units.Gbit)
			if err := p.Set(name, value); err != nil {
				continue
			}
			got, err := p.Get(name)
			if err != nil {
				t.Fatalf("Get(%q) after Set(%q): %v", name, value, err)
			}
			q := p
			if err := q.Set(name, got); err != nil || q != p {
				t.Fatalf("Set(%q, Get = %q) after Set(%q): %v, changed %v", name, got, value, err, q != p)
			}
			if p.Validate() != nil {
				continue // a cross-knob rule
			}
			r := NewRP(p, 0)
			r.OnCNP(0)
			r.OnTransmit(usec, 1<<20)
			r.Advance(10 * time.Millisecond)
			if r.Rc() > p.MaxRate() || r.Rc() < min(p.RPGMinRate, p.MaxRate()) {
				t.Fatalf("Rc %v outside [%v, %v]", r.Rc(), p.RPGMinRate, p.MaxRate())
			}
		}
	})
}

// TestLabParams: the lab profile is the paper profile with the knobs the
// netns tests set by name before it existed.
func TestLabParams(t *testing.T) {
	want := PaperParams(500 * units.Mbit)
	for _, kv := range [][2]string{
		{"rpg_time_reset", "2200"}, {"dce_tcp_rtt", "2200"}, {"min_time_between_cnps", "1000"},
		{"clamp_tgt_rate", "0"}, {"clamp_tgt_rate_after_time_inc", "1"}, {"rate_validation", "75"},
	} {
		if err := want.Set(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Profile("lab", 500*units.Mbit)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("lab profile %+v\nwant         %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
}
