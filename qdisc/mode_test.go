package qdisc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/bpf"
)

// TestMarkersRegistered: every ECNMode up to the highest has a marker, its
// names are its own, and String, ParseECNMode and JSON agree on them.
func TestMarkersRegistered(t *testing.T) {
	owner := map[string]ECNMode{}
	for _, m := range ECNModes() {
		mk := markerOf(m)
		if mk == nil {
			t.Fatalf("ecn mode %d has no marker (a gap in the numbering)", m)
		}
		for _, n := range mk.names {
			if o, dup := owner[n]; dup {
				t.Errorf("name %q of %s is %s's too", n, m, o)
			}
			owner[n] = m
			if got, err := ParseECNMode(strings.ToUpper(n)); err != nil || got != m {
				t.Errorf("ParseECNMode(%q) = %v, %v; want %s", n, got, err, m)
			}
		}
		if !strings.Contains(ECNModeNames(), m.String()) {
			t.Errorf("ECNModeNames %q lacks %s", ECNModeNames(), m)
		}
		b, err := json.Marshal(m)
		var back ECNMode
		if err != nil || json.Unmarshal(b, &back) != nil || back != m {
			t.Errorf("%s: JSON %s -> %v (%v)", m, b, back, err)
		}
	}
	if _, err := ParseECNMode("fast"); err == nil || !strings.Contains(err.Error(), ECNModeNames()) {
		t.Errorf("ParseECNMode(fast): %v", err)
	}
	if s := ECNMode(99).String(); s != "ecn-mode(99)" {
		t.Errorf("ECNMode(99) = %q", s)
	}
}

// TestMarkerKeysAgree: a --tc key several modes share has one canonical
// name for all of them, so the parser's canonical form is every owner's.
func TestMarkerKeysAgree(t *testing.T) {
	canon := map[string]string{}
	for _, m := range ECNModes() {
		for _, k := range markerOf(m).tcKeys() {
			for _, a := range append([]string{k.name}, k.aliases...) {
				if c, ok := canon[a]; ok && c != k.name {
					t.Errorf("%s: %q means %q here and %q elsewhere", m, a, k.name, c)
				}
				canon[a] = k.name
			}
		}
	}
}

// TestMarkerEncodeDecode: what a mode writes to the map value it reads
// back, for a valid class of every mode (probabilities to the map's fixed
// point: the read-back encodes to the same value).
func TestMarkerEncodeDecode(t *testing.T) {
	for _, m := range ECNModes() {
		s, err := ParseTC("3:" + markerOf(m).example())
		if err != nil {
			t.Fatalf("%s: example: %v", m, err)
		}
		cfg := DefaultConfig(1e9)
		cfg.Classes[ClassRoCE] = ClassConfig{Name: "roce", LimitBytes: 4 << 20}
		if err := s.Apply(&cfg); err != nil {
			t.Fatalf("%s: example %q: %v", m, markerOf(m).example(), err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: example %q: %v", m, markerOf(m).example(), err)
		}
		cc := cfg.Classes[ClassRoCE]
		var v bpf.PortClassConfig
		markerOf(m).encode(&v, &cc)
		back := ClassConfig{Name: cc.Name, LimitBytes: cc.LimitBytes, ECN: m}
		markerOf(m).decode(&back, &v)
		var again bpf.PortClassConfig
		markerOf(m).encode(&again, &back)
		if again != v || back.MinThBytes != cc.MinThBytes || back.InsTarget != cc.InsTarget || back.Target != cc.Target {
			t.Errorf("%s: decode(encode(%+v)) = %+v", m, cc, back)
		}
	}
}
