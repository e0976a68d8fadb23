package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/tcpflow"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

// Options are what the command line gives besides the file.
type Options struct {
	Logger *slog.Logger
	// Level is the logger's level: the file's log.level sets it.
	Level *slog.LevelVar
}

// Daemon runs one configuration at a time. Its methods are safe for
// concurrent use; Apply and Drain are serialized.
type Daemon struct {
	log   *slog.Logger
	level *slog.LevelVar

	applyMu sync.Mutex // one Apply or Drain at a time

	mu       sync.Mutex
	cfg      Config // the running one, with defaults
	gen      uint64 // configurations applied
	draining bool
	servers  map[string]*server // by ServerConfig.name()
	ports    map[string]*port   // by PortConfig.key()
	pes      map[string]*pe     // by device: a lab file's tunnel PEs
	flows    map[string]*flow   // by name
	// agentStarts counts the PE agents started per device.
	agentStarts map[string]uint64
	// tcpCCs resolves tcp servers' and flows' congestion controls; a
	// BPF DCTCP it registers stays until Drain.
	tcpCCs  tcpflow.CCs
	reloads struct {
		ok, failed uint64
		lastErr    string
		lastOK     time.Time
	}
	// The device watch (devwatch.go): configured ports and PEs whose
	// device went, and every port's and PE's device events.
	watch     *devWatch
	lostPorts map[string]*lostPort // by PortConfig.key()
	lostPEs   map[string]*lostPE   // by device
	devCounts map[string]*devCounts
	// check judges the lab (Lab.Check); own gathers this daemon's
	// metrics for it, in-process.
	check *checker
	own   *prometheus.Registry
}

// New returns a daemon with nothing running; Apply starts a configuration.
func New(o Options) *Daemon {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{log: log, level: o.Level,
		servers: map[string]*server{}, ports: map[string]*port{}, pes: map[string]*pe{}, flows: map[string]*flow{}, agentStarts: map[string]uint64{},
		lostPorts: map[string]*lostPort{}, lostPEs: map[string]*lostPE{}, devCounts: map[string]*devCounts{},
		own: prometheus.NewRegistry()}
	d.own.MustRegister(collector{d})
	return d
}

type server struct {
	cfg   ServerConfig
	roce  *perf.Server    // one of roce, uet, tcp
	uet   *perf.UETServer //
	tcp   *tcpflow.Server //
	stop  context.CancelFunc
	ended chan struct{} // Serve returned (tcp: and its connections ended)
}

func (s *server) drain() {
	switch {
	case s.roce != nil:
		s.roce.Drain()
	case s.uet != nil:
		s.uet.Drain()
	default:
		s.tcp.Shutdown()
	}
}

// close ends the sessions and closes the server.
func (s *server) close() error {
	s.stop()
	if s.tcp != nil {
		err := s.tcp.Close() // resets the connections still open
		<-s.ended
		return err
	}
	<-s.ended
	if s.roce != nil {
		return s.roce.Close()
	}
	return s.uet.Close()
}

// pe is a lab file's tunnel PE on one of this server's devices.
type pe struct {
	plan  labfile.PEPlan
	t     *tunnel.PE
	agent *tunnelAgent // the plan's agent; nil without one
}

func attachPE(pl labfile.PEPlan) (*pe, error) {
	t, err := tunnel.Attach("", pl.Dev, pl.Config, tunnel.AttachOptions{})
	if err != nil {
		return nil, err
	}
	return &pe{plan: pl, t: t}, nil
}

type port struct {
	cfg  PortConfig
	q    qdisc.Config
	p    *qdisc.Port
	mark string // its ownership mark (OwnershipMark), "" if none was written
}

