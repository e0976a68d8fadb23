package lb

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestDefaultParams(t *testing.T) {
	p := DefaultParams()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	// htsim uec_mp.cpp / buffer_reps.cpp.
	if p.ECNPenalty != 1 || p.NackPenalty != 4 || p.MaxPenalty != 15 || p.REPSBufferSize != 8 ||
		!p.REPSFreeze || p.REPSFreezeTime != 10*time.Millisecond || p.REPSExploreAfterFreeze != 16 {
		t.Errorf("not htsim's: %+v", p)
	}
	if p.FirstPort != 0xC000 || int(p.FirstPort)+p.Ports-1 != 0xFFFF || p.EVs != 128 {
		t.Errorf("EV space %#x+%d, %d EVs; want 0xC000..0xFFFF, 128", p.FirstPort, p.Ports, p.EVs)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Params)
		want string
	}{
		{"first port", func(p *Params) { p.FirstPort = 80 }, "lb: first_port=80: must be 1024..65535"},
		{"ports zero", func(p *Params) { p.Ports = 0 }, "lb: ports=0: must be 1..16384 (first_port 49152 + ports − 1 ≤ 65535)"},
		{"ports past 65535", func(p *Params) { p.Ports = 16385 }, "lb: ports=16385: must be 1..16384 (first_port 49152 + ports − 1 ≤ 65535)"},
		{"evs zero", func(p *Params) { p.EVs = 0 }, "lb: evs=0: must be a power of two ≥ 1 (htsim path_entropy_size)"},
		{"evs not power of two", func(p *Params) { p.EVs = 100 }, "lb: evs=100: must be a power of two ≥ 1 (htsim path_entropy_size)"},
		{"evs above ports", func(p *Params) { p.Ports = 64 }, "lb: evs=128: must be a power of two dividing ports (64)"},
		{"evs not dividing", func(p *Params) { p.Ports = 1000 }, "lb: evs=128: must be a power of two dividing ports (1000)"},
		{"max penalty", func(p *Params) { p.MaxPenalty, p.ECNPenalty, p.NackPenalty = 0, 0, 0 }, "lb: max_penalty=0: must be 1..255"},
		{"ecn penalty", func(p *Params) { p.ECNPenalty = 16 }, "lb: ecn_penalty=16: must be 1..max_penalty (15)"},
		{"nack penalty", func(p *Params) { p.NackPenalty = 0 }, "lb: nack_penalty=0: must be 1..max_penalty (15)"},
		{"reps buffer", func(p *Params) { p.REPSBufferSize = 0 }, "lb: reps_buffer_size=0: must be 1..4096"},
		{"freeze time", func(p *Params) { p.REPSFreezeTime = -time.Millisecond }, "lb: exit_freeze_after=-1ms: must be 0s..10s"},
		{"explore", func(p *Params) { p.REPSExploreAfterFreeze = -1 }, "lb: explore_counter=-1: must be 0..65535"},
		{"mixed limit", func(p *Params) { p.MixedRecycleLimit = 0 }, "lb: mixed_recycle_limit=0: must be 1..1048576"},
	}
	for _, tc := range tests {
		p := DefaultParams()
		tc.edit(&p)
		err := p.Validate()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
		for _, k := range Kinds {
			if _, err := New(k, p, nil); err == nil {
				t.Errorf("%s: New(%v) accepted invalid params", tc.name, k)
			}
		}
	}
	// Several problems: one line each.
	p := DefaultParams()
	p.EVs, p.REPSBufferSize = 3, 0
	err := p.Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two problems: %v", err)
	}
}

