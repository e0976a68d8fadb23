// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Departure AQMs (seed 002): TCN, CoDel and ECN#, decided on a
 * packet's sojourn where it leaves the queue.
 *
 * Part of port.c, included once from it: it uses port.c's maps and
 * helpers and is not a header of its own.
 */
#ifndef PORT_AQM_H
#define PORT_AQM_H

/* Dequeue AQMs (TCN, CoDel, ECN#): decided where the packet leaves the queue,
 * on its sojourn. Times are 64-bit ns from bpf_ktime_get_ns, so none of the
 * 32-bit time emulation or division approximation the ECN# paper needs on
 * Tofino (seed 002 §4.1, §4.3) is needed here. */

/* ControlLaw's count is clamped so that count << 32 fits in 64 bits. */
#define AQM_COUNT_MAX (1ULL << 31)
/* CoDel reuses part of the last count if it re-enters within 16 intervals
 * (Linux include/net/codel_impl.h). */
#define CODEL_REENTRY_INTERVALS 16

/* isqrt64 is floor(sqrt(x)) for x <= 2^63, digit by digit and without
 * branches: a branch per digit would make the verifier walk 2^32 paths, and
 * so would an all-ones mask, which it splits into its two values. take is 0
 * or 1 instead, and multiplies: x - t stays within (-2^63, 2^63], so its top
 * bit says x < t. */
static __always_inline __u64 isqrt64(__u64 x)
{
	__u64 res = 0, bit = 1ULL << 62, t, take;

#pragma unroll
	for (int i = 0; i < 32; i++) {
		t = res + bit;
		take = ((x - t) >> 63) ^ 1; /* 1 when x >= t */
		/* Hide take's two values from clang, which would turn the
		 * multiplications back into branches. */
		asm volatile("" : "+r"(take));
		x -= t * take;
		res = (res >> 1) + bit * take;
		bit >>= 2;
	}
	return res;
}

/* control_law is t + interval/sqrt(count) (CoDel; the ECN# authors' ns-3
 * code), as interval*2^16 / floor(sqrt(count*2^32)) in integer ns: late by a
 * relative 2^-16/sqrt(count) at most (3 ns on 200 us). qdisc/aqm.ControlLaw
 * computes the same. */
static __always_inline __u64 control_law(__u64 t, __u64 interval_ns, __u64 count)
{
	if (count < 1)
		count = 1;
	if (count > AQM_COUNT_MAX)
		count = AQM_COUNT_MAX;
	return t + (interval_ns << 16) / isqrt64(count << 32);
}

/* ecnsharp_instantaneous: signal > ins_target (seed 002 §3.2), or the
 * probabilistic Kmin/Kmax/Pmax curve for DCQCN (§3.5). max_p and the span are
 * both below 2^32, so the product fits. */
static __always_inline bool ecnsharp_instantaneous(const struct class_config *cc, __u64 signal,
						   __u32 rnd)
{
	if (cc->ins_hi == 0)
		return signal > cc->ins_lo;
	if (signal < cc->ins_lo)
		return false;
	if (signal >= cc->ins_hi)
		return true;
	return (__u64)rnd < cc->max_p * (signal - cc->ins_lo) / (cc->ins_hi - cc->ins_lo);
}

/* ecnsharp_persistent is Algorithm 1 of seed 002 (ShouldPersistentMark with
 * IsPersistentQueueBuildups inlined), line for line. It runs on every
 * departing packet, even one the instantaneous condition marks.
 * Precondition: s->lock is held. */
static __always_inline bool ecnsharp_persistent(struct aqm_state *s, const struct class_config *cc,
						__u64 now, __u64 signal)
{
	bool detected;

	/* IsPersistentQueueBuildups, lines 22-33 */
	if (signal < cc->aqm_target) {
		s->first_above_ns = 0;
		detected = false;
	} else if (s->first_above_ns == 0) {
		s->first_above_ns = now;
		detected = false;
	} else {
		detected = now > s->first_above_ns + cc->aqm_interval_ns;
	}

	/* ShouldPersistentMark, lines 3-19 */
	if (s->marking) {
		if (!detected) {
			s->marking = 0;
			return false;
		}
		if (now > s->next_ns) {
			s->count++;
			if (cc->aqm_flags & AQM_F_SQRT_LAW)
				s->next_ns = control_law(now, cc->aqm_interval_ns, s->count);
			else
				s->next_ns += cc->aqm_interval_ns / s->count;
			return true;
		}
		return false;
	}
	if (detected) {
		s->marking = 1;
		s->count = 1;
		s->next_ns = now + cc->aqm_interval_ns;
		return true;
	}
	return false;
}

/* codel_signal is CoDel's dequeue logic (Nichols & Jacobson; RFC 8289; Linux
 * codel_should_drop and codel_dequeue) with 64-bit ns times. Linux drops
 * several packets in one dequeue while in the dropping state; this hook sees
 * one departing packet at a time, so it signals at most that one.
 * Precondition: s->lock is held. */
