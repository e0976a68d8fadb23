//go:build linux

package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	ebpflink "github.com/cilium/ebpf/link"
	"github.com/songgao/water"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/hostlost"
)

const (
	// MaxDelay bounds DelaySpec.Delay, DelaySpec.Jitter and what PerFlow
	// returns (PerFlow results outside 0..MaxDelay are clamped).
	MaxDelay = 10 * time.Second
	// DefaultDelayLimit is DelaySpec.Limit when it is 0.
	DefaultDelayLimit = 10000
	// MaxDelayLimit bounds DelaySpec.Limit.
	MaxDelayLimit = 1 << 20
	// LatenessBuckets is the length of DelayStats.Lateness.
	LatenessBuckets = 40

	// writeBatch is the most packets the writer takes out of the queue at once.
	writeBatch = 64
	// minFlowPrune is the flow-table size below which idle flows are kept.
	minFlowPrune = 1024
	// tunQueueLen is the TUN's ring between delay_divert and the reader
	// (the kernel default is 500): it absorbs the reader's scheduling
	// hiccups; packets beyond it are DelayStats.TunDropped.
	tunQueueLen = 1000
)

// DelaySpec says what a delay link does to packets leaving a device.
type DelaySpec struct {
	// Delay is the fixed one-way delay added to every packet, 0..MaxDelay.
	Delay time.Duration
	// Jitter adds a uniform extra delay in [0, Jitter). Optional. Packets of
	// one flow are never reordered by it (unlike netem's jitter).
	Jitter time.Duration
	// PerFlow overrides Delay per flow. Optional. The forwarder's reader
	// goroutine calls it once per flow, and again after the flow has been
	// idle for longer than its delay, so it must be deterministic, cheap and
	// safe to run concurrently with the caller's code. Results are clamped
	// to 0..MaxDelay.
	PerFlow func(FlowKey) time.Duration
	// Seed seeds the jitter's random numbers, so a run can be repeated.
	Seed int64
	// Limit is the most packets held at once; an arrival beyond it is
	// dropped (DelayStats.QueueFull). Optional: 0 means DefaultDelayLimit.
	// Packet buffers take at most (Limit+65) × (MTU+1) bytes.
	Limit int
	// Held, when set, gets the time the link fell behind its release
	// times (the writer ran late: the host's time, not the link's
	// delay): for a packet whose lateness grew past the link's steady
	// lateness (lagMeter), from its release plus that lateness to its
	// write, on CLOCK_MONOTONIC (host/hostlost). Optional.
	Held *hostlost.Log
}

// FlowKey is the 5-tuple a delay link orders and delays packets by. Ports are
// zero for protocols without ports and for IP fragments; all non-IP packets
// share the zero key.
type FlowKey struct {
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16
}

func (k FlowKey) String() string {
	return fmt.Sprintf("%d %s:%d > %s:%d", k.Proto, k.Src, k.SrcPort, k.Dst, k.DstPort)
}

// Validate checks the spec; its errors wrap ErrInvalidSpec and name the
// field, the value and the range.
func (s DelaySpec) Validate() error {
	if s.Delay < 0 || s.Delay > MaxDelay {
		return specErr("DelaySpec.Delay", "%v outside 0..%v", s.Delay, MaxDelay)
	}
	if s.Jitter < 0 || s.Jitter > MaxDelay {
		return specErr("DelaySpec.Jitter", "%v outside 0..%v", s.Jitter, MaxDelay)
	}
	if s.Limit < 0 || s.Limit > MaxDelayLimit {
		return specErr("DelaySpec.Limit", "%d outside 0..%d (0 means %d)", s.Limit, MaxDelayLimit, DefaultDelayLimit)
	}
	return nil
}

