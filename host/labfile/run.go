//go:build linux

package labfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/host/linkq"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/tcpflow"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

// ErrFlowsFailed is wrapped by Run's error when the lab ran but a flow
// failed (its FlowResult.Error says why).
var ErrFlowsFailed = errors.New("labfile: flows failed")

// ErrAgentFailed is wrapped by Run's error when a PE's agent stopped
// during the run: what the run measured is not what the file describes.
var ErrAgentFailed = errors.New("labfile: a pe agent failed")

// ErrLinkBroken is wrapped by Run's error when a link's delay stopped
// delaying during the run (its TUN deleted, link.ErrTunGone): the
// packets it took are lost, and the run is not the file's lab.
var ErrLinkBroken = errors.New("labfile: a delay link broke")

// Bounds of a run.
const (
	// drainGrace is how long past its planned end a flow may take to
	// finish (the last ACKs, the server's counters) before it is cut.
	drainGrace = 15 * time.Second
	// sizedSlack: a sized flow is cut at this many times its ideal FCT
	// (plus drainGrace) from its start.
	sizedSlack = 10
	// minSizedBudget is the least a sized instance may take (before
	// drainGrace): connection setup, a tcp flow's slow start.
	minSizedBudget = time.Second
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
	// Variant runs the file's variant of that name: its ports on top of
	// the file's. Optional: the file's ports as written.
	Variant string
	// Run numbers the run (1, 2, ...): the sizes drawn between size and
	// size_max are seeded by the file's seed + Run - 1. Optional: 1.
	Run int
	// Htsim runs the lab's incast in htsim too, after the lab
	// (HtsimScenario): Result.Htsim, or in a comparison each variant's
	// once; a workload matrix's run is MatrixResult.Htsim
	// (HtsimMatrixScenario), its files in the output directory's htsim/.
	// Optional: the lab alone.
	Htsim *htsim.Runner
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
	r := &runner{f: f, p: f.plan, log: log, opts: opts, variant: -1}
	r.scale = timelineScale(f.plan, opts.Duration)
	if opts.Variant != "" {
		i := slices.Index(f.VariantNames(), opts.Variant)
		if i < 0 {
			return nil, fmt.Errorf("labfile: %s has no variant %q; its variants are %s", f.RunName(), opts.Variant, orList(f.VariantNames()))
		}
		r.p, r.variant = r.p.Variants[i].Plan, i
	}
	if opts.Run < 0 || opts.Run > MaxRuns {
		return nil, fmt.Errorf("labfile: run %d: want 1..%d", opts.Run, MaxRuns)
	}
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
	r.newMeter() // before attach: the relays' delay links log held time
	if err := r.attach(); err != nil {
		return nil, fmt.Errorf("labfile: %s: %w", f.RunName(), err)
	}
	if err := r.measureTune(ctx); err != nil {
		return nil, fmt.Errorf("labfile: %s: %w", f.RunName(), err)
	}
	if err := r.resolveTCP(); err != nil {
		return nil, fmt.Errorf("labfile: %s: %w", f.RunName(), err)
	}
	if err := r.startAgents(ctx); err != nil {
		return nil, fmt.Errorf("labfile: %s: %w", f.RunName(), err)
	}
	if err := r.steerRx(ctx); err != nil {
		return nil, fmt.Errorf("labfile: %s: %w", f.RunName(), err)
	}
	r.warmNeighbours()
	if err := r.startServers(ctx); err != nil {
		return nil, fmt.Errorf("labfile: %s: %w", f.RunName(), err)
	}
	res = r.run(ctx)
	res.Tune = r.tuned
	res.Goals = f.runGoals(opts.Variant, res)
	if res.judges() {
		res.Check = Check(res)
	}
	outDir := opts.OutDir
	if outDir == "" {
		outDir = f.OutputDir()
	}
	switch {
	case opts.Htsim != nil && res.Matrix != nil:
		dir := ""
		if outDir != "-" {
			dir = filepath.Join(outDir, "htsim")
		}
		res.Matrix.Htsim = f.runHtsimMatrix(ctx, r.p, opts.Htsim, dir, opts.Run)
	case opts.Htsim != nil:
		res.Htsim = f.runHtsim(ctx, r.p, opts.Htsim)
	}
	if outDir != "-" {
		dir := outDir
		if werr := res.write(dir); werr != nil {
			return res, fmt.Errorf("labfile: %w", werr)
		}
	}
	for _, p := range res.PEs {
		if p.AgentFailed {
			return res, fmt.Errorf("%w: %s: %s", ErrAgentFailed, p.Node, p.Error)
		}
	}
	for _, l := range res.Links {
		for _, d := range l.Delays {
			if d.Error != "" {
				return res, fmt.Errorf("%w: %s: %s", ErrLinkBroken, d.Dev, d.Error)
			}
		}
	}
	if n := res.Failed(); n > 0 {
		return res, fmt.Errorf("%w: %d of %d", ErrFlowsFailed, n, len(res.Flows))
	}
	return res, nil
}

