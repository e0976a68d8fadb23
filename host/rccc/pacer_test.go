package rccc_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// grantTime is the pacer's time for b bytes at the lab's 0.99 Gbit/s, as
// the pacer rounds it (up to the ns): 16 384 B → 132 396 ns.
func grantTime(p rccc.Params, b int) time.Duration {
	return time.Duration(math.Ceil(float64(b/uet.ByteUnit) * uet.ByteUnit * 8e9 / (p.PacerRateFactor * float64(p.LinkRate))))
}

// far is a target no test reaches: 2^22 units (1 GiB) ahead.
const far = 1 << 22

// runPacer drives pc with a fake clock that jumps to each NextEvent, until
// end; onGrant sees every grant as it is issued (and may move targets, as
// a sender with no delay would). It returns the grants issued.
func runPacer[K comparable](pc *rccc.Pacer[K], end time.Duration, onGrant func(g rccc.Grant[K])) []rccc.Grant[K] {
	var all, out []rccc.Grant[K]
	for {
		now := pc.NextEvent()
		if now > end {
			return all
		}
		out = pc.Advance(now, out[:0])
		for _, g := range out {
			if onGrant != nil {
				onGrant(g)
			}
		}
		all = append(all, out...)
	}
}

// The pacer grants at 0.99 × line rate, within 0.5 % over a long run, at
// the lab's rate and faster ones, with full grants and with grants cut
// short by the targets.
func TestPacerRate(t *testing.T) {
	tests := []struct {
		rate    units.Rate
		rtt     time.Duration
		targetB int // each source's target is kept this far ahead of its credit
		n       int
		run     time.Duration
	}{
		{units.Gbit, 80 * us, far * 256, 4, time.Second},
		{units.Gbit, 80 * us, 15000, 1, time.Second}, // grants of ⌈15 000 / 256⌉ = 59 units
		{units.Gbit, 80 * us, 5000, 8, time.Second},  // grants of 20 units
		{10 * units.Gbit, 20 * us, far * 256, 16, 100 * time.Millisecond},
		{100 * units.Gbit, 12 * us, far * 256, 128, 10 * time.Millisecond},
	}
	for _, tc := range tests {
		p := rccc.DefaultParams(tc.rate, tc.rtt, 4096)
		pc := rccc.NewPacer[int](p, 0)
		granted := make([]uint64, tc.n)
		for k := range tc.n {
			pc.OnTarget(0, k, rccc.CreditTargetOf(uint64(tc.targetB)))
		}
		var bytes uint64
		var last time.Duration
		for _, g := range runPacer(pc, tc.run, func(g rccc.Grant[int]) {
			granted[g.Key] += uint64(g.Bytes)
			pc.OnTarget(g.At, g.Key, rccc.CreditTargetOf(granted[g.Key]+uint64(tc.targetB)))
		}) {
			if g.At < tc.run {
				bytes += uint64(g.Bytes)
			}
			last = g.At
		}
		got := float64(bytes) * 8 / tc.run.Seconds()
		want := 0.99 * float64(tc.rate)
		t.Logf("%v, %d sources, target +%d B: %.6g bit/s over %v = %.5f × 0.99 line rate, %d grants",
			tc.rate, tc.n, tc.targetB, got, tc.run, got/want, pc.Stats().Grants)
		if math.Abs(got/want-1) > 0.005 {
			t.Errorf("%v: rate %.6g, want %.6g ± 0.5 %%", tc.rate, got, want)
		}
		if last < tc.run-grantTime(p, p.GrantBytes) {
			t.Errorf("last grant at %v", last)
		}
	}
}

