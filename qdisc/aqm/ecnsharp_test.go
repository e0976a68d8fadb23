package aqm

import (
	"math"
	"strings"
	"testing"
	"time"
)

// ecnStep is one departing packet and what ECN♯ must answer, with the
// state after it.
type ecnStep struct {
	now    Time
	signal uint64
	rnd    uint32
	want   Verdict
	state  ECNSharpState
	why    string
}

func runECNSharp(t *testing.T, e *ECNSharp, steps []ecnStep) {
	t.Helper()
	for i, s := range steps {
		got := e.OnDequeue(s.now, s.signal, s.rnd)
		if got != s.want {
			t.Errorf("step %d (%s): OnDequeue(%d, %d, %d) = %+v, want %+v", i, s.why, s.now, s.signal, s.rnd, got, s.want)
		}
		if st := e.State(); st != s.state {
			t.Errorf("step %d (%s): state %+v, want %+v", i, s.why, st, s.state)
		}
		if t.Failed() {
			t.FailNow() // later steps depend on this one
		}
	}
}

// Seed 002 testbed values (§5.2), signal = sojourn in ns.
var seedECNSharp = ECNSharpConfig{
	InsTarget:   200_000,
	PstTarget:   85_000,
	PstInterval: 200 * time.Microsecond,
}

// TestECNSharpAlgorithm1 walks Algorithm 1 (seed 002 §3.2) by hand with a
// sojourn of 100 µs: above pst_target (85 µs), below ins_target (200 µs).
func TestECNSharpAlgorithm1(t *testing.T) {
	e := &ECNSharp{Config: seedECNSharp}
	none, pst, ins := Verdict{}, Verdict{Persistent: true}, Verdict{Instantaneous: true}
	runECNSharp(t, e, []ecnStep{
		{1_000_000, 100_000, 0, none, ECNSharpState{false, 0, 0, 1_000_000}, "first above: first_above_time = now (line 27)"},
		{1_100_000, 85_000, 0, none, ECNSharpState{false, 0, 0, 1_000_000}, "signal = pst_target is not below it (line 22)"},
		{1_200_000, 100_000, 0, none, ECNSharpState{false, 0, 0, 1_000_000}, "now = first_above_time + pst_interval: not yet (line 29, strict)"},
		{1_200_001, 100_000, 0, pst, ECNSharpState{true, 1, 1_400_001, 1_000_000}, "detected: enter, count 1, next = now + 200 µs (lines 13-17)"},
		{1_300_000, 100_000, 0, none, ECNSharpState{true, 1, 1_400_001, 1_000_000}, "in state, before marking_next"},
		{1_400_001, 100_000, 0, none, ECNSharpState{true, 1, 1_400_001, 1_000_000}, "now = marking_next: not yet (line 7, strict)"},
		{1_400_002, 100_000, 0, pst, ECNSharpState{true, 2, 1_500_001, 1_000_000}, "count 2: next += 200000/2"},
		{1_500_002, 100_000, 0, pst, ECNSharpState{true, 3, 1_566_667, 1_000_000}, "count 3: next += 200000/3 = 66666"},
		{1_566_667, 100_000, 0, none, ECNSharpState{true, 3, 1_566_667, 1_000_000}, "now = marking_next"},
		{1_566_668, 100_000, 0, pst, ECNSharpState{true, 4, 1_616_667, 1_000_000}, "count 4: next += 50000"},
		{1_616_668, 100_000, 0, pst, ECNSharpState{true, 5, 1_656_667, 1_000_000}, "count 5: next += 40000"},
		{1_700_000, 100_000, 0, pst, ECNSharpState{true, 6, 1_690_000, 1_000_000}, "late packet, count 6: next += 33333, still behind now"},
		{1_700_001, 100_000, 0, pst, ECNSharpState{true, 7, 1_718_571, 1_000_000}, "catch-up: next grows from marking_next, not now; += 28571"},
		{1_700_100, 250_000, 0, ins, ECNSharpState{true, 7, 1_718_571, 1_000_000}, "instantaneous mark; persistent runs too, not due"},
		{1_718_572, 84_999, 0, none, ECNSharpState{false, 7, 1_718_571, 0}, "below pst_target: reset first_above_time, leave state, no mark (lines 4-6, 22-24)"},
		{1_800_000, 100_000, 0, none, ECNSharpState{false, 7, 1_718_571, 1_800_000}, "above again: new first_above_time"},
		{2_000_000, 100_000, 0, none, ECNSharpState{false, 7, 1_718_571, 1_800_000}, "not yet an interval"},
		{2_000_001, 100_000, 0, pst, ECNSharpState{true, 1, 2_200_001, 1_800_000}, "re-enter: count restarts at 1"},
	})
}

