package qdisc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/pinning"
)

// The machine's xmit dispatcher (bpf/xmit_dispatch.c): one program on
// tp_btf/net_dev_start_xmit tail-calls the port_xmit of the transmitting
// device's port, so that each transmission pays one hash lookup instead of
// one tracing program per port (~60-80 ns each, docs/measured.md); two on
// tp_btf/kfree_skb do the same for port_host_drop, by the dropped
// packet's device (the port's, or its veth peer's). Its
// links and maps are pinned, since ports of several processes share it; a
// flock serialises the processes that change it, and the last port to
// leave removes it.
//
// A slot's holder is a BPF link of its port (the dequeue program's TCX
// link): a port whose process died unpinned has lost it, and the next
// process to touch the dispatcher frees the slot (sweep).
var (
	// XmitDispatchDir is where the dispatcher pins its link and maps.
	// The suffix changes with the layout of its maps.
	XmitDispatchDir = filepath.Join(pinning.Root, "xmit_dispatch_v1")
	// xmitDispatchLock is the flock the processes take to change it.
	xmitDispatchLock = "/run/fabriclab/xmit_dispatch.lock"
)

// XmitDispatchSlots is how many ports the dispatcher serves at once.
const XmitDispatchSlots = 1024 // XMIT_DISPATCH_SLOTS

// The pins of its links: link is pinned last, so that its pin says the
// dispatcher is whole.
const (
	xmitDispatchLinkPin     = "link"
	xmitDispatchDropDevPin  = "link_drop_dev"
	xmitDispatchDropPeerPin = "link_drop_peer"
)

// xmitDispatch is the dispatcher's pinned maps opened by one process.
type xmitDispatch struct {
	slots, progs, owners, counters *ebpf.Map
	dropPeerSlots, dropProgs       *ebpf.Map
}

func (d *xmitDispatch) maps() map[string]**ebpf.Map {
	return map[string]**ebpf.Map{
		bpf.XmitDispatchMapXmitSlots: &d.slots, bpf.XmitDispatchMapXmitProgs: &d.progs,
		bpf.XmitDispatchMapXmitOwners: &d.owners, bpf.XmitDispatchMapXmitDispatchCounters: &d.counters,
		bpf.XmitDispatchMapDropPeerSlots: &d.dropPeerSlots, bpf.XmitDispatchMapDropProgs: &d.dropProgs,
	}
}

func (d *xmitDispatch) close() {
	for _, m := range []*ebpf.Map{d.slots, d.progs, d.owners, d.counters, d.dropPeerSlots, d.dropProgs} {
		if m != nil {
			m.Close()
		}
	}
}

// lockXmitDispatch takes the dispatcher's flock, waiting for it.
func lockXmitDispatch() (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(xmitDispatchLock), 0o755); err != nil {
		return nil, fmt.Errorf("xmit dispatcher lock: %w", err)
	}
	f, err := os.OpenFile(xmitDispatchLock, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("xmit dispatcher lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("xmit dispatcher lock %s: %w", xmitDispatchLock, err)
	}
	return func() { f.Close() }, nil
}