// Sources with unmet targets are granted in turn: the order is cyclic and
// the bytes equal (Jain ≥ 0.99; round robin gives 1 to within a grant).
func TestPacerRoundRobin(t *testing.T) {
	p := labParams(t)
	const n = 7
	pc := rccc.NewPacer[uint32](p, 0)
	for k := range uint32(n) {
		pc.OnTarget(0, k, far)
	}
	grants := runPacer(pc, 500*time.Millisecond, nil)
	bytes := make([]float64, n)
	for i, g := range grants {
		if want := uint32(i % n); g.Key != want {
			t.Fatalf("grant %d to %d, want %d (round robin)", i, g.Key, want)
		}
		if g.Bytes != p.GrantBytes || g.SlowPull {
			t.Fatalf("grant %d: %+v", i, g)
		}
		if i > 0 {
			if d := g.At - grants[i-1].At; d != grantTime(p, p.GrantBytes) {
				t.Fatalf("grant %d %v after the previous one, want %v", i, d, grantTime(p, p.GrantBytes))
			}
		}
		bytes[g.Key] += float64(g.Bytes)
	}
	j := stats.Jain(bytes)
	t.Logf("%d grants, bytes per source %v, Jain %.6f", len(grants), bytes, j)
	if j < 0.99 {
		t.Errorf("Jain %.4f < 0.99", j)
	}
	// Unequal demands: a source that asks for little is served in full,
	// the rest share what is left equally.
	pc = rccc.NewPacer[uint32](p, 0)
	for k := range uint32(n) {
		pc.OnTarget(0, k, far)
	}
	pc.OnTarget(0, n, 16)
	bytes = make([]float64, n+1)
	runPacer(pc, 500*time.Millisecond, func(g rccc.Grant[uint32]) {
		bytes[g.Key] += float64(g.Bytes)
		if g.Key == n {
			if g.Bytes != 4096 {
				t.Fatalf("small source granted %d B, asked for 4096", g.Bytes)
			}
			pc.OnTarget(g.At, n, g.Credit+16) // 4096 more, once it has it
		}
	})
	t.Logf("unequal: bytes per source %v", bytes)
	if j := stats.Jain(bytes[:n]); j < 0.99 || math.Abs(bytes[n]*4/bytes[0]-1) > 0.01 {
		t.Errorf("Jain of the large %.4f, small source %v B against %v B each", j, bytes[n], bytes[0])
	}
}

// Granted credit never passes the target; slow pulls add unrequested
// credit only while no source is active, never more than SlowPullMax
// beyond the target; the schedule never runs faster than the pacer rate.
// Random targets (older and newer), Advance times and removals.
func TestPacerNeverPastTarget(t *testing.T) {
	for _, slow := range []bool{false, true} {
		p := labParams(t)
		if !slow {
			p.SlowPullMaxBytes = 0
		}
		rng := rand.New(rand.NewPCG(1, 2))
		pc := rccc.NewPacer[int](p, 0)
		const n = 5
		target := make([]uint64, n) // units, unwrapped, the highest sent
		var now, lastAt time.Duration
		var lastBytes int
		var out []rccc.Grant[int]
		var grants, slows int
		for step := range 200000 {
			now += time.Duration(rng.IntN(int(200 * us)))
			k := rng.IntN(n)
			switch r := rng.IntN(100); {
			case r < 40:
				target[k] += uint64(rng.IntN(100))
				pc.OnTarget(now, k, uet.Credit(target[k]&uet.Units24Mask))
			case r < 45:
				pc.OnTarget(now, k, uet.Credit((target[k]-uint64(rng.IntN(50)))&uet.Units24Mask)) // old
			case r < 46:
				pc.Remove(k)
				target[k] = 0
			}
			active := pc.Stats().Active
			out = pc.Advance(now, out[:0])
			for _, g := range out {
				grants++
				if g.SlowPull {
					slows++
					if active > 0 {
						t.Fatalf("step %d: slow pull to %d with %d active sources", step, g.Key, active)
					}
				}
				if lastBytes > 0 && g.At-lastAt < grantTime(p, lastBytes) {
					t.Fatalf("step %d: grant %v after one of %d B, want ≥ %v", step, g.At-lastAt, lastBytes, grantTime(p, lastBytes))
				}
				lastAt, lastBytes = g.At, g.Bytes
			}
			for k := range n {
				st, ok := pc.Source(k)
				if !ok {
					continue
				}
				if st.TargetBytes != target[k]*256 {
					t.Fatalf("step %d: source %d target %d, sent %d", step, k, st.TargetBytes, target[k]*256)
				}
				if st.GrantedBytes > st.TargetBytes+uint64(p.SlowPullMaxBytes) {
					t.Fatalf("step %d: source %d granted %d > target %d + slow pull max %d",
						step, k, st.GrantedBytes, st.TargetBytes, p.SlowPullMaxBytes)
				}
			}
		}
		t.Logf("slow pull %v: %d grants, %d slow pulls, %+v", slow, grants, slows, pc.Stats())
		if slow != (slows > 0) {
			t.Errorf("slow pull %v: %d slow pulls", slow, slows)
		}
	}
}

