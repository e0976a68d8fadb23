// Package dispatch is the machine's xmit dispatcher (bpf/xmit_dispatch.c):
// the one home of the tracing programs that every port (qdisc) and every
// kernel NP (host/npbpf) would otherwise each attach to tracepoints that
// fire for every packet of the machine.
package dispatch

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
// packet's device (the port's, or its veth peer's); a third on
// net_dev_start_xmit does it for the kernel NPs' np_xmit (host/npbpf). Its
// links and maps are pinned, since ports of several processes share it; a
// flock serialises the processes that change it, and the last port to
// leave removes it.
//
// A slot's holder is a BPF link of its port (the dequeue program's TCX
// link): a port whose process died unpinned has lost it, and the next
// process to touch the dispatcher frees the slot (sweep).
var (
	// Dir is where the dispatcher pins its link and maps.
	// The suffix changes with the layout of its maps.
	Dir = filepath.Join(pinning.Root, "xmit_dispatch_v1")
	// xmitDispatchLock is the flock the processes take to change it.
	xmitDispatchLock = "/run/fabriclab/xmit_dispatch.lock"
)

// Slots is how many ports and NPs the dispatcher serves at once.
const Slots = 1024 // XMIT_DISPATCH_SLOTS

// enum xmit_kind: what holds a slot.
const (
	xmitKindPort = 0 // XMIT_KIND_PORT
	xmitKindNP   = 1 // XMIT_KIND_NP
)

// The pins of its links: link is pinned last, so that its pin says the
// dispatcher is whole.
const (
	xmitDispatchLinkPin     = "link"
	xmitDispatchDropDevPin  = "link_drop_dev"
	xmitDispatchDropPeerPin = "link_drop_peer"
	xmitDispatchNPPin       = "link_np"
)

// xmitDispatch is the dispatcher's pinned maps opened by one process.
type xmitDispatch struct {
	slots, progs, owners, counters *ebpf.Map
	dropPeerSlots, dropProgs       *ebpf.Map
	npSlots, npProgs               *ebpf.Map
}

func (d *xmitDispatch) maps() map[string]**ebpf.Map {
	return map[string]**ebpf.Map{
		bpf.XmitDispatchMapXmitSlots: &d.slots, bpf.XmitDispatchMapXmitProgs: &d.progs,
		bpf.XmitDispatchMapXmitOwners: &d.owners, bpf.XmitDispatchMapXmitDispatchCounters: &d.counters,
		bpf.XmitDispatchMapDropPeerSlots: &d.dropPeerSlots, bpf.XmitDispatchMapDropProgs: &d.dropProgs,
		bpf.XmitDispatchMapNpSlots: &d.npSlots, bpf.XmitDispatchMapNpProgs: &d.npProgs,
	}
}

