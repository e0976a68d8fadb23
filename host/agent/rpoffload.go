package agent

import (
	"github.com/fabriclab/fabriclab/host/engine"
	"time"

	"golang.org/x/sys/unix"
)

// syncKernelCNPsLocked runs the RP on every CNP the kernel counted for the
// QP since the last call (Config.RPOffload), each at its arrival on the
// device mapped onto the agent's clock, in order. Every decision that uses
// Rc calls it first, so from a CNP's arrival on no packet is paced at the
// Rc before it. Precondition: qp.mu is held.
func (qp *QP) syncKernelCNPsLocked() {
	r := &qp.mu.req
	if r.kCNPs == nil || r.rp == nil {
		return
	}
	n := r.kCNPs.Counted()
	if n == r.kApplied {
		return // the common case: one atomic load
	}
	// The two clocks read together: an arrival's age on one is its age on
	// the other.
	cnow, mono := qp.agent.clockPair()
	t := qp.agent.cfg.Trace
	for ; r.kApplied < n; r.kApplied++ {
		at := cnow
		if ns, ok := r.kCNPs.Arrival(r.kApplied); ok {
			if ns <= mono {
				at = cnow - min(time.Duration(mono-ns), engine.MaxArrivalAge)
			}
		} else {
			qp.mu.ctr.RPCNPTimeUnknown++
		}
		// In order, and never before the previous one (the two clocks
		// are read microseconds apart).
		at = max(at, r.kLast)
		r.kLast = at
		r.rp.Advance(at)
		before := r.rp.Rc()
		qp.mu.ctr.RPCNPKernel++
		if r.rp.OnCNP(at) {
			qp.mu.ctr.RPCNPHandled++
		} else {
			qp.mu.ctr.RPCNPIgnored++
		}
		if t != nil {
			t(Event{Kind: EventCNPHandled, QPN: qp.qpn, At: at, Arrived: at, Synced: cnow, Kernel: true,
				RcBefore: before, RcAfter: r.rp.Rc()})
		}
	}
}

// clockPair reads the agent's clock and CLOCK_MONOTONIC at one instant:
// the agent's between two monotonic readings, taken again (a few times at
// most) if the goroutine lost the CPU in between, so that a kernel time
// maps onto the agent's clock within a few µs, never later than it was.
func (a *Agent) clockPair() (time.Duration, uint64) {
	const tries, tight = 4, 4 * time.Microsecond
	var now time.Duration
	var m1, m2 uint64
	for range tries {
		m1 = monotonicNs()
		now = a.clock.Now()
		m2 = monotonicNs()
		if time.Duration(m2-m1) <= tight {
			break
		}
	}
	// now was read between m1 and m2: pairing it with m1 maps a kernel
	// time t to now - (m1 - t), never earlier than it happened.
	return now, m1
}

// monotonicNs is CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
func monotonicNs() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}
