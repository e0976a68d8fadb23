package qdisc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/fabriclab/fabriclab/qdisc/ethfeat"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
	"github.com/fabriclab/fabriclab/qdisc/pinning"
	"github.com/fabriclab/fabriclab/qdisc/units"
	"github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/dispatch"
)

// PinRoot is where an attached port pins its maps and links.
const PinRoot = pinning.Root

// Paths where an attached port is recorded so that later commands (stats,
// configure, detach) find it after the attaching process has exited.
var (
	MetaRoot = "/run/fabriclab/ports"
)

// AttachMode says how the programs are hooked to the devices.
type AttachMode string

const (
	AttachTCX    AttachMode = "tcx"    // BPF links, kernel >= 6.6
	AttachLegacy AttachMode = "legacy" // clsact qdisc + cls_bpf filter
)

// DepartureHook says where a port counts a packet leaving its queue.
type DepartureHook string

const (
	// DepartXmit: where HTB hands the packet to the port device
	// (tp_btf/net_dev_start_xmit). The backlog, the sojourn and the
	// dequeue AQMs exclude the kernel's per-CPU backlog between HTB and the
	// peer (the host queue), which HostQueueStats count apart.
	DepartXmit DepartureHook = "xmit"
	// DepartPeerIngress: at the veth peer's TC ingress. The host queue
	// counts as port queue. The fallback where the tracepoint cannot be
	// used (no BTF, no tp_btf, kernels before 5.18).
	DepartPeerIngress DepartureHook = "peer-ingress"
)

// UnmarshalText accepts "xmit" and "peer-ingress".
func (d *DepartureHook) UnmarshalText(b []byte) error {
	switch v := DepartureHook(b); v {
	case DepartXmit, DepartPeerIngress:
		*d = v
		return nil
	}
	return fmt.Errorf("departure %q: want %s or %s", b, DepartXmit, DepartPeerIngress)
}

// AttachOptions say where the port goes.
type AttachOptions struct {
	// Dev is the port device: its egress is the port.
	Dev string
	// Netns is the device's namespace: a name under /var/run/netns or a
	// path. Optional: "" is the caller's namespace.
	Netns string
	// Mode is QueueVeth (default) or QueueVirtual.
	Mode QueueMode
	// PeerDev and PeerNetns name the veth peer that runs the dequeue
	// program. Optional: found from the veth itself when empty.
	PeerDev   string
	PeerNetns string
	// Legacy forces clsact + cls_bpf even where TCX exists.
	Legacy bool
	// NoShaping leaves the device's root qdisc alone: no HTB classes, no
	// port-speed queue. Virtual-queue ports install HTB only with Shape.
	NoShaping bool
	// Shape installs the port's HTB tree on a virtual-queue port too, so
	// that the device really sends at the port rate: a port slower than
	// the NIC under it (a PE's rate limiter on a lab server). The virtual
	// queue, which drains at the same rate, still decides marks and
	// drops; HTB's queue is the real one, within a burst (100 µs at the
	// rate) of it, and its counters are the port's Qdisc(). Veth ports
	// shape unless NoShaping.
	Shape bool
	// Pin records the port in bpffs and under MetaRoot so it outlives the
	// process (the CLI). Unpinned ports detach when closed.
	Pin bool
	// Departure is where a veth port counts departures. Optional: ""
	// takes DepartXmit where the kernel allows it and falls back to
	// DepartPeerIngress (Info says which and why); DepartXmit fails
	// instead of falling back.
	Departure DepartureHook
	// XmitOwnProgram attaches the port's xmit hook to the tracepoint
	// itself rather than through the machine's xmit dispatcher: every
	// transmission of the machine then runs it, as before the dispatcher
	// (for measuring the program alone). Ports attached without TCX always
	// do: the dispatcher frees a slot when its port's TCX link ends.
	XmitOwnProgram bool
}

// portMeta is what a pinned port records about itself.
type portMeta struct {
	Dev         string     `json:"dev"`
	Ifindex     int        `json:"ifindex"`
	Netns       string     `json:"netns,omitempty"`
	PeerDev     string     `json:"peer_dev,omitempty"`
	PeerIfindex int        `json:"peer_ifindex,omitempty"`
	PeerNetns   string     `json:"peer_netns,omitempty"`
	Mode        QueueMode  `json:"queue_mode"`
	Attach      AttachMode `json:"attach"`
	HTB         bool       `json:"htb"`
	// HTBCeilBps is the rate the leaf classes' ceilings were last set at:
	// SetRate changes the port class alone up to it.
	HTBCeilBps   uint64 `json:"htb_ceil_bps,omitempty"`
	PinDir       string `json:"pin_dir,omitempty"`
	Config       Config `json:"config"`
	LegacyHandle uint32 `json:"legacy_handle,omitempty"`
	// FrameBytes is the device's MTU plus its Ethernet header (CoDel).
	FrameBytes uint64 `json:"frame_bytes,omitempty"`
	// Hooks' Departure is empty for virtual-queue ports and ports
	// recorded before the xmit hook existed (they count at the peer's
	// ingress).
	Hooks
	// PPFCAttached: ppfc_egress was attached (a port whose classes
	// notify, now or since a configure).
	PPFCAttached bool `json:"ppfc_attached,omitempty"`
}

