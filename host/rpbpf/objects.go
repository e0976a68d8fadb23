package rpbpf

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
)

// LoadOptions tune how the program is loaded.
type LoadOptions struct {
	// TestHooks makes the program read the clock from SetClock, for
	// BPF_PROG_RUN tests. Never set it on a device.
	TestHooks bool
}

// Objects are the loaded program and maps, attached to nothing, with the
// slots array mapped read-only into this process. They implement Offload;
// with LoadOptions.TestHooks, tests run the program with BPF_PROG_RUN.
// Methods are safe for concurrent use.
type Objects struct {
	objs bpf.RpObjects

	mu     sync.RWMutex // Close against the counters' reads of mem
	mem    []byte       // rp_cnps, MaxQPs slots
	slots  map[uint32]uint32
	free   []uint32 // slot indexes, lowest last
	closed bool
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
	o := &Objects{slots: make(map[uint32]uint32)}
	if err := spec.LoadAndAssign(&o.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("rpbpf: load program: %+v", ve)
		}
		return nil, fmt.Errorf("rpbpf: load program: %w", err)
	}
	o.mem, err = unix.Mmap(o.objs.RpCnps.FD(), 0, MaxQPs*slotBytes, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		_ = o.objs.Close()
		return nil, fmt.Errorf("rpbpf: mmap rp_cnps: %w", err)
	}
	for i := MaxQPs - 1; i >= 0; i-- {
		o.free = append(o.free, uint32(i))
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
	slot, again := o.slots[c.QPN]
	if !again {
		if len(o.free) == 0 {
			return nil, fmt.Errorf("rpbpf: qp %#x: all %d slots in use", c.QPN, MaxQPs)
		}
		slot = o.free[len(o.free)-1]
	}
	v := c.value(slot)
	if err := o.objs.RpQps.Put(c.QPN, &v); err != nil {
		return nil, fmt.Errorf("rpbpf: add qp %#x: %w", c.QPN, err)
	}
	if !again {
		o.free = o.free[:len(o.free)-1]
		o.slots[c.QPN] = slot
	}
	ctr := &counter{o: o, slot: slot}
	ctr.base = ctr.loadLocked(wordCounted)
	return ctr, nil
}

// RemoveQP implements Offload.
func (o *Objects) RemoveQP(qpn uint32) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	slot, ok := o.slots[qpn]
	if !ok {
		return fmt.Errorf("rpbpf: remove qp %#x: %w", qpn, ErrUnknownQP)
	}
	if o.closed {
		delete(o.slots, qpn) // the map went with Close
		return nil
	}
	if err := o.objs.RpQps.Delete(qpn); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("rpbpf: remove qp %#x: %w", qpn, err)
	}
	delete(o.slots, qpn)
	o.free = append(o.free, slot)
	return nil
}

// Stats sums the per-CPU counters.
func (o *Objects) Stats() (Stats, error) {
	var per []bpf.RpRpStats
	if err := o.objs.RpCounters.Lookup(uint32(0), &per); err != nil {
		return Stats{}, fmt.Errorf("rpbpf: read counters: %w", err)
	}
	var s Stats
	for i := range per {
		s.add(&per[i])
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
	var errs []error
	if o.mem != nil {
		errs = append(errs, unix.Munmap(o.mem))
		o.mem = nil
	}
	return errors.Join(append(errs, o.objs.Close())...)
}

// counter reads one QP's slot of the mapped rp_cnps.
type counter struct {
	o    *Objects
	slot uint32
	base uint64 // counted when the QP was added
}

// Slot word offsets (struct rp_slot).
const (
	wordCounted = 0
	wordClaimed = 1
	wordAt      = 2
)

// load reads word w of the slot atomically (the program writes it with
// atomic adds and plain 8-byte stores); 0 once the objects are closed.
func (c *counter) load(w int) uint64 {
	c.o.mu.RLock()
	defer c.o.mu.RUnlock()
	return c.loadLocked(w)
}

// loadLocked is load with o.mu held.
func (c *counter) loadLocked(w int) uint64 {
	if c.o.mem == nil {
		return 0
	}
	p := (*uint64)(unsafe.Pointer(&c.o.mem[int(c.slot)*slotBytes+w*8]))
	return atomic.LoadUint64(p)
}

func (c *counter) Counted() uint64 { return c.load(wordCounted) - c.base }

func (c *counter) Arrival(i uint64) (uint64, bool) {
	raw := c.base + i
	ns := c.load(wordAt + int(raw%Ring))
	// Valid unless a later CNP claimed the place meanwhile.
	return ns, c.load(wordClaimed)-raw <= Ring
}
