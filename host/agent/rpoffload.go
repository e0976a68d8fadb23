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

// syncKernelPPFCLocked obeys every PPFC notification toward the QP's peer
// that the kernel took since the last call (Config.RPOffload), each at its
// arrival on the device mapped onto the agent's clock, in order, by the
// rules of ppfc.go (sources, bounds, watchdog). The transmit loop calls it
// before each decision to send, so a stop holds from its arrival on, not
// from when the receive loop, behind the ACKs queued ahead of it, reads it.
// Precondition: qp.mu is held.
func (qp *QP) syncKernelPPFCLocked() {
	r := &qp.mu.req
	if r.kCNPs == nil {
		return
	}
	n := r.kCNPs.PPFCCounted()
	if n == r.kPPFCApplied {
		return // the common case: one atomic load
	}
	a := qp.agent
	cnow, mono := a.clockPair()
	for ; r.kPPFCApplied < n; r.kPPFCApplied++ {
		e, ok := r.kCNPs.PPFCEvent(r.kPPFCApplied)
		if !ok {
			qp.mu.ctr.PPFCKernelLost++
			continue
		}
		if !a.ppfcSourceAllowed(e.Source) {
			continue // the receive loop counts it (ppfc_ignored_source)
		}
		at := cnow
		if e.AtNs <= mono {
			at = cnow - min(time.Duration(mono-e.AtNs), engine.MaxArrivalAge)
		}
		at = max(at, r.kPPFCLast)
		r.kPPFCLast = at
		qp.mu.ctr.PPFCKernel++
		qp.obeyPPFCLocked(at, e.Action, a.ppfcPause(e.Pause))
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
		m1 = a.cfg.KernelNs()
		now = a.clock.Now()
		m2 = a.cfg.KernelNs()
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