static __always_inline bool codel_signal(struct aqm_state *s, const struct class_config *cc,
					 __u64 now, __u64 sojourn, __u64 backlog_after)
{
	bool ok_to_drop;
	__u64 delta;

	if (sojourn < cc->aqm_target || backlog_after <= cc->mtu_bytes) {
		/* went below: stay below for at least an interval */
		s->first_above_ns = 0;
		ok_to_drop = false;
	} else if (s->first_above_ns == 0) {
		s->first_above_ns = now + cc->aqm_interval_ns;
		ok_to_drop = false;
	} else {
		ok_to_drop = now > s->first_above_ns;
	}

	if (s->marking) {
		if (!ok_to_drop) {
			s->marking = 0;
			return false;
		}
		if (now >= s->next_ns) {
			s->count++;
			s->next_ns = control_law(s->next_ns, cc->aqm_interval_ns, s->count);
			return true;
		}
		return false;
	}
	if (!ok_to_drop)
		return false;
	s->marking = 1;
	/* Close to the last episode: its rate is a good start. */
	delta = s->count - s->lastcount;
	if (delta > 1 &&
	    (__s64)(now - s->next_ns) < (__s64)(CODEL_REENTRY_INTERVALS * cc->aqm_interval_ns))
		s->count = delta;
	else
		s->count = 1;
	s->lastcount = s->count;
	s->next_ns = control_law(now, cc->aqm_interval_ns, s->count);
	return true;
}

/* aqm_decide runs the class's dequeue AQM for one departing packet. It is a
 * global function so that the verifier checks it once, on its own: inlined,
 * every path through the parser and the histogram ahead of it would walk the
 * square root again and exceed the verifier's budget. */
__attribute__((noinline)) int aqm_decide(__u32 class_id, __u64 now, __u64 sojourn,
					 __u64 backlog_after)
{
	struct class_config *cc;
	struct aqm_state *s;
	__u64 signal;
	bool ins, pst;
	__u32 rnd = 0;

	cc = bpf_map_lookup_elem(&class_cfg, &class_id);
	if (!cc)
		return AQM_PASS;
	if (cc->ecn_mode == ECN_MODE_TCN)
		return sojourn > cc->ins_lo ? AQM_MARK_INS : AQM_PASS;

	s = bpf_map_lookup_elem(&class_aqm, &class_id);
	if (!s)
		return AQM_PASS;

	/* Fast path, the common case: below target with an idle state, the
	 * state machines would change nothing, so skip the lock (43 ns here).
	 * Read unlocked, a racing CPU's update is ordered after this packet,
	 * as it could be anyway. */
	if (cc->ecn_mode == ECN_MODE_CODEL) {
		if ((sojourn < cc->aqm_target || backlog_after <= cc->mtu_bytes) &&
		    !READ_ONCE(s->marking) && !READ_ONCE(s->first_above_ns))
			return AQM_PASS;
		bpf_spin_lock(&s->lock);
		pst = codel_signal(s, cc, now, sojourn, backlog_after);
		bpf_spin_unlock(&s->lock);
		return pst ? AQM_MARK_PST : AQM_PASS;
	}

	signal = (cc->aqm_flags & AQM_F_QLEN_SIGNAL) ? backlog_after : sojourn;
	if (cc->ins_hi && signal >= cc->ins_lo && signal < cc->ins_hi)
		rnd = random_u32();
	ins = ecnsharp_instantaneous(cc, signal, rnd);
	if (signal < cc->aqm_target && !READ_ONCE(s->marking) && !READ_ONCE(s->first_above_ns))
		return ins ? AQM_MARK_INS : AQM_PASS;
	bpf_spin_lock(&s->lock);
	pst = ecnsharp_persistent(s, cc, now, signal);
	bpf_spin_unlock(&s->lock);
	if (ins)
		return AQM_MARK_INS;
	return pst ? AQM_MARK_PST : AQM_PASS;
}

/* depart takes a packet out of its class's backlog where it leaves the
 * queue, records its sojourn and runs the class's dequeue AQM on it. */
static __always_inline enum aqm_verdict depart(struct class_state *cs, struct class_stats *st,
					      const struct port_config *pc,
					      const struct class_config *cc, __u32 class_id,
					      __u32 len, __u64 enqueued_ns, __u64 now)
{
	__u64 backlog, sojourn;

	backlog = __sync_fetch_and_add(&cs->backlog_bytes, -(__s64)len);
	backlog = backlog > len ? backlog - len : 0; /* what stays queued */
	__sync_fetch_and_add(&cs->backlog_packets, -1LL);
	if (backlog == 0)
		idle_begin(cs, pc, cc, len, now);
	/* PPFC: down to xon ends the congestion episode. */
	if (cc->xoff_bytes && backlog <= cc->xon_bytes && READ_ONCE(cs->ppfc_above_xon) &&
	    __sync_val_compare_and_swap(&cs->ppfc_above_xon, 1, 0) == 1)
		__sync_fetch_and_add(&cs->ppfc_episode, 1);
	st->dequeued_packets++;
	st->dequeued_bytes += len;

	sojourn = now > enqueued_ns ? now - enqueued_ns : 0;
	record_sojourn(st, sojourn);
	if (cc->ecn_mode == ECN_MODE_TCN || cc->ecn_mode == ECN_MODE_CODEL ||
	    cc->ecn_mode == ECN_MODE_ECNSHARP)
		return aqm_decide(class_id, now, sojourn, backlog);
	return AQM_PASS;
}

#endif /* PORT_AQM_H */