// Slow pull step by step at the lab's settings (grant 64 units, slow-pull
// ceiling ⌊15 000 / 256⌋ = 58 units): a satisfied source is topped up to
// the ceiling while no one else asks, every grant taking the pacer's time.
func TestPacerSlowPull(t *testing.T) {
	p := labParams(t)
	pc := rccc.NewPacer[string](p, 0)
	var out []rccc.Grant[string]
	step := func(now time.Duration, want ...rccc.Grant[string]) {
		t.Helper()
		if e := pc.NextEvent(); len(want) > 0 && e != now {
			t.Fatalf("NextEvent %v, want %v", e, now)
		}
		out = pc.Advance(now, out[:0])
		if len(out) != len(want) {
			t.Fatalf("at %v: grants %+v, want %+v", now, out, want)
		}
		for i := range want {
			if out[i] != want[i] {
				t.Fatalf("at %v: grant %+v, want %+v", now, out[i], want[i])
			}
		}
	}
	g16, g58, g64 := grantTime(p, 4096), grantTime(p, 14848), grantTime(p, 16384)
	pc.OnTarget(0, "a", 16)
	step(0, rccc.Grant[string]{Key: "a", Credit: 16, Bytes: 4096, At: 0})
	if st, _ := pc.Source("a"); st.State != rccc.SourceSlowPull {
		t.Fatalf("a: %+v", st)
	}
	// a asked for 4096 and got it; now the pacer tops it up.
	step(g16, rccc.Grant[string]{Key: "a", Credit: 16 + 58, Bytes: 14848, SlowPull: true, At: g16})
	if st, _ := pc.Source("a"); st.State != rccc.SourceSatisfied || pc.NextEvent() != rccc.Never {
		t.Fatalf("a: %+v, next %v", st, pc.NextEvent())
	}
	// b arrives while the slow pull's time runs: it waits for it.
	pc.OnTarget(50*us, "b", 130) // two grants and 2 units
	step(50 * us)
	t1 := g16 + g58
	step(t1, rccc.Grant[string]{Key: "b", Credit: 64, Bytes: 16384, At: t1})
	// a spends 4096 of its slow credit and asks for it again: its target
	// rises by 16 units but stays within its credit, so it is back among
	// the slow pulls — served only when b is satisfied.
	pc.OnTarget(t1+1, "a", 16+16)
	if st, _ := pc.Source("a"); st.State != rccc.SourceSlowPull {
		t.Fatalf("a: %+v", st)
	}
	step(t1+g64, rccc.Grant[string]{Key: "b", Credit: 128, Bytes: 16384, At: t1 + g64})
	step(t1+2*g64, rccc.Grant[string]{Key: "b", Credit: 130, Bytes: 512, At: t1 + 2*g64})
	t2 := t1 + 2*g64 + grantTime(p, 512)
	step(t2, rccc.Grant[string]{Key: "a", Credit: 16 + 58 + 16, Bytes: 4096, SlowPull: true, At: t2})
	t3 := t2 + g16
	step(t3, rccc.Grant[string]{Key: "b", Credit: 130 + 58, Bytes: 14848, SlowPull: true, At: t3})
	if pc.NextEvent() != rccc.Never {
		t.Fatalf("next %v, want Never: both at the ceiling", pc.NextEvent())
	}
	st := pc.Stats()
	if st.Grants != 7 || st.SlowPulls != 3 || st.SlowPullBytes != 14848*2+4096 || st.GrantedBytes != 4096+14848+16384*2+512+4096+14848 {
		t.Errorf("stats %+v", st)
	}
	sa, _ := pc.Source("a")
	sb, _ := pc.Source("b")
	if sa.TargetBytes != 32*256 || sa.GrantedBytes != 90*256 || sb.TargetBytes != 130*256 || sb.GrantedBytes != 188*256 {
		t.Errorf("a %+v, b %+v", sa, sb)
	}
}

