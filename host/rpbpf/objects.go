package rpbpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/roce"
)

// LoadOptions tune how the program is loaded.
type LoadOptions struct {
	// TestHooks makes the program read the clock from SetClock, for
	// BPF_PROG_RUN tests. Never set it on a device.
	TestHooks bool
	// QPs is how many QPs the Objects serve at once, rounded up to a
	// page of slots (32), at most MaxQPs; 0 means MaxQPs (2 MiB of
	// kernel memory). The process maps the slots a window at a time as
	// QPs take them (windowPages): only the windows in use are resident.
	QPs int
	// Pairs is how many (local, peer) pairs take PPFC notifications,
	// rounded up to a page of slots (16), at most MaxPairs; 0 means
	// MaxPairs (1 MiB).
	Pairs int
}

// slotsFor is n rounded up to a whole page of slots of size bytes, at
// most max; 0 means max.
func slotsFor(n, size, most int) int {
	if n <= 0 || n >= most {
		return most
	}
	perPage := os.Getpagesize() / size
	return min(most, (n+perPage-1)/perPage*perPage)
}

// Objects are the loaded program and maps, attached to nothing, with the
// slots arrays mapped read-only into this process. They implement Offload;
// with LoadOptions.TestHooks, tests run the program with BPF_PROG_RUN.
// Methods are safe for concurrent use.
type Objects struct {
	objs bpf.RpObjects

	mu   sync.RWMutex // Close and new windows against the counters' reads
	cnps slotWindows  // rp_cnps, maxQPs slots
	// maxQPs and maxPairs are the slots loaded (LoadOptions).
	maxQPs, maxPairs int
	slots            map[uint32]qpSlots
	free             []uint32 // slot indexes, lowest last
	// PPFC: rp_ppfc, a slot per (local, peer) pair held by the QPs that
	// send on it.
	ppfc     slotWindows
	pairs    map[bpf.RpRpPpfcKey]*pairSlot
	freePair []uint32 // pair slot indexes, lowest last
	closed   bool
}

// qpSlots is where a QP's CNPs and its pair's PPFC notifications go.
type qpSlots struct {
	slot uint32
	pair bpf.RpRpPpfcKey
}

// pairSlot is a pair's slot in rp_ppfc and how many QPs hold it.
type pairSlot struct {
	slot uint32
	refs int
}

var _ Offload = (*Objects)(nil)

// Load loads the program, creates its maps and maps the slots.
func Load(opts LoadOptions) (*Objects, error) {
	spec, err := bpf.LoadRp()
	if err != nil {
		return nil, fmt.Errorf("rpbpf: load spec: %w", err)
	}
	if opts.TestHooks {
		if err := spec.Variables[bpf.RpVarTestHooks].Set(uint8(1)); err != nil {
			return nil, fmt.Errorf("rpbpf: set test_hooks: %w", err)
		}
	}
	qps, pairs := slotsFor(opts.QPs, slotBytes, MaxQPs), slotsFor(opts.Pairs, ppfcSlotBytes, MaxPairs)
	spec.Maps[bpf.RpMapRpQps].MaxEntries = uint32(qps)
	spec.Maps[bpf.RpMapRpCnps].MaxEntries = uint32(qps)
	spec.Maps[bpf.RpMapRpPpfcPeers].MaxEntries = uint32(pairs)
	spec.Maps[bpf.RpMapRpPpfc].MaxEntries = uint32(pairs)
	o := &Objects{slots: make(map[uint32]qpSlots), pairs: make(map[bpf.RpRpPpfcKey]*pairSlot), maxQPs: qps, maxPairs: pairs}
	if err := spec.LoadAndAssign(&o.objs, bpf.LoadOptions()); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("rpbpf: load program: %+v", ve)
		}
		return nil, fmt.Errorf("rpbpf: load program: %w", err)
	}
	o.cnps = newSlotWindows(o.objs.RpCnps, bpf.RpMapRpCnps, qps, slotBytes)
	o.ppfc = newSlotWindows(o.objs.RpPpfc, bpf.RpMapRpPpfc, pairs, ppfcSlotBytes)
	for i := qps - 1; i >= 0; i-- {
		o.free = append(o.free, uint32(i))
	}
	for i := pairs - 1; i >= 0; i-- {
		o.freePair = append(o.freePair, uint32(i))
	}
	return o, nil
}