// DelayStats are a delay link's counters since NewDelay.
type DelayStats struct {
	// The forwarder (user space).
	Packets        uint64 // released: written back to the TUN on time
	Bytes          uint64 // their IP bytes
	Dropped        uint64 // QueueFull + Oversize + WriteErrors
	QueueFull      uint64 // arrived while Limit packets were held
	Oversize       uint64 // longer than the TUN's MTU
	WriteErrors    uint64
	ReadErrors     uint64
	Held           int    // packets held now
	MaxHeld        int    // most packets held at once
	DroppedOnClose uint64 // still held when Close ran

	// Lateness is how long after its release time a packet was written:
	// Lateness[i] counts packets between 2^i and 2^(i+1) ns late (bucket 0
	// also holds the ones on time).
	Lateness     [LatenessBuckets]uint64
	LatenessMax  time.Duration
	LatenessMean time.Duration

	// The eBPF programs (kernel).
	Diverted      uint64 // packets delay_divert sent to the forwarder
	DivertedBytes uint64 // their IP bytes
	Returned      uint64 // packets delay_return sent out of the device
	ReturnedBytes uint64
	Reentered     uint64 // returned packets seen again at the device's egress
	Bypassed      uint64 // passed undelayed: ARP, multicast, broadcast, IPv6 ND, VLAN offload
	Malformed     uint64 // too short to parse: passed undelayed
	KernelDropped uint64 // non-IP written to the TUN, or a redirect helper failed
	// MarksKept counts diverted packets that carried an skb mark, kept
	// for their return; MarksRestored the returned packets given it back
	// (bpf/delay.c: the TUN's write path makes a new sk_buff, and a later
	// program at the egress, the kernel NP's or a port's, tells its CNP
	// clones by their mark).
	MarksKept, MarksRestored uint64
	// TunGone says the TUN was deleted from under the link (Err says
	// when and how much it took); LostTunGone counts the packets
	// delay_divert sent to it since, every one lost.
	TunGone     bool
	LostTunGone uint64
	// TunDropped counts packets the TUN's own queue dropped because the
	// forwarder did not read them fast enough.
	TunDropped uint64
}