func TestKind(t *testing.T) {
	for _, k := range Kinds {
		got, err := ParseKind(strings.ToUpper(k.String()))
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k, got, err)
		}
		var u Kind
		if b, err := k.MarshalText(); err != nil || u.UnmarshalText(b) != nil || u != k {
			t.Errorf("%v: text round trip gave %v (%v)", k, u, err)
		}
		b, err := New(k, DefaultParams(), rand.New(rand.NewPCG(1, 2)))
		if err != nil || b == nil {
			t.Fatalf("New(%v): %v", k, err)
		}
	}
	_, err := ParseKind("ecmp")
	if err == nil || err.Error() != `lb: load balancer "ecmp": must be one of oblivious, bitmap, reps, mixed` {
		t.Errorf("ParseKind(ecmp): %v", err)
	}
	if s := Kind(0).String(); s != "Kind(0)" {
		t.Errorf("Kind(0) = %s", s)
	}
	if _, err := New(Kind(9), DefaultParams(), nil); err == nil {
		t.Error("New(Kind(9)) accepted")
	}
	if _, err := Kind(9).MarshalText(); err == nil {
		t.Error("Kind(9).MarshalText accepted")
	}
	if PathTimeout.String() != "timeout" || PathFeedback(7).String() != "PathFeedback(7)" {
		t.Error("PathFeedback names")
	}
	if AckFeedback(true) != PathECN || AckFeedback(false) != PathGood {
		t.Error("AckFeedback")
	}
}

// Every balancer uses an aligned block of EVs inside the port range,
// chosen by its rng: the same seed gives the same block and the same EVs.
func TestEVRange(t *testing.T) {
	p := DefaultParams()
	blocks := map[uint16]bool{}
	for seed := range uint64(64) {
		for _, k := range Kinds {
			b, err := New(k, p, rand.New(rand.NewPCG(seed, 0)))
			if err != nil {
				t.Fatal(err)
			}
			r := b.EVs()
			if r.Count != p.EVs || (int(r.First)-int(p.FirstPort))%p.EVs != 0 || r.First < p.FirstPort || int(r.Last()) > int(p.FirstPort)+p.Ports-1 {
				t.Fatalf("%v seed %d: EVs %v, want an aligned block of %d in %#x+%d", k, seed, r, p.EVs, p.FirstPort, p.Ports)
			}
			blocks[r.First] = true
			for range 3 * p.EVs {
				if ev := b.Next(0); !r.Contains(ev) {
					t.Fatalf("%v: Next = %d outside %v", k, ev, r)
				}
			}
			if r.Contains(r.First-1) || r.Contains(r.Last()+1) || !r.Contains(r.First) || !r.Contains(r.Last()) {
				t.Fatalf("%v: Contains wrong at the edges of %v", k, r)
			}
			// Foreign feedback is counted and ignored.
			b.Feedback(0, r.First-1, PathECN)
			if st := b.Stats(); st.Foreign != 1 || st.Feedback[PathECN] != 1 {
				t.Fatalf("%v: foreign feedback: %+v", k, st)
			}
		}
	}
	if len(blocks) < 32 {
		t.Errorf("64 seeds drew only %d of 128 blocks", len(blocks))
	}
	// Same seed, same sequence.
	for _, k := range Kinds {
		a, _ := New(k, p, rand.New(rand.NewPCG(7, 7)))
		b, _ := New(k, p, rand.New(rand.NewPCG(7, 7)))
		for i := range 1000 {
			ea, eb := a.Next(0), b.Next(0)
			if ea != eb {
				t.Fatalf("%v: packet %d: %d vs %d with the same seed", k, i, ea, eb)
			}
			f := PathFeedback(i % 3)
			a.Feedback(0, ea, f)
			b.Feedback(0, eb, f)
		}
	}
	// One EV (htsim -paths 1) and the whole range.
	for _, evs := range []int{1, p.Ports} {
		q := p
		q.EVs = evs
		for _, k := range Kinds {
			b, err := New(k, q, nil)
			if err != nil {
				t.Fatalf("%v with %d EVs: %v", k, evs, err)
			}
			for range 10 {
				ev := b.Next(0)
				b.Feedback(0, ev, PathECN)
			}
		}
	}
}
