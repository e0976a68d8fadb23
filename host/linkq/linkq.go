// Package linkq bounds the host queue in front of a switch port: the
// bytes a lab host has sent on its link that the switch has not yet
// received. On a veth pair they wait in the kernel's per-CPU backlog for
// softirq work, which the host can hold off for tens of ms while the
// sender keeps sending; the port then gets them in one burst, past any
// PPFC stop or CNP (a NIC bounds this queue with BQL). bpf/linkq.c counts
// both ends of each link; a sender's transmit loop (host/engine
// Config.HostQueue) waits while its links hold more than a limit, so the
// switch port stays the only queue.
//
// Load the maps once per lab (Load), attach each host-to-switch link
// (Objects.AttachLink), and give each host's senders the Queue of its
// links.
package linkq

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

// MaxLinks is how many links one Objects serves (LINKQ_SLOTS).
const MaxLinks = 1024

// slotBytes is struct linkq_slot's size; the words in it follow.
const (
	slotBytes   = 64
	wordSent    = 0
	wordSentPkt = 1
	wordRecv    = 2
	wordRecvPkt = 3
	wordMax     = 4
)

// DefaultLimit is a host's host-queue limit unless its lab says
// otherwise: 32 full 4 KB RoCEv2 packets, 2 ms at 500 Mbit/s; the
// backlog's wait on this VM is about 0.1 ms at the median
// (shared/reference/kernel.md).
const DefaultLimit = 128 << 10

// Objects are the counters of a lab's links, mapped read-only, and the
// programs attached to them. Methods are safe for concurrent use.
type Objects struct {
	spec *ebpf.CollectionSpec
	m    *ebpf.Map // linkq_slots

	mu     sync.RWMutex // Close against the reads of mem
	mem    []byte
	next   int
	progs  []*ebpf.Program
	links  []link.Link
	closed bool
}

// Load creates the counters and maps them.
func Load() (*Objects, error) {
	spec, err := bpf.LoadLinkq()
	if err != nil {
		return nil, fmt.Errorf("linkq: load spec: %w", err)
	}
	m, err := ebpf.NewMap(spec.Maps["linkq_slots"])
	if err != nil {
		return nil, fmt.Errorf("linkq: create linkq_slots: %w", err)
	}
	mem, err := unix.Mmap(m.FD(), 0, MaxLinks*slotBytes, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("linkq: mmap linkq_slots: %w", err)
	}
	return &Objects{spec: spec, m: m, mem: mem}, nil
}

// End is one end of a link: a device in a namespace (netns.None() for
// the calling thread's).
type End struct {
	NS  netns.NsHandle
	Dev string
}

// AttachLink counts the link from host to sw: its host end's egress and
// its switch end's ingress (first in the TCX chain, before anything there
// may drop). It returns the link's index for Queue and Counters. On error
// nothing stays attached.
func (o *Objects) AttachLink(host, sw End) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return 0, errors.New("linkq: closed")
	}
	if o.next == MaxLinks {
		return 0, fmt.Errorf("linkq: all %d links in use", MaxLinks)
	}
	i := o.next
	spec := o.spec.Copy()
	if err := spec.Variables["slot"].Set(uint32(i)); err != nil {
		return 0, fmt.Errorf("linkq: set slot: %w", err)
	}
	var objs bpf.LinkqObjects
	opts := bpf.LoadOptions()
	opts.MapReplacements = map[string]*ebpf.Map{"linkq_slots": o.m}
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return 0, fmt.Errorf("linkq: load programs: %+v", ve)
		}
		return 0, fmt.Errorf("linkq: load programs: %w", err)
	}
	var attached []link.Link
	attach := func(e End, p *ebpf.Program, at ebpf.AttachType) error {
		return nsexec.Do(e.NS, func() error {
			ifi, err := net.InterfaceByName(e.Dev)
			if err != nil {
				return err
			}
			l, err := link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: p, Attach: at, Anchor: link.Head()})
			if err != nil {
				return fmt.Errorf("attach to %s: %w", e.Dev, err)
			}
			attached = append(attached, l)
			return nil
		})
	}
	err := attach(host, objs.LinkqEgress, ebpf.AttachTCXEgress)
	if err == nil {
		err = attach(sw, objs.LinkqIngress, ebpf.AttachTCXIngress)
	}
	// The links hold the programs; the map stays o's.
	_ = objs.LinkqSlots.Close()
	if err != nil {
		for _, l := range attached {
			_ = l.Close()
		}
		_ = objs.LinkqEgress.Close()
		_ = objs.LinkqIngress.Close()
		return 0, fmt.Errorf("linkq: link %s -> %s: %w", host.Dev, sw.Dev, err)
	}
	o.progs = append(o.progs, objs.LinkqEgress, objs.LinkqIngress)
	o.links = append(o.links, attached...)
	o.next++
	return i, nil
}