// TestECNSharpMarkingSequence checks marking_next += pst_interval/count
// for counts 2..12 with a packet at every ns-exact due time + 1.
func TestECNSharpMarkingSequence(t *testing.T) {
	e := &ECNSharp{Config: seedECNSharp}
	e.OnDequeue(1, 100_000, 0)
	if v := e.OnDequeue(200_002, 100_000, 0); !v.Persistent {
		t.Fatalf("no entry mark: %+v %+v", v, e.State())
	}
	next := Time(200_002 + 200_000)
	for count := uint64(2); count <= 12; count++ {
		if v := e.OnDequeue(next, 100_000, 0); v.Persistent {
			t.Fatalf("count %d: marked at marking_next %d", count, next)
		}
		if v := e.OnDequeue(next+1, 100_000, 0); !v.Persistent {
			t.Fatalf("count %d: not marked at marking_next+1 %d", count, next+1)
		}
		next += Time(200_000 / count)
		if st := e.State(); st.MarkingCount != count || st.MarkingNext != next {
			t.Fatalf("count %d: state %+v, want count %d next %d", count, st, count, next)
		}
	}
}

// TestECNSharpSqrtLaw: the ns-3 variant schedules from now with CoDel's
// law, so a late packet does not leave marks owed.
func TestECNSharpSqrtLaw(t *testing.T) {
	cfg := seedECNSharp
	cfg.SqrtLaw = true
	e := &ECNSharp{Config: cfg}
	none, pst := Verdict{}, Verdict{Persistent: true}
	runECNSharp(t, e, []ecnStep{
		{1_000_000, 100_000, 0, none, ECNSharpState{false, 0, 0, 1_000_000}, "first above"},
		{1_200_001, 100_000, 0, pst, ECNSharpState{true, 1, 1_400_001, 1_000_000}, "enter: next = now + 200 µs, as Algorithm 1"},
		{1_400_002, 100_000, 0, pst, ECNSharpState{true, 2, 1_541_424, 1_000_000}, "count 2: now + 200000·65536/92681 = now + 141422"},
		{1_541_424, 100_000, 0, none, ECNSharpState{true, 2, 1_541_424, 1_000_000}, "now = marking_next"},
		{1_541_425, 100_000, 0, pst, ECNSharpState{true, 3, 1_656_895, 1_000_000}, "count 3: now + 200000·65536/113511 = now + 115470"},
		{1_700_000, 100_000, 0, pst, ECNSharpState{true, 4, 1_800_000, 1_000_000}, "late, count 4: now + 100000"},
		{1_700_001, 100_000, 0, none, ECNSharpState{true, 4, 1_800_000, 1_000_000}, "no catch-up"},
		{1_800_001, 50_000, 0, none, ECNSharpState{false, 4, 1_800_000, 0}, "leave"},
	})
}

func TestECNSharpInstantaneousCutOff(t *testing.T) {
	e := &ECNSharp{Config: seedECNSharp}
	none, ins, both := Verdict{}, Verdict{Instantaneous: true}, Verdict{true, true}
	runECNSharp(t, e, []ecnStep{
		{1_000_000, 0, 0, none, ECNSharpState{}, "empty queue"},
		{1_000_001, 200_000, 0, none, ECNSharpState{false, 0, 0, 1_000_001}, "= ins_target: no mark (strict >)"},
		{1_000_002, 200_001, 0, ins, ECNSharpState{false, 0, 0, 1_000_001}, "> ins_target: mark; persistent keeps first_above_time"},
		{1_200_002, 300_000, 0, both, ECNSharpState{true, 1, 1_400_002, 1_000_001}, "both conditions mark; persistent enters while ins marks"},
		{1_200_003, 300_000, math.MaxUint32, ins, ECNSharpState{true, 1, 1_400_002, 1_000_001}, "rnd is ignored by the cut-off"},
	})
	if !both.Mark() || !ins.Mark() || !(Verdict{Persistent: true}).Mark() || none.Mark() {
		t.Error("Verdict.Mark is not Instantaneous || Persistent")
	}
}

