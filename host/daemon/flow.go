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
	"github.com/fabriclab/fabriclab/host/tcpflow"
	"github.com/fabriclab/fabriclab/qdisc"
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
}

// runResult is one client run's outcome.
type runResult struct {
	reported bool // bytes and bps are the run's
	bytes    uint64
	bps      float64
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
	d.runFlow(fl, log, func(ctx context.Context) runResult {
		r, err := perf.RunClient(ctx, cc)
		fl.set(func() { fl.agent, fl.ep, fl.senders = nil, nil, nil })
		if r == nil {
			return runResult{err: err}
		}
		return runResult{reported: true, bytes: r.End.SumReceived.Bytes, bps: r.End.SumReceived.BitsPerSecond, err: err}
	})
	return fl
}

// startTCPFlow runs a tcp flow's connections (host/tcpflow); conn.CC is
// resolved to the kernel's name here (the BPF DCTCP where it has none).
func (d *Daemon) startTCPFlow(f FlowConfig, conn tcpflow.Conn) *flow {
	fl := &flow{spec: f, tcp: &conn}
	log := d.log.With("flow", f.Name)
	d.runFlow(fl, log, func(ctx context.Context) runResult {
		c := conn
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
		return runResult{reported: true, bytes: rep.Delivered, bps: float64(rep.Delivered) * 8 / rep.Elapsed.Seconds(), err: err}
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

// runFlow runs fl's client runs: Start after now, then Pause apart while
// it repeats, until it is stopped.
func (d *Daemon) runFlow(fl *flow, log *slog.Logger, run func(context.Context) runResult) {
	f := fl.spec
	ctx, cancel := context.WithCancel(context.Background())
	fl.cancel, fl.done, fl.state = cancel, make(chan struct{}), "waiting"
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
			r := run(ctx)
			err := r.err
			fl.set(func() {
				fl.runs++
				fl.bytes += r.bytes
				if r.reported {
					fl.lastBps = r.bps
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
				log.Info("flow run done", "bytes", r.bytes, "bits_per_second", r.bps)
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