// Port is an attached switch egress port.
type Port struct {
	mu struct {
		sync.Mutex
		cfg    Config
		closed bool
		// rateTC is SetRate's rtnetlink socket, kept open: a new one in
		// a namespace is a thread handoff and a setns, several ms on a
		// busy machine, in a PE agent's reaction (TestWANNotify).
		rateTC *tc.Tc
	}
	meta   portMeta
	ns     netns.NsHandle
	peerNS netns.NsHandle
	maps   bpf.PortMaps
	progs  bpf.PortPrograms // nil when opened from pins
	links  []link.Link
}

// Attach loads the programs with cfg and attaches them to the device (and,
// in veth mode, to its peer).
func Attach(cfg Config, opts AttachOptions) (_ *Port, err error) {
	if opts.Dev == "" {
		return nil, errors.New("attach: dev is required")
	}
	p := &Port{ns: netns.None(), peerNS: netns.None()}
	defer func() {
		if err != nil {
			p.teardown()
		}
	}()
	p.meta = portMeta{Dev: opts.Dev, Netns: opts.Netns, Mode: opts.Mode, Attach: AttachTCX}
	if opts.Legacy {
		p.meta.Attach = AttachLegacy
	}
	if p.ns, err = openNetns(opts.Netns); err != nil {
		return nil, err
	}
	if p.meta.Ifindex, err = ifindexIn(p.ns, opts.Dev); err != nil {
		return nil, err
	}
	if p.meta.FrameBytes, err = frameBytesIn(p.ns, opts.Dev); err != nil {
		return nil, err
	}
	if opts.Pin {
		// Before anything is attached: a pin nobody else can see is no pin.
		if err := pinning.EnsureBPFFS(); err != nil {
			return nil, fmt.Errorf("attach %s: %w", describeDev(opts.Netns, opts.Dev), err)
		}
		// Check before claiming the pin directory: a failed attach tears
		// down what it claimed, and this one belongs to the other port.
		dir := pinDir(p.ns, opts.Dev)
		if _, err := os.Stat(metaPath(dir)); err == nil {
			if !stalePort(opts.Netns, opts.Dev) {
				return nil, fmt.Errorf("attach: a port is already attached to %s; detach it first", describeDev(opts.Netns, opts.Dev))
			}
			// A record left by a namespace that is gone, whose inode this
			// one reuses (pin directories are named after it): its pins
			// and record go, and nothing of this namespace is touched.
			if err := removeRecord(dir); err != nil {
				return nil, fmt.Errorf("attach: removing a stale port record on %s: %w", describeDev(opts.Netns, opts.Dev), err)
			}
		}
		p.meta.PinDir = dir
	}
	if opts.Mode == QueueVeth {
		if err := p.findPeer(opts); err != nil {
			return nil, err
		}
	}

	base := uint32(0)
	if opts.Shape && (opts.Mode != QueueVirtual || opts.NoShaping) {
		return nil, fmt.Errorf("attach: shape is for virtual-queue ports without no-shaping (this port is %s)", opts.Mode)
	}
	p.meta.HTB = (opts.Mode == QueueVeth && !opts.NoShaping) || opts.Shape
	if p.meta.HTB {
		base = priorityBase
	} else if c, ok := cfg.flowQueueClass(); ok {
		return nil, fmt.Errorf("attach: class %d: flow_queues (%d) needs the port's HTB queues (queue mode veth, or shape; this port is %s without)", c, cfg.Classes[c].FlowQueues, opts.Mode)
	}
	lo := LoadOptions{FrameBytes: p.meta.FrameBytes, Ifindex: p.meta.Ifindex}
	wantXmit := opts.Mode == QueueVeth && opts.Departure != DepartPeerIngress
	if opts.Mode == QueueVeth {
		p.meta.Departure = DepartPeerIngress
		if !wantXmit {
			p.meta.DepartureNote = "requested"
		}
	} else if opts.Departure != "" {
		return nil, fmt.Errorf("attach: departure %s needs queue mode veth (this port is %s)", opts.Departure, opts.Mode)
	}
	if wantXmit {
		ino, err := netnsIno(p.ns)
		if err != nil {
			return nil, err
		}
		lo.Xmit = &XmitTarget{Ifindex: p.meta.Ifindex, NetnsIno: ino}
	}
	objs, err := LoadObjects(cfg, opts.Mode, base, lo)
	if err != nil {
		return nil, err
	}
	p.maps, p.progs = objs.PortMaps, objs.PortPrograms
	p.mu.cfg = cfg
	p.meta.Config = cfg

	if p.meta.HTB {
		p.meta.HTBCeilBps = uint64(cfg.Rate)
		if err := installHTB(p.ns, uint32(p.meta.Ifindex), &cfg, p.meta.Mode == QueueVirtual); err != nil {
			return nil, err
		}
	}
	// Dequeue first: a packet stamped at enqueue must find its departure
	// counted, or the backlog would keep it forever.
	if opts.Mode == QueueVeth {
		if err := p.attachProg(p.peerNS, p.meta.PeerIfindex, p.progs.PortDequeue, ebpf.AttachTCXIngress); err != nil {
			return nil, fmt.Errorf("attach dequeue to %s: %w", describeDev(p.meta.PeerNetns, p.meta.PeerDev), err)
		}
	}
	// Then the xmit hook, before any packet is stamped: from here on a
	// departure port_xmit does not hand over is counted by the peer.
	if wantXmit {
		if err := p.attachXmit(objs, lo.Xmit, opts.XmitOwnProgram); err != nil {
			if opts.Departure == DepartXmit {
				return nil, err
			}
			p.meta.DepartureNote = "fallback: " + err.Error()
		}
	}
	// PPFC notifications leave through the namespace's other devices
	// (toward the sources): ppfc_egress there first, so that a clone
	// port_enqueue makes always finds it. Only for a port whose classes
	// notify (Configure attaches it when they start to): it runs on every
	// packet of every other device, and a TCX hook holds at most 64
	// programs, so a 64-port switch could not give each of its ports one
	// on every other device.
	if cfg.Notifies() {
		if err := p.attachPPFC(); err != nil {
			return nil, err
		}
	}
	if err := p.attachProg(p.ns, p.meta.Ifindex, p.progs.PortEnqueue, ebpf.AttachTCXEgress); err != nil {
		return nil, fmt.Errorf("attach enqueue to %s: %w", describeDev(opts.Netns, opts.Dev), err)
	}
	if opts.Pin {
		if err := p.pin(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// attachPPFC attaches ppfc_egress at the egress of every device of the
// port's namespace but the port's own and loopback: the devices present
// now. A device added later sends no PPFC notification. On error it
// detaches what it attached.
func (p *Port) attachPPFC() (err error) {
	if p.progs.PpfcEgress == nil {
		return errors.New("attach ppfc: ppfc_egress is not loaded (a port pinned without it): detach and attach again")
	}
	n := len(p.links)
	defer func() {
		if err == nil {
			p.meta.PPFCAttached = true
			return
		}
		for _, l := range p.links[n:] {
			l.Close()
		}
		p.links = p.links[:n]
		if p.meta.Attach == AttachLegacy {
			for _, i := range p.meta.PPFCIfindexes {
				detachClsact(p.ns, uint32(i), false)
			}
		}
		p.meta.PPFCIfindexes = nil
	}()
	h, err := netlinkHandle(p.ns)
	if err != nil {
		return err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("attach ppfc: list devices: %w", err)
	}
	for _, l := range links {
		a := l.Attrs()
		if a.Index == p.meta.Ifindex || a.Flags&net.FlagLoopback != 0 {
			continue
		}
		if err := p.attachProg(p.ns, a.Index, p.progs.PpfcEgress, ebpf.AttachTCXEgress); err != nil {
			return fmt.Errorf("attach ppfc_egress to %s: %w", describeDev(p.meta.Netns, a.Name), err)
		}
		p.meta.PPFCIfindexes = append(p.meta.PPFCIfindexes, a.Index)
	}
	return nil
}

// attachXmit hooks port_xmit and port_host_drop to the machine's xmit
// dispatcher (or, with own, each to its tracepoint), and switches
// departures to them.
func (p *Port) attachXmit(objs *Objects, target *XmitTarget, own bool) error {
	if err := objs.XmitErr(); err != nil {
		return err
	}
	// The dispatcher's slot lives as long as the dequeue program's TCX
	// link, the only link attached so far.
	var owner link.ID
	if !own && p.meta.Attach == AttachTCX && len(p.links) == 1 {
		info, err := p.links[0].Info()
		if err != nil {
			return fmt.Errorf("attach xmit hook: the dequeue link: %w", err)
		}
		owner = info.ID
	}
	// Through the dispatcher where it can be had; where not (no shared
	// bpffs: a private mount namespace), each program on its tracepoint,
	// and Info says why.
	progs := []*ebpf.Program{objs.PortXmit, objs.PortHostDrop}
	if owner != 0 {
		if err := p.dispatchXmit(objs, target, owner); err != nil {
			p.meta.XmitDispatchNote = err.Error()
		} else {
			progs = nil
		}
	}
	var links []link.Link
	undo := func() {
		for _, l := range links {
			l.Close()
		}
		if p.meta.XmitDispatched {
			dispatch.UndoPort(xmitDev(target), []link.ID{owner})
			p.meta.XmitDispatched = false
		}
	}
	for _, prog := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			undo()
			return fmt.Errorf("attach xmit hook: %w", err)
		}
		links = append(links, l)
	}
	if err := objs.enableXmitHook(); err != nil {
		undo()
		return err
	}
	p.links = append(p.links, links...)
	p.meta.Departure, p.meta.DepartureNote = DepartXmit, ""
	return nil
}

// dispatchXmit gives the port's xmit and host-drop programs a slot of the
// machine's dispatcher, held by owner.
func (p *Port) dispatchXmit(objs *Objects, target *XmitTarget, owner link.ID) error {
	ino, err := netnsIno(p.peerNS)
	if err != nil {
		return fmt.Errorf("the peer's namespace: %w", err)
	}
	peer := dispatch.Device{NetnsIno: ino, Ifindex: p.meta.PeerIfindex}
	if err := dispatch.Port(objs.PortXmit, objs.PortHostDrop, xmitDev(target), peer, owner); err != nil {
		return err
	}
	p.meta.XmitDispatched = true
	return nil
}

func xmitDev(t *XmitTarget) dispatch.Device {
	return dispatch.Device{NetnsIno: t.NetnsIno, Ifindex: t.Ifindex}
}

// undispatch frees the port's slot of the xmit dispatcher.
func (p *Port) undispatch() error {
	if !p.meta.XmitDispatched {
		return nil
	}
	ino, err := netnsIno(p.ns)
	if err != nil {
		return fmt.Errorf("xmit dispatcher: %w", err)
	}
	var ids []link.ID
	for _, l := range p.links {
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	p.meta.XmitDispatched = false
	return dispatch.UndoPort(dispatch.Device{NetnsIno: ino, Ifindex: p.meta.Ifindex}, ids)
}

// findPeer locates the veth peer and checks it can see packets one by one.
func (p *Port) findPeer(opts AttachOptions) error {
	p.meta.PeerDev, p.meta.PeerNetns = opts.PeerDev, opts.PeerNetns
	if p.meta.PeerDev == "" {
		dev, nsName, err := vethPeer(p.ns, opts.Dev)
		if err != nil {
			return err
		}
		p.meta.PeerDev = dev
		if p.meta.PeerNetns == "" {
			p.meta.PeerNetns = nsName
		}
	}
	var err error
	if p.meta.PeerNetns == "" {
		p.meta.PeerNetns = opts.Netns
	}
	if p.peerNS, err = openNetns(p.meta.PeerNetns); err != nil {
		return err
	}
	if p.meta.PeerIfindex, err = ifindexIn(p.peerNS, p.meta.PeerDev); err != nil {
		return err
	}
	return nsexec.Do(p.peerNS, func() error {
		feats, err := ethfeat.Get(p.meta.PeerDev)
		if err != nil {
			return fmt.Errorf("ethtool features of %s: %w", p.meta.PeerDev, err)
		}
		if feats["rx-gro"].Active {
			return fmt.Errorf("peer %s has GRO on: it merges packets before the dequeue hook, so the backlog cannot be counted per packet; turn it off (ethtool -K %s gro off)",
				describeDev(p.meta.PeerNetns, p.meta.PeerDev), p.meta.PeerDev)
		}
		return nil
	})
}

func (p *Port) attachProg(ns netns.NsHandle, ifindex int, prog *ebpf.Program, where ebpf.AttachType) error {
	if p.meta.Attach == AttachTCX {
		// The dequeue at the peer's ingress is the port's wire: first in
		// the chain, before any program of the host it reaches (a kernel
		// NP must see the CE marks the departure AQMs set here), however
		// the two were attached in time.
		var anchor link.Anchor
		if where == ebpf.AttachTCXIngress {
			anchor = link.Head()
		}
		var l link.Link
		err := nsexec.Do(ns, func() (err error) {
			l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: where, Anchor: anchor})
			return err
		})
		if err == nil {
			p.links = append(p.links, l)
			return nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return err
		}
		// Kernels before 6.6 have no TCX: fall back for the whole port.
		if len(p.links) > 0 {
			return fmt.Errorf("tcx stopped being supported halfway: %w", err)
		}
		p.meta.Attach = AttachLegacy
	}
	return attachClsact(ns, uint32(ifindex), prog, where == ebpf.AttachTCXIngress)
}

