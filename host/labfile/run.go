//go:build linux

package labfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

// ErrFlowsFailed is wrapped by Run's error when the lab ran but a flow
// failed (its FlowResult.Error says why).
var ErrFlowsFailed = errors.New("labfile: flows failed")

// Bounds of a run.
const (
	// drainGrace is how long past its planned end a flow may take to
	// finish (the last ACKs, the server's counters) before it is cut.
	drainGrace = 15 * time.Second
	// sizedSlack: a sized flow is cut at this many times its ideal FCT
	// (plus drainGrace) from its start.
	sizedSlack = 10
	// settleWait bounds the wait for the ports to empty after the flows.
	settleWait = 2 * time.Second
)

// RunOptions say how to run a file.
type RunOptions struct {
	// Duration caps the run's timeline: when the flows' starts and timed
	// durations reach past it, they are all scaled by Duration / that
	// length (a 20 s story runs in Duration); sized flows keep their size.
	// Optional: 0 runs the file's timeline as written.
	Duration time.Duration
	// OutDir is where result.json and the plots go. Optional: the file's
	// OutputDir; "-" writes nothing.
	OutDir string
	// Logger gets progress and the agents' warnings. Optional: discards.
	Logger *slog.Logger
	// OnSample is called with every report interval's sample, from Run's
	// sampler goroutine (keep it short). Optional.
	OnSample func(*Sample)
}

