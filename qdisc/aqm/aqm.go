// Package aqm holds pure-Go reference state machines for the marking rules
// the port's eBPF programs implement at dequeue: ECN♯ (seed 002), CoDel
// (RFC 8289, Linux include/net/codel_impl.h) and TCN. The eBPF programs are
// tested against them decision for decision, so every rule here uses the
// same integer arithmetic as the BPF C code, not the nicest Go.
//
// The state machines own no clock and no randomness: the caller passes the
// dequeue time (what bpf_ktime_get_ns returns) and, where a rule is
// probabilistic, the 32-bit random number (what bpf_get_prandom_u32
// returns). They are not safe for concurrent use; in the data path each
// one is a per-class map value updated by one dequeue at a time.
//
// Tune derives the parameters from the link rate and the RTT distribution
// (seed 002 §3.4).
package aqm

import (
	"math/bits"
	"time"
)

// Time is a monotonic clock reading in nanoseconds (what bpf_ktime_get_ns
// returns). Zero doubles as "unset" in the state machines, as in the
// algorithms they follow; bpf_ktime_get_ns is never 0 after boot.
type Time uint64

// Add returns t + d (d ≥ 0), wrapping as the eBPF u64 addition does.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// ProbOne is 1.0 in the fixed-point probabilities the eBPF programs use
// (2^32): a packet is marked with probability p when a uniform 32-bit
// random number is below p.
const ProbOne = 1 << 32

// MaxInterval is the largest interval ControlLaw and the configs accept:
// the eBPF program computes interval·2^16 in 64 bits, which overflows from
// 2^48 ns (about 78 hours) on.
const MaxInterval = time.Duration(1<<48 - 1)

// maxControlCount is where ControlLaw clamps count: count·2^32 must fit in
// 64 bits.
const maxControlCount = 1 << 31

// ControlLaw returns t + interval/sqrt(count), the CoDel control law (RFC
// 8289 §5; Linux codel_control_law), computed as the eBPF program does:
//
//	t + interval·2^16 / isqrt(count·2^32)
//
// in integer nanoseconds. count is clamped to [1, 2^31]; a negative
// interval counts as 0. Linux instead keeps a Newton-iterated reciprocal
// square root (rec_inv_sqrt, Q0.32) in its state; this form needs none.
//
// isqrt(count·2^32) is sqrt(count) in 16.16 fixed point, rounded down, so
// the result is never earlier than t + floor(interval/sqrt(count)) and
// later than the exact value by less than interval/(count·2^16 − √count):
// exact at count 1, about 69 µs late for a 10 s interval at count 2, under
// 1 ns for intervals up to count·65.5 µs.
//
// For interval ≤ MaxInterval this is bit-for-bit the 64-bit computation;
// beyond it the eBPF product would overflow and this one does not.
func ControlLaw(t Time, interval time.Duration, count uint64) Time {
	count = min(max(count, 1), maxControlCount)
	iv := uint64(max(interval, 0))
	d := Isqrt(count << 32) // ≥ 2^16
	hi, lo := bits.Mul64(iv, 1<<16)
	q, _ := bits.Div64(hi, lo, d) // hi < 2^16 ≤ d: no overflow, q ≤ iv
	return t + Time(q)
}

// Isqrt returns floor(sqrt(x)) for any uint64, exactly. It is the
// digit-by-digit (base 4) method, integer-only and bounded at 32 rounds,
// which is how a BPF program can do it.
func Isqrt(x uint64) uint64 {
	var r uint64
	b := uint64(1) << 62
	for b > x {
		b >>= 2
	}
	for b != 0 {
		if x >= r+b {
			x -= r + b
			r = r>>1 + b
		} else {
			r >>= 1
		}
		b >>= 2
	}
	return r
}

// TCNMark is TCN's rule (Bai et al., "Enabling ECN over Generic Packet
// Scheduling", CoNEXT 2016; what Linux codel's ce_threshold does): mark a
// departing packet whose sojourn time is above the threshold, strictly.
func TCNMark(sojourn, threshold time.Duration) bool { return sojourn > threshold }