// Configure replaces the configuration live: the maps are updated in
// place, and the HTB classes changed, so queues and counters survive.
func (p *Port) Configure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.configureLocked(cfg)
}

func (p *Port) configureLocked(cfg Config) error {
	if p.mu.closed {
		return errors.New("configure: port is closed")
	}
	if cfg.DefaultClass != p.mu.cfg.DefaultClass && p.meta.HTB {
		return fmt.Errorf("configure: default_class cannot change live (%d -> %d): detach and attach again", p.mu.cfg.DefaultClass, cfg.DefaultClass)
	}
	for c := range cfg.Classes {
		if was, is := p.mu.cfg.Classes[c].FlowQueues, cfg.Classes[c].FlowQueues; was != is {
			return fmt.Errorf("configure: class %d: flow_queues cannot change live (%d -> %d): detach and attach again", c, was, is)
		}
	}
	base := uint32(0)
	if p.meta.HTB {
		base = priorityBase
	}
	if cfg.PPFC() && p.meta.PPFCNote != "" {
		return fmt.Errorf("configure: PPFC thresholds, but this port cannot send PPFC notifications (%s)", p.meta.PPFCNote)
	}
	// Records from before ppfc_egress was attached on demand list its
	// devices without PPFCAttached.
	if cfg.Notifies() && !p.meta.PPFCAttached && len(p.meta.PPFCIfindexes) == 0 {
		n := len(p.links)
		if err := p.attachPPFC(); err != nil {
			return fmt.Errorf("configure: %w", err)
		}
		if p.meta.PinDir != "" {
			for i, l := range p.links[n:] {
				if err := l.Pin(filepath.Join(p.meta.PinDir, fmt.Sprintf("link_ppfc%d", i))); err != nil {
					return fmt.Errorf("configure: pin a ppfc_egress link: %w", err)
				}
			}
		}
	}
	o := Objects{PortObjects: bpf.PortObjects{PortMaps: p.maps}, frameBytes: p.meta.FrameBytes,
		xmitHook: p.meta.Departure == DepartXmit, ifindex: p.meta.Ifindex}
	if err := o.writeConfig(cfg, p.meta.Mode, base); err != nil {
		return err
	}
	if p.meta.HTB {
		if err := updateHTB(p.ns, uint32(p.meta.Ifindex), &cfg, p.meta.Mode == QueueVirtual); err != nil {
			return err
		}
		p.meta.HTBCeilBps = uint64(cfg.Rate)
	}
	p.mu.cfg = cfg
	p.meta.Config = cfg
	if p.meta.PinDir != "" {
		return writeMeta(&p.meta)
	}
	return nil
}