// Apply makes c the running configuration: what is new starts, what is
// gone stops, what changed is changed in place where it can be (port
// AQMs) and restarted where it cannot (a server's limits, a flow's
// settings), and what is the same keeps running untouched. If c is invalid
// or a new server or port cannot start, nothing changes and the error says
// why.
func (d *Daemon) Apply(c *Config) error {
	if err := c.Validate(); err != nil {
		d.failed(err)
		return err
	}
	d.applyMu.Lock()
	defer d.applyMu.Unlock()
	d.mu.Lock()
	if d.draining {
		d.mu.Unlock()
		return errors.New("draining: not applying a configuration")
	}
	old := d.cfg
	d.mu.Unlock()
	nc := c.WithDefaults()

	// Prepare what may fail, undoing it all on the first failure.
	var undo []func()
	rollback := func(err error) error {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		d.failed(err)
		return err
	}
	newServers := map[string]*server{}
	restarted := map[string]bool{}
	for i, sc := range nc.Servers {
		k := sc.name()
		if cur, ok := d.servers[k]; ok {
			if reflect.DeepEqual(cur.cfg, sc) {
				continue
			}
			restarted[k] = true // same socket: reopened in the commit
			continue
		}
		s, err := d.startServer(sc)
		if err != nil {
			return rollback(fmt.Errorf("servers[%d] (%s): %w", i, k, err))
		}
		newServers[k] = s
		undo = append(undo, func() { _ = s.close() })
	}
	newPorts := map[string]*port{}
	touched := map[string]bool{} // ports configured anew: their agents restart
	for i, pc := range nc.Ports {
		q, _ := pc.qdiscConfig("") // validated
		k := pc.key()
		if cur, ok := d.ports[k]; ok {
			if cur.cfg.Mode != pc.Mode {
				return rollback(fmt.Errorf("ports[%d].mode %s: a port's mode cannot change live (it is %s): remove the port, reload, add it again", i, pc.Mode, cur.cfg.Mode))
			}
			if cur.cfg.Shape != pc.Shape {
				return rollback(fmt.Errorf("ports[%d].shape %v: shaping cannot change live (it is %v): remove the port, reload, add it again", i, pc.Shape, cur.cfg.Shape))
			}
			if reflect.DeepEqual(cur.q, q) {
				continue
			}
			// A PE agent's limiter runs at the agent's rate, not its
			// configured one: a refused reload puts that back too.
			prev, liveRate := cur.q, cur.q.Rate
			if live, err := cur.p.Config(); err == nil {
				liveRate = live.Rate
			}
			touched[k] = true
			if err := cur.p.Configure(q); err != nil {
				return rollback(fmt.Errorf("ports[%d] (%s): %w", i, describePort(pc), err))
			}
			undo = append(undo, func() {
				_ = cur.p.Configure(prev)
				if liveRate != prev.Rate {
					_ = cur.p.SetRate(liveRate)
				}
			})
			continue
		}
		if _, ok := d.lostPorts[k]; ok {
			continue // its device is gone: attached, as configured then, when it comes back
		}
		p, err := d.attachPort(pc, q)
		if err != nil {
			return rollback(fmt.Errorf("ports[%d] (%s): %w", i, describePort(pc), err))
		}
		newPorts[k] = p
		undo = append(undo, func() { _ = p.p.Close() })
	}

	newPEs := map[string]*pe{}
	changedPEs := map[string]labfile.PEPlan{}
	for _, pl := range nc.pes() {
		if cur, ok := d.pes[pl.Dev]; ok {
			if !reflect.DeepEqual(cur.plan, pl) {
				changedPEs[pl.Dev] = pl // the device's programs: replaced in the commit
			}
			continue
		}
		if _, ok := d.lostPEs[pl.Dev]; ok {
			continue // its device is gone (devwatch.go)
		}
		x, err := attachPE(pl)
		if err != nil {
			return rollback(fmt.Errorf("lab %s: tunnel PE on %s: %w", nc.Lab.Node, pl.Dev, err))
		}
		newPEs[pl.Dev] = x
		undo = append(undo, func() { _ = x.t.Close() })
	}

	// Commit: nothing below fails the reload (a restarted server that
	// cannot listen again is logged and missing from /healthz).
	d.mu.Lock()
	defer d.mu.Unlock()
	// PE agents whose tunnel or limiter port changes or goes stop first;
	// they start again below, on what is then attached (a rate agent at
	// its limiter's line rate).
	keepPE := map[string]labfile.PEPlan{}
	for _, pl := range nc.pes() {
		keepPE[pl.Dev] = pl
	}
	for dev, x := range d.pes {
		pl, kept := keepPE[dev]
		_, changed := changedPEs[dev]
		// A failed agent starts again on any reload.
		if a := x.agent; a != nil && (!kept || changed || touched[a.limiter] || pl.Agent == nil || a.failure() != "") {
			a.close(d.log)
			x.agent = nil
			d.log.Info("pe agent stopped", "pe", dev)
		}
	}
	keep := map[string]bool{}
	for _, sc := range nc.Servers {
		keep[sc.name()] = true
	}
	for k, s := range d.servers {
		if !keep[k] || restarted[k] {
			if err := s.close(); err != nil {
				d.log.Warn("server close", "server", k, "err", err)
			}
			delete(d.servers, k)
			d.log.Info("server stopped", "server", k)
		}
	}
	for _, sc := range nc.Servers {
		k := sc.name()
		if restarted[k] {
			s, err := d.startServer(sc)
			if err != nil {
				d.log.Error("server restart failed", "server", k, "err", err)
				continue
			}
			newServers[k] = s
		}
	}
	for k, s := range newServers {
		d.servers[k] = s
		d.log.Info("server started", "server", k)
	}
	keep = map[string]bool{}
	for _, pc := range nc.Ports {
		keep[pc.key()] = true
		if cur, ok := d.ports[pc.key()]; ok {
			q, _ := pc.qdiscConfig("")
			if !reflect.DeepEqual(cur.q, q) {
				d.log.Info("port reconfigured", "port", describePort(pc))
			}
			cur.cfg, cur.q = pc, q
		}
	}
	for k, p := range d.ports {
		if !keep[k] {
			if err := p.p.Close(); err != nil {
				d.log.Warn("port detach", "port", describePort(p.cfg), "err", err)
			}
			unmarkOwned(p.mark)
			delete(d.ports, k)
			d.log.Info("port detached", "port", describePort(p.cfg))
		}
	}
	for k, lp := range d.lostPorts {
		if !keep[k] {
			delete(d.lostPorts, k)
			d.log.Info("port removed while its device is gone", "port", describePort(lp.cfg))
		}
	}
	for _, pc := range nc.Ports {
		if lp, ok := d.lostPorts[pc.key()]; ok {
			lp.cfg = pc
			lp.q, _ = pc.qdiscConfig("")
		}
	}
	for k, p := range newPorts {
		d.ports[k] = p
		d.log.Info("port attached", "port", describePort(p.cfg), "rate", p.cfg.Rate.String(), "mode", p.cfg.Mode)
	}
	keep = map[string]bool{}
	for _, pl := range nc.pes() {
		keep[pl.Dev] = true
	}
	for dev, x := range d.pes {
		if _, changed := changedPEs[dev]; changed || !keep[dev] {
			if err := x.t.Close(); err != nil {
				d.log.Warn("tunnel PE detach", "dev", dev, "err", err)
			}
			delete(d.pes, dev)
		}
	}
	for dev, lp := range d.lostPEs {
		if pl, ok := keepPE[dev]; ok {
			lp.plan = pl
		} else {
			delete(d.lostPEs, dev)
			d.log.Info("tunnel PE removed while its device is gone", "dev", dev)
		}
	}
	for dev, pl := range changedPEs {
		x, err := attachPE(pl)
		if err != nil {
			d.log.Error("tunnel PE reattach failed", "dev", dev, "err", err)
			continue
		}
		newPEs[dev] = x
	}
	for dev, x := range newPEs {
		d.pes[dev] = x
		d.log.Info("tunnel PE attached", "dev", dev, "local", x.plan.Config.Local.String())
	}
	d.startAgents(nc)
	// Flows: the same name and settings (profiles resolved) keep running.
	want := map[string]perf.ClientConfig{}
	wantTCP := map[string]tcpflow.Conn{}
	for i, f := range nc.Flows {
		p := fmt.Sprintf("flows[%d]", i)
		if f.Transport == labfile.TransportTCP {
			wantTCP[f.Name], _ = nc.tcpConn(p, f)
			continue
		}
		cc, _ := nc.clientConfig(p, f)
		want[f.Name] = cc
	}
	for name, fl := range d.flows {
		same := false
		if tc, ok := wantTCP[name]; ok {
			same = fl.tcp != nil && *fl.tcp == tc
		} else if w, ok := want[name]; ok {
			same = fl.tcp == nil && sameClient(fl.cc, w)
		}
		if same && reflect.DeepEqual(fl.spec, flowSpecOf(nc, name)) {
			continue
		}
		fl.stop()
		delete(d.flows, name)
		d.log.Info("flow stopped", "flow", name)
	}
	for _, f := range nc.Flows {
		if _, ok := d.flows[f.Name]; ok {
			continue
		}
		var fl *flow
		if tc, ok := wantTCP[f.Name]; ok {
			fl = d.startTCPFlow(f, tc)
		} else {
			fl = d.startFlow(f, want[f.Name])
		}
		d.flows[f.Name] = fl
	}
	if d.level != nil {
		_ = d.level.UnmarshalText([]byte(nc.Log.Level))
	}
	d.restartCheck(old, nc)
	d.cfg = nc
	d.startWatch()
	d.gen++
	d.reloads.ok++
	d.reloads.lastErr = ""
	d.reloads.lastOK = time.Now()
	d.log.Info("configuration applied", "generation", d.gen, "servers", len(d.servers), "ports", len(d.ports), "flows", len(d.flows),
		"was_servers", len(old.Servers), "was_ports", len(old.Ports), "was_flows", len(old.Flows))
	return nil
}

