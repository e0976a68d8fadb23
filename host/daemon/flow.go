package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/tcpflow"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
	"github.com/prometheus/client_golang/prometheus"
)

// flow runs one FlowConfig: its client runs, one after the other.
type flow struct {
	spec   FlowConfig
	cc     perf.ClientConfig // rocev2, uet
	tcp    *tcpflow.Conn     // tcp, its CC as the config names it
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	state    string
	runs     uint64
	failures uint64
	lastErr  string
	bytes    uint64 // acknowledged payload of finished runs
	lastBps  float64
	agent    *agent.Agent  // the run in progress (rocev2)
	ep       *pds.Endpoint // the run in progress (uet)
	senders  []*pds.Sender // its PDCs
	// tcp: the finished runs' retransmitted segments, CE-echoed
	// segments, and runs whose connection did not negotiate ECN.
	tcpRetransmits, tcpDeliveredCE, tcpNoECN uint64
	tcpCC                                    string // the kernel's name
	// Sized runs that delivered their size: FCT, and FCT against the
	// ideal (a lab file's flows); runs that missed their every slot.
	fct, fctRatio histogram
	late          uint64
}

// Histogram bounds: FCT from 50 µs to about 105 s (doubling), FCT/ideal,
// a PE agent's reaction from 10 µs to about 5 s (doubling).
var (
	fctBounds      = prometheus.ExponentialBuckets(50e-6, 2, 22)
	ratioBounds    = []float64{1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100, 1000}
	reactionBounds = prometheus.ExponentialBuckets(10e-6, 2, 20)
)

// histogram counts observations per bound (the last: above every bound).
type histogram struct {
	counts []uint64
	sum    float64
	n      uint64
}