// LatenessQuantile returns an upper bound of the q-quantile (0 < q ≤ 1) of
// the release lateness, at the histogram's factor-of-two resolution.
func (s DelayStats) LatenessQuantile(q float64) time.Duration {
	var total uint64
	for _, c := range s.Lateness {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(q * float64(total))
	if want == 0 {
		want = 1
	}
	var seen uint64
	for i, c := range s.Lateness {
		seen += c
		if seen >= want {
			return min(time.Duration(1)<<(i+1), s.LatenessMax)
		}
	}
	return s.LatenessMax
}

// Delay delays the packets leaving one device of a namespace, for kernels
// without netem. Where netem exists (most lab servers) it may be used
// instead; nothing in the project requires it.
//
// Design. delay_divert (bpf/delay.c), first at TCX egress of the device,
// redirects every unicast IP packet to the egress of an L3 TUN device in the
// same namespace; the kernel strips the Ethernet header and segments GSO
// packets on the way (the TUN has no offloads). The forwarder in this file
// reads each packet from the TUN, holds it, and writes it back when it is
// due. delay_return, at TCX ingress of the TUN, pushes an empty Ethernet
// header (bpf_redirect_neigh drops packets without room for one, as an L3
// device delivers them) and sends the packet out of the device with
// bpf_redirect_neigh, which fills the header in from the route and neighbour
// tables. The device's egress hook sees the packet a second time and lets it
// through by its ingress ifindex (the TUN's), so a program attached after
// delay_divert (a port) sees each packet once, after the delay. Routes,
// addresses, TTL, DSCP and ECN are untouched; ARP, multicast, broadcast and
// IPv6 neighbour discovery are not delayed. skb metadata (mark, priority,
// socket) does not survive the trip through user space, so TCP small queues
// do not see a held packet, as with netem on a router. The TUN has IPv6
// disabled so it sends nothing of its own.
//
// Release order. A packet's release time is max(arrival + delay [+ jitter],
// the release time of the previous packet of its flow): FIFO for a fixed
// delay without jitter, and per-flow delays or jitter never reorder a flow
// (unlike netem's jitter). One goroutine reads the TUN and queues packets in
// a min-heap of release times, at most Limit of them, in recycled buffers (no
// per-packet allocation); another writes them back, one read and one write
// syscall per packet. The writer sleeps on a timerfd in the Go poller: Go's
// own timers wake a sleeping runtime through epoll_wait's millisecond
// timeout, and on the 2-core development VM a 100 µs time.Sleep took
// 1.0 ms (median), while the timerfd woke 25–50 µs late
// (TestDelayTimerLateness). Close detaches the programs, closes both file
// descriptors (which wakes the goroutines and deletes the TUN) and waits for
// the goroutines.
//
// Accuracy and capacity on the development VM (2 cores shared by sender,
// forwarder and receiver; go test -run Delay -v ./host/lab/link/): a
// 2 ms link added 2.04 ms to the median RTT (never less than 2 ms); at low
// rates packets are released 30 µs late on average. The write syscall also
// runs the rest of the emulated path (switch and receiver softirqs), about
// 5–8 µs per packet, so bursts are serialised: paced at 50 kpps (1 ms
// bursts) the release lateness was 130 µs on average, at 100 kpps 300 µs
// (p99 < 2 ms), without loss for 100- and 1500-byte packets. Saturated by an
// unpaced sender, the forwarder released 128–144 kpps (1.5–1.7 Gbit/s of
// 1500-byte packets, 0.1 Gbit/s of 100-byte ones), about 0.6 of what the
// same sender got through the path without a delay link (200–240 kpps); the
// held queue then grows to Limit and the lateness with it. Other load on the
// cores shows up the same way: DelayStats.LatenessMean and LatenessQuantile
// say whether a run got the delay it asked for.
type Delay struct {
	ns      Netns
	nl      *netlink.Handle
	dev     string
	tunName string
	spec    DelaySpec
	limit   int
	mtu     int

	devIndex, tunIndex int
	objs               bpf.DelayObjects
	divert, ret        ebpflink.Link
	tun                *os.File
	timer              *os.File
	timerFD            int
	epoch              time.Time
	epochMono          time.Duration // hostlost.Now() at epoch
	lag                lagMeter      // writer goroutine only
	wg                 sync.WaitGroup

	// closeMu orders Close against Stats' kernel reads.
	closeMu     sync.RWMutex
	closeOnce   sync.Once
	closeErr    error
	closing     atomic.Bool
	finalKernel kernelStats // snapshot taken by Close

	// gone is set once, when the TUN was deleted from under the link
	// (watchTun); watchDone stops the watch.
	gone      atomic.Pointer[tunGone]
	watchDone chan struct{}

	// mu guards the queue shared by the reader and the writer.
	mu struct {
		sync.Mutex
		closed    bool
		heap      releaseHeap
		free      []*packet
		allocated int
		armedAt   int64 // release time the timer is armed for; 0: not armed
		seq       uint64
		maxHeld   int
	}

	// Reader-goroutine state.
	flows   map[FlowKey]*flowState
	pruneAt int
	rng     *rand.Rand

	c struct {
		packets, bytes, queueFull, oversize, writeErrors, readErrors atomic.Uint64
		tunDropped                                                   atomic.Uint64 // the TUN's, last read
		droppedOnClose                                               atomic.Uint64
		lateness                                                     [LatenessBuckets]atomic.Uint64
		latenessSum, latenessMax                                     atomic.Int64
	}
}

type packet struct {
	buf []byte // len = MTU+1, so an oversize packet shows as n > MTU
	n   int
}

type flowState struct {
	delay time.Duration
	last  int64 // release time of the flow's latest packet
}

type heldPacket struct {
	release int64  // ns since epoch
	seq     uint64 // arrival order, breaks ties
	pkt     *packet
}

// releaseHeap is a min-heap by (release, seq), written out rather than
// container/heap so pushes do not box a value per packet.
type releaseHeap []heldPacket

func (h releaseHeap) less(i, j int) bool {
	if h[i].release != h[j].release {
		return h[i].release < h[j].release
	}
	return h[i].seq < h[j].seq
}

func (h *releaseHeap) push(x heldPacket) {
	*h = append(*h, x)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *releaseHeap) pop() heldPacket {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = heldPacket{}
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// NewDelay delays every unicast IP packet leaving dev, a device with an
// Ethernet header (such as a veth) in ns, by spec, through a TUN device
// named tunName that it creates in ns. It needs TCX (kernel >= 6.6). Close
// removes it; the caller must close it before ns goes away.
func NewDelay(ns Netns, dev, tunName string, spec DelaySpec) (_ *Delay, err error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	d := &Delay{ns: ns, nl: ns.Netlink(), dev: dev, tunName: tunName, spec: spec, limit: spec.Limit, timerFD: -1}
	if d.limit == 0 {
		d.limit = DefaultDelayLimit
	}
	defer func() {
		if err != nil {
			_ = d.Close()
			err = fmt.Errorf("link: delay on %s: %w", dev, err)
		}
	}()

	devLink, err := d.nl.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("lookup %s: %w", dev, err)
	}
	d.devIndex, d.mtu = devLink.Attrs().Index, devLink.Attrs().MTU
	// delay_divert parses an Ethernet header and bpf_redirect_neigh resolves
	// a neighbour: both need an Ethernet device.
	if et := devLink.Attrs().EncapType; et != "ether" {
		return nil, fmt.Errorf("%s is a %q device; a delay link needs an Ethernet device such as a veth", dev, et)
	}

	// The TUN is created in the namespace of the thread that opens it.
	err = ns.Do(func() error {
		ifce, err := water.New(water.Config{DeviceType: water.TUN,
			PlatformSpecificParams: water.PlatformSpecificParams{Name: tunName}})
		if err != nil {
			return fmt.Errorf("create tun %s: %w", tunName, err)
		}
		f, ok := ifce.ReadWriteCloser.(*os.File)
		if !ok {
			ifce.Close()
			return fmt.Errorf("tun %s: unexpected %T from water", tunName, ifce.ReadWriteCloser)
		}
		d.tun = f
		return nil
	})
	if err != nil {
		return nil, err
	}
	// water opens the TUN non-blocking, so reads park in the Go poller and
	// Close wakes them. Close relies on it: a file outside the poller has
	// no deadlines. (Never call Fd: it would make the descriptor blocking.)
	if err := d.tun.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("tun %s is not in the Go poller: %w", tunName, err)
	}
	tunLink, err := d.nl.LinkByName(tunName)
	if err != nil {
		return nil, fmt.Errorf("lookup %s: %w", tunName, err)
	}
	d.tunIndex = tunLink.Attrs().Index
	// No IPv6 on the TUN: it would send router solicitations and MLD reports
	// through the forwarder and out of dev.
	if err := disableIPv6(ns, tunName); err != nil {
		return nil, err
	}
	if err := d.nl.LinkSetTxQLen(tunLink, tunQueueLen); err != nil {
		return nil, fmt.Errorf("set %s txqueuelen %d: %w", tunName, tunQueueLen, err)
	}
	if err := d.nl.LinkSetMTU(tunLink, d.mtu); err != nil {
		return nil, fmt.Errorf("set %s mtu %d: %w", tunName, d.mtu, err)
	}
	if err := d.nl.LinkSetUp(tunLink); err != nil {
		return nil, fmt.Errorf("set %s up: %w", tunName, err)
	}

	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	d.timerFD = fd
	d.timer = os.NewFile(uintptr(fd), "delay-timer")

	cs, err := bpf.LoadDelay()
	if err != nil {
		return nil, fmt.Errorf("load delay spec: %w", err)
	}
	if err := cs.Variables[bpf.DelayVarTunIfindex].Set(uint32(d.tunIndex)); err != nil {
		return nil, err
	}
	if err := cs.Variables[bpf.DelayVarDevIfindex].Set(uint32(d.devIndex)); err != nil {
		return nil, err
	}
	if err := cs.LoadAndAssign(&d.objs, bpf.LoadOptions()); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load delay programs: %+v", ve)
		}
		return nil, fmt.Errorf("load delay programs: %w", err)
	}

	d.epoch, d.epochMono = time.Now(), hostlost.Now()
	d.rng = rand.New(rand.NewPCG(uint64(spec.Seed), 0x9e3779b97f4a7c15))
	if d.needFlows() {
		d.flows = make(map[FlowKey]*flowState)
		d.pruneAt = minFlowPrune
	}
	d.wg.Add(2)
	go d.readLoop()
	go d.writeLoop()

	if err := d.watchTun(); err != nil {
		return nil, err
	}
	// Return path first, so the first diverted packet finds it.
	if d.ret, err = d.attach(d.objs.DelayReturn, d.tunIndex, ebpf.AttachTCXIngress); err != nil {
		return nil, fmt.Errorf("attach delay_return to %s ingress: %w", tunName, err)
	}
	if d.divert, err = d.attach(d.objs.DelayDivert, d.devIndex, ebpf.AttachTCXEgress); err != nil {
		return nil, fmt.Errorf("attach delay_divert to %s egress: %w", dev, err)
	}
	return d, nil
}