// Run builds the lab of f in fresh network namespaces (names unique to the
// run), runs its flows at their start times, samples them and the watched
// ports every report interval, and returns the result. Everything it
// made is torn down before it returns, on success, error, panic or ctx's
// cancellation (ports and PEs detached, delay and loss links closed,
// namespaces deleted). A cancelled ctx stops the flows; the result covers
// what ran. A flow that failed makes the error wrap ErrFlowsFailed,
// beside a full result.
func Run(ctx context.Context, f *File, opts RunOptions) (res *Result, err error) {
	if f == nil || f.plan == nil {
		return nil, errors.New("labfile: Run needs a File from Load or Parse")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &runner{f: f, p: f.plan, log: log, opts: opts}
	r.scale = timelineScale(f, opts.Duration)
	l, err := lab.Build(r.p.Spec)
	if err != nil {
		return nil, fmt.Errorf("labfile: %s: %w", f.RunName(), err)
	}
	r.lab = l
	log.Info("lab built", "lab", f.RunName(), "run", l.RunID(), "nodes", len(r.p.Spec.Nodes), "links", len(r.p.Spec.Links))
	defer func() {
		if terr := r.teardown(); terr != nil {
			err = errors.Join(err, fmt.Errorf("labfile: teardown of %s: %w", l.RunID(), terr))
		}
	}()
	if err := r.attach(); err != nil {
		return nil, fmt.Errorf("labfile: %s: %w", f.RunName(), err)
	}
	r.warmNeighbours()
	if err := r.startServers(ctx); err != nil {
		return nil, fmt.Errorf("labfile: %s: %w", f.RunName(), err)
	}
	res = r.run(ctx)
	if opts.OutDir != "-" {
		dir := opts.OutDir
		if dir == "" {
			dir = f.OutputDir()
		}
		if werr := res.write(dir); werr != nil {
			return res, fmt.Errorf("labfile: %w", werr)
		}
	}
	if n := res.Failed(); n > 0 {
		return res, fmt.Errorf("%w: %d of %d", ErrFlowsFailed, n, len(res.Flows))
	}
	return res, nil
}

// runner is one Run's state.
type runner struct {
	f     *File
	p     *Plan
	log   *slog.Logger
	opts  RunOptions
	scale float64
	lab   *lab.Lab

	losses  []*link.Loss
	ports   []*qdisc.Port // Plan.Ports order
	pes     []*tunnel.PE
	servers []server
	stop    context.CancelFunc // the servers'
	served  sync.WaitGroup
}

// server is a started perf server.
type server interface {
	Serve(context.Context) error
	Close() error
}

// timelineScale is the factor the flows' starts and timed durations are
// multiplied by to fit within d (1 when they fit or d is 0).
func timelineScale(f *File, d time.Duration) float64 {
	if d <= 0 {
		return 1
	}
	var end time.Duration
	for i := range f.Flows {
		fl := &f.Flows[i]
		e := fl.Start
		if fl.Size == 0 {
			e += f.plan.Flows[i].Client.Duration
		}
		end = max(end, e)
	}
	if end <= d {
		return 1
	}
	return float64(d) / float64(end)
}

// attach puts the relays' loss and delay links, the ports and the PEs on
// their devices, in that order (lab.NewWAN's): a port's departure hook
// goes before a PE's decapsulation at the peer's ingress.
func (r *runner) attach() error {
	var lossPorts []uint16
	for _, fp := range r.p.Flows {
		port := uint16(roce.UDPPort)
		if fp.Flow.Transport == TransportUET {
			port = uet.Port
		}
		if !containsPort(lossPorts, port) {
			lossPorts = append(lossPorts, port)
		}
	}
	for _, rl := range r.p.Relays {
		n := r.lab.Node(rl.Node)
		for _, dev := range []string{rl.DevA, rl.DevB} {
			// Loss first: the delay goes in front of it at the head of
			// egress, so a delayed packet meets the loss once, on its way
			// out again.
			if rl.Loss > 0 {
				for _, port := range lossPorts {
					ls, err := n.AddLoss(dev, link.LossSpec{Fraction: rl.Loss, UDPPort: port})
					if err != nil {
						return fmt.Errorf("loss on %s:%s: %w", rl.Node, dev, err)
					}
					r.losses = append(r.losses, ls)
				}
			}
			if rl.Delay > 0 {
				if _, err := n.AddDelay(dev, link.DelaySpec{Delay: rl.Delay}); err != nil {
					return fmt.Errorf("delay on %s:%s: %w", rl.Node, dev, err)
				}
			}
		}
	}
	for _, pp := range r.p.Ports {
		port, err := qdisc.Attach(pp.Config, qdisc.AttachOptions{
			Dev: pp.Dev, Netns: r.lab.Node(pp.Node).NetnsName,
			PeerDev: pp.PeerDev, PeerNetns: r.lab.Node(pp.PeerNode).NetnsName,
		})
		if err != nil {
			return fmt.Errorf("port %s at %s: %w", pp.Name, pp.Config.Rate, err)
		}
		r.ports = append(r.ports, port)
	}
	for _, pe := range r.p.PEs {
		t, err := tunnel.Attach(r.lab.Node(pe.Node).NetnsName, pe.Dev, pe.Config, tunnel.AttachOptions{})
		if err != nil {
			return fmt.Errorf("tunnel PE on %s:%s: %w", pe.Node, pe.Dev, err)
		}
		r.pes = append(r.pes, t)
	}
	return nil
}

func containsPort(ps []uint16, p uint16) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// warmNeighbours sends one datagram across every veth in each direction
// (to the discard port) so that neighbour resolution is done before the
// flows start: a RoCE packet queued behind ARP on one ECMP path would
// otherwise start its QP with a go-back-N.
func (r *runner) warmNeighbours() {
	for _, ls := range r.p.Spec.Links {
		for _, pair := range [][2]lab.Endpoint{{ls.A, ls.B}, {ls.B, ls.A}} {
			src, dst := pair[0], pair[1]
			err := r.lab.Node(src.Node).Do(func() error {
				c, err := net.DialUDP("udp4", &net.UDPAddr{IP: src.Addr.Addr().AsSlice()}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst.Addr.Addr(), 9)))
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = c.Write([]byte{0})
				return err
			})
			if err != nil {
				r.log.Debug("warming neighbours", "from", src.Node+":"+src.Dev, "err", err)
			}
		}
	}
	time.Sleep(20 * time.Millisecond)
}