// restartCheck starts, stops or restarts the lab check as nc differs
// from old (the daemon's lock held): a check whose settings, node,
// variant and file are the same keeps its window going.
func (d *Daemon) restartCheck(old, nc Config) {
	same := old.Lab != nil && nc.Lab != nil && reflect.DeepEqual(*old.Lab, *nc.Lab) && old.labSum == nc.labSum
	if same && (d.check != nil) == (nc.Lab.Check != nil) {
		return
	}
	if d.check != nil {
		d.check.close() // not waited for: it may be gathering our metrics, which takes the lock
		d.check = nil
		d.log.Info("lab check stopped")
	}
	if nc.Lab == nil || nc.Lab.Check == nil {
		return
	}
	d.check = newChecker(*nc.Lab.Check, nc.labFile, nc.Lab.Node, nc.Lab.Variant, d.own)
	go d.check.run()
	d.log.Info("lab check started", "node", nc.Lab.Node, "window", d.check.cfg.Window.String(), "flows", d.check.cfg.Flows)
}

// CheckState is the lab check's last verdicts; ok false without one.
func (d *Daemon) CheckState() (CheckState, bool) {
	d.mu.Lock()
	c := d.check
	d.mu.Unlock()
	if c == nil {
		return CheckState{}, false
	}
	return c.State(), true
}