// A removed source gets nothing more; the key registered again starts
// from 0 (a new CCC).
func TestPacerRemove(t *testing.T) {
	p := labParams(t)
	p.SlowPullMaxBytes = 0
	pc := rccc.NewPacer[int](p, 0)
	for k := range 3 {
		pc.OnTarget(0, k, far)
	}
	var out []rccc.Grant[int]
	now := time.Duration(0)
	for range 3 {
		out = pc.Advance(now, out)
		now = pc.NextEvent()
	}
	pc.Remove(1)
	pc.Remove(7) // unknown: nothing
	if _, ok := pc.Granted(1); ok {
		t.Fatal("source 1 still known")
	}
	for range 4 {
		out = pc.Advance(now, out)
		now = pc.NextEvent()
	}
	var keys []int
	for _, g := range out {
		keys = append(keys, g.Key)
	}
	if want := []int{0, 1, 2, 0, 2, 0, 2}; !equal(keys, want) {
		t.Fatalf("grants to %v, want %v", keys, want)
	}
	pc.OnTarget(now, 1, 5)
	if c, ok := pc.Granted(1); !ok || c != 0 {
		t.Fatalf("re-registered: %v %v", c, ok)
	}
	st := pc.Stats()
	if st.Sources != 3 || st.Active != 3 || st.Removed != 1 {
		t.Errorf("stats %+v", st)
	}
	for range 3 {
		out = pc.Advance(now, out[:0])
		now = pc.NextEvent()
		if len(out) == 1 && out[0].Key == 1 && (out[0].Bytes != 5*256 || out[0].Credit != 5) {
			t.Fatalf("new source 1: %+v", out[0])
		}
	}
	// Removing every source idles the pacer.
	for k := range 3 {
		pc.Remove(k)
	}
	if pc.NextEvent() != rccc.Never || len(pc.Advance(now+time.Second, nil)) != 0 {
		t.Fatal("grants after every source was removed")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A late Advance makes up at most CatchUp of the schedule; idle time is
// never made up.
func TestPacerCatchUp(t *testing.T) {
	g := grantTime(labParams(t), 16384)   // 132 396 ns
	all := int(99*time.Millisecond/g) + 1 // on schedule by the last call at 99 ms: 748
	tests := []struct {
		catchUp time.Duration
		want    int // grants issued by Advance calls every 1 ms for 100 ms
	}{
		{0, 100},                // one per call: the lateness is lost
		{time.Millisecond, all}, // every one
		{300 * us, 1 + 99*3},    // per call: at now − 300 µs and two more by now
		{10 * time.Millisecond, all},
	}
	for _, tc := range tests {
		p := labParams(t)
		p.CatchUp = tc.catchUp
		pc := rccc.NewPacer[int](p, 0)
		pc.OnTarget(0, 0, far)
		var out []rccc.Grant[int]
		for now := time.Duration(0); now < 100*time.Millisecond; now += time.Millisecond {
			out = pc.Advance(now, out)
		}
		st := pc.Stats()
		t.Logf("catch-up %v: %d grants, %d caught up, %v lost", tc.catchUp, len(out), st.CaughtUp, st.Lost)
		if len(out) != tc.want {
			t.Errorf("catch-up %v: %d grants, want %d", tc.catchUp, len(out), tc.want)
		}
		if tc.catchUp >= time.Millisecond && st.Lost != 0 {
			t.Errorf("catch-up %v: lost %v", tc.catchUp, st.Lost)
		}
		if tc.catchUp == 0 && st.Lost < 99*(time.Millisecond-g) {
			t.Errorf("catch-up 0: lost only %v", st.Lost)
		}
	}
	// Idle for 10 ms, then a target: one grant at once, the next a grant
	// time later, although CatchUp is 1 ms.
	p := labParams(t)
	p.CatchUp = time.Millisecond
	pc := rccc.NewPacer[int](p, 0)
	pc.OnTarget(10*time.Millisecond, 0, far)
	out := pc.Advance(10*time.Millisecond, nil)
	if len(out) != 1 || out[0].At != 10*time.Millisecond || pc.NextEvent() != 10*time.Millisecond+g {
		t.Fatalf("after idle: %+v, next %v", out, pc.NextEvent())
	}
}

// Grants and targets wrap at 2^24 units (4 GiB): a sender and a pacer in a
// closed loop with no delay pass the wrap one and a half times and agree
// on every byte.
func TestPacerWrap(t *testing.T) {
	p := rccc.DefaultParams(100*units.Gbit, time.Millisecond, 4096) // MaxWnd 18.75 MB
	p.GrantBytes = 1 << 20
	p.SlowPullMaxBytes = 0
	s := rccc.NewSender(p, 0)
	pc := rccc.NewPacer[int](p, 0)
	var out []rccc.Grant[int]
	var wraps int
	prev := uet.Credit(0)
	now := time.Duration(0)
	const total = 6 << 30 // bytes
	for sent := 0; sent < total; {
		for s.CanSend() && sent < total {
			s.OnTransmit(now, 4096)
			sent += 4096
			pc.OnTarget(now, 0, uet.Credit(s.Target(cc.CreditDemand{Backlog: total - sent})))
		}
		if sent == total {
			break
		}
		now = pc.NextEvent()
		if now == rccc.Never {
			t.Fatalf("pacer idle with the sender out of credit (%d sent, credit %d)", sent, s.Credit())
		}
		out = pc.Advance(now, out[:0])
		for _, g := range out {
			if g.Credit < prev {
				wraps++
			}
			prev = g.Credit
			s.OnCredit(now, uint32(g.Credit))
		}
	}
	ss, ps := s.Stats(), pc.Stats()
	t.Logf("%d wraps; sender %+v; pacer %+v", wraps, ss, ps)
	// The last MaxWnd of the backlog asks for less with every packet:
	// those targets are not ahead of the highest, the pacer's stale ones.
	if wraps != 1 || ss.CreditBytes != ps.GrantedBytes || ss.StaleCredits != 0 || ss.ClampedBytes != 0 ||
		ss.SentBytes != total || ss.Overdrawn != 0 {
		t.Errorf("wraps %d; sender credit %d B, pacer granted %d B", wraps, ss.CreditBytes, ps.GrantedBytes)
	}
	if st, _ := pc.Source(0); st.GrantedBytes <= 1<<32 || st.GrantedBytes > st.TargetBytes {
		t.Errorf("source %+v", st)
	}
}

// In the steady state OnTarget and Advance allocate nothing.
func TestPacerAllocs(t *testing.T) {
	p := labParams(t)
	pc := rccc.NewPacer[uint32](p, 0)
	out := make([]rccc.Grant[uint32], 0, 16)
	var tgt [4]uet.Credit
	for k := range uint32(4) {
		pc.OnTarget(0, k, 1)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		now := pc.NextEvent()
		for k := range tgt {
			tgt[k] = (tgt[k] + 70) & uet.Units24Mask
			pc.OnTarget(now, uint32(k), tgt[k])
		}
		out = pc.Advance(now, out[:0])
	})
	if allocs != 0 {
		t.Errorf("%v allocations per step", allocs)
	}
	s := rccc.NewSender(p, 0)
	if a := testing.AllocsPerRun(1000, func() {
		s.OnTransmit(0, 4096)
		s.OnCredit(0, s.Target(cc.CreditDemand{Backlog: 1 << 20}))
	}); a != 0 {
		t.Errorf("sender: %v allocations per step", a)
	}
}