// startServers opens every server in its node's namespace and serves it
// until the run ends.
func (r *runner) startServers(ctx context.Context) error {
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop
	for _, sp := range r.p.Servers {
		cfg := perf.ServerConfig{Bind: sp.Addr.Addr(), Port: int(sp.Addr.Port()), Interval: -1, Logger: r.log.With("server", sp.Node, "transport", sp.Transport)}
		var s server
		err := r.lab.Node(sp.Node).Do(func() error {
			// Listen opens its sockets on this goroutine, in the namespace.
			if sp.Transport == TransportUET {
				cfg.Transport = perf.TransportUET
				u, err := perf.ListenUET(cfg)
				if err == nil {
					s = u
				}
				return err
			}
			v, err := perf.Listen(cfg)
			if err == nil {
				s = v
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("%s server on %s (%v): %w", sp.Transport, sp.Node, sp.Addr, err)
		}
		r.servers = append(r.servers, s)
		r.served.Add(1)
		go func() {
			defer r.served.Done()
			if err := s.Serve(sctx); err != nil && sctx.Err() == nil {
				r.log.Warn("server stopped", "node", sp.Node, "transport", sp.Transport, "err", err)
			}
		}()
	}
	return nil
}

// teardown undoes everything in reverse: servers, PEs, ports, loss links,
// then the lab (its delay links, then the namespaces).
func (r *runner) teardown() error {
	var errs []error
	if r.stop != nil {
		r.stop()
		r.served.Wait()
	}
	for _, s := range r.servers {
		_ = s.Close() // already closed by Serve's return
	}
	for i := len(r.pes) - 1; i >= 0; i-- {
		errs = append(errs, r.pes[i].Close())
	}
	for i := len(r.ports) - 1; i >= 0; i-- {
		errs = append(errs, r.ports[i].Close())
	}
	for i := len(r.losses) - 1; i >= 0; i-- {
		errs = append(errs, r.losses[i].Close())
	}
	errs = append(errs, r.lab.Close())
	return errors.Join(errs...)
}

// flowRun is one flow's live state.
type flowRun struct {
	plan  *FlowPlan
	start time.Duration // scaled

	mu     sync.Mutex
	state  string // waiting, running, done, failed
	last   perf.Interval
	report *perf.Report
	err    error
}

func (fr *flowRun) set(f func(*flowRun)) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	f(fr)
}

// run runs the flows and the sampler and collects the result.
func (r *runner) run(ctx context.Context) *Result {
	res := r.newResult()
	flows := make([]*flowRun, len(r.p.Flows))
	var deadline time.Duration
	for i := range r.p.Flows {
		fp := &r.p.Flows[i]
		fr := &flowRun{plan: fp, state: stateWaiting, start: time.Duration(float64(fp.Flow.Start) * r.scale)}
		flows[i] = fr
		deadline = max(deadline, fr.start+r.flowBudget(fp))
	}
	rctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	t0 := time.Now()
	res.Start = t0
	var wg sync.WaitGroup
	for _, fr := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runFlow(rctx, t0, fr)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		defer func() {
			if v := recover(); v != nil {
				r.log.Error("sampler panicked; the run goes on without samples", "panic", v)
				<-done
			}
		}()
		r.sample(t0, flows, res, done)
	}()
	<-done
	<-sampled
	res.Seconds = time.Since(t0).Seconds()
	r.finish(res, flows, ctx.Err() != nil)
	return res
}

// flowBudget is how long a flow may run from its start before it is cut.
func (r *runner) flowBudget(fp *FlowPlan) time.Duration {
	if fp.Flow.Size == 0 {
		return time.Duration(float64(fp.Client.Duration)*r.scale) + drainGrace
	}
	return time.Duration(sizedSlack*fp.idealFCT().Seconds()*float64(time.Second)) + drainGrace
}

// idealFCT is the flow's size at its bottleneck rate alone.
func (fp *FlowPlan) idealFCT() time.Duration {
	if fp.Flow.Size == 0 || fp.Bottleneck == 0 {
		return 0
	}
	return time.Duration(float64(fp.Flow.Size) * 8 / float64(fp.Bottleneck) * 1e9)
}

// Flow states in samples and results.
const (
	stateWaiting = "waiting"
	stateRunning = "running"
	stateDone    = "done"
	stateFailed  = "failed"
)