// openXmitDispatch opens the pinned dispatcher; with create, it loads,
// attaches and pins one if there is none (or only the remains of one
// whose creator died halfway). Without create and without a dispatcher it
// returns nil. The caller holds the lock.
func openXmitDispatch(create bool) (*xmitDispatch, error) {
	l, err := link.LoadPinnedLink(filepath.Join(XmitDispatchDir, xmitDispatchLinkPin), nil)
	if err == nil {
		l.Close() // the pin keeps it
		d := &xmitDispatch{}
		for name, dst := range d.maps() {
			if *dst, err = pinning.LoadMap(XmitDispatchDir, name); err != nil {
				d.close()
				return nil, fmt.Errorf("xmit dispatcher: %w", err)
			}
		}
		return d, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("xmit dispatcher: open its link: %w", err)
	}
	// No link pinned: no dispatcher, or what a creator killed halfway
	// left (maps pinned before the link).
	if err := os.RemoveAll(XmitDispatchDir); err != nil {
		return nil, fmt.Errorf("xmit dispatcher: remove the remains of one: %w", err)
	}
	if !create {
		return nil, nil
	}
	var objs bpf.XmitDispatchObjects
	if err := bpf.LoadXmitDispatchObjects(&objs, nil); err != nil {
		return nil, loadError("load the xmit dispatcher", err)
	}
	defer objs.XmitDispatchPrograms.Close()
	d := &xmitDispatch{slots: objs.XmitSlots, progs: objs.XmitProgs, owners: objs.XmitOwners, counters: objs.XmitDispatchCounters,
		dropPeerSlots: objs.DropPeerSlots, dropProgs: objs.DropProgs}
	fail := func(err error) (*xmitDispatch, error) {
		d.close()
		os.RemoveAll(XmitDispatchDir)
		return nil, err
	}
	if err := os.MkdirAll(XmitDispatchDir, 0o700); err != nil {
		return fail(fmt.Errorf("xmit dispatcher: %w", err))
	}
	for name, m := range d.maps() {
		if err := (*m).Pin(filepath.Join(XmitDispatchDir, name)); err != nil {
			return fail(fmt.Errorf("xmit dispatcher: pin map %s: %w", name, err))
		}
	}
	for _, pl := range []struct {
		prog *ebpf.Program
		pin  string
	}{{objs.HostDropDispatchDev, xmitDispatchDropDevPin}, {objs.HostDropDispatchPeer, xmitDispatchDropPeerPin}, {objs.XmitDispatch, xmitDispatchLinkPin}} {
		l, err := link.AttachTracing(link.TracingOptions{Program: pl.prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return fail(fmt.Errorf("xmit dispatcher: attach %s: %w", pl.pin, err))
		}
		err = l.Pin(filepath.Join(XmitDispatchDir, pl.pin))
		l.Close() // the pin keeps it
		if err != nil {
			return fail(fmt.Errorf("xmit dispatcher: pin %s: %w", pl.pin, err))
		}
	}
	return d, nil
}

// removeIfEmpty unpins the dispatcher when no slot is held: its link and
// maps go with their last references.
func (d *xmitDispatch) removeIfEmpty() error {
	var k uint32
	var v bpf.XmitDispatchXmitOwner
	if d.owners.Iterate().Next(&k, &v) {
		return nil
	}
	return os.RemoveAll(XmitDispatchDir)
}

// free empties slot s, device entry first, so that the dispatcher stops
// looking the device up before its program goes.
func (d *xmitDispatch) free(s uint32, o bpf.XmitDispatchXmitOwner) error {
	var errs []error
	for _, m := range []struct {
		slots *ebpf.Map
		dev   *bpf.XmitDispatchXmitDev
	}{{d.slots, &o.Dev}, {d.dropPeerSlots, &o.Peer}} {
		var cur uint32
		if err := m.slots.Lookup(m.dev, &cur); err == nil && cur == s {
			if err := m.slots.Delete(m.dev); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
			}
		}
	}
	for _, progs := range []*ebpf.Map{d.progs, d.dropProgs} {
		if err := progs.Delete(&s); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	if err := d.owners.Delete(&s); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("xmit dispatcher: free slot %d: %w", s, err)
	}
	return nil
}

