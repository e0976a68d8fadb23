// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Enqueue and marking: where the IP header is, the ECN rewrite, the
 * marking decisions on the backlog a packet finds (step, WRED, two
 * thresholds) and the virtual queue.
 *
 * Part of port.c, included once from it: it uses port.c's maps and
 * helpers and is not a header of its own.
 */
#ifndef PORT_MARK_H
#define PORT_MARK_H

/* Where the IP header is and what it says. */
struct pkt_info {
	__u32 l3_off;
	__u16 l3_proto; /* ETH_P_IP, ETH_P_IPV6 or 0 for non-IP */
	__u8 dsfield;   /* DSCP << 2 | ECN */
	__u8 vlan;
};

enum parse_result {
	PARSE_IP = 0,
	PARSE_NON_IP = 1,
	PARSE_MALFORMED = 2,
};

/* parse finds the IP header behind up to VLAN_MAX_DEPTH 802.1Q/802.1ad tags,
 * bounds-checking every header it reads. */
static __always_inline enum parse_result parse(struct __sk_buff *skb, struct pkt_info *pi)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__be16 proto;
	__u32 off;
	__u8 tags;

	if (net_l3(data, data_end, &proto, &off, &tags))
		return PARSE_MALFORMED;
	pi->vlan = tags != 0;
	pi->l3_off = off;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;

		if ((void *)(ip + 1) > data_end)
			return PARSE_MALFORMED;
		if (ip->version != 4 || ip->ihl < 5)
			return PARSE_MALFORMED;
		if ((void *)ip + ip->ihl * 4 > data_end)
			return PARSE_MALFORMED;
		pi->l3_proto = ETH_P_IP;
		pi->dsfield = ip->tos;
		return PARSE_IP;
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;

		if ((void *)(ip6 + 1) > data_end)
			return PARSE_MALFORMED;
		if (ip6->version != 6)
			return PARSE_MALFORMED;
		pi->l3_proto = ETH_P_IPV6;
		pi->dsfield = ipv6_dsfield(ip6);
		return PARSE_IP;
	}
	pi->l3_proto = 0;
	return PARSE_NON_IP;
}

/* set_ds rewrites the bits of mask in the DS field of the first IP header
 * (the outer one of a tunnelled packet) to those of val. IPv4 fixes the
 * header checksum incrementally (RFC 1624); IPv6 has no header checksum
 * and the UDP/TCP pseudo-header does not cover the traffic class. */
static __always_inline int set_ds(struct __sk_buff *skb, const struct pkt_info *pi, __u8 mask, __u8 val)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;

	if (pi->l3_proto == ETH_P_IP) {
		struct iphdr *ip = data + pi->l3_off;
		__u16 old_word, new_word;
		__u32 sum;

		if ((void *)(ip + 1) > data_end)
			return -1;
		old_word = *(__u16 *)ip;
		ip->tos = (ip->tos & ~mask) | (val & mask);
		new_word = *(__u16 *)ip;
		/* HC' = ~(~HC + ~m + m'), all in one's complement. */
		sum = (__u16)~ip->check + (__u16)~old_word + new_word;
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		ip->check = ~sum;
		return 0;
	}
	if (pi->l3_proto == ETH_P_IPV6) {
		struct ipv6hdr *ip6 = data + pi->l3_off;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		/* The traffic class spans the first two bytes: its high
		 * nibble in byte 0's low one, its low nibble in byte 1's high. */
		ip6->priority = (ip6->priority & ~(mask >> 4)) | ((val & mask) >> 4);
		ip6->flow_lbl[0] = (ip6->flow_lbl[0] & ~(mask << 4)) | ((val & mask) << 4);
		return 0;
	}
	return -1;
}

/* set_ecn rewrites the ECN field of the first IP header to ecn. */
static __always_inline int set_ecn(struct __sk_buff *skb, const struct pkt_info *pi, __u8 ecn)
{
	return set_ds(skb, pi, ECN_MASK, ecn);
}

/* set_ce rewrites ECT(0)/ECT(1) to CE. */
static __always_inline int set_ce(struct __sk_buff *skb, const struct pkt_info *pi)
{
	return set_ecn(skb, pi, ECN_CE);
}

