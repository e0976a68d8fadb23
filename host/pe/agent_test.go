package pe

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

type fakeLimiter struct {
	rates []units.Rate
	fail  bool
}

func (f *fakeLimiter) SetRate(r units.Rate) error {
	if f.fail {
		return errors.New("netlink: no")
	}
	f.rates = append(f.rates, r)
	return nil
}

type fakePaths struct{ moves []bool }

func (f *fakePaths) Spill(on bool) error { f.moves = append(f.moves, on); return nil }

var light = tunnel.Notification{Light: true}

// TestRateLimitAgent: the limiter starts at the line rate, a light CNP cuts
// it as DCQCN's first cut does (α = 1: by half), the RP's timers raise it
// back, heavy CNPs change nothing, and the reaction time is the handling
// time less the CNP's arrival.
func TestRateLimitAgent(t *testing.T) {
	lim := &fakeLimiter{}
	clock := engine.NewFakeClock(0)
	a, err := New(Config{Mode: RateLimit, LineRate: 200 * units.Mbit, RTT: 10 * time.Millisecond}, lim, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	if len(lim.rates) != 1 || lim.rates[0] != 200*units.Mbit {
		t.Fatalf("initial rates %v, want the line rate", lim.rates)
	}

	n := light
	n.Time = 10 * time.Millisecond
	clock.Set(10*time.Millisecond + 40*time.Microsecond)
	a.OnNotification(n)
	if len(lim.rates) != 2 || lim.rates[1] != 100*units.Mbit {
		t.Fatalf("after a light CNP rates %v, want a cut to 100 Mbit/s", lim.rates)
	}
	s := a.Stats()
	if s.LightCNPs != 1 || s.HeavyCNPs != 0 || len(s.Reaction) != 1 || s.Reaction[0] != 40*time.Microsecond || s.MinRate != 100*units.Mbit ||
		s.FirstAction != 10*time.Millisecond+40*time.Microsecond {
		t.Errorf("stats %+v", s)
	}
	// Within an RTT of the cut a CNP is coalesced: the cut has not
	// reached the WAN port yet. After it, the next one cuts again (from
	// 150 Mbit/s: T = RTT brought one fast-recovery step, by α/2).
	clock.Set(15 * time.Millisecond)
	a.OnNotification(light)
	if len(lim.rates) != 2 || a.Stats().Coalesced != 1 {
		t.Errorf("a CNP 5 ms after the cut: rates %v, coalesced %d; want no change, 1", lim.rates, a.Stats().Coalesced)
	}
	clock.Set(21 * time.Millisecond)
	a.OnNotification(light)
	if len(lim.rates) != 3 || lim.rates[2] > 80*units.Mbit {
		t.Errorf("after a second CNP past the RTT rates %v, want a second cut to about 75 Mbit/s", lim.rates)
	}
	// The timers bring it back to the line rate within a second.
	for now := 22 * time.Millisecond; now < 3*time.Second; now += time.Millisecond {
		clock.Set(now)
		a.Advance(now)
	}
	if last := lim.rates[len(lim.rates)-1]; last < 195*units.Mbit {
		t.Errorf("after 3 s without CNPs the limiter is at %v, want back near 200 Mbit/s (rates %v)", last, lim.rates)
	}
	for i := 3; i < len(lim.rates); i++ {
		if d := float64(lim.rates[i]) - float64(lim.rates[i-1]); d < 0 {
			t.Errorf("rate fell without a CNP: %v -> %v", lim.rates[i-1], lim.rates[i])
		}
	}
}

// TestRerouteAgent: a light CNP spills the flows onto the second path once,
// CNPs keep them there, RerouteHold after the last one they return.
func TestRerouteAgent(t *testing.T) {
	paths := &fakePaths{}
	clock := engine.NewFakeClock(0)
	a, err := New(Config{Mode: Reroute, RerouteHold: 20 * time.Millisecond}, nil, paths, clock)
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(time.Millisecond)
	a.OnNotification(tunnel.Notification{Light: true, Time: 900 * time.Microsecond})
	clock.Set(5 * time.Millisecond)
	a.OnNotification(light)
	a.Advance(20 * time.Millisecond)
	if len(paths.moves) != 1 || !paths.moves[0] {
		t.Fatalf("moves %v, want one spill", paths.moves)
	}
	if next := a.NextEvent(); next != 25*time.Millisecond {
		t.Errorf("next event %v, want 25ms (20 ms after the last CNP)", next)
	}
	a.Advance(25 * time.Millisecond)
	if len(paths.moves) != 2 || paths.moves[1] {
		t.Fatalf("moves %v, want the spill undone", paths.moves)
	}
	if s := a.Stats(); s.Spills != 1 || s.Unspills != 1 || s.Spilled || len(s.Reaction) != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestAgentConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		lim  Limiter
		path Paths
		want string
	}{
		{Config{Mode: RateLimit, LineRate: units.Gbit}, nil, nil, "rate mode needs a limiter"},
		{Config{Mode: RateLimit}, &fakeLimiter{}, nil, "line_rate (0"},
		{Config{Mode: RateLimit, LineRate: units.Gbit, MinRate: 2 * units.Gbit}, &fakeLimiter{}, nil, "min_rate (2gbit)"},
		{Config{Mode: Reroute}, nil, nil, "reroute mode needs paths"},
		{Config{Mode: 9}, nil, nil, "mode (mode(9))"},
		{Config{MinChange: 2}, nil, nil, "min_change (2)"},
		{Config{Mode: RateLimit, LineRate: units.Gbit}, &fakeLimiter{fail: true}, nil, "initial rate: netlink: no"},
	} {
		if _, err := New(c.cfg, c.lim, c.path, engine.NewFakeClock(0)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestRateLimitAgentHeavy: a heavy CNP cuts the limiter as a light one
// does (the timers must not raise the tunnel past a WAN at T2), coalesced
// within the RTT alike; in reroute mode it moves nothing.
func TestRateLimitAgentHeavy(t *testing.T) {
	lim := &fakeLimiter{}
	clock := engine.NewFakeClock(0)
	a, err := New(Config{Mode: RateLimit, LineRate: 200 * units.Mbit, RTT: 10 * time.Millisecond}, lim, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(time.Millisecond)
	a.OnNotification(tunnel.Notification{Time: time.Millisecond})
	clock.Set(2 * time.Millisecond)
	a.OnNotification(tunnel.Notification{Light: true, Time: 2 * time.Millisecond})
	if s := a.Stats(); len(lim.rates) != 2 || lim.rates[1] != 100*units.Mbit || s.HeavyCNPs != 1 || s.Coalesced != 1 {
		t.Errorf("rates %v, stats %+v: want one cut to 100 Mbit/s by the heavy CNP, the light one coalesced", lim.rates, s)
	}
	paths := &fakePaths{}
	r, err := New(Config{Mode: Reroute}, nil, paths, clock)
	if err != nil {
		t.Fatal(err)
	}
	r.OnNotification(tunnel.Notification{Time: time.Millisecond})
	if len(paths.moves) != 0 {
		t.Errorf("a heavy CNP moved paths: %v", paths.moves)
	}
}

// TestOnReaction: with OnReaction the reaction times go to the hook and
// Stats keeps none (an agent that runs for days).
func TestOnReaction(t *testing.T) {
	var got []time.Duration
	clock := engine.NewFakeClock(0)
	a, err := New(Config{Mode: RateLimit, LineRate: 200 * units.Mbit, RTT: 10 * time.Millisecond,
		OnReaction: func(r time.Duration) { got = append(got, r) }}, &fakeLimiter{}, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	n := light
	n.Time = 10 * time.Millisecond
	clock.Set(10*time.Millisecond + 40*time.Microsecond)
	a.OnNotification(n)
	if s := a.Stats(); len(got) != 1 || got[0] != 40*time.Microsecond || len(s.Reaction) != 0 || s.RateUpdates != 2 {
		t.Errorf("hook got %v, stats kept %v (%d rate updates); want [40µs] in the hook alone", got, s.Reaction, s.RateUpdates)
	}
}