func (h *histogram) observe(bounds []float64, v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(bounds)+1)
	}
	i, _ := slices.BinarySearch(bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

// cumulative is the histogram as Prometheus takes it: upper bound to the
// count at or below it.
func (h *histogram) cumulative(bounds []float64) map[float64]uint64 {
	out := make(map[float64]uint64, len(bounds))
	var cum uint64
	for i, b := range bounds {
		if h.counts != nil {
			cum += h.counts[i]
		}
		out[b] = cum
	}
	return out
}

// series is a lab file's flow as its sender's daemon runs it: a cycle of
// Count runs, Every apart or Pause after each, sizes drawn per cycle from
// the file's seed (cycle 0 as the file's first run in namespaces draws
// them); a plain flow's cycle is one run of its size.
type series struct {
	plan *labfile.FlowPlan
	seed uint64
}

func (s *series) count() int {
	if s == nil {
		return 1
	}
	return max(s.plan.Flow.Count, 1)
}

func (s *series) sizes(cycle int) []uint64 {
	if s == nil {
		return nil
	}
	return labfile.DrawSizes(s.plan.Flow, s.seed+uint64(cycle), s.plan.Index)
}

// gap is the wait before run k (k >= 1) of a cycle that started at t0,
// and whether the run is late for its every slot.
func (s *series) gap(k int, t0 time.Time) (time.Duration, bool) {
	fl := s.plan.Flow
	if fl.Every == 0 {
		return fl.Pause, false
	}
	w := time.Until(t0.Add(time.Duration(k) * fl.Every))
	return max(w, 0), w < -time.Millisecond
}

// runResult is one client run's outcome.
type runResult struct {
	reported bool // bytes and bps are the run's
	bytes    uint64
	bps      float64
	elapsed  time.Duration // a sized run's FCT, when it delivered its size
	err      error
}

// startFlow runs a rocev2 or uet flow's perf client.
func (d *Daemon) startFlow(f FlowConfig, cc perf.ClientConfig) *flow {
	fl := &flow{spec: f, cc: cc}
	log := d.log.With("flow", f.Name)
	cc.Logger = log
	cc.OnAgent = func(a *agent.Agent) { fl.set(func() { fl.agent = a }) }
	cc.OnEndpoint = func(ep *pds.Endpoint) { fl.set(func() { fl.ep = ep }) }
	cc.OnSenders = func(s []*pds.Sender) { fl.set(func() { fl.senders = s }) }
	d.runFlow(fl, log, func(ctx context.Context, size uint64) runResult {
		c := cc
		if size != 0 {
			c.Bytes, c.Duration = size, 0
		}
		r, err := perf.RunClient(ctx, c)
		fl.set(func() { fl.agent, fl.ep, fl.senders = nil, nil, nil })
		if r == nil {
			return runResult{err: err}
		}
		res := runResult{reported: true, bytes: r.End.SumReceived.Bytes, bps: r.End.SumReceived.BitsPerSecond, err: err}
		if s := r.End.SumSent; c.Bytes != 0 && err == nil && !r.Interrupted && s.Bytes >= c.Bytes {
			res.elapsed = time.Duration(s.Seconds * float64(time.Second))
		}
		return res
	})
	return fl
}

// startTCPFlow runs a tcp flow's connections (host/tcpflow); conn.CC is
// resolved to the kernel's name here (the BPF DCTCP where it has none).
func (d *Daemon) startTCPFlow(f FlowConfig, conn tcpflow.Conn) *flow {
	fl := &flow{spec: f, tcp: &conn}
	log := d.log.With("flow", f.Name)
	d.runFlow(fl, log, func(ctx context.Context, size uint64) runResult {
		c := conn
		if size != 0 {
			c.Size, c.Duration = size, 0
		}
		cc, err := d.resolveCC(conn.CC)
		if err != nil {
			return runResult{err: err}
		}
		c.CC = cc
		rep, err := tcpflow.Run(ctx, nil, c, nil)
		if rep.Elapsed == 0 {
			return runResult{err: err}
		}
		fl.set(func() {
			fl.tcpRetransmits += rep.Retransmits
			fl.tcpDeliveredCE += rep.DeliveredCE
			fl.tcpCC = rep.CC
			if !rep.ECN {
				fl.tcpNoECN++
			}
		})
		res := runResult{reported: true, bytes: rep.Delivered, bps: float64(rep.Delivered) * 8 / rep.Elapsed.Seconds(), err: err}
		if c.Size != 0 && err == nil && rep.Delivered >= c.Size {
			res.elapsed = rep.Elapsed
		}
		return res
	})
	return fl
}

// resolveCC is a tcp congestion control's kernel name.
func (d *Daemon) resolveCC(cc string) (string, error) {
	name, registered, err := d.tcpCCs.Resolve(cc)
	if registered {
		d.log.Info("tcp: the kernel has no dctcp; the BPF DCTCP registered", "name", name)
	}
	return name, err
}

// runFlow runs fl's client runs: Start after now, a cycle of runs (a
// series' Count, else one), then Pause apart while it repeats, until it
// is stopped. An every series keeps its grid: the next cycle starts Pause
// after the slot that follows its last run, however long that run took.
// Until a run first succeeds (the receiver's daemon may start later than
// this one), a failed run is followed by DefaultFlowPause, not by the
// series' gap: a short pause must not fail a whole cycle at start.
func (d *Daemon) runFlow(fl *flow, log *slog.Logger, run func(ctx context.Context, size uint64) runResult) {
	f := fl.spec
	ctx, cancel := context.WithCancel(context.Background())
	fl.cancel, fl.done, fl.state = cancel, make(chan struct{}), "waiting"
	log.Info("flow started", "server", f.Server, "transport", f.Transport, "start", f.Start.String(), "count", f.series.count())
	sleep := func(d time.Duration) bool {
		if d <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	go func() {
		defer close(fl.done)
		wait := f.Start
		succeeded := false
		for cycle := 0; ; cycle++ {
			if !sleep(wait) {
				return
			}
			sizes, t0 := f.series.sizes(cycle), time.Now()
			var err error
			backoff := false // the last run failed before any succeeded
			for k := range f.series.count() {
				late := false
				if k > 0 {
					var gap time.Duration
					gap, late = f.series.gap(k, t0)
					if backoff {
						gap, late = max(gap, DefaultFlowPause), false
					}
					fl.set(func() { fl.state = "pausing" })
					if !sleep(gap) {
						return
					}
					if backoff {
						// The grid moves with the wait: run k is due now,
						// the rest every slot after it (none late for it).
						t0 = time.Now().Add(-time.Duration(k) * f.series.plan.Flow.Every)
					}
				}
				var size uint64
				if sizes != nil {
					size = sizes[k]
				}
				fl.set(func() { fl.state = "running" })
				r := run(ctx, size)
				fl.record(ctx, r, size, late)
				if ctx.Err() != nil {
					return
				}
				backoff = r.err != nil && !succeeded
				if r.err != nil {
					err = r.err
					log.Warn("flow run failed", "err", r.err)
				} else {
					succeeded = true
					log.Info("flow run done", "bytes", r.bytes, "bits_per_second", r.bps, "fct_seconds", r.elapsed.Seconds())
				}
			}
			if !f.Repeat {
				fl.set(func() {
					fl.state = "done"
					if err != nil {
						fl.state = "failed"
					}
				})
				return
			}
			fl.set(func() { fl.state = "pausing" })
			wait = f.Pause
			if s := f.series; s != nil && s.plan.Flow.Every > 0 {
				g, _ := s.gap(s.count(), t0) // to the slot after the last
				wait += g
			}
		}
	}()
}

// record adds a run's outcome to the flow's counters.
func (fl *flow) record(ctx context.Context, r runResult, size uint64, late bool) {
	fl.set(func() {
		fl.runs++
		fl.bytes += r.bytes
		if r.reported {
			fl.lastBps = r.bps
		}
		if late {
			fl.late++
		}
		if r.err != nil && ctx.Err() == nil {
			fl.failures++
			fl.lastErr = r.err.Error()
		}
		if r.elapsed > 0 {
			fl.fct.observe(fctBounds, r.elapsed.Seconds())
			if s := fl.spec.series; s != nil {
				if ideal := s.plan.IdealFCT(size); ideal > 0 {
					fl.fctRatio.observe(ratioBounds, r.elapsed.Seconds()/ideal.Seconds())
				}
			}
		}
	})
}

func (fl *flow) set(f func()) {
	fl.mu.Lock()
	f()
	fl.mu.Unlock()
}

// stop ends the run in progress (its report is taken) and waits for it.
func (fl *flow) stop() {
	fl.cancel()
	<-fl.done
}

func (fl *flow) health() FlowHealth {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return FlowHealth{Name: fl.spec.Name, State: fl.state, Runs: fl.runs, Failures: fl.failures, LastError: fl.lastErr}
}

// Ports this daemon attached are recorded under qdisc.MetaRoot, so that a
// daemon restarted after SIGKILL detaches its own leftovers and never a
// port somebody attached with portctl.
var ownedDir = filepath.Join(filepath.Dir(qdisc.MetaRoot), "fabriclabd")

// OwnershipMark is the file that says a fabriclabd attached pc's port, from
// the attach until the daemon detaches it (a killed daemon's stays for its
// restart). It names the namespace by its inode, as the port's own pins do
// (qdisc/pinning): daemons in two namespaces may both have an eth0, and
// neither may take the other's mark for its own (one daemon's exit removed
// the other's; a restart detached a port portctl had attached next door).
// Netns "" is the caller's namespace.
func OwnershipMark(pc PortConfig) (string, error) {
	ns, err := nsexec.Open(pc.Netns)
	if err != nil {
		return "", err
	}
	defer ns.Close()
	ino, err := nsexec.Ino(ns)
	if err != nil {
		return "", err
	}
	return filepath.Join(ownedDir, fmt.Sprintf("ns%d@%s", ino, pc.Dev)), nil
}

func ownedLeftover(pc PortConfig) bool {
	path, err := OwnershipMark(pc)
	if err != nil {
		return false
	}
	_, err = os.Stat(path)
	return err == nil
}

// markOwned writes pc's mark and returns its path, "" if it has none.
func markOwned(pc PortConfig) string {
	path, err := OwnershipMark(pc)
	if err != nil {
		slog.Default().Debug("fabriclabd ownership mark", "port", describePort(pc), "err", err)
		return ""
	}
	if err := os.MkdirAll(ownedDir, 0o755); err == nil {
		_ = os.WriteFile(path, []byte(describePort(pc)+"\n"), 0o644)
	}
	return path
}

func unmarkOwned(path string) {
	if path == "" {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		slog.Default().Debug("fabriclabd ownership mark", "err", err)
	}
}
