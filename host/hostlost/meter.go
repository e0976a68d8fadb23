package hostlost

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultBudget is the share of a run a port may sit idle while a sender
// was held before the run counts as host-starved: a tail FCT / ideal
// compared within 0.03 of a reference needs the host to take well under
// that.
const DefaultBudget = 0.02

// MeterConfig configures a Meter.
type MeterConfig struct {
	// PIDs are the processes whose threads run the lab (Kernel.RunDelay).
	// Optional: this process.
	PIDs []int
	// Budget is the share of the run (Report.Share) above which it is
	// host-starved. Optional: DefaultBudget.
	Budget float64
	// Tick is how often the meter folds the logs. Optional: 200 ms.
	Tick time.Duration
	// Horizon is how long it waits for an interval to be logged after it
	// ended (a port's idle period is read from its ring a little after
	// the arrival that ended it). Optional: 100 ms.
	Horizon time.Duration
}

// maxStarvedIntervals bounds the starved intervals a port keeps for
// StarvedBetween; beyond it only the totals grow.
const maxStarvedIntervals = 1 << 20

// Meter intersects the ports' idle periods with the senders' held time as
// a run goes, and reads the kernel's accounting at its start and stop.
type Meter struct {
	cfg MeterConfig

	mu        sync.Mutex
	held      []*heldLog
	ports     []*meterPort
	lateCarry []Interval // feedback waits past the last cut
	lateTotal time.Duration
	lateAges  ageHist
	scratch   []Interval
	cut       time.Duration
	heldTotal time.Duration
	start     time.Duration
	k0        Kernel
	kerr      error
	started   bool
	stopped   bool
	report    Report
	stopc     chan struct{}
	done      chan struct{}
}

// heldLog is a sender's log and how much later its packets reach the
// ports (Meter.HeldVia), with what of it the ports lost.
type heldLog struct {
	log     *Log
	delay   time.Duration
	name    string     // Meter.HeldAs; "" is not reported on its own
	carry   []Interval // held intervals past the last cut
	held    time.Duration
	starved time.Duration // over the ports, each port's idle ∩ this log
}

type meterPort struct {
	name      string
	log       *Log // idle periods
	back      *Log // service lost with packets queued
	carry     []Interval
	backCarry []Interval
	idle      time.Duration
	heldBack  time.Duration
	starved   time.Duration
	ivs       []Interval // starved intervals, in time order
	overflow  bool
}

// NewMeter returns a meter; register its logs, then Start it.
func NewMeter(cfg MeterConfig) (*Meter, error) {
	if cfg.Budget == 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.Tick == 0 {
		cfg.Tick = 200 * time.Millisecond
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = 100 * time.Millisecond
	}
	var errs []error
	if cfg.Budget < 0 || cfg.Budget > 1 {
		errs = append(errs, fmt.Errorf("hostlost: budget %g: must be 0..1", cfg.Budget))
	}
	if cfg.Tick < time.Millisecond || cfg.Tick > time.Minute {
		errs = append(errs, fmt.Errorf("hostlost: tick %v: must be 1ms..1m", cfg.Tick))
	}
	if cfg.Horizon < 0 || cfg.Horizon > time.Minute {
		errs = append(errs, fmt.Errorf("hostlost: horizon %v: must be 0..1m", cfg.Horizon))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Meter{cfg: cfg}, nil
}

// Held returns a new log of held time for one sender (engine.Config.Held)
// whose packets reach the ports at once.
func (m *Meter) Held() *Log { return m.HeldVia(0) }

// HeldVia is Held for a sender whose packets reach the ports delay after
// it sends them (a delay link or a WAN between them): the port idles
// that much later for the time the sender was held, so its intervals are
// compared with the ports' delay later.
func (m *Meter) HeldVia(delay time.Duration) *Log { return m.HeldAs("", delay) }

// HeldAs is HeldVia for a holder the report names (Report.Holders): which
// of the lab's loops — a sender, a receiver's credit or ACK loop, a relay
// — the ports waited for.
func (m *Meter) HeldAs(name string, delay time.Duration) *Log {
	l := NewLog()
	l.late = NewLog()
	m.mu.Lock()
	m.held = append(m.held, &heldLog{log: l, delay: max(delay, 0), name: name})
	m.mu.Unlock()
	return l
}

// PortLogs are one port's logs: its idle periods (intersected with the
// senders' held time) and the service it lost with packets queued (host
// time as it stands: a switch's link does not wait for a CPU).
type PortLogs struct {
	Idle, HeldBack *Log
}

// Port returns the logs of one port, named name in the report.
func (m *Meter) Port(name string) PortLogs {
	p := &meterPort{name: name, log: NewLog(), back: NewLog()}
	m.mu.Lock()
	m.ports = append(m.ports, p)
	m.mu.Unlock()
	return PortLogs{Idle: p.log, HeldBack: p.back}
}

// Start reads the kernel's accounting and starts folding the logs.
func (m *Meter) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return errors.New("hostlost: meter started twice")
	}
	m.started = true
	m.start = Now()
	m.cut = m.start
	m.k0, m.kerr = ReadKernel(m.cfg.PIDs...)
	m.stopc, m.done = make(chan struct{}), make(chan struct{})
	go m.loop()
	return nil
}