// relayDelay is a delay link on a relay's device.
type relayDelay struct {
	relay, dev string
	d          *link.Delay
}

// runner is one Run's state.
type runner struct {
	f *File
	p *Plan
	// variant is the File.Variants index run, -1 for the file as
	// written; tuned the values its ports' $names took (File.Tune).
	variant int
	tuned   *TuneValues
	log     *slog.Logger
	opts    RunOptions
	scale   float64
	lab     *lab.Lab
	// tcpCC maps a tcp flow's cc to the kernel's name; tcpCCs holds the
	// BPF DCTCP registered for the run, if any.
	tcpCC  map[string]string
	tcpCCs tcpflow.CCs

	// hostq counts the hosts' links (host/linkq); hostQueues bounds each
	// host's senders by its links, by host name.
	hostq      *linkq.Objects
	hostQueues map[string]*linkq.Queue
	// pdcIDs numbers the UET endpoints each host opens.
	pdcIDs pdcIDs

	losses     []*link.Loss
	delays     []relayDelay  // closed with the lab
	ports      []*qdisc.Port // Plan.Ports order
	pes        []*tunnel.PE  // Plan.PEs order
	agents     []*peAgent
	stopAgents context.CancelFunc

	// timedLeft counts the timed flows still running; when the last ends,
	// busy records the ports' sent bytes and the time: the utilization's
	// window.
	timedLeft atomic.Int32
	busyOnce  sync.Once
	busy      portsSent
	servers   []server
	stop      context.CancelFunc // the servers'
	served    sync.WaitGroup

	// meter measures what the host took from the run (host/hostlost):
	// the metered ports' idle periods against the senders' held time.
	// flowHeld is each flow's held log (its instances share it);
	// stopFeeds ends the ports' feeds into the meter (before it stops,
	// and before the ports close); meterErr says why nothing is metered.
	meter     *hostlost.Meter
	flowHeld  []*hostlost.Log
	relayHeld map[[2]string]*hostlost.Log // by relay node and device
	stopFeeds []func() error
	meterErr  error

	// rocev2 are the RoCEv2 flows' agents, whose DCQCN cuts the queue
	// sampler counts (e2eReaction).
	// matrix runs the workload's triggers (nil without a workload).
	matrix *matrixRun

	rocev2 struct {
		sync.Mutex
		agents []*agent.Agent
	}
}

// server is a started perf server.
type server interface {
	Serve(context.Context) error
	Close() error
}

