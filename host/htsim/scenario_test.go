package htsim

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// labTrim is TestUETIncastTrim's port (htsim.md's mapping table): 1 BDP
// that trims, ECN from 0.2 to 0.8 BDP.
func labTrim(senders int, rate units.Rate, m Mapping) Scenario {
	bdp := units.ByteSize(rate.BytesPerSecond() * time.Millisecond.Seconds())
	return Scenario{Senders: senders, FlowBytes: 2 * units.MiB, Rate: rate, MTUBytes: 4096, BaseRTT: time.Millisecond,
		PortQueue: PortQueue{LimitBytes: bdp, MinThBytes: bdp / 5, MaxThBytes: bdp * 4 / 5}, Trim: true, CC: pds.CCNSCC, Seed: 1, Mapping: m}
}

// labDeep is TestUETIncast's port: the lab's limit scale(8 MiB), ECN from
// 1 to 2 BDP, no trimming.
func labDeep(rate units.Rate, m Mapping) Scenario {
	s := labTrim(8, rate, m)
	bdp := s.LimitBytes
	s.Trim, s.LimitBytes, s.MinThBytes, s.MaxThBytes = false, 8*units.MiB*units.ByteSize(rate/units.Mbit)/1000, bdp, 2*bdp
	return s
}

func TestValidateNamesFieldValueAndRange(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Scenario)
		field string
		want  string // in the message
	}{
		{"no senders", func(s *Scenario) { s.Senders = 0 }, "senders", "senders (0) must be 1 to 128 with topology dumbbell"},
		{"too many senders", func(s *Scenario) { s.Senders = 129 }, "senders", "(129) must be 1 to 128"},
		{"fat tree senders", func(s *Scenario) { s.Topology, s.Senders = FatTree, 1024 }, "senders", "1 to 1023 with topology fattree"},
		{"empty flow", func(s *Scenario) { s.FlowBytes = 0 }, "flow_bytes", "flow_bytes (0b) must be 1b to"},
		{"flow over stoi", func(s *Scenario) { s.FlowBytes = 2 * units.GiB }, "flow_bytes", "(2048mb) must be 1b to 2147483647b"},
		{"slow rate", func(s *Scenario) { s.Rate = 999 * units.Kbit }, "rate", "rate (999kbit) must be 1mbit to 10tbit"},
		{"small mtu", func(s *Scenario) { s.MTUBytes = 100 }, "mtu", "mtu (100) must be 128 to 65535 (bytes of IP packet)"},
		{"no rtt", func(s *Scenario) { s.BaseRTT = 0 }, "base_rtt", "base_rtt (0s) must be 1ns to 10s, or hop_latency set"},
		{"both rtts", func(s *Scenario) { s.HopLatency = time.Microsecond }, "hop_latency", "hop_latency (1µs) must be 0 when base_rtt (1ms) is set"},
		{"negative rtt", func(s *Scenario) { s.BaseRTT = -1 }, "base_rtt", "(-1ns) must be 1ns to 10s"},
		{"limit under a packet", func(s *Scenario) { s.LimitBytes, s.MinThBytes, s.MaxThBytes = 4109, 0, 0 }, "limit", "limit (4109b) must be at least one packet of the wire MTU (4110b)"},
		{"max_th over limit", func(s *Scenario) { s.MaxThBytes = s.LimitBytes + 1 }, "max_th", "max_th (62501b) must be at most limit (62500b)"},
		{"min_th over max_th", func(s *Scenario) { s.MinThBytes = s.MaxThBytes + 1 }, "min_th", "min_th (50001b) must be at most max_th (50000b)"},
		{"trim too short", func(s *Scenario) { s.TrimBytes = 49 }, "trim_bytes", "trim_bytes (49b) must be 0 (the default, 128b) or 50b to mtu (4096b)"},
		{"trim size without trim", func(s *Scenario) { s.Trim, s.TrimBytes = false, 128 }, "trim_bytes", "(128b) must be 0 without trim"},
		{"cc none", func(s *Scenario) { s.CC = pds.CCNone }, "cc", "cc (none) must be nscc, rccc or both"},
		{"mapping", func(s *Scenario) { s.Mapping = 7 }, "mapping", "mapping (Mapping(7)) must be native or scaled"},
		{"topology", func(s *Scenario) { s.Topology = 7 }, "topology", "topology (Topology(7)) must be dumbbell or fattree"},
		{"tq with rccc", func(s *Scenario) { s.CC, s.TargetQDelay = pds.CCRCCC, time.Millisecond }, "target_qdelay", "(1ms) must be 0 with cc rccc"},
		{"negative tq", func(s *Scenario) { s.TargetQDelay = -time.Microsecond }, "target_qdelay", "(-1µs) must be 0 (htsim's) to 10s"},
		{"sack", func(s *Scenario) { s.SACKThresholdBytes = 2 * units.GiB }, "sack_threshold", "(2048mb) must be 0 (the project's) to 1gb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := labTrim(8, 500*units.Mbit, Scaled)
			tc.edit(&s)
			err := s.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v: want a *FieldError", err)
			}
			if fe.Field != tc.field {
				t.Errorf("field %q, want %q (%v)", fe.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %q: want it to say %q", err, tc.want)
			}
			if _, err := NewPlan(s); err == nil {
				t.Error("NewPlan took the scenario")
			}
		})
	}
}

func TestValidateJoinsEveryProblem(t *testing.T) {
	s := Scenario{}
	err := s.Validate()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		fields = append(fields, e.(*FieldError).Field)
	}
	if got, want := strings.Join(fields, ","), "senders,flow_bytes,rate,mtu,base_rtt"; got != want {
		t.Errorf("fields %s, want %s (%v)", got, want, err)
	}
}

func TestValidateTakesTheLabsScenarios(t *testing.T) {
	for _, s := range []Scenario{labTrim(8, 500*units.Mbit, Scaled), labTrim(16, 250*units.Mbit, Native), labDeep(500*units.Mbit, Scaled)} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

func TestNamesRoundTrip(t *testing.T) {
	for _, m := range []Mapping{Native, Scaled} {
		var got Mapping
		b, _ := m.MarshalText()
		if err := got.UnmarshalText(b); err != nil || got != m {
			t.Errorf("mapping %v: %s → %v, %v", m, b, got, err)
		}
	}
	for _, tp := range []Topology{Dumbbell, FatTree} {
		var got Topology
		b, _ := tp.MarshalText()
		if err := got.UnmarshalText(b); err != nil || got != tp {
			t.Errorf("topology %v: %s → %v, %v", tp, b, got, err)
		}
	}
	var fe *FieldError
	if _, err := ParseMapping("fast"); !errors.As(err, &fe) || err.Error() != "htsim: mapping (fast) must be native or scaled" {
		t.Errorf("ParseMapping(fast) = %v", err)
	}
}

func TestSetHtsimRecovery(t *testing.T) {
	s := labDeep(500*units.Mbit, Scaled)
	s.SetHtsimRecovery()
	if !s.SLEEK || s.SACKThresholdBytes != 16384 {
		t.Errorf("deep: SLEEK %v, sack %v: want htsim's no-trim setting, SLEEK and 16 KiB", s.SLEEK, s.SACKThresholdBytes)
	}
	s = labTrim(8, 500*units.Mbit, Scaled)
	s.SetHtsimRecovery()
	if s.SLEEK || s.SACKThresholdBytes != 16384 {
		t.Errorf("trim: SLEEK %v, sack %v: want no SLEEK, 16 KiB", s.SLEEK, s.SACKThresholdBytes)
	}
}