func (m *Meter) loop() {
	defer close(m.done)
	t := time.NewTicker(m.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-m.stopc:
			return
		case <-t.C:
			m.mu.Lock()
			m.fold(Now() - m.cfg.Horizon)
			m.mu.Unlock()
		}
	}
}

// fold intersects everything logged between the last cut and cut.
// Precondition: m.mu is held.
func (m *Meter) fold(cut time.Duration) {
	if cut <= m.cut {
		return
	}
	buf := m.scratch[:0]
	var in []Interval
	own := make([][]Interval, len(m.held)) // each holder's, a union
	for j, h := range m.held {
		buf = h.log.Drain(buf[:0])
		for i := range buf {
			buf[i].From += h.delay
			buf[i].To += h.delay
		}
		buf = append(buf, h.carry...)
		var hin []Interval
		hin, h.carry = Clip(buf, m.cut, cut, nil, h.carry[:0])
		in = append(in, hin...)
		if h.name != "" {
			own[j] = Union(hin) // in place: after in took a copy
			h.held += Sum(own[j])
		}
	}
	held := Union(in)
	m.heldTotal += Sum(held)
	var late []Interval
	for _, h := range m.held {
		n := len(late)
		late = h.log.late.Drain(late)
		for _, iv := range late[n:] {
			m.lateAges.add(iv.Len())
		}
	}
	late = append(late, m.lateCarry...)
	var lateIn []Interval
	lateIn, m.lateCarry = Clip(late, m.cut, cut, nil, m.lateCarry[:0])
	m.lateTotal += Sum(Union(lateIn))
	for _, p := range m.ports {
		pb := p.log.Drain(buf[:0])
		pb = append(pb, p.carry...)
		var idle []Interval
		idle, p.carry = Clip(pb, m.cut, cut, nil, p.carry[:0])
		idle = Union(idle)
		p.idle += Sum(idle)
		bb := p.back.Drain(nil)
		bb = append(bb, p.backCarry...)
		var back []Interval
		back, p.backCarry = Clip(bb, m.cut, cut, nil, p.backCarry[:0])
		back = Union(back)
		p.heldBack += Sum(back)
		for j, h := range m.held {
			if own[j] != nil {
				h.starved += Sum(Intersect(nil, idle, own[j]))
			}
		}
		st := Union(append(Intersect(nil, idle, held), back...))
		p.starved += Sum(st)
		if len(p.ivs)+len(st) > maxStarvedIntervals {
			p.overflow = true
		} else {
			p.ivs = append(p.ivs, st...)
		}
	}
	m.scratch = buf[:0]
	m.cut = cut
}