// attach puts prog first on the device's TCX hook: at dev egress, a program
// after it (a port) then sees each packet once, after the delay.
func (d *Delay) attach(prog *ebpf.Program, ifindex int, where ebpf.AttachType) (ebpflink.Link, error) {
	var l ebpflink.Link
	err := d.ns.Do(func() (err error) {
		l, err = ebpflink.AttachTCX(ebpflink.TCXOptions{Interface: ifindex, Program: prog, Attach: where, Anchor: ebpflink.Head()})
		return err
	})
	if errors.Is(err, ebpf.ErrNotSupported) {
		err = fmt.Errorf("%w (delay links need TCX, kernel >= %s)", err, tcxKernel)
	}
	return l, err
}

func (d *Delay) needFlows() bool { return d.spec.PerFlow != nil || d.spec.Jitter > 0 }

// TunName returns the name of the TUN device inside the namespace.
func (d *Delay) TunName() string { return d.tunName }

// Dev returns the delayed device.
func (d *Delay) Dev() string { return d.dev }

func (d *Delay) now() int64 { return int64(time.Since(d.epoch)) }

// getFreeLocked returns a buffer for the next arrival, or nil at the limit.
// Precondition: d.mu is held.
func (d *Delay) getFreeLocked() *packet {
	if k := len(d.mu.free); k > 0 {
		p := d.mu.free[k-1]
		d.mu.free = d.mu.free[:k-1]
		return p
	}
	// Held packets stay within limit, the writer's batch within writeBatch,
	// and the reader keeps one spare: allocation never needs more.
	if d.mu.allocated >= d.limit+writeBatch+1 {
		return nil
	}
	d.mu.allocated++
	return &packet{buf: make([]byte, d.mtu+1)}
}

