package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/qdisc"
)

// flow runs one FlowConfig: its client runs, one after the other.
type flow struct {
	spec   FlowConfig
	cc     perf.ClientConfig
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
}

func (d *Daemon) startFlow(f FlowConfig, cc perf.ClientConfig) *flow {
	ctx, cancel := context.WithCancel(context.Background())
	fl := &flow{spec: f, cc: cc, cancel: cancel, done: make(chan struct{}), state: "waiting"}
	log := d.log.With("flow", f.Name)
	cc.Logger = log
	cc.OnAgent = func(a *agent.Agent) { fl.set(func() { fl.agent = a }) }
	cc.OnEndpoint = func(ep *pds.Endpoint) { fl.set(func() { fl.ep = ep }) }
	cc.OnSenders = func(s []*pds.Sender) { fl.set(func() { fl.senders = s }) }
	log.Info("flow started", "server", f.Server, "transport", f.Transport, "start", f.Start.String())
	go func() {
		defer close(fl.done)
		wait := f.Start
		for {
			if wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			fl.set(func() { fl.state = "running" })
			r, err := perf.RunClient(ctx, cc)
			fl.set(func() {
				fl.agent, fl.ep, fl.senders = nil, nil, nil
				fl.runs++
				if r != nil {
					fl.bytes += r.End.SumReceived.Bytes
					fl.lastBps = r.End.SumReceived.BitsPerSecond
				}
				if err != nil && ctx.Err() == nil {
					fl.failures++
					fl.lastErr = strings.TrimPrefix(err.Error(), "roceperf: ")
				}
			})
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				log.Warn("flow run failed", "err", err)
			} else {
				log.Info("flow run done", "bytes", r.End.SumReceived.Bytes, "bits_per_second", r.End.SumReceived.BitsPerSecond)
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
		}
	}()
	return fl
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

func ownedPath(pc PortConfig) string {
	ns := pc.Netns
	if ns == "" {
		ns = "-"
	}
	return filepath.Join(ownedDir, strings.ReplaceAll(ns, "/", "_")+"@"+pc.Dev)
}

func ownedLeftover(pc PortConfig) bool {
	_, err := os.Stat(ownedPath(pc))
	return err == nil
}

func markOwned(pc PortConfig) {
	if err := os.MkdirAll(ownedDir, 0o755); err == nil {
		_ = os.WriteFile(ownedPath(pc), []byte(describePort(pc)+"\n"), 0o644)
	}
}

func unmarkOwned(pc PortConfig) {
	if err := os.Remove(ownedPath(pc)); err != nil && !errors.Is(err, os.ErrNotExist) {
		slog.Default().Debug("fabriclabd ownership mark", "err", err)
	}
}