// Stop folds what is left, reads the kernel again and returns the report.
// Later calls return the same report.
func (m *Meter) Stop() Report {
	m.mu.Lock()
	if !m.started || m.stopped {
		r := m.report
		m.mu.Unlock()
		return r
	}
	m.stopped = true
	m.mu.Unlock()
	close(m.stopc)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	end := Now()
	m.fold(end)
	k1, kerr := ReadKernel(m.cfg.PIDs...)
	r := Report{Wall: end - m.start, Held: m.heldTotal, Budget: m.cfg.Budget, Kernel: k1.Sub(m.k0)}
	if err := errors.Join(m.kerr, kerr); err != nil {
		r.KernelError = err.Error()
	}
	for _, h := range m.held {
		_, _, lost := h.log.Totals()
		r.HeldLost += lost
		_, _, lost = h.log.late.Totals()
		r.FeedbackLost += lost
	}
	for _, h := range m.held {
		if h.name != "" {
			r.Holders = append(r.Holders, HolderReport{Name: h.name, Held: h.held, Starved: h.starved})
		}
	}
	r.FeedbackLate, r.FeedbackBatches = m.lateTotal, m.lateAges.n
	r.FeedbackAgeP99, r.FeedbackAgeMax = m.lateAges.quantileBound(0.99), m.lateAges.max
	var all []Interval
	r.portStarved = make(map[string][]Interval, len(m.ports))
	for _, p := range m.ports {
		_, _, lost := p.log.Totals()
		_, _, blost := p.back.Totals()
		r.Ports = append(r.Ports, PortReport{Name: p.name, Idle: p.idle, HeldBack: p.heldBack, Starved: p.starved, IdleLost: lost + blost, Truncated: p.overflow})
		// Each fold's intervals are a union after the last fold's.
		r.portStarved[p.name] = Union(append(r.portStarved[p.name], p.ivs...))
		all = append(all, p.ivs...)
	}
	all = Union(all)
	r.Starved = Sum(all)
	if r.Wall > 0 {
		r.Share = float64(r.Starved) / float64(r.Wall)
	}
	r.HostStarved = r.Share > r.Budget
	r.starved = all
	m.report = r
	return r
}

// Report is what a Meter measured over a run.
type Report struct {
	// Wall is the run's length.
	Wall time.Duration `json:"wall_ns"`
	// Starved is the time some port sat idle while a sender was held, or
	// held queued packets back while its link was free: time the host
	// took from the fabric. Share is its part of Wall.
	Starved time.Duration `json:"starved_ns"`
	Share   float64       `json:"share"`
	// HostStarved says Share passed Budget: the run's efficiency figures
	// (utilization, FCT / ideal) say more about the host than the fabric.
	HostStarved bool    `json:"host_starved"`
	Budget      float64 `json:"budget"`
	// Held is the union of the senders' held time, idle port or not; and
	// intervals the senders' logs had no room for.
	Held     time.Duration `json:"held_ns"`
	HeldLost uint64        `json:"held_lost,omitempty"`
	Ports    []PortReport  `json:"ports,omitempty"`
	// Holders are the named held logs (Meter.HeldAs), each alone: which
	// loop the ports waited for. Their Starved overlap (two loops held at
	// once count in both), so they do not add up to Starved.
	Holders []HolderReport `json:"holders,omitempty"`
	// FeedbackLate is the union of the senders' feedback waits (Log.Late):
	// time in which some ACK, CNP or credit had arrived and its sender's
	// congestion control had not yet seen it, so reacted that much late.
	// It is not starved time (the port may have been busy), but it is the
	// host's: a NIC reacts within microseconds. FeedbackAgeP99 bounds the
	// wait of 99 % of the batches read (the upper edge of a log2 bucket),
	// FeedbackAgeMax is the longest; FeedbackLost counts waits the logs
	// had no room for.
	FeedbackLate    time.Duration `json:"feedback_late_ns"`
	FeedbackBatches uint64        `json:"feedback_batches"`
	FeedbackAgeP99  time.Duration `json:"feedback_age_p99_ns"`
	FeedbackAgeMax  time.Duration `json:"feedback_age_max_ns"`
	FeedbackLost    uint64        `json:"feedback_lost,omitempty"`
	// Kernel is the kernel's accounting of the run.
	Kernel      Kernel `json:"kernel"`
	KernelError string `json:"kernel_error,omitempty"`

	starved     []Interval
	portStarved map[string][]Interval // by port name, each a union
}