// runFlow waits for the flow's start and runs its client in its sender's
// namespace.
func (r *runner) runFlow(ctx context.Context, t0 time.Time, fr *flowRun) {
	fl := fr.plan.Flow
	// A panic in a flow fails the flow, not the process: Run still tears
	// the lab down.
	defer func() {
		if v := recover(); v != nil {
			fr.set(func(fr *flowRun) { fr.state, fr.err = stateFailed, fmt.Errorf("panic: %v", v) })
		}
	}()
	if wait := time.Until(t0.Add(fr.start)); wait > 0 {
		select {
		case <-ctx.Done():
			fr.set(func(fr *flowRun) { fr.state, fr.err = stateFailed, fmt.Errorf("not started: %w", context.Cause(ctx)) })
			return
		case <-time.After(wait):
		}
	}
	cfg := fr.plan.Client
	if fl.Size == 0 {
		cfg.Duration = max(time.Duration(float64(cfg.Duration)*r.scale), time.Millisecond)
	}
	cfg.Logger = r.log.With("flow", fl.Name)
	cfg.OnInterval = func(iv perf.Interval) { fr.set(func(fr *flowRun) { fr.last = iv }) }
	fctx, cancel := context.WithTimeout(ctx, r.flowBudget(fr.plan))
	defer cancel()
	fr.set(func(fr *flowRun) { fr.state = stateRunning })
	r.log.Info("flow starts", "flow", fl.Name, "from", fl.From, "to", fl.To, "transport", fl.Transport, "cc", fl.CC)
	var rep *perf.Report
	err := r.lab.Node(fl.From).Do(func() (err error) {
		rep, err = perf.RunClient(fctx, cfg)
		return err
	})
	if err == nil && rep != nil && rep.Interrupted {
		switch {
		case ctx.Err() == nil && fctx.Err() != nil:
			err = fmt.Errorf("cut after %v: not finished within its budget", r.flowBudget(fr.plan))
		case ctx.Err() != nil:
			err = fmt.Errorf("interrupted: %w", context.Cause(ctx))
		}
	}
	fr.set(func(fr *flowRun) {
		fr.report, fr.err = rep, err
		fr.state = stateDone
		if err != nil {
			fr.state = stateFailed
		}
	})
	if err != nil {
		r.log.Warn("flow failed", "flow", fl.Name, "err", err)
	} else {
		r.log.Info("flow done", "flow", fl.Name)
	}
}

// sample takes a Sample every report interval until done closes.
func (r *runner) sample(t0 time.Time, flows []*flowRun, res *Result, done <-chan struct{}) {
	tick := time.NewTicker(r.f.interval())
	defer tick.Stop()
	prev := make([]qdisc.ClassStats, len(r.ports))
	take := func() {
		s := &Sample{T: time.Since(t0).Seconds()}
		for _, fr := range flows {
			fr.mu.Lock()
			fs := FlowSample{Name: fr.plan.Flow.Name, State: fr.state}
			if fr.state == stateRunning {
				sum := &fr.last.Sum
				fs.GoodputBps, fs.RcBps, fs.CwndBytes = sum.BitsPerSecond, sum.RcBps, sum.CwndBytes
				fs.CNPs, fs.Retransmits = sum.CNPHandled, sum.Retransmits
			}
			fr.mu.Unlock()
			s.Flows = append(s.Flows, fs)
		}
		for i, pp := range r.p.Ports {
			if !pp.Watch {
				continue
			}
			st, err := r.ports[i].Stats()
			if err != nil {
				r.log.Warn("port stats", "port", pp.Name, "err", err)
				continue
			}
			t := st.Total()
			s.Ports = append(s.Ports, PortSample{Name: pp.Name,
				BacklogBytes:   t.BacklogBytes,
				DequeuedBps:    float64(t.DequeuedBytes-prev[i].DequeuedBytes) * 8 / r.f.interval().Seconds(),
				CEMarks:        t.CEMarked() - prev[i].CEMarked(),
				DroppedPackets: t.DroppedPackets() - prev[i].DroppedPackets()})
			prev[i] = t
		}
		res.Samples = append(res.Samples, *s)
		if r.opts.OnSample != nil {
			r.opts.OnSample(s)
		}
	}
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			take()
		}
	}
}

// finish waits for the ports to empty, then fills in the flows' and the
// ports' results.
func (r *runner) finish(res *Result, flows []*flowRun, interrupted bool) {
	res.Interrupted = interrupted
	for _, fr := range flows {
		res.Flows = append(res.Flows, flowResult(fr))
	}
	deadline := time.Now().Add(settleWait)
	for {
		busy := false
		for _, p := range r.ports {
			st, err := p.Stats()
			if err == nil {
				t := st.Total()
				busy = busy || t.BacklogPackets > 0 || t.Host.BacklogPackets > 0
			}
		}
		if !busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, pp := range r.p.Ports {
		st, err := r.ports[i].Stats()
		pr := PortResult{Name: pp.Name, Node: pp.Node, Dev: pp.Dev, RateBps: uint64(pp.Config.Rate), Watched: pp.Watch}
		if err != nil {
			pr.Error = err.Error()
		} else {
			pr.fill(&st)
		}
		res.Ports = append(res.Ports, pr)
	}
}