// Config reads the effective configuration back from the maps.
func (p *Port) Config() (Config, error) {
	p.mu.Lock()
	names := p.mu.cfg
	p.mu.Unlock()
	cfg, _, err := readConfig(&p.maps, names)
	return cfg, err
}

// Stats reads the counters.
func (p *Port) Stats() (Stats, error) {
	p.mu.Lock()
	cfg := p.mu.cfg
	p.mu.Unlock()
	return readStats(&p.maps, &cfg)
}

// Programs are the port's loaded programs (for their kernel statistics,
// ebpf.Program.Stats). Fields are nil for programs not loaded (the xmit
// hook's on a peer-ingress port) and for ports opened from their pins. They
// stay owned by the port.
func (p *Port) Programs() bpf.PortPrograms { return p.progs }

// Qdisc reads the kernel's counters of the port's root qdisc.
func (p *Port) Qdisc() (QdiscCounters, error) {
	return readRootQdisc(p.ns, uint32(p.meta.Ifindex))
}

// Info describes where the port is attached.
type Info struct {
	Dev       string     `json:"dev"`
	Ifindex   int        `json:"ifindex"`
	Netns     string     `json:"netns,omitempty"`
	PeerDev   string     `json:"peer_dev,omitempty"`
	PeerNetns string     `json:"peer_netns,omitempty"`
	Mode      QueueMode  `json:"queue_mode"`
	Attach    AttachMode `json:"attach"`
	HTB       bool       `json:"htb"`
	Pinned    bool       `json:"pinned"`
	Hooks
}