// Counters are one link's totals.
type Counters struct {
	SentBytes, SentPackets uint64
	RecvBytes, RecvPackets uint64
	// MaxBytes is the most the link held behind a packet when it reached
	// the switch.
	MaxBytes uint64
}

// Counters reads link i's totals; zero once closed.
func (o *Objects) Counters(i int) Counters {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return Counters{
		SentBytes: o.loadLocked(i, wordSent), SentPackets: o.loadLocked(i, wordSentPkt),
		RecvBytes: o.loadLocked(i, wordRecv), RecvPackets: o.loadLocked(i, wordRecvPkt),
		MaxBytes: o.loadLocked(i, wordMax),
	}
}

func (o *Objects) loadLocked(i, w int) uint64 {
	if o.mem == nil || i < 0 || i >= MaxLinks {
		return 0
	}
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&o.mem[i*slotBytes+w*8])))
}

// Close detaches every link's programs and unmaps the counters. It is
// idempotent.
func (o *Objects) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	var errs []error
	for _, l := range o.links {
		errs = append(errs, l.Close())
	}
	for _, p := range o.progs {
		errs = append(errs, p.Close())
	}
	if o.mem != nil {
		errs = append(errs, unix.Munmap(o.mem))
		o.mem = nil
	}
	errs = append(errs, o.m.Close())
	return errors.Join(errs...)
}

// Queue is the host queue of a host's links: it implements
// host/engine.HostQueue.
type Queue struct {
	o     *Objects
	links []int
	limit uint64
	stuck time.Duration

	mu struct {
		sync.Mutex
		base     uint64 // bytes written off as lost on the way
		lastRecv uint64
		since    time.Time // when the queue was last seen full with no arrival
		leaks    uint64
	}
}

// StuckAfter is how long a full queue may see nothing arrive at the
// switch before its bytes are written off: a packet the kernel dropped
// between the two ends (a full backlog, a device's MTU) was counted sent
// and never arrives, and would otherwise close the gate for good. Longer
// than any host stall a lab survives.
const StuckAfter = 200 * time.Millisecond

// Queue returns the host queue of the given links with its limit in bytes
// (0: DefaultLimit).
func (o *Objects) Queue(limit int, links ...int) *Queue {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Queue{o: o, links: links, limit: uint64(limit), stuck: StuckAfter}
}

// Limit is the bytes the links may hold before the senders wait.
func (q *Queue) Limit() int { return int(q.limit) }

// Links are the indexes of the queue's links (Objects.Counters).
func (q *Queue) Links() []int { return q.links }

// sums reads the links' sent and received bytes.
func (q *Queue) sums() (sent, recv uint64) {
	q.o.mu.RLock()
	defer q.o.mu.RUnlock()
	for _, i := range q.links {
		sent += q.o.loadLocked(i, wordSent)
		recv += q.o.loadLocked(i, wordRecv)
	}
	return sent, recv
}

// Room is how many bytes the senders may send now: the limit less what
// the links hold, 0 when full.
func (q *Queue) Room() int {
	sent, recv := q.sums()
	q.mu.Lock()
	defer q.mu.Unlock()
	held := uint64(0)
	if sent > recv+q.mu.base {
		held = sent - recv - q.mu.base
	}
	if held < q.limit {
		q.mu.since = time.Time{}
		return int(q.limit - held)
	}
	// Full: written off if nothing arrived for StuckAfter.
	now := time.Now()
	switch {
	case q.mu.since.IsZero() || recv != q.mu.lastRecv:
		q.mu.since, q.mu.lastRecv = now, recv
	case now.Sub(q.mu.since) >= q.stuck:
		q.mu.base += held
		q.mu.leaks++
		q.mu.since = time.Time{}
		return int(q.limit)
	}
	return 0
}

// Leaks is how many times a full queue was written off (StuckAfter).
func (q *Queue) Leaks() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.leaks
}
