// Package pe is the tunnel-ingress PE's agent (seed 001; issue 13 §4): it
// takes the WAN ports' congestion notifications that the PE's eBPF programs
// (qdisc/tunnel) receive and reacts to light congestion without telling the
// senders: it slows the tunnel down (a rate limiter on the PE's WAN device
// driven by a DCQCN reaction point, cc.RateController) or spills the
// tunnel's flows onto a second WAN path. Heavy congestion is handled in the
// data path too (the encapsulation marks CE inside, tunnel.Config.HeavyHold);
// a rate-limiting agent cuts on it as well, so that its timers never raise
// the tunnel past a WAN port at T2.
//
// The agent is a state machine on an injected clock (OnNotification,
// Advance, NextEvent); Run drives it from a PE's ring buffer on the real
// clock.
package pe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/qdisc/enum"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Mode is how the PE reacts to light congestion.
type Mode int

const (
	// Observe only counts notifications (scheme (a): end-to-end only).
	Observe Mode = iota
	// RateLimit cuts the tunnel's rate on each light CNP as a DCQCN RP
	// would, and raises it again on the RP's timers.
	RateLimit
	// Reroute spreads the tunnel's flows over the second WAN path on a
	// light CNP, and returns them to the first after RerouteHold without
	// one.
	Reroute
)

var modeNames = enum.Names{Observe: {"observe", "none"}, RateLimit: {"rate", "rate-limit"}, Reroute: {"reroute"}}

func (m Mode) String() string { return enum.String(m, modeNames, "mode") }

// ParseMode reads "observe", "rate" or "reroute".
func ParseMode(s string) (Mode, error) { return enum.Parse[Mode](s, modeNames, "pe mode") }

// Limiter sets the rate the tunnel may leave the PE at.
type Limiter interface {
	SetRate(units.Rate) error
}

// Paths moves the tunnel's flows: spill spreads them over both WAN paths,
// !spill keeps them on the first.
type Paths interface {
	Spill(spill bool) error
}

// Config is the agent's policy.
type Config struct {
	Mode Mode
	// Controller drives the limiter in RateLimit mode; nil means a DCQCN
	// RP (WANParams) for LineRate, RTT and MinRate.
	Controller cc.RateController
	// LineRate is the WAN rate the limiter starts at (RateLimit).
	LineRate units.Rate
	// MinRate is the least rate the limiter is cut to. 0 means LineRate/10.
	MinRate units.Rate
	// RTT is the WAN's round trip: the default controller's timers scale
	// to it, and a light CNP within RTT of the last cut is coalesced (the
	// cut cannot have reached the WAN port yet). 0 means 10 ms.
	RTT time.Duration
	// MinChange is the least relative rate change that is applied to the
	// limiter (each change is a netlink round trip); 0 means 1 %.
	MinChange float64
	// RerouteHold is how long the flows stay spread after the last light
	// CNP (Reroute); 0 means 50 ms.
	RerouteHold time.Duration
	// OnReaction, if set, takes each reaction time (Stats.Reaction's
	// samples) instead of Stats, which then keeps none: an agent that runs
	// for days (fabriclabd) keeps a histogram, not every sample. It is
	// called with the agent's lock held.
	OnReaction func(time.Duration)
}

const (
	defaultMinChange   = 0.01
	defaultRerouteHold = 50 * time.Millisecond
	defaultRTT         = 10 * time.Millisecond
)

// WANParams is the tunnel's DCQCN reaction point: the lab profile
// (dcqcn.LabParams) with its timers, the rate-increase timer T and the α
// timer K, at the WAN's round trip, since a cut takes an RTT to show at the
// WAN port (the paper's 55 µs timers assume a data-centre RTT); Rmin at
// minRate; no rate validation (the PE does not count the tunnel's bytes).
func WANParams(lineRate, minRate units.Rate, rtt time.Duration) dcqcn.Params {
	p := dcqcn.LabParams(lineRate)
	p.RPGTimeReset = rtt
	p.DCETCPRTT = rtt
	p.RPGMinRate = minRate
	p.RateValidation = 0
	return p
}

