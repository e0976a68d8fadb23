package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

// The devices under the daemon's ports and tunnel PEs can go while it runs
// (ip link del, a driver reload, a NIC unplugged, a VM's interface
// re-created) and come back. The kernel detaches the programs with the
// device; left alone, the daemon would go on reporting a port that no
// longer is one. The device watch notices (a netlink link subscription in
// each namespace the daemon attaches in, and a resync every second, for
// events a full socket lost), detaches what is left of a port or PE whose
// device went, and attaches it again, as configured, when a device of
// that name comes back. Meanwhile /healthz is degraded and lists it under
// "lost", and fabriclab_port_attached / fabriclab_tunnel_pe_attached are 0.

// devResync is how often the watch checks every port and PE, events or not.
const devResync = time.Second

// lost is what a port and a PE waiting for their device share.
type lost struct {
	since time.Time
	err   string // the last reattach failure, "" before any
}

// lostPort is a configured port whose device went away.
type lostPort struct {
	lost
	cfg PortConfig
	q   qdisc.Config
}

// lostPE is a lab file's tunnel PE whose device went away.
type lostPE struct {
	lost
	plan labfile.PEPlan
}

// reattached books the outcome of an attach on a returned device for a
// port or PE (what: "port" or "tunnel PE", logged with attr; its counters
// under key): a failure is logged once per distinct error (the resync
// retries every second) and counted.
func (d *Daemon) reattached(l *lost, key, what string, attr slog.Attr, err error, now time.Time) bool {
	if err != nil {
		if l.err != err.Error() {
			d.log.Error(what+" reattach failed", attr, "err", err)
		}
		l.err = err.Error()
		d.devCount(key).failures++
		return false
	}
	d.devCount(key).reattached++
	d.log.Info(what+" attached again on its new device", attr, "lost_seconds", now.Sub(l.since).Seconds())
	return true
}

// devCounts are a port's or PE's device events since the daemon started.
type devCounts struct {
	lost, reattached, failures uint64
}

// devWatch is the running watch: its namespaces' subscriptions and the
// resync loop.
type devWatch struct {
	netns  []string // the namespaces subscribed to ("" = the daemon's)
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// watchNamespaces are the namespaces the configuration attaches in,
// sorted, the daemon's own ("") first when it has a PE there.
func watchNamespaces(c Config) []string {
	seen := map[string]bool{}
	var out []string
	add := func(ns string) {
		if !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	if len(c.pes()) > 0 {
		add("")
	}
	for _, pc := range c.Ports {
		add(pc.Netns)
	}
	return out
}

// startWatch (re)starts the device watch on the running configuration's
// namespaces; the daemon's lock is held. It is a no-op when they did not
// change.
func (d *Daemon) startWatch() {
	want := watchNamespaces(d.cfg)
	if d.watch != nil && fmt.Sprint(d.watch.netns) == fmt.Sprint(want) {
		return
	}
	d.stopWatchLocked()
	if len(want) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &devWatch{netns: want, cancel: cancel}
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	for _, ns := range want {
		updates := make(chan netlink.LinkUpdate, 64)
		done := make(chan struct{})
		opts := netlink.LinkSubscribeOptions{
			ErrorCallback: func(err error) {
				d.log.Debug("device watch: netlink", "netns", ns, "err", err)
				poke() // a lost event: resync now
			},
		}
		if ns != "" {
			h, err := nsexec.Open(ns)
			if err != nil {
				d.log.Warn("device watch: namespace not watched (the resync still checks it)", "netns", ns, "err", err)
				continue
			}
			opts.Namespace = &h
			err = netlink.LinkSubscribeWithOptions(updates, done, opts)
			h.Close()
			if err != nil {
				d.log.Warn("device watch: namespace not watched (the resync still checks it)", "netns", ns, "err", err)
				continue
			}
		} else if err := netlink.LinkSubscribeWithOptions(updates, done, opts); err != nil {
			d.log.Warn("device watch: not subscribed (the resync still checks)", "err", err)
			continue
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer close(done)
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-updates:
					if !ok {
						return
					}
					poke()
				}
			}
		}()
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(devResync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			case <-t.C:
			}
			d.reconcileDevices(ctx)
		}
	}()
	d.watch = w
}

// stopWatchLocked stops the watch without waiting for it (the daemon's
// lock is held): a resync still in flight finds its context done and
// changes nothing.
func (d *Daemon) stopWatchLocked() {
	if w := d.watch; w != nil {
		d.watch = nil
		w.cancel()
	}
}

// stopWatch stops the device watch and waits for it (Drain, before it
// detaches; no lock held).
func (d *Daemon) stopWatch() {
	d.mu.Lock()
	w := d.watch
	d.watch = nil
	d.mu.Unlock()
	if w != nil {
		w.cancel()
		w.wg.Wait()
	}
}

// devCount is the counters of a port ("port "+key) or PE ("pe "+dev).
func (d *Daemon) devCount(key string) *devCounts {
	c, ok := d.devCounts[key]
	if !ok {
		c = &devCounts{}
		d.devCounts[key] = c
	}
	return c
}