enum verdict {
	VERDICT_PASS = 0,
	VERDICT_MARK = 1,
	VERDICT_DROP_LIMIT = 2,
	VERDICT_DROP_WRED = 3,
	VERDICT_TRIMMED = 4,   /* cut and moved to the trim class */
	VERDICT_DROP_TRIM = 5, /* trimmable, but the trim class is full */
	VERDICT_LIGHT = 6,     /* two-threshold: ECT(0) -> ECT(1) */
};

/* congested reports whether a packet finding backlog bytes ahead of it falls
 * on the marking curve: step marks above K (min_th); WRED marks with
 * probability max_p*(backlog-min_th)/(max_th-min_th) between the thresholds
 * and always at or above max_th (seed 000, "How the switch marks"). */
static __always_inline bool congested(const struct class_config *cc, __u64 backlog, __u32 rnd)
{
	__u64 span, p;

	switch (cc->ecn_mode) {
	case ECN_MODE_STEP:
		return backlog > cc->min_th_bytes;
	case ECN_MODE_WRED:
		if (backlog < cc->min_th_bytes)
			return false;
		if (backlog >= cc->max_th_bytes)
			return true;
		span = cc->max_th_bytes - cc->min_th_bytes;
		if (span == 0)
			return true;
		/* Both factors stay below 2^32 (limits are capped at 4 GiB and
		 * max_p at PROB_ONE), so the product fits in 64 bits. */
		p = cc->max_p * (backlog - cc->min_th_bytes) / span;
		return (__u64)rnd < p;
	default:
		return false;
	}
}

/* two_threshold is the two-threshold mechanism of seed 001
 * (draft-hu-rtgwg-pre-ecn-wan-00, "Two Threshold ECN Mechanism") on the
 * backlog a packet finds:
 *  1. from t1 (T1) an ECT(0) packet is marked ECT(1), "light congestion",
 *     with a probability rising linearly with the queue: 0 at t1,
 *     light_max_p at t2. The seed changes the meaning of ECT(1) only, so
 *     only ECT(0) is light-marked; ECT(1) and CE arrivals keep theirs.
 *  2. from t2 (T2) an ECT packet, ECT(0) or ECT(1), is marked CE on a
 *     RED-like curve: heavy_max_p*(backlog-t2)/(t2_max-t2), every one at or
 *     above t2_max (as this port's WRED). Not-ECT is dropped there only
 *     with CLASS_F_WRED_DROP.
 * The seed does not say what happens to the ECT(0) packets above T2 that
 * the CE curve spares: the queue has passed T1 too, so they are
 * light-marked with light_max_p. One draw decides both: CE when
 * rnd < p_ce, else ECT(1) when rnd - p_ce < p_light*(1-p_ce), which given
 * no CE is a draw below p_light. */
static __always_inline enum verdict two_threshold(const struct class_config *cc, __u64 backlog,
						  __u8 ecn, __u32 rnd)
{
	__u64 u = rnd, p_ce = 0, p_light, span;

	if (backlog < cc->t1_bytes)
		return VERDICT_PASS;
	if (backlog >= cc->t2_bytes) {
		span = cc->t2_max_bytes - cc->t2_bytes;
		if (backlog >= cc->t2_max_bytes || span == 0)
			p_ce = PROB_ONE;
		else /* both factors below 2^33: fits in 64 bits */
			p_ce = cc->heavy_max_p * (backlog - cc->t2_bytes) / span;
		if (u < p_ce) {
			if (ecn == ECN_ECT0 || ecn == ECN_ECT1)
				return VERDICT_MARK;
			if (ecn == ECN_NOT_ECT && (cc->flags & CLASS_F_WRED_DROP))
				return VERDICT_DROP_WRED;
			return VERDICT_PASS;
		}
		p_light = cc->light_max_p;
	} else {
		span = cc->t2_bytes - cc->t1_bytes;
		p_light = span ? cc->light_max_p * (backlog - cc->t1_bytes) / span : 0;
	}
	if (ecn != ECN_ECT0)
		return VERDICT_PASS;
	/* p_ce > 0 keeps the product below 2^64. */
	if (p_ce)
		p_light = (p_light * (PROB_ONE - p_ce)) >> PROB_SHIFT;
	return u - p_ce < p_light ? VERDICT_LIGHT : VERDICT_PASS;
}

/* wred_draw draws a random number only where the marking curve needs one:
 * between WRED's min_th and max_th, or the two-threshold curves (from t1;
 * at or above t2_max only the light marking of what CE spares, which is
 * none). */