// Stats are what the agent did.
type Stats struct {
	LightCNPs uint64 `json:"light_cnps"`
	HeavyCNPs uint64 `json:"heavy_cnps"`
	// Coalesced counts light CNPs within an RTT of the last cut.
	Coalesced uint64 `json:"coalesced"`
	// RateUpdates counts limiter changes; Rate is the last rate set,
	// MinRate the least.
	RateUpdates uint64     `json:"rate_updates"`
	Rate        units.Rate `json:"rate"`
	MinRate     units.Rate `json:"min_rate"`
	// Spills and Unspills count path moves.
	Spills   uint64 `json:"spills"`
	Unspills uint64 `json:"unspills"`
	Spilled  bool   `json:"spilled"`
	Errors   uint64 `json:"errors"`
	// Reaction is, per light CNP that changed the limiter or the paths,
	// the time from the CNP's arrival at the PE's device to the change
	// being in place.
	Reaction []time.Duration `json:"reaction_ns,omitempty"`
	// FirstAction is when the first such change was in place (the
	// agent's clock; 0: none yet).
	FirstAction time.Duration `json:"first_action_ns,omitempty"`
}

// Agent reacts to one tunnel's notifications.
type Agent struct {
	cfg     Config
	limiter Limiter
	paths   Paths
	rc      cc.RateController
	clock   engine.Clock

	mu         sync.Mutex
	stats      Stats
	applied    units.Rate
	lastCut    time.Duration
	cut        bool
	spillUntil time.Duration
	lastErr    error
}

// New makes an agent on clock (Monotonic for the PE's BPF timestamps).
// RateLimit needs a limiter (and LineRate unless a Controller is given),
// Reroute needs paths.
func New(cfg Config, limiter Limiter, paths Paths, clock engine.Clock) (*Agent, error) {
	now := clock.Now()
	if cfg.RTT == 0 {
		cfg.RTT = defaultRTT
	}
	if cfg.MinRate == 0 {
		cfg.MinRate = cfg.LineRate / 10
	}
	if cfg.MinChange == 0 {
		cfg.MinChange = defaultMinChange
	}
	if cfg.RerouteHold == 0 {
		cfg.RerouteHold = defaultRerouteHold
	}
	if cfg.MinChange < 0 || cfg.MinChange >= 1 {
		return nil, fmt.Errorf("pe: min_change (%v): want 0 to 1 (0: 1 %%)", cfg.MinChange)
	}
	if cfg.RerouteHold < 0 {
		return nil, fmt.Errorf("pe: reroute_hold (%v): want 0 (50 ms) or more", cfg.RerouteHold)
	}
	if cfg.RTT < 0 {
		return nil, fmt.Errorf("pe: rtt (%v): want the WAN round trip, or 0 (10 ms)", cfg.RTT)
	}
	a := &Agent{cfg: cfg, limiter: limiter, paths: paths, clock: clock}
	switch cfg.Mode {
	case Observe:
	case RateLimit:
		if limiter == nil {
			return nil, errors.New("pe: rate mode needs a limiter")
		}
		a.rc = cfg.Controller
		if a.rc == nil {
			if cfg.LineRate <= 0 {
				return nil, fmt.Errorf("pe: line_rate (%v): want the WAN rate the limiter starts at", cfg.LineRate)
			}
			if cfg.MinRate <= 0 || cfg.MinRate > cfg.LineRate {
				return nil, fmt.Errorf("pe: min_rate (%v): want above 0 and at most line_rate (%v)", cfg.MinRate, cfg.LineRate)
			}
			p := WANParams(cfg.LineRate, cfg.MinRate, cfg.RTT)
			if err := p.Validate(); err != nil {
				return nil, fmt.Errorf("pe: %w", err)
			}
			a.rc = dcqcn.NewRP(p, now)
		}
		a.stats.MinRate = a.rc.Rate()
		if err := a.setRate(a.rc.Rate()); err != nil {
			return nil, fmt.Errorf("pe: initial rate: %w", err)
		}
	case Reroute:
		if paths == nil {
			return nil, errors.New("pe: reroute mode needs paths")
		}
	default:
		return nil, fmt.Errorf("pe: mode (%v): want observe, rate or reroute", cfg.Mode)
	}
	return a, nil
}

func (a *Agent) setRate(r units.Rate) error {
	if err := a.limiter.SetRate(r); err != nil {
		a.stats.Errors++
		a.lastErr = err
		return err
	}
	a.applied = r
	a.stats.Rate = r
	a.stats.RateUpdates++
	a.stats.MinRate = min(a.stats.MinRate, r)
	return nil
}

// changed reports whether r differs from the applied rate by MinChange.
func (a *Agent) changed(r units.Rate) bool {
	d := float64(r) - float64(a.applied)
	return d*d > a.cfg.MinChange*a.cfg.MinChange*float64(a.applied)*float64(a.applied)
}