// TestECNSharpProbabilistic checks the Kmin/Kmax/Pmax curve (seed 002
// §3.5) at its edges: Kmin 100, Kmax 200 bytes, Pmax 0.1.
func TestECNSharpProbabilistic(t *testing.T) {
	const pmax = ProbOne / 10 // 429496729
	e := &ECNSharp{Config: ECNSharpConfig{
		InsTarget: 100, InsMax: 200, MaxPFixed: pmax,
		PstTarget: math.MaxUint64, PstInterval: time.Microsecond, // persistent never fires
	}}
	if err := e.Config.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		signal uint64
		rnd    uint32
		want   bool
		why    string
	}{
		{0, 0, false, "empty"},
		{99, 0, false, "below Kmin"},
		{100, 0, false, "at Kmin: p = 0"},
		{101, 4294966, true, "Kmin+1: p = pmax/100 = 4294967, rnd just below"},
		{101, 4294967, false, "Kmin+1: rnd = p"},
		{150, 214748363, true, "mid: p = pmax·50/100 = 214748364, rnd just below"},
		{150, 214748364, false, "mid: rnd = p"},
		{199, 425201760, true, "Kmax-1: p = pmax·99/100 = 425201761, rnd just below"},
		{199, 425201761, false, "Kmax-1: rnd = p"},
		{200, math.MaxUint32, true, "at Kmax: always"},
		{1 << 60, math.MaxUint32, true, "far above Kmax"},
	} {
		got := e.OnDequeue(Time(1000+c.signal), c.signal, c.rnd)
		if got != (Verdict{Instantaneous: c.want}) {
			t.Errorf("%s: OnDequeue(signal %d, rnd %d) = %+v, want instantaneous %v", c.why, c.signal, c.rnd, got, c.want)
		}
	}

	// Pmax = 1.0 over a 2-unit ramp: p = 2^31 half way.
	e = &ECNSharp{Config: ECNSharpConfig{InsMax: 2, MaxPFixed: ProbOne, PstTarget: math.MaxUint64, PstInterval: 1}}
	if !e.OnDequeue(1, 1, 1<<31-1).Instantaneous || e.OnDequeue(1, 1, 1<<31).Instantaneous {
		t.Error("Pmax 1.0, half way: want mark iff rnd < 2^31")
	}
	// A ramp Validate rejects (InsMax ≤ InsTarget) still does not divide by 0.
	e = &ECNSharp{Config: ECNSharpConfig{InsTarget: 10, InsMax: 5, MaxPFixed: ProbOne, PstTarget: math.MaxUint64, PstInterval: 1}}
	if e.OnDequeue(1, 9, 0).Instantaneous || !e.OnDequeue(1, 10, 0).Instantaneous {
		t.Error("InsMax ≤ InsTarget: want a step at InsTarget")
	}
}

func TestECNSharpValidate(t *testing.T) {
	ok := []ECNSharpConfig{
		seedECNSharp,
		{InsTarget: 100, InsMax: 200, MaxPFixed: ProbOne / 10, PstTarget: 85, PstInterval: time.Millisecond},
		{InsMax: 1 << 32, MaxPFixed: ProbOne, PstInterval: MaxInterval}, // largest ramp at Pmax 1.0
		{InsMax: math.MaxUint64, MaxPFixed: 0, PstInterval: 1},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, c := range []struct {
		cfg  ECNSharpConfig
		want string
	}{
		{ECNSharpConfig{}, "ecnsharp: pst_interval (0us) must be 1ns to 2^48-1ns"},
		{ECNSharpConfig{PstInterval: -time.Second}, "pst_interval (-1s)"},
		{ECNSharpConfig{PstInterval: MaxInterval + 1}, "pst_interval (281474.976710656s)"},
		{ECNSharpConfig{InsTarget: 200, InsMax: 200, PstInterval: 1}, "ins_max (200) must be greater than ins_target (200), or 0"},
		{ECNSharpConfig{InsTarget: 1, InsMax: 2, MaxPFixed: ProbOne + 1, PstInterval: 1}, "max_p (4294967297/2^32) must be 0 to 2^32"},
		{ECNSharpConfig{InsMax: 1<<32 + 1, MaxPFixed: ProbOne, PstInterval: 1}, "ins_max − ins_target (4294967297) must be at most 4294967296"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}