// Hooks are where a port's programs beside the queue run, and why not
// where they would best.
type Hooks struct {
	// Departure is where departures are counted (veth ports), and
	// DepartureNote why it is not DepartXmit.
	Departure     DepartureHook `json:"departure,omitempty"`
	DepartureNote string        `json:"departure_note,omitempty"`
	// XmitDispatched: port_xmit runs from the machine's xmit dispatcher
	// (a slot of it) rather than attached to the tracepoint itself;
	// XmitDispatchNote why not, when the dispatcher could not be had.
	XmitDispatched   bool   `json:"xmit_dispatched,omitempty"`
	XmitDispatchNote string `json:"xmit_dispatch_note,omitempty"`
	// PPFCIfindexes are the devices PPFC notifications can leave by
	// (ppfc_egress is attached to them), PPFCNote why there are none
	// (the port cannot send PPFC).
	PPFCIfindexes []int  `json:"ppfc_ifindexes,omitempty"`
	PPFCNote      string `json:"ppfc_note,omitempty"`
}

func (p *Port) Info() Info {
	m := &p.meta
	h := m.Hooks
	if h.Departure == "" && m.Mode == QueueVeth {
		h.Departure = DepartPeerIngress
	}
	return Info{Dev: m.Dev, Ifindex: m.Ifindex, Netns: m.Netns, PeerDev: m.PeerDev, PeerNetns: m.PeerNetns,
		Mode: m.Mode, Attach: m.Attach, HTB: m.HTB, Pinned: m.PinDir != "", Hooks: h}
}

// Close detaches the port and removes everything it installed: programs,
// HTB tree, pins. It is idempotent.
func (p *Port) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil
	}
	p.mu.closed = true
	return p.teardown()
}

// Release closes this process's handles but leaves a pinned port attached.
func (p *Port) Release() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil
	}
	if p.meta.PinDir == "" {
		return errors.New("release: port is not pinned; Close it instead")
	}
	p.mu.closed = true
	p.closeHandles()
	return nil
}

func (p *Port) closeHandles() {
	for _, l := range p.links {
		l.Close()
	}
	p.links = nil
	if p.mu.rateTC != nil {
		p.mu.rateTC.Close()
		p.mu.rateTC = nil
	}
	p.maps.Close()
	p.progs.Close()
	if p.ns.IsOpen() {
		p.ns.Close()
	}
	if p.peerNS.IsOpen() {
		p.peerNS.Close()
	}
}