// OnNotification takes one WAN CNP that reached the PE at n.Time (on the
// agent's clock). The reaction time runs from then until the limiter or
// the paths are changed.
func (a *Agent) OnNotification(n tunnel.Notification) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	if n.Light {
		a.stats.LightCNPs++
	} else {
		a.stats.HeavyCNPs++
		// The data path marks inside on heavy congestion; a rate
		// limiter must not let its timers raise the tunnel past the
		// WAN meanwhile: heavy CNPs cut it as light ones do. Paths are
		// spilled on light congestion only.
		if a.cfg.Mode != RateLimit {
			return
		}
	}
	reacted := false
	switch a.cfg.Mode {
	case RateLimit:
		if a.cut && now-a.lastCut < a.cfg.RTT {
			a.stats.Coalesced++
			return
		}
		a.rc.Advance(now)
		if a.rc.OnNotification(now) {
			a.cut, a.lastCut = true, now
			if a.changed(a.rc.Rate()) {
				reacted = a.setRate(a.rc.Rate()) == nil
			}
		}
	case Reroute:
		if !a.stats.Spilled {
			if err := a.paths.Spill(true); err != nil {
				a.stats.Errors++
				a.lastErr = err
			} else {
				a.stats.Spilled = true
				a.stats.Spills++
				reacted = true
			}
		}
		a.spillUntil = now + a.cfg.RerouteHold
	}
	if reacted {
		done := a.clock.Now()
		if a.stats.FirstAction == 0 {
			a.stats.FirstAction = done
		}
		if n.Time > 0 {
			if r := max(done-n.Time, 0); a.cfg.OnReaction != nil {
				a.cfg.OnReaction(r)
			} else {
				a.stats.Reaction = append(a.stats.Reaction, r)
			}
		}
	}
}

// Advance runs the timers due by now: the controller's increases, the end
// of a spill.
func (a *Agent) Advance(now time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.cfg.Mode {
	case RateLimit:
		a.rc.Advance(now)
		if a.changed(a.rc.Rate()) {
			a.setRate(a.rc.Rate())
		}
	case Reroute:
		if a.stats.Spilled && now >= a.spillUntil {
			if err := a.paths.Spill(false); err != nil {
				a.stats.Errors++
				a.lastErr = err
				return
			}
			a.stats.Spilled = false
			a.stats.Unspills++
		}
	}
}

// NextEvent is when Advance next has something to do.
func (a *Agent) NextEvent() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.cfg.Mode {
	case RateLimit:
		return a.rc.NextEvent()
	case Reroute:
		if a.stats.Spilled {
			return a.spillUntil
		}
	}
	return never
}

const never = time.Duration(1<<63 - 1)

// Stats returns a copy of the counters.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Reaction = slices.Clone(s.Reaction)
	return s
}

// Err is the last limiter or path error, if any.
func (a *Agent) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr
}

// Monotonic is CLOCK_MONOTONIC, the clock of the PE's BPF timestamps
// (bpf_ktime_get_ns).
type Monotonic struct{}

var _ engine.Clock = Monotonic{}

// Now implements engine.Clock.
func (Monotonic) Now() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// Run drives the agent from pe's notifications until ctx ends; the agent's
// clock must be Monotonic. One goroutine reads the CNPs and keeps the
// timers: no hand-off between goroutines for a CNP to wait on. (Real-time
// priority for it made reactions slower here, 5-10 ms against 1-2: the
// HTB change it waits for is kernel work its priority holds back.)
func (a *Agent) Run(ctx context.Context, pe *tunnel.PE) error {
	rd, err := pe.NotificationReader()
	if err != nil {
		return err
	}
	defer rd.Close()
	stop := context.AfterFunc(ctx, func() { rd.Close() })
	defer stop()
	// Warm up: the first limiter change (its first netlink socket in the
	// namespace) took 7 ms, not 1.
	a.mu.Lock()
	if a.cfg.Mode == RateLimit {
		_ = a.limiter.SetRate(a.applied)
	}
	a.mu.Unlock()
	for {
		now := a.clock.Now()
		a.Advance(now)
		wait := 100 * time.Millisecond
		if next := a.NextEvent(); next != never {
			wait = min(max(next-now, 50*time.Microsecond), wait)
		}
		n, ok, err := rd.Next(time.Now().Add(wait))
		if errors.Is(err, os.ErrClosed) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if ok {
			a.OnNotification(n)
		}
	}
}