// AddQP implements Offload.
func (o *Objects) AddQP(c QPContext) (CNPCounter, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, errors.New("rpbpf: closed")
	}
	prev, again := o.slots[c.QPN]
	slot := prev.slot
	if !again {
		if len(o.free) == 0 {
			return nil, fmt.Errorf("rpbpf: qp %#x: all %d slots in use (LoadOptions.QPs)", c.QPN, o.maxQPs)
		}
		slot = o.free[len(o.free)-1]
		if err := o.cnps.mapSlot(slot); err != nil {
			return nil, fmt.Errorf("rpbpf: qp %#x: %w", c.QPN, err)
		}
	}
	key := c.pairKey()
	ps, err := o.holdPairLocked(key)
	if err != nil {
		return nil, fmt.Errorf("rpbpf: qp %#x: %w", c.QPN, err)
	}
	v := c.value(slot)
	if err := o.objs.RpQps.Put(c.QPN, &v); err != nil {
		o.releasePairLocked(key)
		return nil, fmt.Errorf("rpbpf: add qp %#x: %w", c.QPN, err)
	}
	if again {
		o.releasePairLocked(prev.pair) // the QP it replaces
	} else {
		o.free = o.free[:len(o.free)-1]
	}
	o.slots[c.QPN] = qpSlots{slot: slot, pair: key}
	ctr := &counter{o: o, slot: slot, pair: ps.slot}
	ctr.base = ctr.loadLocked(wordCounted)
	ctr.ppfcBase = ctr.ppfcLoadLocked(wordCounted)
	return ctr, nil
}

// holdPairLocked takes a reference on the pair's slot, writing the pair
// into rp_ppfc_peers for its first QP. Precondition: o.mu is held.
func (o *Objects) holdPairLocked(key bpf.RpRpPpfcKey) (*pairSlot, error) {
	if ps := o.pairs[key]; ps != nil {
		ps.refs++
		return ps, nil
	}
	if len(o.freePair) == 0 {
		return nil, fmt.Errorf("all %d PPFC pair slots in use (LoadOptions.Pairs)", o.maxPairs)
	}
	ps := &pairSlot{slot: o.freePair[len(o.freePair)-1], refs: 1}
	if err := o.ppfc.mapSlot(ps.slot); err != nil {
		return nil, err
	}
	if err := o.objs.RpPpfcPeers.Put(&key, ps.slot); err != nil {
		return nil, fmt.Errorf("add PPFC pair: %w", err)
	}
	o.freePair = o.freePair[:len(o.freePair)-1]
	o.pairs[key] = ps
	return ps, nil
}

// releasePairLocked drops a reference on the pair's slot; the last one
// takes the pair out of rp_ppfc_peers. Precondition: o.mu is held.
func (o *Objects) releasePairLocked(key bpf.RpRpPpfcKey) {
	ps := o.pairs[key]
	if ps == nil {
		return
	}
	if ps.refs--; ps.refs > 0 {
		return
	}
	delete(o.pairs, key)
	if !o.closed {
		if err := o.objs.RpPpfcPeers.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return // the slot stays taken rather than shared by two pairs
		}
	}
	o.freePair = append(o.freePair, ps.slot)
}

// RemoveQP implements Offload.
func (o *Objects) RemoveQP(qpn uint32) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	qs, ok := o.slots[qpn]
	if !ok {
		return fmt.Errorf("rpbpf: remove qp %#x: %w", qpn, ErrUnknownQP)
	}
	if o.closed {
		delete(o.slots, qpn) // the maps went with Close
		o.releasePairLocked(qs.pair)
		return nil
	}
	if err := o.objs.RpQps.Delete(qpn); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("rpbpf: remove qp %#x: %w", qpn, err)
	}
	delete(o.slots, qpn)
	o.free = append(o.free, qs.slot)
	o.releasePairLocked(qs.pair)
	return nil
}

// Stats sums the per-CPU counters.
func (o *Objects) Stats() (Stats, error) {
	var s Stats
	if err := bpf.SumPerCPU[bpf.RpRpStats](o.objs.RpCounters, 0, &s); err != nil {
		return Stats{}, fmt.Errorf("rpbpf: %w", err)
	}
	return s, nil
}

// SetClock sets the time the program reads under LoadOptions.TestHooks.
func (o *Objects) SetClock(nowNs uint64) error {
	return o.objs.TestNowNs.Set(nowNs)
}

// program is rp_ingress, for Attach and BPF_PROG_RUN tests.
func (o *Objects) program() *ebpf.Program { return o.objs.RpIngress }

// RunIngress hands one Ethernet frame to rp_ingress (BPF_PROG_RUN), as a
// device's ingress would: for tests that hold the kernel RP's verdicts
// against another's (host/agent). It returns the program's return code.
func (o *Objects) RunIngress(frame []byte) (uint32, error) {
	return o.objs.RpIngress.Run(&ebpf.RunOptions{Data: frame})
}

// Close unmaps the slots (counters read 0 from then on) and frees the
// program and maps. It is idempotent.
func (o *Objects) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	errs := []error{o.cnps.unmap(), o.ppfc.unmap()}
	return errors.Join(append(errs, o.objs.Close())...)
}

// windowPages is how many pages of slots one mapping covers. The kernel
// maps every page of a BPF array at mmap (remap_vmalloc_range), so a
// mapping of all MaxQPs' slots is 2 MiB resident whatever the QPs in use;
// windows are mapped as QPs first take a slot in them, and the lowest
// free slot goes first, so a few QPs cost a window (64 KiB of rp_cnps).
const windowPages = 16

// slotWindows is one mmapable array's slots, mapped read-only a window at
// a time.
type slotWindows struct {
	m         *ebpf.Map
	name      string
	slots     int // in the map
	slotBytes int
	perWindow int      // slots in a window
	windows   [][]byte // nil: not mapped (or unmapped by Close)
}

