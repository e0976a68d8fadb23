package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/ethfeat"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
	"github.com/fabriclab/fabriclab/qdisc/pinning"
)

// MetaRoot is where a pinned PE records its configuration, beside the
// ports' records.
var MetaRoot = filepath.Join(filepath.Dir(qdisc.MetaRoot), "tunnels")

// AttachOptions say how a PE is attached.
type AttachOptions struct {
	// Pin keeps the PE attached after the process exits (the CLI); Open
	// finds it again. Unpinned PEs detach when closed.
	Pin bool
}

// PE is the tunnel's programs on one device: encapsulation at egress (first
// in the chain, so a port on the same device sees the outer header) and
// decapsulation at ingress.
type PE struct {
	ns    netns.NsHandle
	maps  bpf.TunnelMaps
	progs bpf.TunnelPrograms // empty when opened from pins
	links []link.Link
	meta  peMeta
}

// peMeta is what a pinned PE records about itself.
type peMeta struct {
	Netns  string `json:"netns,omitempty"`
	Dev    string `json:"dev"`
	PinDir string `json:"pin_dir,omitempty"`
	Config Config `json:"config"`
}

// Attach loads the programs, configures them and attaches them to dev in
// the named namespace ("" = the caller's).
func Attach(netnsName, dev string, cfg Config, opts AttachOptions) (_ *PE, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &PE{ns: netns.None(), meta: peMeta{Netns: netnsName, Dev: dev}}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.teardown())
		}
	}()
	if p.ns, err = nsexec.Open(netnsName); err != nil {
		return nil, err
	}
	ifindex, mtu, err := p.device()
	if err != nil {
		return nil, err
	}
	if err := p.checkOffloads(); err != nil {
		return nil, err
	}
	if cfg.MTU == 0 {
		cfg.MTU = mtu
	}
	if opts.Pin {
		dir := pinDir(p.ns, dev)
		if _, err := os.Stat(metaPath(dir)); err == nil {
			if !stalePE(netnsName, dev) {
				return nil, fmt.Errorf("a tunnel PE is already attached to %s (detach it first)", nsexec.Describe(netnsName, dev))
			}
			// A record left by a namespace that is gone, whose inode this
			// one reuses (pin directories are named after it): its pins
			// and record go, and nothing of this namespace is touched.
			if err := removeRecord(dir); err != nil {
				return nil, fmt.Errorf("removing a stale tunnel PE record on %s: %w", nsexec.Describe(netnsName, dev), err)
			}
		}
		p.meta.PinDir = dir
	}
	var objs bpf.TunnelObjects
	if err := bpf.LoadTunnelObjects(&objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load tunnel programs: %+v", ve)
		}
		return nil, fmt.Errorf("load tunnel programs: %w", err)
	}
	p.maps, p.progs = objs.TunnelMaps, objs.TunnelPrograms
	if err := p.write(cfg); err != nil {
		return nil, err
	}
	// Encapsulation first at egress: a port on the device (a rate limiter,
	// a marking queue) must see and count the outer header. A program
	// attached later goes after these at either hook.
	for _, a := range []struct {
		prog   *ebpf.Program
		where  ebpf.AttachType
		anchor link.Anchor
	}{
		{p.progs.TunnelEncap, ebpf.AttachTCXEgress, link.Head()},
		// Decapsulation last at ingress: a port's departure hook on the
		// veth peer must see the packet as it was queued.
		{p.progs.TunnelDecap, ebpf.AttachTCXIngress, link.Tail()},
	} {
		var l link.Link
		err := nsexec.Do(p.ns, func() (err error) {
			l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: a.prog, Attach: a.where, Anchor: a.anchor})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("attach %s to %s (needs TCX, Linux 6.6 or later): %w", a.prog, nsexec.Describe(netnsName, dev), err)
		}
		p.links = append(p.links, l)
	}
	if opts.Pin {
		if err := p.pin(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// device reads dev's index and MTU.
func (p *PE) device() (ifindex, mtu int, err error) {
	h, err := nsexec.Netlink(p.ns)
	if err != nil {
		return 0, 0, err
	}
	defer h.Close()
	l, err := h.LinkByName(p.meta.Dev)
	if err != nil {
		return 0, 0, fmt.Errorf("device %q: %w", nsexec.Describe(p.meta.Netns, p.meta.Dev), err)
	}
	return l.Attrs().Index, l.Attrs().MTU, nil
}

// checkOffloads refuses a device that would hand the programs merged
// packets or send encapsulated ones unsegmented. Decapsulation takes no GSO
// packets (the kernel flags that fix their GSO state after the outer header
// goes are not in 6.18), so the PE merges none on receive (GRO, LRO), and
// segments what it encapsulates before it leaves (no TSO, GSO or UDP GSO on
// the device): the peer PE then receives wire-size packets even on veth.
func (p *PE) checkOffloads() error {
	return nsexec.Do(p.ns, func() error {
		feats, err := ethfeat.Get(p.meta.Dev)
		if err != nil {
			return fmt.Errorf("ethtool features of %s: %w", nsexec.Describe(p.meta.Netns, p.meta.Dev), err)
		}
		var on []string
		for _, f := range []string{"rx-gro", "rx-lro", "tx-tcp-segmentation", "tx-generic-segmentation", "tx-udp-segmentation"} {
			if feats[f].Active {
				on = append(on, f)
			}
		}
		if len(on) > 0 {
			return fmt.Errorf("%s has %s on: a tunnel PE needs received packets unmerged and tunnelled ones segmented; turn them off: ethtool -K %s gro off lro off tso off gso off tx-udp-segmentation off",
				nsexec.Describe(p.meta.Netns, p.meta.Dev), strings.Join(on, ", "), p.meta.Dev)
		}
		return nil
	})
}

// Configure replaces the routes, peers and settings live; counters stay.
func (p *PE) Configure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.MTU == 0 {
		_, mtu, err := p.device()
		if err != nil {
			return err
		}
		cfg.MTU = mtu
	}
	if err := p.write(cfg); err != nil {
		return err
	}
	if p.meta.PinDir != "" {
		return writeMeta(&p.meta)
	}
	return nil
}

// Config is the configuration in effect (defaults filled in).
func (p *PE) Config() Config { return p.meta.Config }

// write puts cfg into the maps: settings first, then routes and peers added
// before stale ones are removed, so no packet in between finds neither.
func (p *PE) write(cfg Config) error {
	cfg = cfg.withDefaults()
	v := bpf.TunnelPeConfig{
		Local:         addrBE(cfg.Local),
		Mtu:           uint32(cfg.MTU),
		EcnMode:       uint32(cfg.ECN),
		Ttl:           uint32(cfg.TTL),
		LogIntervalNs: uint64(cfg.LogInterval.Nanoseconds()),
	}
	if cfg.HeavyHold > 0 {
		v.HeavyHoldNs = uint64(cfg.HeavyHold.Nanoseconds())
	}
	if cfg.TwoThreshold {
		v.TwoThreshold = 1
	}
	if err := p.maps.TunnelCfg.Put(uint32(0), &v); err != nil {
		return fmt.Errorf("write tunnel config: %w", err)
	}
	want := map[bpf.TunnelRoutePrefix]bool{}
	for _, r := range cfg.Routes {
		k := bpf.TunnelRoutePrefix{Prefixlen: uint32(r.Prefix.Bits()), Addr: addrBE(r.Prefix.Addr())}
		want[k] = true
		if err := p.maps.TunnelRoutes.Put(&k, &bpf.TunnelEncapRoute{Remote: addrBE(r.Remote)}); err != nil {
			return fmt.Errorf("write route %v: %w", r.Prefix, err)
		}
	}
	if err := prune[bpf.TunnelRoutePrefix, bpf.TunnelEncapRoute](p.maps.TunnelRoutes, want, "route"); err != nil {
		return err
	}
	peers := map[uint32]bool{}
	for _, a := range cfg.peers() {
		peers[addrBE(a)] = true
		if err := p.maps.TunnelPeers.Put(addrBE(a), uint32(1)); err != nil {
			return fmt.Errorf("write peer %v: %w", a, err)
		}
	}
	if err := prune[uint32, uint32](p.maps.TunnelPeers, peers, "peer"); err != nil {
		return err
	}
	p.meta.Config = cfg
	return nil
}

// prune deletes the entries of m whose key keep does not hold; what
// names an entry in errors.
func prune[K comparable, V any](m *ebpf.Map, keep map[K]bool, what string) error {
	var stale []K
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !keep[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %ss: %w", what, err)
	}
	for _, k := range stale {
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove %s: %w", what, err)
		}
	}
	return nil
}