func (d *xmitDispatch) close() {
	for _, m := range []*ebpf.Map{d.slots, d.progs, d.owners, d.counters, d.dropPeerSlots, d.dropProgs, d.npSlots, d.npProgs} {
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
	l, err := link.LoadPinnedLink(filepath.Join(Dir, xmitDispatchLinkPin), nil)
	if err == nil {
		l.Close() // the pin keeps it
		d := &xmitDispatch{}
		for name, dst := range d.maps() {
			if *dst, err = pinning.LoadMap(Dir, name); err != nil {
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
	if err := os.RemoveAll(Dir); err != nil {
		return nil, fmt.Errorf("xmit dispatcher: remove the remains of one: %w", err)
	}
	if !create {
		return nil, nil
	}
	var objs bpf.XmitDispatchObjects
	if err := bpf.LoadXmitDispatchObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("load the xmit dispatcher: %w", err)
	}
	defer objs.XmitDispatchPrograms.Close()
	d := &xmitDispatch{slots: objs.XmitSlots, progs: objs.XmitProgs, owners: objs.XmitOwners, counters: objs.XmitDispatchCounters,
		dropPeerSlots: objs.DropPeerSlots, dropProgs: objs.DropProgs, npSlots: objs.NpSlots, npProgs: objs.NpProgs}
	fail := func(err error) (*xmitDispatch, error) {
		d.close()
		os.RemoveAll(Dir)
		return nil, err
	}
	if err := os.MkdirAll(Dir, 0o700); err != nil {
		return fail(fmt.Errorf("xmit dispatcher: %w", err))
	}
	for name, m := range d.maps() {
		if err := (*m).Pin(filepath.Join(Dir, name)); err != nil {
			return fail(fmt.Errorf("xmit dispatcher: pin map %s: %w", name, err))
		}
	}
	for _, pl := range []struct {
		prog *ebpf.Program
		pin  string
	}{{objs.HostDropDispatchDev, xmitDispatchDropDevPin}, {objs.HostDropDispatchPeer, xmitDispatchDropPeerPin},
		{objs.NpXmitDispatch, xmitDispatchNPPin}, {objs.XmitDispatch, xmitDispatchLinkPin}} {
		l, err := link.AttachTracing(link.TracingOptions{Program: pl.prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return fail(fmt.Errorf("xmit dispatcher: attach %s: %w", pl.pin, err))
		}
		err = l.Pin(filepath.Join(Dir, pl.pin))
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
	return os.RemoveAll(Dir)
}

// free empties slot s, device entry first, so that the dispatcher stops
// looking the device up before its program goes.
func (d *xmitDispatch) free(s uint32, o bpf.XmitDispatchXmitOwner) error {
	var errs []error
	type devMap struct {
		slots *ebpf.Map
		dev   *bpf.XmitDispatchXmitDev
	}
	devs := []devMap{{d.slots, &o.Dev}, {d.dropPeerSlots, &o.Peer}}
	progs := []*ebpf.Map{d.progs, d.dropProgs}
	if o.Kind == xmitKindNP {
		devs, progs = []devMap{{d.npSlots, &o.Dev}}, []*ebpf.Map{d.npProgs}
	}
	for _, m := range devs {
		var cur uint32
		if err := m.slots.Lookup(m.dev, &cur); err == nil && cur == s {
			if err := m.slots.Delete(m.dev); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
			}
		}
	}
	for _, progs := range progs {
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

// Port gives xmit and hostDrop, the port_xmit and port_host_drop
// of the port on dev (whose veth peer is peer), a slot of the machine's
// dispatcher (creating it if there is none). owner is a link of the port
// whose end frees the slot.
func Port(xmit, hostDrop *ebpf.Program, port, peerDev Device, owner link.ID) error {
	dev, peer := port.key(), peerDev.key()
	o := bpf.XmitDispatchXmitOwner{Dev: dev, Peer: peer, OwnerLinkId: uint32(owner), Kind: xmitKindPort}
	return claimSlot(o, func(d *xmitDispatch, slot uint32) []dispatchStep {
		return []dispatchStep{
			{"port_xmit", func() error { return d.progs.Update(&slot, uint32(xmit.FD()), ebpf.UpdateAny) }},
			{"port_host_drop", func() error { return d.dropProgs.Update(&slot, uint32(hostDrop.FD()), ebpf.UpdateAny) }},
			{"the port's device", func() error { return d.slots.Update(&dev, &slot, ebpf.UpdateNoExist) }},
			{"its peer", func() error { return d.dropPeerSlots.Update(&peer, &slot, ebpf.UpdateNoExist) }},
		}
	})
}

// Device is a device the xmit dispatcher serves: its ifindex and its
// namespace's inode (net->ns.inum).
type Device struct {
	NetnsIno uint32
	Ifindex  int
}

func (d Device) key() bpf.XmitDispatchXmitDev {
	return bpf.XmitDispatchXmitDev{NetnsIno: d.NetnsIno, Ifindex: uint32(d.Ifindex)}
}

// NP gives prog, the np_xmit of the kernel NP on dev
// (host/npbpf), a slot of the machine's xmit dispatcher, creating it if
// there is none: the transmissions of dev run it, no other device's. owner
// is a link of the NP whose end frees the slot.
func NP(prog *ebpf.Program, dev Device, owner link.ID) error {
	key := dev.key()
	o := bpf.XmitDispatchXmitOwner{Dev: key, OwnerLinkId: uint32(owner), Kind: xmitKindNP}
	return claimSlot(o, func(d *xmitDispatch, slot uint32) []dispatchStep {
		return []dispatchStep{
			{"np_xmit", func() error { return d.npProgs.Update(&slot, uint32(prog.FD()), ebpf.UpdateAny) }},
			{"the NP's device", func() error { return d.npSlots.Update(&key, &slot, ebpf.UpdateNoExist) }},
		}
	})
}

// UndoNP frees the slot of the kernel NP on dev, if one of
// owners holds it, and removes the dispatcher with its last user.
func UndoNP(dev Device, owners []link.ID) error {
	return freeSlot(func(d *xmitDispatch) *ebpf.Map { return d.npSlots }, dev.key(), owners)
}

// dispatchStep is one map update of a slot's claim.
type dispatchStep struct {
	what string
	do   func() error
}

// claimSlot claims a free slot for o under the lock, then runs its steps
// (programs first, then the devices that lead to them); on an error it
// frees the slot again.
func claimSlot(o bpf.XmitDispatchXmitOwner, steps func(d *xmitDispatch, slot uint32) []dispatchStep) (err error) {
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
	slot := uint32(Slots)
	for s := range uint32(Slots) {
		err := d.owners.Update(&s, &o, ebpf.UpdateNoExist)
		if err == nil {
			slot = s
			break
		}
		if !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("xmit dispatcher: claim slot %d: %w", s, err)
		}
	}
	if slot == Slots {
		return fmt.Errorf("xmit dispatcher: all %d slots are taken (one per port and per kernel NP)", Slots)
	}
	for _, st := range steps(d, slot) {
		if err := st.do(); err != nil {
			d.free(slot, o)
			if errors.Is(err, ebpf.ErrKeyExist) {
				err = fmt.Errorf("%w (device %d of namespace %d already has one)", err, o.Dev.Ifindex, o.Dev.NetnsIno)
			}
			return fmt.Errorf("xmit dispatcher: slot %d, %s: %w", slot, st.what, err)
		}
	}
	return nil
}

// UndoPort frees the slot of the port on dev, if one of owners holds
// it, and removes the dispatcher with its last user.
func UndoPort(dev Device, owners []link.ID) error {
	return freeSlot(func(d *xmitDispatch) *ebpf.Map { return d.slots }, dev.key(), owners)
}

// freeSlot frees the slot that slots gives dev, if one of owners holds
// it, sweeps, and removes the dispatcher if nothing is left in it.
func freeSlot(slots func(d *xmitDispatch) *ebpf.Map, dev bpf.XmitDispatchXmitDev, owners []link.ID) error {
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
	if err := slots(d).Lookup(&dev, &s); err == nil {
		if err := d.owners.Lookup(&s, &o); err == nil && slices.Contains(owners, link.ID(o.OwnerLinkId)) {
			errs = append(errs, d.free(s, o))
		}
	}
	_, err = d.sweep()
	errs = append(errs, err, d.removeIfEmpty())
	return errors.Join(errs...)
}

// Status is what the machine's xmit dispatcher holds.
type Status struct {
	// Attached says there is one (it exists while some port uses it).
	Attached bool `json:"attached"`
	// Ports and NPs are how many slots ports and kernel NPs hold; Stale
	// how many of them a dead process left (freed at the next attach or
	// detach, or by SweepStale).
	Ports int `json:"ports"`
	NPs   int `json:"nps"`
	Stale int `json:"stale"`
	// EmptySlot counts transmissions of a device whose port was halfway
	// through leaving, DropEmptySlot drops likewise, NPEmptySlot an NP's.
	EmptySlot     uint64 `json:"empty_slot"`
	DropEmptySlot uint64 `json:"drop_empty_slot"`
	NPEmptySlot   uint64 `json:"np_empty_slot"`
	// ProgramID is the dispatcher's program (for its run-time statistics).
	ProgramID ebpf.ProgramID `json:"program_id,omitempty"`
}

// Read reads the machine's xmit dispatcher.
func Read() (Status, error) {
	var st Status
	unlock, err := lockXmitDispatch()
	if err != nil {
		return st, err
	}
	defer unlock()
	l, err := link.LoadPinnedLink(filepath.Join(Dir, xmitDispatchLinkPin), nil)
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
		if v.Kind == xmitKindNP {
			st.NPs++
		} else {
			st.Ports++
		}
		if l, err := link.NewFromID(link.ID(v.OwnerLinkId)); err == nil {
			l.Close()
		} else {
			st.Stale++
		}
	}
	if err := it.Err(); err != nil {
		return st, err
	}
	return st, bpf.SumPerCPU[bpf.XmitDispatchXmitDispatchStats](d.counters, 0, &st)
}

// Sweep frees the slots dead processes left and removes the
// dispatcher if nothing is left in it.
func Sweep() (int, error) {
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