func newSlotWindows(m *ebpf.Map, name string, slots, slotBytes int) slotWindows {
	per := windowPages * os.Getpagesize() / slotBytes
	return slotWindows{m: m, name: name, slots: slots, slotBytes: slotBytes, perWindow: per,
		windows: make([][]byte, (slots+per-1)/per)}
}

// mapSlot maps the window that holds slot, if it is not yet. Precondition:
// o.mu is held for writing.
func (w *slotWindows) mapSlot(slot uint32) error {
	i := int(slot) / w.perWindow
	if w.windows[i] != nil {
		return nil
	}
	first := i * w.perWindow
	n := min(w.perWindow, w.slots-first)
	mem, err := unix.Mmap(w.m.FD(), int64(first*w.slotBytes), n*w.slotBytes, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %s slots %d..%d: %w", w.name, first, first+n-1, err)
	}
	w.windows[i] = mem
	return nil
}

// word reads the 8-byte word w of slot atomically (the program writes
// with atomic adds and plain 8-byte stores); 0 if its window is not
// mapped. Precondition: o.mu is held.
func (w *slotWindows) word(slot uint32, word int) uint64 {
	mem := w.windows[int(slot)/w.perWindow]
	if mem == nil {
		return 0
	}
	off := int(slot)%w.perWindow*w.slotBytes + word*8
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[off])))
}

// mapped says whether slot's window is mapped. Precondition: o.mu is held.
func (w *slotWindows) mapped(slot uint32) bool { return w.windows[int(slot)/w.perWindow] != nil }

// unmap unmaps every window: words read 0 from then on. Precondition:
// o.mu is held for writing.
func (w *slotWindows) unmap() error {
	var errs []error
	for i, mem := range w.windows {
		if mem != nil {
			errs = append(errs, unix.Munmap(mem))
			w.windows[i] = nil
		}
	}
	return errors.Join(errs...)
}

// counter reads one QP's slot of the mapped rp_cnps and its pair's of
// rp_ppfc.
type counter struct {
	o        *Objects
	slot     uint32
	pair     uint32
	base     uint64 // counted when the QP was added
	ppfcBase uint64 // its pair's PPFC notifications then
}

// Slot word offsets (struct rp_slot).
const (
	wordCounted = 0
	wordClaimed = 1
	wordAt      = 2
)

// load reads word w of the QP's slot of rp_cnps atomically (the program
// writes it with atomic adds and plain 8-byte stores); 0 once the objects
// are closed.
func (c *counter) load(w int) uint64 {
	c.o.mu.RLock()
	defer c.o.mu.RUnlock()
	return c.loadLocked(w)
}

// loadLocked is load with o.mu held.
func (c *counter) loadLocked(w int) uint64 { return c.o.cnps.word(c.slot, w) }

func (c *counter) Counted() uint64 { return c.load(wordCounted) - c.base }

func (c *counter) Arrival(i uint64) (uint64, bool) {
	raw := c.base + i
	ns := c.load(wordAt + int(raw%Ring))
	// Valid unless a later CNP claimed the place meanwhile.
	return ns, c.load(wordClaimed)-raw <= Ring
}

// ppfcLoadLocked reads word w of the pair's slot of rp_ppfc (as
// loadLocked) with o.mu held.
func (c *counter) ppfcLoadLocked(w int) uint64 { return c.o.ppfc.word(c.pair, w) }

func (c *counter) PPFCCounted() uint64 {
	c.o.mu.RLock()
	defer c.o.mu.RUnlock()
	return c.ppfcLoadLocked(wordCounted) - c.ppfcBase
}

func (c *counter) PPFCEvent(i uint64) (PPFCEvent, bool) {
	raw := c.ppfcBase + i
	c.o.mu.RLock()
	defer c.o.mu.RUnlock()
	if !c.o.ppfc.mapped(c.pair) {
		return PPFCEvent{}, false
	}
	// The event's four words, copied before the claim check: a writer
	// that took the place meanwhile shows in claimed, and the copy is
	// then not used.
	w := 2 + int(raw%PPFCRing)*ppfcEventSize/8
	var ev [ppfcEventSize]byte
	for i := range ppfcEventSize / 8 {
		binary.NativeEndian.PutUint64(ev[8*i:], c.ppfcLoadLocked(w+i))
	}
	if c.ppfcLoadLocked(wordClaimed)-raw > PPFCRing {
		return PPFCEvent{}, false
	}
	e := PPFCEvent{
		AtNs:   binary.NativeEndian.Uint64(ev[0:]),
		Source: netip.AddrFrom16([16]byte(ev[8:24])).Unmap(),
		Action: roce.PPFCAction(binary.NativeEndian.Uint16(ev[24:])),
		Pause:  time.Duration(binary.NativeEndian.Uint16(ev[26:])) * time.Microsecond,
		PSN:    binary.NativeEndian.Uint32(ev[28:]),
	}
	return e, true
}