// sweep frees the slots whose holder link is gone: ports of processes that
// died without closing them. It returns how many it freed.
func (d *xmitDispatch) sweep() (int, error) {
	type held struct {
		slot  uint32
		owner bpf.XmitDispatchXmitOwner
	}
	var all []held
	var k uint32
	var v bpf.XmitDispatchXmitOwner
	it := d.owners.Iterate()
	for it.Next(&k, &v) {
		all = append(all, held{k, v})
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("xmit dispatcher: list slots: %w", err)
	}
	n := 0
	for _, h := range all {
		l, err := link.NewFromID(link.ID(h.owner.OwnerLinkId))
		if err == nil {
			l.Close()
			continue
		}
		if !errors.Is(err, os.ErrNotExist) {
			return n, fmt.Errorf("xmit dispatcher: slot %d's holder link %d: %w", h.slot, h.owner.OwnerLinkId, err)
		}
		if err := d.free(h.slot, h.owner); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// dispatchXmit gives xmit and hostDrop, the port_xmit and port_host_drop
// of the port on dev (whose veth peer is peer), a slot of the machine's
// dispatcher (creating it if there is none). owner is a link of the port
// whose end frees the slot.
func dispatchXmit(xmit, hostDrop *ebpf.Program, dev, peer bpf.XmitDispatchXmitDev, owner link.ID) (err error) {
	unlock, err := lockXmitDispatch()
	if err != nil {
		return err
	}
	defer unlock()
	if err := pinning.EnsureBPFFS(); err != nil {
		return err
	}
	d, err := openXmitDispatch(true)
	if err != nil {
		return err
	}
	defer d.close()
	defer func() {
		if err != nil {
			d.removeIfEmpty()
		}
	}()
	if _, err := d.sweep(); err != nil {
		return err
	}
	var cur uint32
	if err := d.slots.Lookup(&dev, &cur); err == nil {
		return fmt.Errorf("xmit dispatcher: device %d of namespace %d already has slot %d (another port on it)", dev.Ifindex, dev.NetnsIno, cur)
	}
	if err := d.dropPeerSlots.Lookup(&peer, &cur); err == nil {
		return fmt.Errorf("xmit dispatcher: device %d of namespace %d is already a port's peer (slot %d)", peer.Ifindex, peer.NetnsIno, cur)
	}
	o := bpf.XmitDispatchXmitOwner{Dev: dev, Peer: peer, OwnerLinkId: uint32(owner)}
	slot := uint32(XmitDispatchSlots)
	for s := range uint32(XmitDispatchSlots) {
		err := d.owners.Update(&s, &o, ebpf.UpdateNoExist)
		if err == nil {
			slot = s
			break
		}
		if !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("xmit dispatcher: claim slot %d: %w", s, err)
		}
	}
	if slot == XmitDispatchSlots {
		return fmt.Errorf("xmit dispatcher: all %d slots are taken (one per port)", XmitDispatchSlots)
	}
	// Programs first, then the devices that lead to them.
	steps := []struct {
		what string
		do   func() error
	}{
		{"port_xmit", func() error { return d.progs.Update(&slot, uint32(xmit.FD()), ebpf.UpdateAny) }},
		{"port_host_drop", func() error { return d.dropProgs.Update(&slot, uint32(hostDrop.FD()), ebpf.UpdateAny) }},
		{"the port's device", func() error { return d.slots.Update(&dev, &slot, ebpf.UpdateNoExist) }},
		{"its peer", func() error { return d.dropPeerSlots.Update(&peer, &slot, ebpf.UpdateNoExist) }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			d.free(slot, o)
			return fmt.Errorf("xmit dispatcher: slot %d, %s: %w", slot, st.what, err)
		}
	}
	return nil
}

// undispatchXmit frees the slot of the port on dev, if one of owners holds
// it, and removes the dispatcher with its last port.
func undispatchXmit(dev bpf.XmitDispatchXmitDev, owners []link.ID) error {
	unlock, err := lockXmitDispatch()
	if err != nil {
		return err
	}
	defer unlock()
	d, err := openXmitDispatch(false)
	if err != nil || d == nil {
		return err
	}
	defer d.close()
	var errs []error
	var s uint32
	var o bpf.XmitDispatchXmitOwner
	if err := d.slots.Lookup(&dev, &s); err == nil {
		if err := d.owners.Lookup(&s, &o); err == nil && slices.Contains(owners, link.ID(o.OwnerLinkId)) {
			errs = append(errs, d.free(s, o))
		}
	}
	_, err = d.sweep()
	errs = append(errs, err, d.removeIfEmpty())
	return errors.Join(errs...)
}

// XmitDispatchStatus is what the machine's xmit dispatcher holds.
type XmitDispatchStatus struct {
	// Attached says there is one (it exists while some port uses it).
	Attached bool `json:"attached"`
	// Ports is how many slots are held; Stale how many of them a dead
	// process left (freed at the next attach or detach, or by SweepStale).
	Ports int `json:"ports"`
	Stale int `json:"stale"`
	// EmptySlot counts transmissions of a device whose port was halfway
	// through leaving, DropEmptySlot drops likewise.
	EmptySlot     uint64 `json:"empty_slot"`
	DropEmptySlot uint64 `json:"drop_empty_slot"`
	// ProgramID is the dispatcher's program (for its run-time statistics).
	ProgramID ebpf.ProgramID `json:"program_id,omitempty"`
}

// XmitDispatch reads the machine's xmit dispatcher.
func XmitDispatch() (XmitDispatchStatus, error) {
	var st XmitDispatchStatus
	unlock, err := lockXmitDispatch()
	if err != nil {
		return st, err
	}
	defer unlock()
	l, err := link.LoadPinnedLink(filepath.Join(XmitDispatchDir, xmitDispatchLinkPin), nil)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("xmit dispatcher: %w", err)
	}
	li, err := l.Info()
	l.Close()
	if err != nil {
		return st, fmt.Errorf("xmit dispatcher: %w", err)
	}
	st.Attached, st.ProgramID = true, li.Program
	d, err := openXmitDispatch(false)
	if err != nil || d == nil {
		return st, err
	}
	defer d.close()
	var k uint32
	var v bpf.XmitDispatchXmitOwner
	it := d.owners.Iterate()
	for it.Next(&k, &v) {
		st.Ports++
		if l, err := link.NewFromID(link.ID(v.OwnerLinkId)); err == nil {
			l.Close()
		} else {
			st.Stale++
		}
	}
	if err := it.Err(); err != nil {
		return st, err
	}
	var per []bpf.XmitDispatchXmitDispatchStats
	if err := d.counters.Lookup(uint32(0), &per); err != nil {
		return st, err
	}
	for _, c := range per {
		st.EmptySlot += c.EmptySlot
		st.DropEmptySlot += c.DropEmptySlot
	}
	return st, nil
}

// sweepXmitDispatch frees the slots dead processes left and removes the
// dispatcher if nothing is left in it.
func sweepXmitDispatch() (int, error) {
	unlock, err := lockXmitDispatch()
	if err != nil {
		return 0, err
	}
	defer unlock()
	d, err := openXmitDispatch(false)
	if err != nil || d == nil {
		return 0, err
	}
	defer d.close()
	n, err := d.sweep()
	return n, errors.Join(err, d.removeIfEmpty())
}