// startAgents starts the agents of c's PEs that are attached and have
// none running (the daemon's lock held): after Apply, and after the device
// watch attached a PE or a limiter port again.
func (d *Daemon) startAgents(c Config) {
	for _, pl := range c.pes() {
		x, ok := d.pes[pl.Dev]
		if !ok || pl.Agent == nil || x.agent != nil {
			continue
		}
		if err := d.startAgent(x, c.deploy); err != nil {
			d.log.Error("pe agent failed to start", "pe", pl.Dev, "err", err)
		}
	}
}

// Refuse records a configuration that could not even be read (Load
// failed), as Apply records one it refuses: /healthz and the reload
// metrics show it.
func (d *Daemon) Refuse(err error) { d.failed(err) }

func (d *Daemon) failed(err error) {
	d.mu.Lock()
	d.reloads.failed++
	d.reloads.lastErr = err.Error()
	d.mu.Unlock()
}

func flowSpecOf(c Config, name string) FlowConfig {
	for _, f := range c.Flows {
		if f.Name == name {
			return f
		}
	}
	return FlowConfig{}
}

// sameClient compares two client runs' settings (not their hooks).
func sameClient(a, b perf.ClientConfig) bool {
	a.OnAgent, a.OnEndpoint, a.OnInterval, a.Logger, a.Out = nil, nil, nil, nil, nil
	b.OnAgent, b.OnEndpoint, b.OnInterval, b.Logger, b.Out = nil, nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

func (d *Daemon) startServer(sc ServerConfig) (*server, error) {
	pc := sc.perfConfig()
	pc.Logger = d.log.With("server", sc.name())
	s := &server{cfg: sc, ended: make(chan struct{})}
	var serve func(context.Context) error
	switch sc.Transport {
	case labfile.TransportTCP:
		cc, err := d.resolveCC(sc.CC)
		if err != nil {
			return nil, err
		}
		bind := netip.IPv4Unspecified()
		if sc.Bind.IsValid() {
			bind = sc.Bind
		}
		t, err := tcpflow.Listen(nil, netip.AddrPortFrom(bind, uint16(sc.Port)), cc)
		if err != nil {
			return nil, err
		}
		s.tcp = t
		serve = func(ctx context.Context) error {
			err := t.Serve(ctx)
			t.Wait()
			return err
		}
	case perf.TransportUET:
		u, err := perf.ListenUET(pc)
		if err != nil {
			return nil, err
		}
		s.uet, serve = u, u.Serve
	default:
		r, err := perf.Listen(pc)
		if err != nil {
			return nil, err
		}
		s.roce, serve = r, r.Serve
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() {
		defer close(s.ended)
		if err := serve(ctx); err != nil {
			d.log.Error("server failed", "server", sc.name(), "err", err)
		}
	}()
	return s, nil
}

func describePort(pc PortConfig) string {
	if pc.Netns == "" {
		return pc.Dev
	}
	return pc.Netns + "/" + pc.Dev
}

// SweepStale removes the pins of ports and tunnel PEs whose device went away
// while they were attached and whose owner is gone (qdisc.SweepStale,
// tunnel.SweepStale), logging each, and returns their pin directories.
// fabriclabd runs it once at start, before its own ports attach.
func (d *Daemon) SweepStale() []string {
	var swept []string
	for _, s := range []struct {
		what  string
		sweep func() ([]string, error)
	}{{"port", qdisc.SweepStale}, {"tunnel PE", tunnel.SweepStale}} {
		dirs, err := s.sweep()
		for _, dir := range dirs {
			d.log.Info("swept the pins of a "+s.what+" whose device is gone", "pins", dir)
		}
		if err != nil {
			d.log.Warn("sweep", "what", s.what, "err", err)
		}
		swept = append(swept, dirs...)
	}
	return swept
}

// attachPort attaches a port, pinned so that portctl show and stats see
// it. A port this daemon left pinned (it was killed) is detached first.
func (d *Daemon) attachPort(pc PortConfig, q qdisc.Config) (*port, error) {
	var mode qdisc.QueueMode
	_ = mode.UnmarshalText([]byte(pc.Mode))
	opts := qdisc.AttachOptions{Dev: pc.Dev, Netns: pc.Netns, Mode: mode, Shape: pc.Shape, Pin: true}
	p, err := qdisc.Attach(q, opts)
	if err != nil && ownedLeftover(pc) {
		d.log.Warn("detaching a port left attached by an earlier fabriclabd", "port", describePort(pc))
		if ferr := qdisc.Forget(pc.Netns, pc.Dev); ferr != nil {
			d.log.Warn("detach leftover", "port", describePort(pc), "err", ferr)
		}
		p, err = qdisc.Attach(q, opts)
	}
	if err != nil {
		return nil, err
	}
	return &port{cfg: pc, q: q, p: p, mark: markOwned(pc)}, nil
}

// Drain stops taking sessions, lets those in progress end (at most
// timeout, then ends them), stops the flows and detaches the ports.
// Nothing the daemon started is left running.
func (d *Daemon) Drain(timeout time.Duration) error {
	d.stopWatch() // before anything is detached: nothing is attached again behind it
	d.applyMu.Lock()
	defer d.applyMu.Unlock()
	d.mu.Lock()
	d.draining = true
	if c := d.check; c != nil {
		d.check = nil
		c.close()
		defer c.wait() // after the lock: an evaluation gathers our metrics
	}
	servers := make([]*server, 0, len(d.servers))
	for _, s := range d.servers {
		servers = append(servers, s)
	}
	flows := d.flows
	d.flows = map[string]*flow{}
	d.mu.Unlock()

	d.log.Info("draining", "servers", len(servers), "flows", len(flows), "timeout", timeout.String())
	for _, fl := range flows {
		fl.stop()
	}
	for _, s := range servers {
		s.drain()
	}
	deadline := time.After(timeout)
	for _, s := range servers {
		select {
		case <-s.ended:
		case <-deadline:
			d.log.Warn("drain timeout: ending the sessions in progress", "server", s.cfg.name())
		}
	}
	var errs []error
	d.mu.Lock()
	defer d.mu.Unlock()
	// Agents before the ports they drive and the tunnels they read.
	for _, x := range d.pes {
		if x.agent != nil {
			x.agent.close(d.log)
			x.agent = nil
		}
	}
	for k, s := range d.servers {
		errs = append(errs, s.close())
		delete(d.servers, k)
	}
	for k, p := range d.ports {
		if err := p.p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("port %s: %w", describePort(p.cfg), err))
		}
		unmarkOwned(p.mark)
		delete(d.ports, k)
	}
	for dev, x := range d.pes {
		if err := x.t.Close(); err != nil {
			errs = append(errs, fmt.Errorf("tunnel PE %s: %w", dev, err))
		}
		delete(d.pes, dev)
	}
	// After the sockets: none uses a BPF DCTCP registered for them.
	if err := d.tcpCCs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("BPF DCTCP: %w", err))
	}
	d.log.Info("drained")
	return errors.Join(errs...)
}