// teardown undoes whatever part of an attach happened.
func (p *Port) teardown() error {
	var errs []error
	// Out of the dispatcher while the links that hold its slot live.
	if err := p.undispatch(); err != nil {
		errs = append(errs, err)
	}
	for _, l := range p.links {
		if p.meta.PinDir != "" {
			if err := l.Unpin(); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if err := l.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	p.links = nil
	if p.meta.Attach == AttachLegacy {
		if p.meta.Ifindex != 0 {
			errs = append(errs, detachClsact(p.ns, uint32(p.meta.Ifindex), false))
		}
		for _, i := range p.meta.PPFCIfindexes {
			if err := detachClsact(p.ns, uint32(i), false); err != nil && !isGone(err) {
				errs = append(errs, err)
			}
		}
		if p.meta.PeerIfindex != 0 {
			errs = append(errs, detachClsact(p.peerNS, uint32(p.meta.PeerIfindex), true))
		}
	}
	if p.meta.HTB && p.meta.Ifindex != 0 {
		errs = append(errs, removeHTB(p.ns, uint32(p.meta.Ifindex)))
	}
	if p.meta.PinDir != "" {
		errs = append(errs, removeRecord(p.meta.PinDir))
	}
	p.closeHandles()
	return errors.Join(errs...)
}

// pin records the maps and links in bpffs and the metadata under MetaRoot.
func (p *Port) pin() error {
	if err := pinning.Pin(MetaRoot, p.meta.PinDir, p.mapsByName(), p.links, &p.meta); err != nil {
		return err
	}
	// ppfc_egress, for a Configure of another process to attach it.
	if p.progs.PpfcEgress != nil {
		if err := p.progs.PpfcEgress.Pin(filepath.Join(p.meta.PinDir, ppfcProgPin)); err != nil {
			return fmt.Errorf("pin ppfc_egress: %w", err)
		}
	}
	return nil
}

// ppfcProgPin is ppfc_egress's pin in a port's pin directory.
const ppfcProgPin = "prog_ppfc_egress"

func (p *Port) mapsByName() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		bpf.PortMapPortCfg:       p.maps.PortCfg,
		bpf.PortMapDscpClass:     p.maps.DscpClass,
		bpf.PortMapClassCfg:      p.maps.ClassCfg,
		bpf.PortMapClassQueue:    p.maps.ClassQueue,
		bpf.PortMapClassAqm:      p.maps.ClassAqm,
		bpf.PortMapClassCounters: p.maps.ClassCounters,
		bpf.PortMapPortCounters:  p.maps.PortCounters,
		bpf.PortMapHandoff:       p.maps.Handoff,
		bpf.PortMapPpfcSources:   p.maps.PpfcSources,
		bpf.PortMapPpfcScratch:   p.maps.PpfcScratch,
	}
}

// Open finds a pinned port on dev in netns ("" = the caller's namespace).
func Open(netnsName, dev string) (_ *Port, err error) {
	p := &Port{ns: netns.None(), peerNS: netns.None()}
	defer func() {
		if err != nil {
			p.closeHandles()
		}
	}()
	if p.ns, err = openNetns(netnsName); err != nil {
		return nil, err
	}
	dir := pinDir(p.ns, dev)
	switch err := pinning.ReadRecord(MetaRoot, dir, &p.meta); {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("no port is attached to %s (attach one with: portctl attach)", describeDev(netnsName, dev))
	case err != nil:
		return nil, err
	}
	if p.meta.PeerNetns != "" && p.meta.Mode == QueueVeth {
		if p.peerNS, err = openNetns(p.meta.PeerNetns); err != nil {
			return nil, err
		}
	}
	p.mu.cfg = p.meta.Config
	if err = pinning.LoadMaps(dir, map[string]**ebpf.Map{
		bpf.PortMapPortCfg: &p.maps.PortCfg, bpf.PortMapDscpClass: &p.maps.DscpClass,
		bpf.PortMapClassCfg: &p.maps.ClassCfg, bpf.PortMapClassQueue: &p.maps.ClassQueue,
		bpf.PortMapClassAqm: &p.maps.ClassAqm, bpf.PortMapClassCounters: &p.maps.ClassCounters,
		bpf.PortMapPortCounters: &p.maps.PortCounters,
	}); err != nil {
		return nil, err
	}
	// Ports pinned before the handoff map existed have none.
	if p.maps.Handoff, err = pinning.LoadMap(dir, bpf.PortMapHandoff); err != nil && p.meta.Departure != "" {
		return nil, err
	}
	if p.links, err = pinning.LoadLinks(dir); err != nil {
		return nil, err
	}
	if prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, ppfcProgPin), nil); err == nil {
		p.progs.PpfcEgress = prog
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open pinned ppfc_egress: %w", err)
	}
	return p, nil
}

// stalePort reports whether the pinned port recorded for dev belongs to a
// device that no longer exists (alone or with its namespace): its enqueue
// link is attached to no device. A record that cannot be opened, or a
// legacy (clsact) port, is not called stale: Attach keeps refusing, and
// Forget is the way out.
func stalePort(netnsName, dev string) bool {
	p, err := Open(netnsName, dev)
	if err != nil {
		return false
	}
	defer p.Release()
	return p.Orphaned()
}