static __always_inline __u32 wred_draw(const struct class_config *cc, __u64 backlog)
{
	if (cc->ecn_mode == ECN_MODE_WRED && backlog >= cc->min_th_bytes && backlog < cc->max_th_bytes)
		return random_u32();
	if (cc->ecn_mode == ECN_MODE_TWO_THRESHOLD && backlog >= cc->t1_bytes && backlog < cc->t2_max_bytes)
		return random_u32();
	return 0;
}

/* decide takes the random draw as an argument so that it can run under the
 * virtual queue's spin lock, where helpers may not be called. */
static __always_inline enum verdict decide(const struct class_config *cc, __u64 backlog,
					   __u32 len, __u8 ecn, __u32 rnd)
{
	if (backlog + len > cc->limit_bytes)
		return VERDICT_DROP_LIMIT;
	if (cc->ecn_mode == ECN_MODE_TWO_THRESHOLD)
		return two_threshold(cc, backlog, ecn, rnd);
	if (!congested(cc, backlog, rnd))
		return VERDICT_PASS;
	if (ecn == ECN_ECT0 || ecn == ECN_ECT1)
		return VERDICT_MARK;
	if (ecn == ECN_NOT_ECT && (cc->flags & CLASS_F_WRED_DROP))
		return VERDICT_DROP_WRED;
	return VERDICT_PASS; /* Not-ECT without a drop profile, or already CE */
}

static __always_inline void note_max(__u64 *max, __u64 v)
{
	/* A lost race only loses a maximum by one packet. */
	if (v > *max)
		*max = v;
}

/* vq_advance drains the virtual queue up to now and reports what left.
 * Packets leave in proportion to bytes: the virtual queue knows bytes
 * exactly, packets on average. Precondition: vq_lock is held. */
static __always_inline void vq_advance(struct class_state *cs, __u64 now, __u64 ns_per_byte_fp,
				       __u64 *left_bytes, __u64 *left_packets)
{
	__u64 elapsed, drain, last = cs->vq_last_ns;

	*left_bytes = 0;
	*left_packets = 0;
	if (now <= cs->vq_last_ns || ns_per_byte_fp == 0) {
		if (cs->vq_last_ns == 0)
			cs->vq_last_ns = now;
		return;
	}
	elapsed = now - cs->vq_last_ns;
	cs->vq_last_ns = now;
	if (cs->backlog_bytes == 0)
		return;
	/* Beyond 2^47 ns (39 h) every queue is empty anyway; below it the
	 * shift cannot overflow. */
	if (elapsed >= 1ULL << 47) {
		drain = cs->backlog_bytes;
	} else {
		drain = (elapsed << VQ_FP_SHIFT) / ns_per_byte_fp;
	}
	if (drain >= cs->backlog_bytes) {
		*left_bytes = cs->backlog_bytes;
		*left_packets = cs->backlog_packets;
		/* It ran dry when its last byte left (idle.h); backlog < 2^32
		 * and ns/byte < 2^14: the product fits. */
		cs->idle_since_ns = last + ((cs->backlog_bytes * ns_per_byte_fp) >> VQ_FP_SHIFT);
	} else {
		*left_bytes = drain;
		*left_packets = cs->backlog_packets * drain / cs->backlog_bytes;
	}
	cs->backlog_bytes -= *left_bytes;
	cs->backlog_packets -= *left_packets;
}

/* enqueue_virtual runs the virtual queue of a class for one arrival. With
 * limit_only the class only checks its limit (a trimmed packet entering its
 * trim class: no marking, no early drop). */