// Health is what /healthz reports.
type Health struct {
	Status     string         `json:"status"` // ok, degraded (a configured server or port is missing), draining
	Generation uint64         `json:"generation"`
	Servers    []ServerHealth `json:"servers"`
	Ports      []string       `json:"ports"`
	PEs        []string       `json:"tunnel_pes"`
	Agents     []AgentHealth  `json:"pe_agents"`
	Flows      []FlowHealth   `json:"flows"`
	// Lost are the configured ports and PEs whose device went away: each
	// is attached again when a device of its name comes back.
	Lost            []LostHealth `json:"lost,omitempty"`
	ReloadsOK       uint64       `json:"reloads_ok"`
	ReloadsFailed   uint64       `json:"reloads_failed"`
	LastReloadError string       `json:"last_reload_error,omitempty"`
}

// LostHealth is a port or PE waiting for its device.
type LostHealth struct {
	Kind        string  `json:"kind"` // port, tunnel_pe
	Name        string  `json:"name"`
	LostSeconds float64 `json:"lost_seconds"`
	ReattachErr string  `json:"reattach_error,omitempty"`
}

// ServerHealth is one server's sessions.
type ServerHealth struct {
	Name     string `json:"name"`
	Sessions int    `json:"sessions"`
}

// AgentHealth is a PE agent's state.
type AgentHealth struct {
	Dev   string `json:"dev"`
	Mode  string `json:"mode"`
	State string `json:"state"` // running, failed
	Error string `json:"error,omitempty"`
}