// Orphaned reports whether the port's device went away while it was
// attached (deleted alone or with its namespace): the TCX link of its
// enqueue program is attached to no device any more. A legacy (clsact)
// port: false.
func (p *Port) Orphaned() bool { return LinksOrphaned(p.links) }

// LinksOrphaned reports whether a port's links, as pinned, have lost the
// port's device: its enqueue program's TCX link is attached to no device
// (pinning.OrphanedProg; its PPFC links are on other devices).
func LinksOrphaned(links []link.Link) bool {
	return pinning.OrphanedProg(links, bpf.PortProgPortEnqueue)
}

// SweepStale removes the pins and records of ports whose device went away
// while they were attached and whose owner is gone (pinning.SweepOrphaned):
// a namespace deleted under a killed process leaves them. It returns the
// pin directories it removed. Live ports, attached to a device, stay.
func SweepStale() ([]string, error) {
	dirs, err := pinning.SweepOrphaned(PinRoot, MetaRoot, "ns", LinksOrphaned)
	if err != nil {
		return dirs, err
	}
	// Then the xmit dispatcher's slots that the removed pins held.
	if n, err := dispatch.Sweep(); err != nil || n > 0 {
		if n > 0 {
			dirs = append(dirs, fmt.Sprintf("%s: %d slot(s)", dispatch.Dir, n))
		}
		return dirs, err
	}
	return dirs, nil
}

// Forget detaches the port on dev as far as it still can and removes its
// record and pins whatever is left of it: for a record whose links cannot
// be opened any more (the device or its namespace went away while
// attached, and a new namespace has the old one's inode), which Open
// refuses and so Close cannot reach. Nothing attached: nil.
func Forget(netnsName, dev string) error {
	if p, err := Open(netnsName, dev); err == nil {
		return p.Close()
	}
	ns, err := openNetns(netnsName)
	if err != nil {
		return err
	}
	defer ns.Close()
	return removeRecord(pinDir(ns, dev))
}

// PortsHere lists the devices of the calling thread's namespace that
// carry a pinned port (AttachOptions.Pin: portctl's, fabriclabd's), by
// their records; a port a process holds unpinned is not seen. A sender
// there needs to know:
// its UDP GSO send reaches such a port as one packet, judged and queued
// outside the class's accounting (a sender in the switch's own namespace
// sends datagram by datagram instead).
func PortsHere() ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var devs []string
	for _, ifi := range ifs {
		if _, err := os.Stat(metaPath(pinDir(netns.None(), ifi.Name))); err == nil {
			devs = append(devs, ifi.Name)
		}
	}
	return devs, nil
}

// removeRecord removes a port's pins and record, and nothing else.
func removeRecord(dir string) error { return pinning.Remove(MetaRoot, dir) }

// linkIn looks dev up in ns.
func linkIn(ns netns.NsHandle, dev string) (netlink.Link, error) {
	h, err := netlinkHandle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("device %q: %w", dev, err)
	}
	return l, nil
}

func ifindexIn(ns netns.NsHandle, dev string) (int, error) {
	l, err := linkIn(ns, dev)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}

// frameBytesIn is the largest frame dev sends: its MTU and Ethernet header.
func frameBytesIn(ns netns.NsHandle, dev string) (uint64, error) {
	l, err := linkIn(ns, dev)
	if err != nil {
		return 0, err
	}
	return uint64(l.Attrs().MTU) + 14, nil
}

// Backlog reads a class's queue as the programs count it: cheap enough to
// sample every millisecond. With the xmit hook it is what HTB holds; without
// it, it includes the host queue up to the peer.
func (p *Port) Backlog(class ClassID) (bytes, packets uint64, err error) {
	cs, err := p.classState("backlog", class)
	return cs.BacklogBytes, cs.BacklogPackets, err
}

// classState reads a class's state from the programs' map; what names the
// caller in the error.
func (p *Port) classState(what string, class ClassID) (bpf.PortClassState, error) {
	var cs bpf.PortClassState
	if class >= NumClasses {
		return cs, fmt.Errorf("%s: class (%d) must be 0 to %d", what, class, NumClasses-1)
	}
	if err := p.maps.ClassQueue.Lookup(uint32(class), &cs); err != nil {
		return bpf.PortClassState{}, fmt.Errorf("%s: read class %d: %w", what, class, err)
	}
	return cs, nil
}