// armLocked sets the timer to fire at release (ns since epoch).
// Precondition: d.mu is held and the link is not closed.
func (d *Delay) armLocked(release, now int64) {
	wait := max(release-now, 1) // 0 would disarm it
	ts := unix.ItimerSpec{Value: unix.NsecToTimespec(wait)}
	_ = unix.TimerfdSettime(d.timerFD, 0, &ts, nil)
	d.mu.armedAt = release
}

func (d *Delay) readLoop() {
	defer d.wg.Done()
	scratch := make([]byte, d.mtu+1)
	d.mu.Lock()
	spare := d.getFreeLocked()
	d.mu.Unlock()
	for {
		buf := scratch
		if spare != nil {
			buf = spare.buf
		}
		n, err := d.tun.Read(buf)
		if err != nil {
			if d.closing.Load() || errors.Is(err, os.ErrClosed) {
				return
			}
			d.c.readErrors.Add(1)
			time.Sleep(time.Millisecond) // a persistent error must not spin
			continue
		}
		arrival := d.now()
		if spare == nil {
			d.c.queueFull.Add(1)
			d.mu.Lock()
			spare = d.getFreeLocked()
			d.mu.Unlock()
			continue
		}
		if n > d.mtu {
			d.c.oversize.Add(1)
			continue
		}
		spare.n = n
		release := arrival + int64(d.spec.Delay)
		if d.flows != nil {
			release = d.flowRelease(buf[:n], arrival)
		}

		d.mu.Lock()
		if d.mu.closed {
			d.mu.Unlock()
			return
		}
		if len(d.mu.heap) >= d.limit {
			d.mu.Unlock()
			d.c.queueFull.Add(1) // the spare is reused for the next read
			continue
		}
		d.mu.seq++
		d.mu.heap.push(heldPacket{release: release, seq: d.mu.seq, pkt: spare})
		if h := len(d.mu.heap); h > d.mu.maxHeld {
			d.mu.maxHeld = h
		}
		if d.mu.armedAt == 0 || release < d.mu.armedAt {
			d.armLocked(release, arrival)
		}
		spare = d.getFreeLocked()
		d.mu.Unlock()
	}
}

