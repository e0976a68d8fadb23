/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The port's idle ledger: when each class's link sat idle. Host-lost time
 * (issue 26 §1) is the time a port sat idle while a sender had data and
 * window it could not send because its host did not run it; the senders
 * know when they were held, the port knows when it was idle, and user
 * space intersects the two (host/hostlost).
 *
 * A class goes idle when a departure leaves its backlog empty: from the end
 * of that packet's serialization at the class's rate (the veth itself is
 * instant; HTB released the packet at the rate). The next arrival that
 * finds the backlog empty ends the period. The two sides race on two CPUs;
 * idle_since_ns is written with exchanges (full barriers) and a departure
 * that sees a packet arrive after it marked the class idle takes its mark
 * back, so a period never spans a packet in the queue.
 *
 * Included by port.c after port.h and the class maps.
 */
#ifndef FABRICLAB_IDLE_H
#define FABRICLAB_IDLE_H

/* Read in user space with a ring buffer reader only while PORT_F_IDLE_LOG
 * is set: 2^15 events of 32 bytes, about 2 s of a port going idle after
 * every packet at 15 kpps. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} idle_log SEC(".maps");

/* Puts struct idle_event in the BTF for bpf2go's -type: nothing else
 * names it outside a function. */
const struct idle_event *idle_event_btf __attribute__((unused));

/* ring_wakeup is the submit flag of a ring the reader polls: no wakeup,
 * but for a ring half full. A wakeup per event would wake the reader at
 * every idle period of a port paced at its line (15 kpps), a cost the lab
 * measuring the host would add to the host. */
#define RING_WAKE_BYTES (1 << 19)

static __always_inline __u64 ring_wakeup(void *ring)
{
	return bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) > RING_WAKE_BYTES ? BPF_RB_FORCE_WAKEUP
									     : BPF_RB_NO_WAKEUP;
}

/* serialize_ns is how long len bytes hold the class's link. */
static __always_inline __u64 serialize_ns(const struct port_config *pc,
					  const struct class_config *cc, __u32 len)
{
	__u64 rate = cc->rate_bps ? cc->rate_bps : pc->rate_bps;

	/* len < 2^17 and 8e9 < 2^33: the product fits. */
	return rate ? (__u64)len * 8000000000ULL / rate : 0;
}

/* idle_begin marks the class idle from the end of a departure of len
 * bytes at now that left its backlog empty (veth mode). */
static __always_inline void idle_begin(struct class_state *cs, const struct port_config *pc,
				       const struct class_config *cc, __u32 len, __u64 now)
{
	__u64 t = now + serialize_ns(pc, cc, len);

	__sync_lock_test_and_set(&cs->idle_since_ns, t);
	/* A packet that arrived meanwhile found the backlog it had claimed
	 * non-empty, or took the mark already: either way the class is busy. */
	if (READ_ONCE(cs->backlog_bytes) != 0)
		__sync_val_compare_and_swap(&cs->idle_since_ns, t, 0);
}

/* idle_log_write writes one event, counting it lost when the ring is
 * full. */
static __always_inline void idle_log_write(struct class_stats *st, __u32 class_id, __u32 kind,
					   __u64 from, __u64 to)
{
	struct idle_event *ev;

	/* Reserved in place: port_enqueue's stack has no room for a copy. */
	ev = bpf_ringbuf_reserve(&idle_log, sizeof(*ev), 0);
	if (!ev) {
		st->idle_log_lost++;
		return;
	}
	ev->from_ns = from;
	ev->to_ns = to;
	ev->class_id = class_id;
	ev->kind = kind;
	bpf_ringbuf_submit(ev, ring_wakeup(&idle_log));
}

/* idle_record books one idle period [from, to) of class_id. A function of
 * its own: inlined, its locals would push port_enqueue's stack, with
 * trim_packet's under it, past the verifier's 512 bytes. */
static __attribute__((noinline)) void idle_record(struct class_stats *st, const struct port_config *pc,
						  __u32 class_id, __u64 from, __u64 to)
{
	if (!from || to <= from)
		return;
	st->idle_periods++;
	st->idle_ns += to - from;
	if (pc->flags & PORT_F_IDLE_LOG)
		idle_log_write(st, class_id, IDLE_EMPTY, from, to);
}