static __always_inline __u64 enqueue_virtual(struct class_state *cs, struct class_stats *st,
					     const struct class_config *cc, __u32 len, __u8 ecn,
					     bool limit_only, enum verdict *v)
{
	__u64 now = now_ns();
	__u64 left_bytes, left_packets, backlog, sojourn = 0;
	__u32 rnd = random_u32(); /* no helper calls under the lock */
	__u64 backlog_after, packets_after;
	bool enqueued = false;

	bpf_spin_lock(&cs->vq_lock);
	vq_advance(cs, now, cc->vq_ns_per_byte_fp, &left_bytes, &left_packets);
	backlog = cs->backlog_bytes;
	/* PPFC episodes, as depart and port_enqueue keep them in veth mode. */
	if (cs->ppfc_above_xon && backlog <= cc->xon_bytes) {
		cs->ppfc_above_xon = 0;
		cs->ppfc_episode++;
	}
	if (limit_only)
		*v = backlog + len > cc->limit_bytes ? VERDICT_DROP_LIMIT : VERDICT_PASS;
	else
		*v = decide(cc, backlog, len, ecn, rnd);
	if (*v == VERDICT_PASS || *v == VERDICT_MARK || *v == VERDICT_LIGHT) {
		/* backlog < 2^32 and ns/byte < 2^14 at the slowest port: the
		 * product fits. */
		sojourn = (backlog * cc->vq_ns_per_byte_fp) >> VQ_FP_SHIFT;
		cs->backlog_bytes += len;
		cs->backlog_packets += 1;
		enqueued = true;
		/* It ends the idle period: booked after the lock, which
		 * allows no helper calls (idle_end_pending). */
		if (backlog == 0 && cs->idle_since_ns) {
			cs->idle_pending_ns = cs->idle_since_ns;
			cs->idle_since_ns = 0;
		}
	}
	backlog_after = cs->backlog_bytes;
	packets_after = cs->backlog_packets;
	if (cc->xoff_bytes && backlog_after > cc->xon_bytes)
		cs->ppfc_above_xon = 1;
	bpf_spin_unlock(&cs->vq_lock);

	st->dequeued_bytes += left_bytes;
	st->dequeued_packets += left_packets;
	if (enqueued) {
		note_max(&cs->max_backlog_bytes, backlog_after);
		note_max(&cs->max_backlog_packets, packets_after);
		/* A FIFO draining at a constant rate: the sojourn is known on
		 * arrival. */
		record_sojourn(st, sojourn);
	}
	return backlog;
}

static __always_inline void record_curve(struct class_stats *st, const struct class_config *cc,
					 __u64 backlog, enum verdict v)
{
	__u64 bin = cc->limit_bytes ? backlog * CURVE_BINS / cc->limit_bytes : 0;

	if (bin >= CURVE_BINS)
		bin = CURVE_BINS - 1;
	st->curve_ect_arrivals[bin]++;
	if (v == VERDICT_MARK)
		st->curve_ce_marks[bin]++;
}

/* udp_gso: the packet is a UDP GSO super-packet (UDP_SEGMENT). Only a
 * sending host makes one (a lab host's device has tx-udp-segmentation off,
 * and a port refuses a peer that coalesces), and its device cuts it up as
 * it sends it, every segment with the enqueue stamp: its departures would
 * count more packets and bytes than came in (a host's UET sends ran its
 * NIC port's backlog below zero, and every packet after was dropped at the
 * limit). A TCP super-packet crosses a veth whole, as it came in. */
static __always_inline int udp_gso(struct __sk_buff *skb, const struct pkt_info *pi)
{
	__u8 proto = 0;

	if (skb->gso_segs <= 1)
		return 0;
	if (pi->l3_proto == ETH_P_IP)
		bpf_skb_load_bytes(skb, pi->l3_off + 9, &proto, 1);
	else if (pi->l3_proto == ETH_P_IPV6)
		bpf_skb_load_bytes(skb, pi->l3_off + 6, &proto, 1);
	return proto == NET_IPPROTO_UDP;
}

/* enqueue_unaccounted applies the class's policy to a packet that cannot
 * carry an enqueue stamp, judged on the backlog it finds, and counts it apart
 * so that the class counters keep their invariant. */
static __always_inline int enqueue_unaccounted(struct __sk_buff *skb, struct port_stats *ps,
					       const struct class_config *cc,
					       const struct class_state *cs,
					       const struct pkt_info *pi, __u32 len, __u8 ecn)
{
	enum verdict v = decide(cc, cs->backlog_bytes, len, ecn, wred_draw(cc, cs->backlog_bytes));

	ps->unaccounted_packets++;
	ps->unaccounted_bytes += len;
	if (v == VERDICT_DROP_LIMIT || v == VERDICT_DROP_WRED) {
		ps->unaccounted_dropped_packets++;
		return TC_ACT_SHOT;
	}
	if (v == VERDICT_MARK && set_ce(skb, pi) == 0)
		ps->unaccounted_ce_marked_packets++;
	if (v == VERDICT_LIGHT)
		set_ecn(skb, pi, ECN_ECT1);
	return TC_ACT_OK;
}

#endif /* PORT_MARK_H */
