package lb

import (
	"math/rand/v2"
	"testing"
)

// cursor returns the order in which a balancer made with p and seed walks
// its EVs: Bitmap draws from its rng exactly as Oblivious does (the block,
// then the XOR mask at every wrap), so an Oblivious twin's packets are the
// Bitmap's cursor positions.
func cursor(t *testing.T, p Params, seed uint64) func(pos int) uint16 {
	t.Helper()
	twin, err := NewOblivious(p, rand.New(rand.NewPCG(seed, 0)))
	if err != nil {
		t.Fatal(err)
	}
	var seq []uint16
	return func(pos int) uint16 {
		for len(seq) <= pos {
			seq = append(seq, twin.Next(0))
		}
		return seq[pos]
	}
}

func newTestBitmap(t *testing.T, evs int, seed uint64) (*Bitmap, func(int) uint16) {
	t.Helper()
	p := DefaultParams()
	p.EVs = evs
	b, err := NewBitmap(p, rand.New(rand.NewPCG(seed, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return b, cursor(t, p, seed)
}

func checkPenalty(t *testing.T, b *Bitmap, step string, ev uint16, want uint8) {
	t.Helper()
	if got, ok := b.Penalty(ev); !ok || got != want {
		t.Errorf("%s: penalty of %d = %d (ok %v), want %d", step, ev, got, ok, want)
	}
}

// htsim processEv: ECN +1, NACK +4, timeout = the cap (15), good nothing;
// the cap holds.
func TestBitmapPenalties(t *testing.T) {
	b, _ := newTestBitmap(t, 8, 1)
	r := b.EVs()
	a, c := r.First, r.First+1
	steps := []struct {
		ev   uint16
		f    PathFeedback
		want uint8
	}{
		{a, PathGood, 0},
		{a, PathECN, 1},
		{a, PathECN, 2},
		{a, PathNack, 6},
		{a, PathNack, 10},
		{a, PathGood, 10},
		{a, PathNack, 14},
		{a, PathNack, 15},
		{a, PathECN, 15},
		{c, PathTimeout, 15},
	}
	for i, s := range steps {
		b.Feedback(0, s.ev, s.f)
		checkPenalty(t, b, s.f.String(), s.ev, s.want)
		if want := 1 + min(i/9, 1); i > 0 && b.Penalised() != want {
			t.Errorf("step %d: %d EVs penalised, want %d", i, b.Penalised(), want)
		}
	}
	if _, ok := b.Penalty(r.Last() + 1); ok {
		t.Error("Penalty of a foreign EV")
	}
}

// The first round, by hand: the cursor meets o0 (clean), then o1
// (NACKed: 4) and o2 (ECN: 1). Next takes a point off o1, the first
// penalised EV it meets, none off o2, and returns o3.
func TestBitmapSkipAndDecayByHand(t *testing.T) {
	b, o := newTestBitmap(t, 4, 3)
	b.Feedback(0, o(1), PathNack)
	b.Feedback(0, o(2), PathECN)
	if ev := b.Next(0); ev != o(0) {
		t.Fatalf("first packet %d, want o0 = %d", ev, o(0))
	}
	if ev := b.Next(0); ev != o(3) {
		t.Fatalf("second packet %d, want o3 = %d (o1, o2 skipped)", ev, o(3))
	}
	checkPenalty(t, b, "o1 decayed", o(1), 3)
	checkPenalty(t, b, "o2 untouched", o(2), 1)
	if st := b.Stats(); st.Skipped != 2 || st.Decays != 1 || st.Packets != 2 {
		t.Errorf("stats %+v, want 2 skipped, 1 decay, 2 packets", st)
	}
}

// A timed-out EV (15) among clean ones: each Next that meets it takes one
// point off, and it is used again at the 16th meeting, when its penalty
// is 0.
func TestBitmapTimeoutDecay(t *testing.T) {
	b, o := newTestBitmap(t, 4, 5)
	bad := o(0)
	b.Feedback(0, bad, PathTimeout)
	pen := uint8(15)
	for n := 0; ; n++ {
		if n > 200 {
			t.Fatal("timed-out EV never used again")
		}
		ev := b.Next(0)
		got, _ := b.Penalty(bad)
		if got != pen && got != pen-1 {
			t.Fatalf("packet %d: penalty %d after %d: more than one point per Next", n, got, pen)
		}
		pen = got
		if ev == bad {
			if pen != 0 {
				t.Fatalf("packet %d: used with penalty %d", n, pen)
			}
			if d := b.Stats().Decays; d != 15 {
				t.Fatalf("used again after %d decays, want 15", d)
			}
			return
		}
	}
}

// Random feedback against the rule: the Bitmap returns exactly what a walk
// of its cursor order gives when each Next takes one point off the first
// penalised EV it meets and returns the first clean one (htsim
// nextEntropy); and it never returns an EV with a penalty while a clean
// one exists. (An EV the same Next took its last point off is clean: with
// the XOR mask redrawn at the wrap the cursor may meet it twice in a row.)
func TestBitmapAgainstRule(t *testing.T) {
	for _, evs := range []int{1, 2, 4, 16, 128} {
		for seed := range uint64(4) {
			b, o := newTestBitmap(t, evs, seed)
			r := b.EVs()
			pen := map[uint16]int{}
			pos := 0
			model := func() uint16 {
				first := true
				for probes := 1; ; probes++ {
					ev := o(pos)
					pos++
					if pen[ev] == 0 {
						return ev
					}
					if first {
						pen[ev]--
						first = false
					}
					if probes >= 2*evs {
						return ev
					}
				}
			}
			rng := rand.New(rand.NewPCG(seed, 99))
			for step := range 5000 {
				clean := false
				for i := range evs {
					clean = clean || pen[r.ev(i)] == 0
				}
				before := map[uint16]int{}
				for k, v := range pen {
					before[k] = v
				}
				want, got := model(), b.Next(0)
				if got != want {
					t.Fatalf("%d EVs seed %d step %d: Next = %d, rule says %d", evs, seed, step, got, want)
				}
				if p, _ := b.Penalty(got); clean && p > 0 {
					t.Fatalf("%d EVs seed %d step %d: picked %d with penalty %d (%d before) while a clean EV existed", evs, seed, step, got, p, before[got])
				}
				// Feedback on a random EV, mostly clean.
				ev := r.ev(rng.IntN(evs))
				f := []PathFeedback{PathGood, PathGood, PathGood, PathECN, PathECN, PathNack, PathTimeout}[rng.IntN(7)]
				if step%50 != 0 && f == PathTimeout {
					f = PathGood
				}
				b.Feedback(0, ev, f)
				switch f {
				case PathECN:
					pen[ev] = min(pen[ev]+1, 15)
				case PathNack:
					pen[ev] = min(pen[ev]+4, 15)
				case PathTimeout:
					pen[ev] = 15
				}
				for i := range evs {
					e := r.ev(i)
					if p, _ := b.Penalty(e); int(p) != pen[e] {
						t.Fatalf("%d EVs seed %d step %d: penalty of %d = %d, rule says %d", evs, seed, step, e, p, pen[e])
					}
				}
			}
		}
	}
}

// Every EV penalised: Next still returns one (after looking at every EV).
func TestBitmapAllPenalised(t *testing.T) {
	b, _ := newTestBitmap(t, 8, 2)
	r := b.EVs()
	for i := range r.Count {
		b.Feedback(0, r.ev(i), PathTimeout)
	}
	ev := b.Next(0)
	if !r.Contains(ev) {
		t.Fatalf("Next = %d outside %v", ev, r)
	}
	if st := b.Stats(); st.Decays != 1 || st.Skipped != 2*8-1 {
		t.Errorf("stats %+v: want one decay, 15 EVs skipped", st)
	}
}