// reconcileDevices detaches what lost its device and reattaches what has
// one again. It holds applyMu (no Apply runs meanwhile; while one does,
// this round is skipped and the next resync comes within devResync) and
// the daemon's lock.
func (d *Daemon) reconcileDevices(ctx context.Context) {
	if !d.applyMu.TryLock() {
		return
	}
	defer d.applyMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining || ctx.Err() != nil {
		return
	}
	now := time.Now()
	changed := false
	for k, p := range d.ports {
		if why := portGone(p); why != "" {
			d.dropAgentsOn(k, "")
			if err := p.p.Close(); err != nil {
				d.log.Debug("lost port: detach what is left", "port", describePort(p.cfg), "err", err)
			}
			unmarkOwned(p.mark)
			delete(d.ports, k)
			d.lostPorts[k] = &lostPort{lost: lost{since: now}, cfg: p.cfg, q: p.q}
			d.devCount("port "+k).lost++
			d.log.Warn("port lost its device: detached, to attach again when it comes back", "port", describePort(p.cfg), "why", why)
			changed = true
		}
	}
	for dev, x := range d.pes {
		if why := peGone(x); why != "" {
			d.dropAgentsOn("", dev)
			if err := x.t.Close(); err != nil {
				d.log.Debug("lost tunnel PE: detach what is left", "dev", dev, "err", err)
			}
			delete(d.pes, dev)
			d.lostPEs[dev] = &lostPE{lost: lost{since: now}, plan: x.plan}
			d.devCount("pe "+dev).lost++
			d.log.Warn("tunnel PE lost its device: detached, to attach again when it comes back", "dev", dev, "why", why)
			changed = true
		}
	}
	for k, lp := range d.lostPorts {
		if !devicePresent(lp.cfg.Netns, lp.cfg.Dev) {
			continue
		}
		p, err := d.attachPort(lp.cfg, lp.q)
		if !d.reattached(&lp.lost, "port "+k, "port", slog.String("port", describePort(lp.cfg)), err, now) {
			continue
		}
		delete(d.lostPorts, k)
		d.ports[k] = p
		changed = true
	}
	for dev, lp := range d.lostPEs {
		if !devicePresent("", dev) {
			continue
		}
		x, err := attachPE(lp.plan)
		if !d.reattached(&lp.lost, "pe "+dev, "tunnel PE", slog.String("dev", dev), err, now) {
			continue
		}
		delete(d.lostPEs, dev)
		d.pes[dev] = x
		changed = true
	}
	if changed {
		d.startAgents(d.cfg)
	}
}

// dropAgentsOn stops the PE agents that drive the port with key limiter or
// read the PE on dev (either may be ""); the daemon's lock is held. They
// start again (startAgents) once what they need is attached.
func (d *Daemon) dropAgentsOn(limiter, dev string) {
	for pdev, x := range d.pes {
		a := x.agent
		if a == nil || (pdev != dev && (limiter == "" || a.limiter != limiter)) {
			continue
		}
		a.close(d.log)
		x.agent = nil
		d.log.Info("pe agent stopped: its device went", "pe", pdev)
	}
}

// portGone says why a port no longer has its device ("" if it has): its
// enqueue link was detached, or the device of its name is missing or
// another one.
func portGone(p *port) string {
	if p.p.Orphaned() {
		return "its programs were detached with the device"
	}
	idx, err := ifindexOf(p.cfg.Netns, p.cfg.Dev)
	switch {
	case errors.As(err, new(netlink.LinkNotFoundError)):
		return "no device " + p.cfg.Dev
	case err != nil:
		return "" // cannot tell (the namespace is unreadable): never guess towards detaching
	case idx != p.p.Info().Ifindex:
		return fmt.Sprintf("%s is another device now (ifindex %d, was %d)", p.cfg.Dev, idx, p.p.Info().Ifindex)
	}
	return ""
}

// peGone is portGone for a tunnel PE.
func peGone(x *pe) string {
	if x.t.Orphaned() {
		return "its programs were detached with the device"
	}
	if _, err := ifindexOf("", x.plan.Dev); errors.As(err, new(netlink.LinkNotFoundError)) {
		return "no device " + x.plan.Dev
	}
	return ""
}

func devicePresent(netnsName, dev string) bool {
	_, err := ifindexOf(netnsName, dev)
	return err == nil
}

// ifindexOf is dev's ifindex in the named namespace ("" = the daemon's).
func ifindexOf(netnsName, dev string) (int, error) {
	ns, err := nsexec.Open(netnsName)
	if err != nil {
		return 0, err
	}
	defer func() {
		if ns.IsOpen() {
			ns.Close()
		}
	}()
	h, err := nsexec.Netlink(ns)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}

// DeviceState is a configured port's or PE's device, for metrics.
type DeviceState struct {
	Kind     string // "port" or "pe"
	Name     string // describePort, or the PE's device
	Attached bool
	devCounts
}

// deviceStates lists the configured ports and PEs with their device
// counters.
func (d *Daemon) deviceStates() []DeviceState {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []DeviceState
	for _, pc := range d.cfg.Ports {
		_, ok := d.ports[pc.key()]
		out = append(out, DeviceState{Kind: "port", Name: describePort(pc), Attached: ok, devCounts: *d.devCount("port " + pc.key())})
	}
	for _, pl := range d.cfg.pes() {
		_, ok := d.pes[pl.Dev]
		out = append(out, DeviceState{Kind: "pe", Name: pl.Dev, Attached: ok, devCounts: *d.devCount("pe " + pl.Dev)})
	}
	return out
}