// flowRelease applies the per-flow delay, the jitter and the no-reordering
// rule. Reader goroutine only.
func (d *Delay) flowRelease(pkt []byte, arrival int64) int64 {
	k := parseFlow(pkt)
	st := d.flows[k]
	if st == nil {
		if len(d.flows) >= d.pruneAt {
			// A flow whose last packet is already due constrains nothing.
			for fk, fs := range d.flows {
				if fs.last <= arrival {
					delete(d.flows, fk)
				}
			}
			d.pruneAt = max(minFlowPrune, 2*len(d.flows))
		}
		st = &flowState{delay: d.spec.Delay}
		if d.spec.PerFlow != nil {
			st.delay = min(max(d.spec.PerFlow(k), 0), MaxDelay)
		}
		d.flows[k] = st
	}
	release := arrival + int64(st.delay)
	if d.spec.Jitter > 0 {
		release += d.rng.Int64N(int64(d.spec.Jitter))
	}
	release = max(release, st.last)
	st.last = release
	return release
}

func (d *Delay) writeLoop() {
	defer d.wg.Done()
	batch := make([]heldPacket, 0, writeBatch)
	var tick [8]byte
	for {
		d.mu.Lock()
		for _, h := range batch {
			d.mu.free = append(d.mu.free, h.pkt)
		}
		batch = batch[:0]
		if d.mu.closed {
			d.mu.Unlock()
			return
		}
		now := d.now()
		for len(d.mu.heap) > 0 && d.mu.heap[0].release <= now && len(batch) < writeBatch {
			batch = append(batch, d.mu.heap.pop())
		}
		if len(batch) == 0 {
			if len(d.mu.heap) > 0 {
				d.armLocked(d.mu.heap[0].release, now)
			} else {
				d.mu.armedAt = 0 // the reader arms it for the next arrival
			}
			d.mu.Unlock()
			if _, err := d.timer.Read(tick[:]); err != nil {
				if d.closing.Load() || errors.Is(err, os.ErrClosed) {
					return
				}
				time.Sleep(time.Millisecond)
			}
			continue
		}
		d.mu.Unlock()
		held := heldRun{log: d.spec.Held}
		for _, h := range batch {
			now := d.now()
			late := now - h.release
			if from, ok := d.lag.grow(late); ok {
				held.add(d.epochMono+time.Duration(h.release+from), d.epochMono+time.Duration(now))
			}
			if _, err := d.tun.Write(h.pkt.buf[:h.pkt.n]); err != nil {
				if d.closing.Load() {
					continue
				}
				d.c.writeErrors.Add(1)
				continue
			}
			d.c.packets.Add(1)
			d.c.bytes.Add(uint64(h.pkt.n))
			d.recordLateness(late)
		}
		held.flush()
	}
}

// heldJitter is how much a delay link's release lateness moves without
// the link falling behind: the timerfd wakes 25-50 µs late on a quiet
// machine (TestDelayTimerLateness).
const heldJitter = 100 * time.Microsecond

// lagMeter tells a delay link falling behind from a steady lateness. A
// lateness that stays put only shifts the link's packets: the port after
// it idles as long, later. The link takes time from the fabric when its
// lateness grows: by the growth, past heldJitter, from the lowest
// lateness since it last grew (so a slow creep counts too, in steps).
// Writer goroutine only.
type lagMeter struct {
	base int64 // ns: the lateness the link is known to carry
}

// grow takes a packet's lateness (ns) and says whether the link fell
// behind with it, and from how late: the packet was held from its
// release + from to its write.
func (m *lagMeter) grow(late int64) (from int64, ok bool) {
	late = max(late, 0)
	switch {
	case late > m.base+int64(heldJitter):
		from, m.base = m.base, late
		return from, true
	case late < m.base:
		m.base = late
	}
	return 0, false
}

// heldRun merges a batch's late packets' held intervals (release to
// write, in release order) into runs before they go to the log: one
// Add per stretch the writer was behind, not one per packet.
type heldRun struct {
	log *hostlost.Log // nil: not measured
	cur hostlost.Interval
}

func (r *heldRun) add(from, to time.Duration) {
	if r.log == nil {
		return
	}
	if from > r.cur.To {
		r.flush()
		r.cur.From = from
	}
	r.cur.To = max(r.cur.To, to)
}

func (r *heldRun) flush() {
	if r.log != nil {
		r.log.Add(r.cur.From, r.cur.To)
		r.cur = hostlost.Interval{}
	}
}

func (d *Delay) recordLateness(ns int64) {
	b := 0
	if ns > 0 {
		b = min(bits.Len64(uint64(ns))-1, LatenessBuckets-1)
	}
	d.c.lateness[b].Add(1)
	d.c.latenessSum.Add(max(ns, 0))
	if ns > d.c.latenessMax.Load() {
		d.c.latenessMax.Store(ns) // single writer
	}
}