// FlowHealth is one flow's progress.
type FlowHealth struct {
	Name      string `json:"name"`
	State     string `json:"state"` // waiting, running, pausing, done, failed
	Runs      uint64 `json:"runs"`
	Failures  uint64 `json:"failures"`
	LastError string `json:"last_error,omitempty"`
}

// Health reports the running configuration.
func (d *Daemon) Health() Health {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := Health{Status: "ok", Generation: d.gen, ReloadsOK: d.reloads.ok, ReloadsFailed: d.reloads.failed,
		LastReloadError: d.reloads.lastErr, Servers: []ServerHealth{}, Ports: []string{}, PEs: []string{}, Agents: []AgentHealth{}, Flows: []FlowHealth{}}
	for _, sc := range d.cfg.Servers {
		s, ok := d.servers[sc.name()]
		if !ok {
			h.Status = "degraded"
			continue
		}
		sh := ServerHealth{Name: sc.name()}
		switch {
		case s.roce != nil:
			sh.Sessions = s.roce.Sessions()
		case s.uet != nil:
			sh.Sessions = s.uet.Stats().Sessions
		default:
			sh.Sessions = s.tcp.Open()
		}
		h.Servers = append(h.Servers, sh)
	}
	for _, pc := range d.cfg.Ports {
		if _, ok := d.ports[pc.key()]; ok {
			h.Ports = append(h.Ports, describePort(pc))
		} else {
			h.Status = "degraded"
			if lp, ok := d.lostPorts[pc.key()]; ok {
				h.Lost = append(h.Lost, LostHealth{Kind: "port", Name: describePort(pc), LostSeconds: time.Since(lp.since).Seconds(), ReattachErr: lp.err})
			}
		}
	}
	for _, pl := range d.cfg.pes() {
		x, ok := d.pes[pl.Dev]
		if ok {
			h.PEs = append(h.PEs, pl.Dev)
		} else {
			h.Status = "degraded"
			if lp, ok := d.lostPEs[pl.Dev]; ok {
				h.Lost = append(h.Lost, LostHealth{Kind: "tunnel_pe", Name: pl.Dev, LostSeconds: time.Since(lp.since).Seconds(), ReattachErr: lp.err})
			}
		}
		if pl.Agent == nil {
			continue
		}
		ah := AgentHealth{Dev: pl.Dev, Mode: pl.Agent.Mode.String(), State: "running"}
		switch {
		case !ok || x.agent == nil:
			ah.State, ah.Error = "failed", "not running (see the log)"
		default:
			if f := x.agent.failure(); f != "" {
				ah.State, ah.Error = "failed", f
			}
		}
		if ah.State != "running" {
			h.Status = "degraded"
		}
		h.Agents = append(h.Agents, ah)
	}
	for _, fc := range d.cfg.Flows {
		if fl, ok := d.flows[fc.Name]; ok {
			h.Flows = append(h.Flows, fl.health())
		}
	}
	if d.draining {
		h.Status = "draining"
	}
	return h
}