// PortReport is one port's part.
type PortReport struct {
	Name string `json:"name"`
	// Idle is the time the port sat idle in the run; HeldBack the time it
	// held queued packets back while its link was free (HTB on this
	// machine's CPUs running late); Starved the time it lost to the host:
	// idle while some sender was held, or holding back.
	Idle     time.Duration `json:"idle_ns"`
	HeldBack time.Duration `json:"held_back_ns"`
	Starved  time.Duration `json:"starved_ns"`
	// IdleLost counts idle periods its log had no room for; Truncated
	// says StarvedBetween no longer sees all of them.
	IdleLost  uint64 `json:"idle_lost,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// HolderReport is one named held log's part: Held is its own held time,
// Starved the time a port sat idle while it was held (summed over the
// ports).
type HolderReport struct {
	Name    string        `json:"name"`
	Held    time.Duration `json:"held_ns"`
	Starved time.Duration `json:"starved_ns"`
}

// StarvedBetween is the starved time between from and to (CLOCK_MONOTONIC,
// Now): a flow's share of it.
func (r *Report) StarvedBetween(from, to time.Duration) time.Duration {
	return Between(r.starved, from, to)
}

// PortsStarvedBetween is the starved time between from and to of the
// ports named (their union; unknown names count nothing): the host's loss
// on one path of a lab whose other ports the flows do not cross, which
// idle while senders are held without losing anything.
func (r *Report) PortsStarvedBetween(from, to time.Duration, names ...string) time.Duration {
	var ivs []Interval
	for _, n := range names {
		ivs = append(ivs, r.portStarved[n]...)
	}
	return Between(Union(ivs), from, to)
}

// String is the report in one line.
func (r Report) String() string {
	var b strings.Builder
	if r.HostStarved {
		fmt.Fprintf(&b, "host-starved: %.1f %% of the run (budget %.1f %%): ", 100*r.Share, 100*r.Budget)
	} else {
		b.WriteString("host-lost: ")
	}
	fmt.Fprintf(&b, "the ports lost %s to the host (%.2f %% of %s); senders held %s",
		ms(r.Starved), 100*r.Share, ms(r.Wall), ms(r.Held))
	for _, p := range r.Ports {
		fmt.Fprintf(&b, "; %s idle %s, holding back %s", p.Name, ms(p.Idle), ms(p.HeldBack))
	}
	if top := r.topHolders(3); len(top) > 0 {
		b.WriteString("; idle while held most: ")
		for i, h := range top {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s", h.Name, ms(h.Starved))
		}
	}
	if r.FeedbackBatches > 0 {
		fmt.Fprintf(&b, "; feedback waited %s (a batch: p99 ≤ %s, max %s)", ms(r.FeedbackLate), us(r.FeedbackAgeP99), us(r.FeedbackAgeMax))
	}
	k := r.Kernel
	fmt.Fprintf(&b, "; kernel: run delay %s over %d threads, softirq threads %s, steal %s, Go scheduler %s, %d squeezed, %d backlog drops",
		ms(k.RunDelay), k.Threads, ms(k.SoftirqDelay), ms(k.Steal), ms(k.GoSchedWait), k.Squeezed, k.BacklogDrops)
	return b.String()
}

// topHolders are the n holders the ports sat idle for longest, longest
// first; those with none are left out.
func (r Report) topHolders(n int) []HolderReport {
	var top []HolderReport
	for _, h := range r.Holders {
		if h.Starved > 0 {
			top = append(top, h)
		}
	}
	slices.SortStableFunc(top, func(a, b HolderReport) int { return cmp.Compare(b.Starved, a.Starved) })
	return top[:min(n, len(top))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

func us(d time.Duration) string {
	if d >= 10*time.Millisecond {
		return ms(d)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

// ageHist counts waits in log2 buckets of nanoseconds: bucket b holds
// [2^b, 2^(b+1)) ns (bucket 0 also 0 and 1 ns).
type ageHist struct {
	counts [64]uint64
	n      uint64
	max    time.Duration
}

func (h *ageHist) add(d time.Duration) {
	b := 0
	if d > 1 {
		b = bits.Len64(uint64(d)) - 1
	}
	h.counts[b]++
	h.n++
	h.max = max(h.max, d)
}

// quantileBound is the upper edge of the bucket holding the q-quantile,
// capped at the maximum: at least q of the waits were shorter. No waits: 0.
func (h *ageHist) quantileBound(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	need := uint64(math.Ceil(q * float64(h.n)))
	var cum uint64
	for b, c := range h.counts {
		cum += c
		if cum >= need {
			return min(time.Duration(uint64(1)<<(b+1)), h.max)
		}
	}
	return h.max
}