// parseFlow reads the 5-tuple of an IPv4 or IPv6 packet. Anything it cannot
// parse gets the zero key.
func parseFlow(b []byte) FlowKey {
	var k FlowKey
	if len(b) < 1 {
		return k
	}
	var off int
	fragment := false
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return k
		}
		off = int(b[0]&0xf) * 4
		if off < 20 || off > len(b) {
			return k
		}
		k.Src = netip.AddrFrom4([4]byte(b[12:16]))
		k.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		k.Proto = b[9]
		// More-fragments set or a non-zero offset: no ports in this one.
		fragment = binary.BigEndian.Uint16(b[6:8])&0x3fff != 0
	case 6:
		if len(b) < 40 {
			return k
		}
		k.Src = netip.AddrFrom16([16]byte(b[8:24]))
		k.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		nh, off6 := b[6], 40
		for range 8 { // extension headers, bounded
			switch nh {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if off6+2 > len(b) {
					return k
				}
				nh, off6 = b[off6], off6+(int(b[off6+1])+1)*8
				continue
			case 44: // fragment
				if off6+8 > len(b) {
					return k
				}
				nh, off6, fragment = b[off6], off6+8, true
				continue
			}
			break
		}
		k.Proto, off = nh, off6
	default:
		return k
	}
	switch k.Proto {
	case unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_DCCP, unix.IPPROTO_SCTP, unix.IPPROTO_UDPLITE:
		if !fragment && off+4 <= len(b) {
			k.SrcPort = binary.BigEndian.Uint16(b[off:])
			k.DstPort = binary.BigEndian.Uint16(b[off+2:])
		}
	}
	return k
}

// kernelStats is the part of DelayStats read from the kernel.
type kernelStats struct {
	bpf        bpf.DelayDelayStats
	tunDropped uint64
}

func (d *Delay) readKernelStats() (kernelStats, error) {
	var ks kernelStats
	if err := bpf.SumPerCPU[bpf.DelayDelayStats](d.objs.DelayCounters, 0, &ks.bpf); err != nil {
		return ks, err
	}
	// The TUN's own counters go with it (ErrTunGone): then the last ones
	// read stand.
	ks.tunDropped = d.c.tunDropped.Load()
	if d.gone.Load() != nil {
		return ks, nil
	}
	if l, err := d.nl.LinkByIndex(d.tunIndex); err == nil && l.Attrs().Statistics != nil {
		ks.tunDropped = l.Attrs().Statistics.TxDropped
		d.c.tunDropped.Store(ks.tunDropped)
	}
	return ks, nil
}

// Stats returns the counters. After Close it returns the final values.
func (d *Delay) Stats() DelayStats {
	var s DelayStats
	s.Packets = d.c.packets.Load()
	s.Bytes = d.c.bytes.Load()
	s.QueueFull = d.c.queueFull.Load()
	s.Oversize = d.c.oversize.Load()
	s.WriteErrors = d.c.writeErrors.Load()
	s.ReadErrors = d.c.readErrors.Load()
	s.Dropped = s.QueueFull + s.Oversize + s.WriteErrors
	s.DroppedOnClose = d.c.droppedOnClose.Load()
	var n uint64
	for i := range s.Lateness {
		s.Lateness[i] = d.c.lateness[i].Load()
		n += s.Lateness[i]
	}
	s.LatenessMax = time.Duration(d.c.latenessMax.Load())
	if n > 0 {
		s.LatenessMean = time.Duration(d.c.latenessSum.Load() / int64(n))
	}
	d.mu.Lock()
	s.Held, s.MaxHeld = len(d.mu.heap), d.mu.maxHeld
	d.mu.Unlock()

	d.closeMu.RLock()
	ks := d.finalKernel
	if !d.closing.Load() {
		if live, err := d.readKernelStats(); err == nil {
			ks = live
		}
	}
	d.closeMu.RUnlock()
	s.Diverted, s.DivertedBytes = ks.bpf.Diverted, ks.bpf.DivertedBytes
	s.Returned, s.ReturnedBytes = ks.bpf.Returned, ks.bpf.ReturnedBytes
	s.Reentered, s.Bypassed, s.Malformed = ks.bpf.Reentered, ks.bpf.Bypassed, ks.bpf.Malformed
	s.KernelDropped = ks.bpf.ReturnDropped + ks.bpf.RedirectErrors
	s.MarksKept, s.MarksRestored = ks.bpf.MarksKept, ks.bpf.MarksRestored
	s.TunDropped = ks.tunDropped
	if g := d.gone.Load(); g != nil {
		s.TunGone = true
		s.LostTunGone = ks.bpf.Diverted - min(ks.bpf.Diverted, g.diverted)
	}
	return s
}