// Live handles, for metrics: taken under the daemon's lock.
type liveServer struct {
	name  string
	agent *agent.Agent
	side  *agent.Server
	ep    *pds.Endpoint
	uet   *perf.UETServer
	tcp   *tcpflow.Server
}

// livePE is a tunnel PE and its agent as they were at the snapshot.
type livePE struct {
	*pe
	agent *tunnelAgent
}

func (d *Daemon) snapshot() (servers []liveServer, ports []*port, pes []livePE, flows []*flow) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, sc := range d.cfg.Servers {
		s, ok := d.servers[sc.name()]
		if !ok {
			continue
		}
		ls := liveServer{name: sc.name()}
		switch {
		case s.roce != nil:
			ls.agent, ls.side = s.roce.Agent(), s.roce.SideChannel()
		case s.uet != nil:
			ls.ep, ls.uet = s.uet.Endpoint(), s.uet
		default:
			ls.tcp = s.tcp
		}
		servers = append(servers, ls)
	}
	for _, pc := range d.cfg.Ports {
		if p, ok := d.ports[pc.key()]; ok {
			ports = append(ports, p)
		}
	}
	for _, pl := range d.cfg.pes() {
		if x, ok := d.pes[pl.Dev]; ok {
			pes = append(pes, livePE{pe: x, agent: x.agent})
		}
	}
	for _, fc := range d.cfg.Flows {
		if fl, ok := d.flows[fc.Name]; ok {
			flows = append(flows, fl)
		}
	}
	return servers, ports, pes, flows
}