// SetRate changes the port's rate live, cheaper than Configure: the maps as
// Configure writes them, and in the HTB tree only the port class, whose
// rate and ceil bound every class below it (their own assured rates are a
// token 1/1000 of the rate, strict classes' the rest of it). A rate above
// the one the classes' ceilings were set at takes the full Configure. The
// tunnel PE's limiter cuts with it (host/pe), where an HTB change is most
// of the reaction time: one class change instead of nine. It holds the
// port's lock throughout, so a Configure beside it is never undone by the
// configuration SetRate started from.
func (p *Port) SetRate(rate units.Rate) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cfg := p.mu.cfg
	cfg.Rate = rate
	if err := cfg.Validate(); err != nil {
		return err
	}
	if !p.meta.HTB || uint64(rate) > p.meta.HTBCeilBps {
		return p.configureLocked(cfg)
	}
	if p.mu.closed {
		return errors.New("set rate: port is closed")
	}
	o := Objects{PortObjects: bpf.PortObjects{PortMaps: p.maps}, frameBytes: p.meta.FrameBytes,
		xmitHook: p.meta.Departure == DepartXmit, ifindex: p.meta.Ifindex}
	if err := o.writeConfig(cfg, p.meta.Mode, priorityBase); err != nil {
		return err
	}
	if p.mu.rateTC == nil {
		t, err := openTC(p.ns)
		if err != nil {
			return err
		}
		p.mu.rateTC = t
	}
	if err := setPortClassRate(p.mu.rateTC, uint32(p.meta.Ifindex), uint64(rate)); err != nil {
		// The next call starts from a fresh socket.
		p.mu.rateTC.Close()
		p.mu.rateTC = nil
		return err
	}
	p.mu.cfg = cfg
	p.meta.Config = cfg
	if p.meta.PinDir != "" {
		return writeMeta(&p.meta)
	}
	return nil
}

// FirstWANCNP reads when a class sent its first WAN CNP of each kind
// (CLOCK_MONOTONIC; 0: none yet): the onset of light and heavy congestion
// as the tunnel-ingress PE learns of it.
func (p *Port) FirstWANCNP(class ClassID) (light, heavy time.Duration, err error) {
	cs, err := p.classState("first wan cnp", class)
	return time.Duration(cs.WanCnpFirstLightNs), time.Duration(cs.WanCnpFirstHeavyNs), err
}

// HostBacklog reads a class's host queue (xmit hook only): packets that
// left HTB and have not reached the peer's ingress hook.
func (p *Port) HostBacklog(class ClassID) (bytes, packets uint64, err error) {
	cs, err := p.classState("host backlog", class)
	return cs.HostBacklogBytes, cs.HostBacklogPackets, err
}

func netlinkHandle(ns netns.NsHandle) (*netlink.Handle, error) { return nsexec.Netlink(ns) }

// vethPeer finds the peer of a veth and the named namespace it lives in
// ("" when it is the device's own namespace).
func vethPeer(ns netns.NsHandle, dev string) (string, string, error) {
	h, err := netlinkHandle(ns)
	if err != nil {
		return "", "", err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return "", "", fmt.Errorf("device %q: %w", dev, err)
	}
	veth, ok := l.(*netlink.Veth)
	if !ok {
		return "", "", fmt.Errorf("device %q is a %s, not a veth: give --peer-dev, or use the virtual queue mode for devices whose far end is not ours", dev, l.Type())
	}
	// IFLA_LINK of a veth is its peer's ifindex, in the peer's namespace.
	peerIndex := veth.Attrs().ParentIndex
	nsid := veth.Attrs().NetNsID
	if nsid < 0 {
		// The peer is in the same namespace.
		pl, err := h.LinkByIndex(peerIndex)
		if err != nil {
			return "", "", fmt.Errorf("veth peer of %q: %w", dev, err)
		}
		return pl.Attrs().Name, "", nil
	}
	// Find which named namespace carries that netnsid as seen from ns.
	names, _ := filepath.Glob("/var/run/netns/*")
	for _, path := range names {
		cand, err := netns.GetFromPath(path)
		if err != nil {
			continue
		}
		id, err := h.GetNetNsIdByFd(int(cand))
		if err == nil && id == nsid {
			ch, err := netlink.NewHandleAt(cand)
			cand.Close()
			if err != nil {
				return "", "", err
			}
			pl, err := ch.LinkByIndex(peerIndex)
			ch.Close()
			if err != nil {
				return "", "", fmt.Errorf("veth peer of %q: %w", dev, err)
			}
			return pl.Attrs().Name, filepath.Base(path), nil
		}
		cand.Close()
	}
	return "", "", fmt.Errorf("veth peer of %q is in a namespace with no name under /var/run/netns: give --peer-netns and --peer-dev", dev)
}

// pinDir names a port by its namespace's inode and device name, unique
// while the namespace lives.
func pinDir(ns netns.NsHandle, dev string) string { return pinning.Dir(ns, "ns", dev) }

// netnsIno is the kernel's net->ns.inum, which the xmit hook compares.
func netnsIno(ns netns.NsHandle) (uint32, error) { return nsexec.Ino(ns) }

func metaPath(pinDir string) string { return pinning.RecordPath(MetaRoot, pinDir) }

func writeMeta(m *portMeta) error { return pinning.WriteRecord(MetaRoot, m.PinDir, m) }

// ErrPrivateBPFFS: this process has a mount namespace of its own whose
// /sys hides the system's bpffs (pinning.ErrPrivateBPFFS).
var ErrPrivateBPFFS = pinning.ErrPrivateBPFFS

func describeDev(ns, dev string) string { return nsexec.Describe(ns, dev) }