// ErrTunGone is the cause Err wraps when the link's TUN device was deleted
// from under it (by `ip link del`, say): delay_divert still sends every
// packet to it, and the kernel drops them, so the link is cut.
var ErrTunGone = errors.New("its TUN device was deleted")

// tunGone is when the TUN went, and delay_divert's count then.
type tunGone struct {
	at       time.Time
	diverted uint64
}

// Err reports a link that no longer delays: nil while it works, else an
// error wrapping ErrTunGone that says when the TUN went and how many
// packets were lost since. The link does not repair itself; a lab runner
// fails the run (host/labfile).
func (d *Delay) Err() error {
	g := d.gone.Load()
	if g == nil {
		return nil
	}
	st := d.Stats()
	return fmt.Errorf("link: delay on %s: %w: %s went %v after the link started; %d packets diverted to it since were lost",
		d.dev, ErrTunGone, d.tunName, g.at.Sub(d.epoch).Round(time.Millisecond), st.LostTunGone)
}

// watchTun marks the link broken when its TUN is deleted. Its netlink
// socket is opened inside the namespace, so it hears that namespace's
// links.
func (d *Delay) watchTun() error {
	updates := make(chan netlink.LinkUpdate, 16)
	d.watchDone = make(chan struct{})
	err := d.ns.Do(func() error {
		return netlink.LinkSubscribeWithOptions(updates, d.watchDone, netlink.LinkSubscribeOptions{
			// An error ends the subscription; Err then stays nil, as before.
			ErrorCallback: func(error) {},
		})
	})
	if err != nil {
		d.watchDone = nil
		return fmt.Errorf("watch %s: %w", d.tunName, err)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for u := range updates {
			if u.Header.Type != unix.RTM_DELLINK || int(u.Index) != d.tunIndex || d.closing.Load() {
				continue
			}
			g := &tunGone{at: time.Now()}
			if ks, err := d.readKernelStats(); err == nil {
				g.diverted = ks.bpf.Diverted
			}
			d.gone.CompareAndSwap(nil, g)
		}
	}()
	return nil
}

// Close detaches the programs, stops the goroutines and deletes the TUN.
// Packets still held are dropped (DelayStats.DroppedOnClose). It is
// idempotent and safe to call concurrently.
func (d *Delay) Close() error {
	d.closeOnce.Do(func() {
		d.closeMu.Lock()
		defer d.closeMu.Unlock()
		d.closeErr = d.close()
	})
	return d.closeErr
}

func (d *Delay) close() error {
	var errs []error
	// Stop diverting first: from here on packets leave dev undelayed.
	if d.divert != nil {
		if err := d.divert.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach delay_divert: %w", err))
		}
	}
	if d.objs.DelayCounters != nil && d.tunIndex != 0 {
		// Best effort: the snapshot only feeds Stats after Close.
		d.finalKernel, _ = d.readKernelStats()
	}
	d.closing.Store(true)
	if d.watchDone != nil {
		close(d.watchDone) // ends the subscription: its channel closes
	}
	d.mu.Lock()
	d.mu.closed = true
	d.c.droppedOnClose.Add(uint64(len(d.mu.heap)))
	d.mu.Unlock()
	// Closing the files wakes the goroutines parked in the poller; the TUN
	// goes away with its last file descriptor.
	if d.tun != nil {
		if err := d.tun.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close tun %s: %w", d.tunName, err))
		}
	}
	if d.timer != nil {
		if err := d.timer.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close timerfd: %w", err))
		}
	} else if d.timerFD >= 0 {
		unix.Close(d.timerFD)
	}
	d.wg.Wait()
	if d.ret != nil {
		if err := d.ret.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach delay_return: %w", err))
		}
	}
	if err := d.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close delay objects: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("link: close delay on %s: %w", d.dev, err)
	}
	return nil
}