// addrBE is an IPv4 address as the programs compare it: network order in
// a host-order integer.
func addrBE(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

func addrFromBE(v uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// Close detaches the PE and removes its pins. It is idempotent.
func (p *PE) Close() error { return p.teardown() }

// Release closes this process's handles and leaves a pinned PE attached.
func (p *PE) Release() error {
	if p.meta.PinDir == "" {
		return errors.New("release: tunnel PE is not pinned; Close it instead")
	}
	p.closeHandles()
	return nil
}

func (p *PE) closeHandles() {
	for _, l := range p.links {
		l.Close()
	}
	p.links = nil
	closeAll(&p.maps, &p.progs)
	p.maps, p.progs = bpf.TunnelMaps{}, bpf.TunnelPrograms{}
	if p.ns.IsOpen() {
		p.ns.Close()
		p.ns = netns.None()
	}
}

func closeAll(cs ...interface{ Close() error }) {
	for _, c := range cs {
		c.Close()
	}
}

func (p *PE) teardown() error {
	var errs []error
	for _, l := range p.links {
		if p.meta.PinDir != "" {
			if err := l.Unpin(); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if p.meta.PinDir != "" {
		for _, m := range p.mapsByName() {
			if m != nil && m.IsPinned() {
				if err := m.Unpin(); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
	}
	p.closeHandles()
	if p.meta.PinDir != "" {
		errs = append(errs, removeRecord(p.meta.PinDir))
		p.meta.PinDir = ""
	}
	return errors.Join(errs...)
}

func (p *PE) mapsByName() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		bpf.TunnelMapTunnelCfg:        p.maps.TunnelCfg,
		bpf.TunnelMapTunnelRoutes:     p.maps.TunnelRoutes,
		bpf.TunnelMapTunnelPeers:      p.maps.TunnelPeers,
		bpf.TunnelMapTunnelCounters:   p.maps.TunnelCounters,
		bpf.TunnelMapTunnelLogLast:    p.maps.TunnelLogLast,
		bpf.TunnelMapTunnelEvents:     p.maps.TunnelEvents,
		bpf.TunnelMapTunnelCongestion: p.maps.TunnelCongestion,
		bpf.TunnelMapTunnelCnps:       p.maps.TunnelCnps,
	}
}

func (p *PE) pin() error {
	return pinning.Pin(MetaRoot, p.meta.PinDir, p.mapsByName(), p.links, &p.meta)
}

// Open finds a pinned PE on dev in netns ("" = the caller's namespace).
func Open(netnsName, dev string) (_ *PE, err error) {
	p := &PE{ns: netns.None()}
	defer func() {
		if err != nil {
			p.closeHandles()
		}
	}()
	if p.ns, err = nsexec.Open(netnsName); err != nil {
		return nil, err
	}
	dir := pinDir(p.ns, dev)
	switch err := pinning.ReadRecord(MetaRoot, dir, &p.meta); {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("no tunnel PE is attached to %s (attach one with: portctl tunnel attach)", nsexec.Describe(netnsName, dev))
	case err != nil:
		return nil, err
	}
	if err = pinning.LoadMaps(dir, map[string]**ebpf.Map{
		bpf.TunnelMapTunnelCfg: &p.maps.TunnelCfg, bpf.TunnelMapTunnelRoutes: &p.maps.TunnelRoutes,
		bpf.TunnelMapTunnelPeers: &p.maps.TunnelPeers, bpf.TunnelMapTunnelCounters: &p.maps.TunnelCounters,
		bpf.TunnelMapTunnelLogLast: &p.maps.TunnelLogLast, bpf.TunnelMapTunnelEvents: &p.maps.TunnelEvents,
		bpf.TunnelMapTunnelCongestion: &p.maps.TunnelCongestion, bpf.TunnelMapTunnelCnps: &p.maps.TunnelCnps,
	}); err != nil {
		return nil, err
	}
	if p.links, err = pinning.LoadLinks(dir); err != nil {
		return nil, err
	}
	return p, nil
}

// stalePE reports whether the pinned PE recorded for dev belongs to a
// namespace that no longer exists: its TCX links are attached to no
// device. A record that cannot be opened is not called stale: Attach keeps
// refusing, and Forget is the way out.
func stalePE(netnsName, dev string) bool {
	p, err := Open(netnsName, dev)
	if err != nil {
		return false
	}
	defer p.closeHandles()
	return pinning.Orphaned(p.links)
}

// SweepStale removes the pins and records of PEs whose device went away
// while they were attached and whose owner is gone (pinning.SweepOrphaned),
// and returns the pin directories it removed.
func SweepStale() ([]string, error) {
	return pinning.SweepOrphaned(pinning.Root, MetaRoot, "tunnel_ns", pinning.Orphaned)
}

// Orphaned reports whether the PE's device went away while it was attached
// (deleted alone or with its namespace): its TCX links are attached to no
// device any more.
func (p *PE) Orphaned() bool { return pinning.Orphaned(p.links) }

// Forget detaches the PE on dev as far as it still can and removes its
// record and pins whatever is left of it: for a record whose pins cannot
// be opened any more, which Open refuses and so Close cannot reach.
// Nothing attached: nil.
func Forget(netnsName, dev string) error {
	if p, err := Open(netnsName, dev); err == nil {
		return p.Close()
	}
	ns, err := nsexec.Open(netnsName)
	if err != nil {
		return err
	}
	defer ns.Close()
	return removeRecord(pinDir(ns, dev))
}

// removeRecord removes a PE's pins and record, and nothing else.
func removeRecord(dir string) error { return pinning.Remove(MetaRoot, dir) }

// pinDir names the PE by its namespace's inode and the device, beside the
// ports' pins.
func pinDir(ns netns.NsHandle, dev string) string { return pinning.Dir(ns, "tunnel_ns", dev) }

func metaPath(pinDir string) string { return pinning.RecordPath(MetaRoot, pinDir) }

func writeMeta(m *peMeta) error { return pinning.WriteRecord(MetaRoot, m.PinDir, m) }