// timelineScale is the factor the flows' starts and timed durations (on
// the plan's timeline, slowed) are multiplied by to fit within d (1 when
// they fit or d is 0).
func timelineScale(p *Plan, d time.Duration) float64 {
	if d <= 0 {
		return 1
	}
	var end time.Duration
	for i := range p.Flows {
		fp := &p.Flows[i]
		e := fp.Start + time.Duration(fp.Flow.Count-1)*fp.Every
		if fp.Flow.Size == 0 {
			e += fp.duration()
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
		if fp.TCP != nil {
			continue // a link's loss is the RoCEv2 and UET datagrams'
		}
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
				d, err := n.AddDelay(dev, link.DelaySpec{Delay: rl.Delay, Held: r.relayHeld[[2]string{rl.Node, dev}]})
				if err != nil {
					return fmt.Errorf("delay on %s:%s: %w", rl.Node, dev, err)
				}
				r.delays = append(r.delays, relayDelay{relay: rl.Node, dev: dev, d: d})
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
	return r.attachHostQueues()
}

// hostQueueResults reads the hosts' host queues, in the file's order.
func (r *runner) hostQueueResults() []HostQueueResult {
	var out []HostQueueResult
	for _, n := range r.f.Nodes {
		q := r.hostQueues[n.Name]
		if q == nil {
			continue
		}
		hr := HostQueueResult{Host: n.Name, LimitBytes: q.Limit(), WrittenOff: q.Leaks()}
		for _, i := range q.Links() {
			hr.MaxBytes = max(hr.MaxBytes, r.hostq.Counters(i).MaxBytes)
		}
		out = append(out, hr)
	}
	return out
}

// attachHostQueues bounds each host's host queue (Node.HostQueue): its
// links to the fabric (a switch, PE or relay) are counted at both ends,
// and its senders wait while they hold more than the bound.
func (r *runner) attachHostQueues() error {
	limits := map[string]int{}
	for _, hq := range r.f.HostQueues() {
		limits[hq.Host] = int(hq.Limit)
	}
	links := map[string][]int{}
	for _, ls := range r.p.Spec.Links {
		for _, e := range [][2]lab.Endpoint{{ls.A, ls.B}, {ls.B, ls.A}} {
			host, peer := e[0], e[1]
			if _, ok := limits[host.Node]; !ok || slices.ContainsFunc(r.f.Nodes, func(n Node) bool { return n.Name == peer.Node && n.Kind == KindHost }) {
				continue // not a host's, or host to host
			}
			if r.hostq == nil {
				o, err := linkq.Load()
				if err != nil {
					return fmt.Errorf("host queues: %w", err)
				}
				r.hostq = o
			}
			i, err := r.hostq.AttachLink(linkq.End{NS: r.lab.Node(host.Node).NsHandle(), Dev: host.Dev},
				linkq.End{NS: r.lab.Node(peer.Node).NsHandle(), Dev: peer.Dev})
			if err != nil {
				return fmt.Errorf("host queue of %s: %w", host.Node, err)
			}
			links[host.Node] = append(links[host.Node], i)
		}
	}
	r.hostQueues = map[string]*linkq.Queue{}
	for h, ls := range links {
		r.hostQueues[h] = r.hostq.Queue(limits[h], ls...)
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

// steerRx puts the receive processing of every forwarding node's devices
// (switches, PEs, relays) on one CPU and the hosts' on the other: a veth
// delivers a packet on the CPU that sent it, and a flow whose packets are
// sent from two CPUs (a sender that migrates, a shaper's timer) would be
// processed in parallel and reordered — spurious go-back-N and fast
// retransmits with nothing lost.
func (r *runner) steerRx(ctx context.Context) error {
	var network, hosts [][2]string
	for _, ls := range r.p.Spec.Links {
		for _, ep := range []lab.Endpoint{ls.A, ls.B} {
			d := [2]string{ep.Node, ep.Dev}
			if r.f.kind(ep.Node) == KindHost {
				hosts = append(hosts, d)
			} else {
				network = append(network, d)
			}
		}
	}
	cpus, err := r.lab.SteerRx(ctx, network, hosts)
	if err == nil && cpus != "" {
		r.log.Info("receive processing steered", "cpus", cpus)
	}
	return err
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

// reroutePaths is a reroute agent's pe.Paths: both PEs' routes to the
// other data centre over every WAN path (ECMP) or over path 1.
type reroutePaths struct {
	lab            *lab.Lab
	spill, unspill []lab.RouteSpec
}

func (p reroutePaths) Spill(spill bool) error {
	routes := p.unspill
	if spill {
		routes = p.spill
	}
	var errs []error
	for _, rs := range routes {
		errs = append(errs, p.lab.ReplaceRoute(rs))
	}
	return errors.Join(errs...)
}

// peAgent is a running PE agent.
type peAgent struct {
	node, dev string
	ag        *pe.Agent
	done      chan struct{}
	err       error // Run's, once done is closed
}

// startAgents runs every PE's agent on its tunnel's notifications until
// teardown; a rate agent drives the limiter port on the PE's WAN device.
func (r *runner) startAgents(ctx context.Context) error {
	actx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stopAgents = stop
	for i, pp := range r.p.PEs {
		if pp.Agent == nil {
			continue
		}
		var lim pe.Limiter
		if pp.Agent.Mode == pe.RateLimit {
			j := slices.IndexFunc(r.p.Ports, func(po PortPlan) bool { return po.Limiter && po.Node == pp.Node && po.Dev == pp.Dev })
			if j < 0 {
				return fmt.Errorf("pe %s: no limiter port on %s", pp.Node, pp.Dev)
			}
			lim = pe.PortLimiter{Port: r.ports[j]}
		}
		var paths pe.Paths
		if pp.Agent.Mode == pe.Reroute {
			paths = reroutePaths{lab: r.lab, spill: pp.Spill, unspill: pp.Unspill}
		}
		ag, err := pe.New(*pp.Agent, lim, paths, pe.Monotonic{})
		if err != nil {
			return fmt.Errorf("pe %s: agent: %w", pp.Node, err)
		}
		a := &peAgent{node: pp.Node, dev: pp.Dev, ag: ag, done: make(chan struct{})}
		r.agents = append(r.agents, a)
		t := r.pes[i]
		go func() {
			defer close(a.done)
			defer func() {
				if v := recover(); v != nil {
					a.err = fmt.Errorf("panic: %v", v)
				}
			}()
			a.err = ag.Run(actx, t)
			if a.err != nil && actx.Err() == nil {
				r.log.Error("pe agent stopped", "pe", a.node, "err", a.err)
			}
		}()
		r.log.Info("pe agent runs", "pe", pp.Node, "mode", pp.Agent.Mode)
	}
	return nil
}

// startServers opens every server in its node's namespace and serves it
// until the run ends.
func (r *runner) startServers(ctx context.Context) error {
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop
	for _, sp := range r.p.Servers {
		cfg := perf.ServerConfig{Bind: sp.Addr.Addr(), Port: int(sp.Addr.Port()), Interval: -1, NP: sp.NP, Logger: r.log.With("server", sp.Node, "transport", sp.Transport),
			LineRate: sp.LineRate, BaseRTT: sp.BaseRTT, Wires: sp.Wires, TrimDSCP: sp.TrimDSCP, TrimLastHopDSCP: sp.TrimLastHopDSCP, Timescale: sp.Timescale, SendPath: sp.SendPath}
		if r.meter != nil {
			cfg.Held = r.meter.HeldAs(fmt.Sprintf("server %s (%s)", sp.Node, sp.Transport), 0)
		}
		var s server
		if sp.Transport == TransportTCP {
			t, err := listenTCP(r.lab.Node(sp.Node), sp.Addr, r.tcpCC[sp.CC])
			if err != nil {
				return fmt.Errorf("tcp server on %s (%v, %s): %w", sp.Node, sp.Addr, sp.CC, err)
			}
			s = t
		}
		err := r.lab.Node(sp.Node).Do(func() error {
			if s != nil {
				return nil
			}
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
			defer func() {
				if v := recover(); v != nil {
					r.log.Error("server panicked", "node", sp.Node, "transport", sp.Transport, "panic", v)
				}
			}()
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
	errs = append(errs, r.stopPortFeeds())
	if r.stop != nil {
		r.stop()
		r.served.Wait()
	}
	for _, s := range r.servers {
		_ = s.Close() // already closed by Serve's return
	}
	if r.stopAgents != nil {
		r.stopAgents()
		for _, a := range r.agents {
			<-a.done
		}
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
	if r.hostq != nil {
		errs = append(errs, r.hostq.Close())
	}
	errs = append(errs, r.lab.Close())
	// After the namespaces: their sockets are gone.
	errs = append(errs, r.tcpCCs.Close())
	return errors.Join(errs...)
}

// flowRun is one flow's live state.
type flowRun struct {
	plan  *FlowPlan
	index int           // in the file
	start time.Duration // scaled; a triggered flow's when its trigger fired
	// trigger brings a matrix flow that starts on a trigger the time it
	// fired (matrixRun); nil for a flow that starts at its time.
	trigger chan time.Duration
	// sizes are the instances' sizes (one for a single flow; nil for a
	// timed one).
	sizes []uint64
	// tcpSent counts a tcp flow's bytes written, for the live view.
	tcpSent atomic.Uint64

	mu       sync.Mutex
	state    string // waiting, running, done, failed
	last     perf.Interval
	lastSent uint64 // tcpSent at the last sample
	// acked reads the running instance's acknowledged bytes (perf's
	// OnData; nil outside its RunClient), lastAcked its value at the last
	// sample: the live view's goodput over the same window as the ports'.
	acked     func() uint64
	lastAcked uint64
	// agent is the running rocev2 instance's (perf's OnAgent; nil
	// outside its RunClient): the DCQCN trace reads its QPs.
	agent     *agent.Agent
	instances []instanceRun
}

// instanceRun is one instance of a flow.
type instanceRun struct {
	start time.Duration // from the run's start, as it started
	end   time.Duration // when it returned, its report in
	// dataStart is when its data started (a uet flow's senders; else
	// start, its setup included); dataMono the same on CLOCK_MONOTONIC,
	// the host-lost meter's clock.
	dataStart time.Duration
	dataMono  time.Duration
	// dataEnd is when a gated matrix flow's last byte was acknowledged
	// (perf's OnFinished), 0 for other flows: end then.
	dataEnd time.Duration
	// setup is a gated matrix flow's setup, before the run's clock.
	setup  time.Duration
	size   uint64
	late   bool // started after its every slot
	report *perf.Report
	tcp    *tcpflow.Report
	err    error
}

func (fr *flowRun) set(f func(*flowRun)) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	f(fr)
}

// DrawSizes draws a flow's instance sizes: size, or uniform in
// size..size_max from the run's seed and the flow's place in the file
// (FlowPlan.Index; the same in every variant of a run). Nil for a timed
// flow.
func DrawSizes(fl *Flow, seed uint64, index int) []uint64 {
	if fl.Size == 0 {
		return nil
	}
	out := make([]uint64, fl.Count)
	rng := rand.New(rand.NewPCG(seed, uint64(index)))
	for k := range out {
		out[k] = uint64(fl.Size)
		if fl.SizeMax > fl.Size {
			out[k] += rng.Uint64N(uint64(fl.SizeMax-fl.Size) + 1)
		}
	}
	return out
}

// run runs the flows and the sampler and collects the result.
func (r *runner) run(ctx context.Context) *Result {
	res := r.newResult()
	res.Variant, res.Run = r.opts.Variant, r.opts.Run
	seed := r.f.Seed + uint64(max(r.opts.Run, 1)-1)
	flows := make([]*flowRun, len(r.p.Flows))
	var deadline time.Duration
	for i := range r.p.Flows {
		fp := &r.p.Flows[i]
		fr := &flowRun{plan: fp, index: i, state: stateWaiting, start: r.scaled(fp.Start), sizes: DrawSizes(fp.Flow, seed, i)}
		flows[i] = fr
		deadline = max(deadline, fr.start+r.seriesBudget(fr))
	}
	for _, fr := range flows {
		if fr.sizes == nil {
			r.timedLeft.Add(1)
		}
	}
	if r.f.matrix != nil {
		// The matrix's flows set up before the clock starts (prepareGated).
		deadline = max(deadline, r.matrixDeadline(flows)) + r.setupAllowance(flows)
	}
	rctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	r.matrix = r.newMatrixRun(flows, cancel)
	hostDrops0 := r.hostDrops()
	incasts := r.p.incasts()
	var wg sync.WaitGroup
	if r.matrix != nil {
		// The matrix's rocev2 flows set up before the clock starts.
		r.prepareGated(rctx, flows, &wg)
	}
	r.startMeter()
	t0 := time.Now()
	res.Start = t0
	if r.matrix != nil {
		r.matrix.t0 = t0
		close(r.matrix.started)
	}
	qctx, stopQueues := context.WithCancel(context.Background())
	queued := make(chan queueSamples, 1)
	go func() { queued <- r.sampleQueues(qctx, t0, incasts, flows) }()
	for _, fr := range flows {
		if r.matrix.gated(fr) {
			continue // running (prepareGated)
		}
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
	stopQueues()
	queues := <-queued
	host := r.stopMeter()
	r.finish(res, flows, ctx.Err() != nil)
	res.Matrix = r.matrixResult(res, flows)
	res.HostLost = r.hostLost(host, flows, res)
	res.Incasts = r.incastResults(incasts, flows, res, host, queues.ports)
	r.portQueues(res, queues.ports)
	res.E2EReactionMS = r.e2eReaction(queues)
	res.DCQCN = queues.dcqcn
	res.Fairness = fairness(r.p, res.Samples)
	for k, v := range r.hostDrops() {
		if d := v - hostDrops0[k]; d > 0 || k != softnetKey {
			if k == softnetKey {
				res.SoftnetDrops = d
			} else {
				res.HostDrops = append(res.HostDrops, HostDrops{Node: k, UDPRcvbufErrors: d})
			}
		}
	}
	slices.SortFunc(res.HostDrops, func(a, b HostDrops) int { return strings.Compare(a.Node, b.Node) })
	return res
}

// softnetKey is hostDrops' key of the machine's input backlog drops.
const softnetKey = ""

// hostDrops reads every host's UDP receive-buffer drops (RcvbufErrors,
// its namespace's) and, under softnetKey, the machine's per-CPU input
// backlog drops (lab.SoftnetDrops): the host queues outside the ports.
func (r *runner) hostDrops() map[string]uint64 {
	out := map[string]uint64{}
	for _, n := range r.f.Nodes {
		if n.Kind != KindHost {
			continue
		}
		if v, err := r.lab.Node(n.Name).UDPCounter("RcvbufErrors"); err == nil {
			out[n.Name] = v
		}
	}
	if v, err := lab.SoftnetDrops(); err == nil {
		out[softnetKey] = v
	}
	return out
}

// stableStats reads a port's counters until two reads in a row agree
// (until deadline at the latest, and at least once more after it): the
// counters are read one map at a time, so a stray packet of the lab at
// rest (a TCP FIN, a neighbour probe) crossing the port during a read
// tears it, and the identities of qdisc.ClassStats.CheckInvariant hold
// only for a read that nothing crossed.
func stableStats(p *qdisc.Port, deadline time.Time) (qdisc.Stats, error) {
	prev, err := p.Stats()
	if err != nil {
		return prev, err
	}
	for range 50 {
		time.Sleep(2 * time.Millisecond)
		st, err := p.Stats()
		if err != nil {
			return st, err
		}
		if reflect.DeepEqual(st.Classes, prev.Classes) || time.Now().After(deadline.Add(100*time.Millisecond)) {
			return st, nil
		}
		prev = st
	}
	return prev, nil
}

// scaled is d on the run's timeline.
func (r *runner) scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * r.scale) }

// duration is a timed flow's length as written.
func (fp *FlowPlan) duration() time.Duration {
	if fp.TCP != nil {
		return fp.TCP.Duration
	}
	return fp.Client.Duration
}

// instanceBudget is how long an instance may run from its start before it
// is cut.
func (r *runner) instanceBudget(fp *FlowPlan, size uint64) time.Duration {
	if size == 0 {
		return r.scaled(fp.duration()) + drainGrace
	}
	return max(time.Duration(sizedSlack*fp.IdealFCT(size).Seconds()*float64(time.Second)), minSizedBudget) + drainGrace
}

// seriesBudget bounds a flow's every instance, from its start.
func (r *runner) seriesBudget(fr *flowRun) time.Duration {
	fl := fr.plan.Flow
	if fr.sizes == nil {
		return r.instanceBudget(fr.plan, 0)
	}
	var sum, worst time.Duration
	for _, n := range fr.sizes {
		b := r.instanceBudget(fr.plan, n) - drainGrace
		sum += b + r.scaled(fr.plan.Pause)
		worst = max(worst, b)
	}
	if fl.Every != 0 {
		sum = max(sum, time.Duration(fl.Count-1)*r.scaled(fr.plan.Every)+worst)
	}
	return sum + drainGrace
}

// IdealFCT is size at the flow's bottleneck rate alone, plus the path's
// base RTT (the last byte's acknowledgement, or a tcp flow's answer); 0
// when either is unknown. On a fabric that stores and forwards, the last
// packet is serialised again at every further hop and its ACK at every
// hop (htsim's ideal, host/htsim.MatrixPlan.IdealFCT).
func (fp *FlowPlan) IdealFCT(size uint64) time.Duration {
	if size == 0 || fp.Bottleneck == 0 {
		return 0
	}
	ideal := time.Duration(float64(size)*8/float64(fp.Bottleneck)*1e9) + fp.BaseRTT
	if fp.wired() {
		last := min(int(size), fp.Client.MTU-udpIPBytes)
		once := time.Duration(float64(last+fp.Wire.Overhead) * 8 / float64(fp.Bottleneck) * 1e9)
		ideal += max(fp.Wire.Delay(last)-once, 0) + fp.ReplyWire.Delay(uetAckBytes)
	}
	return ideal
}

// wired says the flow's ends add their paths' wires (Fabric.StoreAndForward).
func (fp *FlowPlan) wired() bool { return fp.Wire != pktio.Wire{} }

// portsSent is what each port had sent at a time from the run's start.
type portsSent struct {
	at    time.Duration
	bytes []uint64 // Plan.Ports order; nil: not taken
}

// snapshotSent takes portsSent now.
func (r *runner) snapshotSent(t0 time.Time) portsSent {
	ps := portsSent{at: time.Since(t0), bytes: make([]uint64, len(r.ports))}
	for i, p := range r.ports {
		if st, err := p.Stats(); err == nil {
			ps.bytes[i] = st.Total().DequeuedBytes
		}
	}
	return ps
}

// Flow states in samples and results.
const (
	stateWaiting = "waiting"
	stateRunning = "running"
	stateDone    = "done"
	stateFailed  = "failed"
)

// runFlow runs the flow's instances, each at its start, in its sender's
// namespace.
func (r *runner) runFlow(ctx context.Context, t0 time.Time, fr *flowRun) {
	fl := fr.plan.Flow
	// A panic in a flow fails the flow, not the process: Run still tears
	// the lab down.
	defer func() {
		if v := recover(); v != nil {
			fr.set(func(fr *flowRun) {
				fr.state = stateFailed
				fr.instances = append(fr.instances, instanceRun{err: fmt.Errorf("panic: %v", v)})
			})
		}
		if fr.sizes == nil && r.timedLeft.Add(-1) == 0 {
			r.busyOnce.Do(func() { r.busy = r.snapshotSent(t0) })
		}
	}()
	n := max(len(fr.sizes), 1)
	next := fr.start
	failed := false
	if fr.trigger != nil {
		select {
		case <-ctx.Done():
			fr.set(func(fr *flowRun) { fr.state = stateFailed })
			return
		case at := <-fr.trigger:
			fr.set(func(fr *flowRun) { fr.start = at })
			next = at
		}
	}
	for k := range n {
		late := false
		if wait := time.Until(t0.Add(next)); wait > 0 {
			select {
			case <-ctx.Done(): // the rest did not run (SeriesResult.NotRun)
			case <-time.After(wait):
			}
		} else if k > 0 && fl.Every != 0 && wait < -time.Millisecond {
			late = true
		}
		if ctx.Err() != nil {
			failed = true
			break
		}
		var size uint64
		if fr.sizes != nil {
			size = fr.sizes[k]
		}
		in := instanceRun{start: time.Since(t0), size: size, late: late}
		in.dataStart, in.dataMono = in.start, hostlost.Now()
		fr.set(func(fr *flowRun) { fr.state = stateRunning })
		if k == 0 {
			r.log.Info("flow starts", "flow", fl.Name, "from", fl.From, "to", fl.To, "transport", fl.Transport, "cc", fl.CC, "count", n)
		}
		r.runInstance(ctx, t0, fr, &in, nil)
		in.end = time.Since(t0)
		fr.set(func(fr *flowRun) { fr.instances = append(fr.instances, in) })
		if fr.plan.Flow.conn > 0 {
			r.matrix.done(fr, in.end, in.err)
		}
		if in.err != nil {
			failed = true
			r.log.Warn("flow failed", "flow", fl.Name, "instance", k+1, "err", in.err)
			if ctx.Err() != nil {
				break
			}
		}
		if fl.Every != 0 {
			next = fr.start + time.Duration(k+1)*r.scaled(fr.plan.Every)
		} else {
			next = time.Since(t0) + r.scaled(fr.plan.Pause)
		}
	}
	fr.set(func(fr *flowRun) {
		fr.state = stateDone
		if failed {
			fr.state = stateFailed
		}
	})
	if !failed {
		r.log.Info("flow done", "flow", fl.Name)
	}
}

// runInstance runs one instance of fr's flow. With a gate (a rocev2
// matrix flow set up ahead, runGated) its data waits for the gate, and
// its budget runs from there.
func (r *runner) runInstance(ctx context.Context, t0 time.Time, fr *flowRun, in *instanceRun, gate *flowGate) {
	fl := fr.plan.Flow
	budget := r.instanceBudget(fr.plan, in.size)
	fctx, cancel := context.WithTimeout(ctx, budget)
	if gate != nil {
		cancel()
		fctx, cancel = context.WithCancel(ctx)
		go func() {
			select {
			case <-gate.open:
				t := time.NewTimer(budget)
				defer t.Stop()
				select {
				case <-t.C:
					cancel()
				case <-fctx.Done():
				}
			case <-fctx.Done():
			}
		}()
	}
	defer cancel()
	node := r.lab.Node(fl.From)
	if tp := fr.plan.TCP; tp != nil {
		tp := *tp
		tp.Duration = max(r.scaled(tp.Duration), time.Millisecond)
		rep, err := runTCP(fctx, node, &tp, r.tcpCC[tp.CC], in.size, &fr.tcpSent)
		in.tcp = &rep
		in.err = r.cutOrInterrupted(ctx, fctx, budget, err, err != nil && fctx.Err() != nil)
		return
	}
	cfg := fr.plan.Client
	if in.size == 0 {
		cfg.Duration = max(r.scaled(cfg.Duration), time.Millisecond)
	} else {
		cfg.Bytes = in.size
	}
	if gate != nil {
		cfg.StartGate, cfg.OnReady, cfg.OnFinished = gate.open, gate.ready, gate.finished
	}
	cfg.Logger = r.log.With("flow", fl.Name)
	cfg.OnInterval = func(iv perf.Interval) { fr.set(func(fr *flowRun) { fr.last = iv }) }
	cfg.OnData = func(acked func() uint64) { fr.set(func(fr *flowRun) { fr.acked, fr.lastAcked = acked, 0 }) }
	defer fr.set(func(fr *flowRun) { fr.acked, fr.agent = nil, nil })
	if r.flowHeld != nil {
		cfg.Held = r.flowHeld[fr.index]
	}
	if q := r.hostQueues[fl.From]; q != nil {
		cfg.HostQueue = q
	}
	if cfg.Transport == perf.TransportUET {
		cfg.FirstPDCID = r.pdcIDs.next(fl.From)
	}
	// A uet flow's data starts with its senders; RunClient returns after.
	if gate == nil { // a gated flow's data starts at its gate (runGated)
		cfg.OnSenders = func([]*pds.Sender) { in.dataStart, in.dataMono = time.Since(t0), hostlost.Now() }
	}
	cfg.OnAgent = func(a *agent.Agent) {
		fr.set(func(fr *flowRun) { fr.agent = a })
		r.rocev2.Lock()
		r.rocev2.agents = append(r.rocev2.agents, a)
		r.rocev2.Unlock()
	}
	err := node.Do(func() (err error) {
		in.report, err = perf.RunClient(fctx, cfg)
		return err
	})
	in.err = r.cutOrInterrupted(ctx, fctx, budget, err, err == nil && in.report != nil && in.report.Interrupted)
}

// cutOrInterrupted names why an instance stopped early: its budget, or
// the run's cancellation.
func (r *runner) cutOrInterrupted(ctx, fctx context.Context, budget time.Duration, err error, stopped bool) error {
	if !stopped {
		return err
	}
	switch {
	case ctx.Err() == nil && fctx.Err() != nil:
		return fmt.Errorf("cut after %v: not finished within its budget", budget)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return errors.New("cut at the run's deadline: the flows' budgets ran out")
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	return err
}

// sample takes a Sample every report interval until done closes.
func (r *runner) sample(t0 time.Time, flows []*flowRun, res *Result, done <-chan struct{}) {
	tick := time.NewTicker(r.p.Interval)
	defer tick.Stop()
	prev := make([]qdisc.ClassStats, len(r.ports))
	take := func() {
		s := &Sample{T: time.Since(t0).Seconds()}
		for _, fr := range flows {
			fr.mu.Lock()
			fs := FlowSample{Name: fr.plan.Flow.Name, State: fr.state, Instances: len(fr.instances)}
			switch {
			case fr.plan.TCP != nil:
				// What the socket took: the sending rate, send buffer
				// included.
				sent := fr.tcpSent.Load()
				if fr.state == stateRunning {
					fs.GoodputBps = float64(sent-fr.lastSent) * 8 / r.p.Interval.Seconds()
				}
				fr.lastSent = sent
			case fr.state == stateRunning:
				// DCQCN's Rc and α now (the QPs' state), cwnd as of the
				// flow's last interval report; the goodput since the last
				// sample, as the ports' rates.
				sum := &fr.last.Sum
				fs.RcBps, fs.CwndBytes = sum.RcBps, sum.CwndBytes
				if rc, alpha := dcqcnNow(fr.agent); rc > 0 {
					fs.RcBps, fs.Alpha = rc, alpha
				}
				fs.CNPs, fs.Retransmits = sum.CNPHandled, sum.Retransmits
				if fr.acked != nil {
					acked := fr.acked()
					fs.GoodputBps = float64(acked-min(fr.lastAcked, acked)) * 8 / r.p.Interval.Seconds()
					fr.lastAcked = acked
				}
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
				DequeuedBps:    float64(t.DequeuedBytes-prev[i].DequeuedBytes) * 8 / r.p.Interval.Seconds(),
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
		out := flowResult(fr)
		r.p.fillPath(&out, fr.plan)
		res.Flows = append(res.Flows, out)
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
	for i, pp := range r.p.PEs {
		res.PEs = append(res.PEs, r.peResult(i, &pp))
	}
	res.HostQueues = r.hostQueueResults()
	for i, sp := range r.p.Servers {
		switch v := r.servers[i].(type) {
		case *perf.Server:
			c := v.Agent().Counters()
			res.Servers = append(res.Servers, ServerResult{Node: sp.Node, Transport: TransportRoCEv2, Malformed: c.Malformed, ICRCErrors: c.ICRCErrors,
				UnknownQP: c.UnknownQP, WrongPeer: c.WrongPeer, PKeyViolations: c.PKeyViolations, SendErrors: c.SendErrors, ReplyOverruns: c.ReplyOverruns})
		case *perf.UETServer:
			ep := v.Endpoint()
			c := ep.Counters()
			sr := ServerResult{Node: sp.Node, Transport: TransportUET, Malformed: c.Malformed, SendErrors: c.SendErrors, ReplyOverruns: c.ReplyOverruns, Wire: wireResult(&c)}
			if ps := ep.PacerStats(); ps.Grants > 0 {
				sr.Pacer = &ps
			}
			res.Servers = append(res.Servers, sr)
		}
	}
	for _, rd := range r.delays {
		for i := range res.Links {
			if l := &res.Links[i]; l.Relay == rd.relay {
				l.Delays = append(l.Delays, delayResult(rd))
			}
		}
	}
	for i, pp := range r.p.Ports {
		st, err := stableStats(r.ports[i], deadline)
		pr := PortResult{Name: pp.Name, Node: pp.Node, Dev: pp.Dev, RateBps: uint64(pp.Config.Rate), Watched: pp.Watch, Config: &pp.Config}
		if err != nil {
			pr.Error = err.Error()
		} else {
			pr.fill(&st)
			pr.Curves = curves(&st, &pp.Config)
			if q, err := r.ports[i].Qdisc(); err == nil {
				pr.QdiscDroppedPackets = q.Drops
			}
			// Over the timed flows' span (the port's load), else the run.
			sent, secs := st.Total().DequeuedBytes, res.Seconds
			if r.busy.bytes != nil {
				sent, secs = r.busy.bytes[i], r.busy.at.Seconds()
			}
			if secs > 0 && pp.Config.Rate > 0 {
				pr.Utilization = float64(sent) * 8 / (float64(pp.Config.Rate) * secs)
			}
		}
		res.Ports = append(res.Ports, pr)
	}
}

// pdcIDs gives each UET endpoint a host opens its first PDC ID: a host's
// NIC serves its flows in turn by SPDCID modulo its flow queues
// (nicFlowQueues), and endpoints that drew their IDs at random shared a
// queue one pair in 64 (TestNICFlowsTakeTurns failed so). The k-th
// endpoint of a host starts at base + k × pdcIDStride, modulo pdcIDSpan,
// from a base drawn per host and run: its first ID falls in a queue of
// its own for nicFlowQueues endpoints in a row, its next PDCs count up
// through 4 × nicFlowQueues IDs before the next endpoint's, and each run
// draws other IDs and so other ECMP entropies (pds derives a PDC's from
// its ID), as random IDs did.
type pdcIDs struct {
	mu   sync.Mutex
	base map[string]uint32
	n    map[string]uint32
}

// pdcIDSpan is the IDs used, 1..pdcIDSpan: a multiple of nicFlowQueues,
// so the wrap keeps an ID's queue.
const pdcIDSpan = (1<<16 - 1) / nicFlowQueues * nicFlowQueues

// pdcIDStride parts a host's endpoints: one more than a multiple of
// nicFlowQueues, so consecutive endpoints' first IDs fall in consecutive
// queues.
const pdcIDStride = 4*nicFlowQueues + 1

func (p *pdcIDs) next(host string) uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.base == nil {
		p.base, p.n = map[string]uint32{}, map[string]uint32{}
	}
	b, ok := p.base[host]
	if !ok {
		b = rand.Uint32N(pdcIDSpan)
		p.base[host] = b
	}
	k := p.n[host]
	p.n[host] = k + 1
	return uint16(1 + (b+k*pdcIDStride)%pdcIDSpan)
}