/* idle_end ends the class's idle period at now, for an arrival that found
 * its backlog empty and entered it (veth mode). */
static __attribute__((noinline)) void idle_end(struct class_state *cs, struct class_stats *st,
					       const struct port_config *pc, __u32 class_id)
{
	idle_record(st, pc, class_id, __sync_lock_test_and_set(&cs->idle_since_ns, 0), now_ns());
}

/* idle_end_pending books the idle period a virtual queue's arrival ended
 * under its lock (enqueue_virtual), which allows no helper calls: it ends
 * now, right after the lock; whichever CPU takes it first books it. */
static __attribute__((noinline)) void idle_end_pending(struct class_state *cs,
						       struct class_stats *st,
						       const struct port_config *pc, __u32 class_id)
{
	idle_record(st, pc, class_id, __sync_lock_test_and_set(&cs->idle_pending_ns, 0), now_ns());
}

/* The port's link, as the departures at the xmit hook drive it: free
 * again a serialization after each departure, or after the previous free
 * time if the departures come faster (HTB catching up on a late timer).
 * One per port; the xmit hook runs under the device's transmit lock, one
 * departure at a time. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct link_state);
} port_link SEC(".maps");

/* link_book books the pending lateness: what HTB did not make up. */
static __always_inline void link_book(struct link_state *ls, struct class_stats *st,
				      const struct port_config *pc)
{
	__u64 from = ls->pend_from_ns, to = ls->pend_to_ns;

	ls->pend_from_ns = 0;
	if (!from || to <= from)
		return;
	st->held_back_ns += to - from;
	st->held_back_packets++;
	if (pc->flags & PORT_F_IDLE_LOG)
		idle_log_write(st, ls->pend_class, IDLE_HELD, from, to);
}

/* link_depart books a departure at now of len bytes enqueued at
 * enqueued_ns. One that leaves after both the link was free and the
 * packet was there was held back for the difference (IDLE_HELD), time a
 * switch would have been sending; but HTB, its timer late, then sends
 * its bucket's worth ahead of the line, so the lateness waits while the
 * departures run further ahead and is booked shortened by that: the
 * service the port lost for good. (st is this departure's class's; a
 * pending lateness is booked to the first class that departs on time.) */
static __always_inline void link_depart(struct class_stats *st, const struct port_config *pc,
					__u32 class_id, __u32 len, __u64 enqueued_ns, __u64 now)
{
	__u32 zero = 0;
	struct link_state *ls = bpf_map_lookup_elem(&port_link, &zero);
	__u64 start, lead;

	if (!ls || !pc->rate_bps)
		return;
	start = ls->free_ns > enqueued_ns ? ls->free_ns : enqueued_ns;
	if (ls->free_ns && now > start) {
		/* Late: a new lateness; the one before it is final. */
		link_book(ls, st, pc);
		ls->pend_from_ns = start;
		ls->pend_to_ns = now;
		ls->pend_class = class_id;
		ls->lead_ns = 0;
	} else if (ls->free_ns && now < ls->free_ns && ls->free_ns - now > ls->lead_ns) {
		/* Further ahead: catching up on the pending lateness. */
		lead = ls->free_ns - now;
		if (ls->pend_from_ns) {
			__u64 made_up = lead - ls->lead_ns, left = ls->pend_to_ns - ls->pend_from_ns;

			if (made_up > left)
				made_up = left;
			ls->pend_to_ns -= made_up;
			st->caught_up_ns += made_up;
		}
		ls->lead_ns = lead;
	} else {
		/* On the line, or no further ahead: the catch-up is over. */
		link_book(ls, st, pc);
		ls->lead_ns = now < ls->free_ns ? ls->free_ns - now : 0;
	}
	/* len < 2^17 and 8e9 < 2^33: the product fits. */
	ls->free_ns = (now > ls->free_ns ? now : ls->free_ns) + (__u64)len * 8000000000ULL / pc->rate_bps;
}

#endif
