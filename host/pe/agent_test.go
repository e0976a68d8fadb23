package pe

import (
	"errors"
	"strings"
	"testing"
	"time"

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
	a, err := New(Config{Mode: RateLimit, LineRate: 200 * units.Mbit}, lim, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(lim.rates) != 1 || lim.rates[0] != 200*units.Mbit {
		t.Fatalf("initial rates %v, want the line rate", lim.rates)
	}
	a.OnNotification(tunnel.Notification{Light: false, Time: time.Millisecond}, time.Millisecond)
	if len(lim.rates) != 1 {
		t.Fatalf("a heavy CNP changed the limiter: %v", lim.rates)
	}
	n := light
	n.Time = 10 * time.Millisecond
	a.OnNotification(n, 10*time.Millisecond+40*time.Microsecond)
	if len(lim.rates) != 2 || lim.rates[1] != 100*units.Mbit {
		t.Fatalf("after a light CNP rates %v, want a cut to 100 Mbit/s", lim.rates)
	}
	s := a.Stats()
	if s.LightCNPs != 1 || s.HeavyCNPs != 1 || len(s.Reaction) != 1 || s.Reaction[0] != 40*time.Microsecond || s.MinRate != 100*units.Mbit {
		t.Errorf("stats %+v", s)
	}
	// The RP does not coalesce (the WAN port does, per PE): a second CNP
	// cuts again, by α/2 with α near 1.
	a.OnNotification(light, 10*time.Millisecond+500*time.Microsecond)
	if len(lim.rates) != 3 || lim.rates[2] > 55*units.Mbit {
		t.Errorf("after a second CNP rates %v, want a second cut to about 50 Mbit/s", lim.rates)
	}
	// The timers bring it back to the line rate within a second.
	for now := 11 * time.Millisecond; now < time.Second; now += time.Millisecond {
		a.Advance(now)
	}
	if last := lim.rates[len(lim.rates)-1]; last < 195*units.Mbit {
		t.Errorf("after 1 s without CNPs the limiter is at %v, want back near 200 Mbit/s (rates %v)", last, lim.rates)
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
	a, err := New(Config{Mode: Reroute, RerouteHold: 20 * time.Millisecond}, nil, paths, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.OnNotification(tunnel.Notification{Light: true, Time: 900 * time.Microsecond}, 1*time.Millisecond)
	a.OnNotification(light, 5*time.Millisecond)
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
		{Config{Mode: Reroute}, nil, nil, "reroute mode needs paths"},
		{Config{Mode: 9}, nil, nil, "mode (mode(9))"},
		{Config{MinChange: 2}, nil, nil, "min_change (2)"},
		{Config{Mode: RateLimit, LineRate: units.Gbit}, &fakeLimiter{fail: true}, nil, "initial rate: netlink: no"},
	} {
		if _, err := New(c.cfg, c.lim, c.path, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}
