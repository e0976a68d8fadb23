package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/labfile"
	peagent "github.com/fabriclab/fabriclab/host/pe"
)

// tunnelAgent runs a lab file's PE agent (host/pe) on its tunnel's
// notifications, as fabriclab run does in namespaces. A rate agent drives
// the limiter port on the PE's WAN device (a shaped virtual-queue port
// here: the machine's NIC runs at its own speed); a reroute agent moves
// this machine's routes to the other data centre. The peer PE's routes
// are its own machine's: its return path stays on path 1.
type tunnelAgent struct {
	dev  string
	mode peagent.Mode
	ag   *peagent.Agent
	// limiter is the port a rate agent drives (its PortConfig key).
	limiter string
	paths   *ownPaths
	stop    context.CancelFunc
	done    chan struct{}
	// starts is how many agents this daemon started on dev, this one
	// included: a reload that restarts the agent shows.
	starts uint64

	mu       sync.Mutex
	reaction histogram // seconds
	err      error     // Run's, once done is closed
}

// ownPaths is a reroute agent's peagent.Paths on a machine: its own
// routes, spread over every WAN path (spill) or over path 1.
type ownPaths struct {
	spec           lab.Spec
	spill, unspill []lab.RouteSpec
}

func (p *ownPaths) Spill(spill bool) error {
	routes := p.unspill
	if spill {
		routes = p.spill
	}
	var errs []error
	for _, rs := range routes {
		errs = append(errs, lab.ApplyRoute(p.spec, rs))
	}
	return errors.Join(errs...)
}

// limiterKey is the PortConfig key of a rate agent's limiter: the lab
// file's port on the PE's WAN device, in the daemon's namespace.
func limiterKey(pl labfile.PEPlan) string { return PortConfig{Dev: pl.Dev}.key() }

// startAgent starts x's agent on the running ports (the daemon's lock held).
func (d *Daemon) startAgent(x *pe, dep *labfile.Deployment) error {
	pl := x.plan
	cfg := *pl.Agent
	ta := &tunnelAgent{dev: pl.Dev, mode: cfg.Mode, done: make(chan struct{})}
	cfg.OnReaction = func(r time.Duration) {
		ta.mu.Lock()
		ta.reaction.observe(reactionBounds, r.Seconds())
		ta.mu.Unlock()
	}
	var lim peagent.Limiter
	switch cfg.Mode {
	case peagent.RateLimit:
		ta.limiter = limiterKey(pl)
		p, ok := d.ports[ta.limiter]
		if !ok {
			return fmt.Errorf("no limiter port on %s", pl.Dev)
		}
		lim = peagent.PortLimiter{Port: p.p}
	case peagent.Reroute:
		ta.paths = &ownPaths{spec: dep.Plan.Spec, spill: labfile.OwnRoutes(pl.Spill, dep.Node.Name), unspill: labfile.OwnRoutes(pl.Unspill, dep.Node.Name)}
		// Path 1 first: a daemon killed while spilled left the routes
		// spread (replacing a route is idempotent).
		if err := ta.paths.Spill(false); err != nil {
			return fmt.Errorf("routes to path 1: %w", err)
		}
	}
	var paths peagent.Paths
	if ta.paths != nil {
		paths = ta.paths
	}
	ag, err := peagent.New(cfg, lim, paths, peagent.Monotonic{})
	if err != nil {
		return err
	}
	ta.ag = ag
	ctx, cancel := context.WithCancel(context.Background())
	ta.stop = cancel
	log := d.log.With("pe", pl.Dev, "mode", cfg.Mode.String())
	go func() {
		defer close(ta.done)
		var err error
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("panic: %v", v)
			}
			if err != nil && ctx.Err() == nil {
				log.Error("pe agent stopped", "err", err)
				ta.restore(log)
			}
			ta.mu.Lock()
			ta.err = err
			ta.mu.Unlock()
		}()
		err = ag.Run(ctx, x.t)
	}()
	d.agentStarts[pl.Dev]++
	ta.starts = d.agentStarts[pl.Dev]
	x.agent = ta
	log.Info("pe agent runs", "line_rate", cfg.LineRate.String(), "rtt", cfg.RTT.String())
	return nil
}

// close stops the agent and puts back what it moved.
func (ta *tunnelAgent) close(log *slog.Logger) {
	ta.stop()
	<-ta.done
	ta.restore(log)
}

// restore puts a reroute agent's routes back on path 1, whatever its
// stats say (a spill that failed half-way moved some); a rate agent's
// limiter is the port's, reset or detached by whoever owns it.
func (ta *tunnelAgent) restore(log *slog.Logger) {
	if ta.paths == nil {
		return
	}
	if err := ta.paths.Spill(false); err != nil {
		log.Warn("pe agent: routes back to path 1", "pe", ta.dev, "err", err)
	}
}

// failure is why the agent stopped early ("" while it runs).
func (ta *tunnelAgent) failure() string {
	select {
	case <-ta.done:
	default:
		return ""
	}
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.err == nil {
		return "stopped"
	}
	return ta.err.Error()
}
