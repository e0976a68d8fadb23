//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Switch egress port: traffic classes, ECN marking on the instantaneous
 * backlog (step and WRED, seed 000 "How the switch marks"), tail drop at a
 * per-class buffer limit or packet trimming (UET), and exact queue
 * accounting.
 *
 * port_enqueue runs at TC egress of the port device, before the qdisc: it
 * classifies by DSCP, decides drop / mark / pass on the backlog the packet
 * finds, and stamps the packet with its enqueue time and class.
 *
 * port_xmit runs where HTB hands the packet to the port device
 * (tp_btf/net_dev_start_xmit, filtered to the port's device): the packet
 * leaves the port's queue there, so it takes it out of the backlog, measures
 * its sojourn and runs the sojourn AQMs (TCN, CoDel, ECN#, seed 002). A
 * tracing program cannot rewrite the packet, so it hands the decision and
 * its own timestamp on, in a table slot of the skb's address, to
 * port_dequeue.
 *
 * port_dequeue runs at TC ingress of the veth peer, after the packet waited
 * in the kernel's per-CPU backlog (veth_xmit -> netif_rx -> softirq): the
 * host queue. It takes the handoff, measures that wait apart, and applies the
 * decision (ECT -> CE). Where the xmit hook is not attached (old kernel,
 * --departure peer-ingress) or did not see a packet, port_dequeue counts the
 * departure itself as before (shared/reference/kernel.md, "Real queue,
 * measured sojourn, on a veth pair"): the host queue then counts as port
 * queue.
 *
 * port_host_drop (tp_btf/kfree_skb) closes the books on packets the kernel
 * drops between the two hooks.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#include "net.h"
#include "icrc.h"
#include "port.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* The 6.1 uapi spells the monotonic delivery clock the old way (same value). */
#ifndef BPF_SKB_CLOCK_MONOTONIC
#define BPF_SKB_CLOCK_MONOTONIC BPF_SKB_TSTAMP_DELIVERY_MONO
#endif

typedef _Bool bool;
#define true 1
#define false 0

#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))

#define TC_ACT_UNSPEC (-1) /* TCX_NEXT: later programs and the qdisc see it */
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2

#define EEXIST 17

/* The kernel's structures the tracing programs read, resolved against the
 * running kernel's BTF when the programs load (CO-RE): only the fields used,
 * at whatever offsets the kernel has them. */
#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
struct ns_common {
	unsigned int inum;
};
struct net {
	struct ns_common ns;
};
typedef struct {
	struct net *net;
} possible_net_t;
struct net_device {
	int ifindex;
	possible_net_t nd_net;
};
struct sk_buff {
	unsigned int len;
	__s64 tstamp;
	__u8 tstamp_type : 2; /* 6.11+: SKB_CLOCK_REALTIME, _MONOTONIC, _TAI */
};
/* 5.18 to 6.10 had one bit: 1 = the stamp is a monotonic delivery time. */
struct sk_buff___mono_bit {
	__u8 mono_delivery_time : 1;
};
#pragma clang attribute pop

/* The enqueue stamp: skb->tstamp = enqueue time with the low STAMP_BITS
 * replaced by a magic and the class, so the dequeue side knows the packet went
 * through port_enqueue and which class's backlog it leaves. Costs 256 ns of
 * timestamp resolution. */
#define STAMP_BITS 8
#define STAMP_MASK ((1ULL << STAMP_BITS) - 1)
#define STAMP_CLASS_MASK 0x7ULL
#define STAMP_MAGIC 0xA8ULL /* 10101xxx */
#define STAMP_MAGIC_MASK 0xF8ULL

#define VQ_FP_SHIFT 16 /* class_config.vq_ns_per_byte_fp is 16.16 */

/* Load-time settings (rewritten by the loader before the program loads). */

/* Tests only: read the clock and the random draw from test_now_ns and
 * test_rand, and accept stamps whose clock type BPF_PROG_RUN cannot set. */
volatile const __u8 test_hooks = 0;

__u64 test_now_ns = 0;
__u32 test_rand = 0;
/* Tests only: the handoff key port_dequeue uses (BPF_PROG_RUN builds a new
 * skb every run, at an address the test cannot know). */
__u64 test_skb_key = 0;

/* The port device the xmit hook watches: the tracepoint fires for every
 * device of every namespace. */
volatile const __u32 xmit_ifindex = 0;
volatile const __u32 xmit_netns_ino = 0; /* the namespace's inode number */

/* Runtime settings and state. */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct port_config);
} port_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DSCP_COUNT);
	__type(key, __u32);
	__type(value, __u32);
} dscp_class SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct class_config);
} class_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct class_state);
} class_queue SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct aqm_state);
} class_aqm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct class_stats);
} class_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct port_stats);
} port_counters SEC(".maps");

/* port_xmit -> port_dequeue (or port_host_drop), a slot per skb address.
 * A slot is claimed and released with compare-and-swap on its skb field: a
 * slot that does not hold a packet's skb always means "the xmit hook did not
 * count this departure". An array and an atomic instead of a hash map: the
 * hash map's insert, lookup and delete cost ~140 ns more per packet in situ
 * (make bench), and TCP through an unshaped port 16 %. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HANDOFF_SLOTS);
	__type(key, __u32);
	__type(value, struct xmit_handoff);
} handoff SEC(".maps");

/* Where a program turns a kernel address into a number it may hash: the
 * verifier forbids arithmetic on pointers, but lets a program that may read
 * kernel addresses (CAP_PERFMON, which loading these needs) store one in a
 * map and read it back as a number. One entry per program, per CPU. */
enum addr_scratch_slot {
	ADDR_DEQUEUE = 0,
	ADDR_XMIT = 1,
	ADDR_HOST_DROP = 2,
	ADDR_SLOTS = 3,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ADDR_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} addr_scratch SEC(".maps");


static __always_inline __u64 now_ns(void)
{
	if (test_hooks)
		return test_now_ns;
	return bpf_ktime_get_ns();
}

#include "idle.h"

static __always_inline __u32 random_u32(void)
{
	if (test_hooks)
		return test_rand;
	return bpf_get_prandom_u32();
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

static __always_inline __u32 time_bucket(__u64 ns)
{
	__u32 b = log2_u64(ns);

	return b < SOJOURN_BUCKETS ? b : SOJOURN_BUCKETS - 1;
}

static __always_inline void record_sojourn(struct class_stats *st, __u64 sojourn_ns)
{
	st->sojourn_hist[time_bucket(sojourn_ns)]++;
	st->sojourn_sum_ns += sojourn_ns;
	st->sojourn_samples++;
}

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
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__u16 proto;

	if ((void *)(eth + 1) > data_end)
		return PARSE_MALFORMED;
	proto = eth->h_proto;

#pragma unroll
	for (int i = 0; i < VLAN_MAX_DEPTH; i++) {
		struct vlan_hdr *vh;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		vh = data + off;
		if ((void *)(vh + 1) > data_end)
			return PARSE_MALFORMED;
		proto = vh->h_vlan_encapsulated_proto;
		off += sizeof(*vh);
		pi->vlan = 1;
	}

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

/* set_ecn rewrites the ECN field of the first IP header (the outer one of a
 * tunnelled packet) to ecn. IPv4 fixes the header checksum incrementally
 * (RFC 1624); IPv6 has no header checksum and the UDP/TCP pseudo-header
 * does not cover the traffic class. */
static __always_inline int set_ecn(struct __sk_buff *skb, const struct pkt_info *pi, __u8 ecn)
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
		ip->tos = (ip->tos & ~ECN_MASK) | ecn;
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
		ip6->flow_lbl[0] = (ip6->flow_lbl[0] & ~(ECN_MASK << 4)) | (ecn << 4);
		return 0;
	}
	return -1;
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

/* PPFC (seed 003; roce-wire.md §PPFC): a packet that takes its class's
 * backlog to xoff_bytes or above stops its source. The notification goes
 * straight to the source: port_enqueue looks the route toward it up
 * (bpf_fib_lookup, which also gives the MAC addresses and the switch's own
 * address on that route), builds the whole frame in ppfc_scratch, and clones
 * the data packet to the egress of the device toward the source with
 * skb->mark = ppfc_mark; ppfc_egress, attached there, turns the clone into
 * the frame. bpf_clone_redirect runs that egress path synchronously on this
 * CPU, so the per-CPU scratch is still this packet's.
 *
 * A source is stopped once per pause and destination (ppfc_sources,
 * claimed by compare-and-swap): packets it had in flight are coalesced.
 * While it is paused and the backlog is at or below xon_bytes, the next
 * packet the switch sends it from that destination (ACKs, CNPs) carries a
 * resume out: ppfc_egress
 * clones that packet to its own egress. A program at the queue's exit
 * (port_xmit) cannot send, so the resume waits for such a packet. The
 * stop's pause duration is the safety net for a source that gets none: the
 * time the class takes to drain from the backlog the packet found to half
 * of xon_bytes at the class's rate, so a source with reverse traffic
 * restarts at xon on the resume, one without it at xon/2, before the queue
 * runs dry.
 *
 * alarm and hold: the draft names PT 10 and 11 and no more ("to be
 * discussed in future versions of this document"). This project's choice,
 * both tied to a congestion episode of the class: it begins when the
 * backlog rises above xon_bytes and ends when it falls back to xon_bytes or
 * below (class_state.ppfc_episode counts the ends); for one source, a
 * resume sent ends it too.
 *  - hold, "still congested: stay paused": a source stopped (or held) in
 *    this episode whose pause has run out while the backlog is still above
 *    xon_bytes gets a hold on its first packet after the pause, with a new
 *    pause (the stop's rule), instead of sending freely until the backlog
 *    crosses xoff_bytes again. One per pause: packets of a paused source in
 *    the band count as coalesced holds.
 *  - alarm, an early warning: a packet that takes the backlog to
 *    alarm_bytes or above (below xoff_bytes) alarms its source, once per
 *    episode (more: coalesced), unless it is paused or due a hold. The
 *    Pause Duration field carries the time the class takes to drain to
 *    xon_bytes: the source neither pauses nor cuts, but does not raise its
 *    rate for that long (host/agent: DCQCN increase events held).
 * Each packet above xon_bytes from an IPv4 source thus costs a lookup in
 * ppfc_sources.
 *
 * On the wire (the draft leaves these open): IPv4 only; UDP 4791 from
 * PPFC_UDP_SPORT; BTH opcode 0x81 with P (byte 4, 0x20) set, P_Key 0xFFFF,
 * DestQP 0, PSN a per-source sequence; the congested destination as an
 * IPv4-mapped IPv6 address; Congestion Port = ppfc_port; DSCP ppfc_dscp,
 * Not-ECT; the ICRC as for any RoCEv2 packet; Pause Duration 0 in a
 * resume. */
#define PPFC_UDP_SPORT 0xC0FC
#define PPFC_TTL 64
#define PPFC_MAX_PAUSE_US 0xFFFF
#define PPFC_L4_LEN (sizeof(struct net_udphdr) + ROCE_BTH_LEN + 24 + ROCE_ICRC_LEN) /* 48 */
#define PPFC_V4_LEN (sizeof(struct ethhdr) + sizeof(struct iphdr) + PPFC_L4_LEN)   /* 82 */
#define NET_AF_INET 2

enum ppfc_action {
	PPFC_STOP = 0,
	PPFC_RESUME = 1,
	PPFC_ALARM = 2,
	PPFC_HOLD = 3,
};

/* The mark of a clone that ppfc_egress turns into a notification: set by
 * the loader per port (several ports may share a switch's devices). */
volatile const __u32 ppfc_mark = 0x50460000; /* "PF" */

struct ppfc_l4 {
	struct net_udphdr udp;
	struct roce_bth bth;
	__u8 dest[16];     /* congested destination, IPv4-mapped */
	__be16 flags_pt;   /* flags (14 bits, 0) | PT (2 bits) */
	__be16 cport;      /* Congestion Port */
	__be16 rsvd;
	__be16 pause_us;   /* Pause Duration, µs */
	__u32 icrc;        /* little-endian on the wire: stored natively (bpfel) */
};

/* The frame, 2 bytes in so that the IP header sits on a 16-byte boundary. */
struct ppfc_frame {
	__u8 align[2];
	struct ethhdr eth;
	struct iphdr ip;
	struct ppfc_l4 l4;
};

_Static_assert(sizeof(struct ppfc_l4) == PPFC_L4_LEN, "ppfc_l4 is 48 bytes");
_Static_assert(__builtin_offsetof(struct ppfc_frame, ip) == 16, "IP header aligned");
_Static_assert(sizeof(struct ppfc_frame) - 2 == PPFC_V4_LEN, "ppfc_frame is one IPv4 PPFC");

/* A WAN CNP (seed 001; issue 13 §4): a RoCEv2 CNP to a tunnel-ingress PE,
 * 74 bytes. Same alignment as ppfc_frame. */
struct wan_cnp_frame {
	__u8 align[2];
	struct ethhdr eth;
	struct iphdr ip;
	struct net_udphdr udp;
	struct roce_bth bth;
	__u8 rsvd[ROCE_CNP_RSVD_LEN];
	__u32 icrc;
};

#define WAN_CNP_V4_LEN (sizeof(struct ethhdr) + sizeof(struct iphdr) + ROCE_CNP_L4_LEN) /* 74 */

_Static_assert(sizeof(struct wan_cnp_frame) - 2 == WAN_CNP_V4_LEN, "wan_cnp_frame is one IPv4 CNP");

/* wan_cnp's working memory: port_enqueue leaves it too little stack. */
struct wan_cnp_work {
	struct bpf_fib_lookup fib;
	struct iphdr hdr;
	struct {
		struct net_udphdr udp;
		__u8 bth[8];
	} l4;
	struct wan_cnp_key key;
	/* What wan_cnp works with, kept here rather than in registers and
	 * on the stack: its stack adds to port_enqueue's, near the
	 * verifier's 512 bytes. */
	__u64 now;
	__u64 old;
	__be32 from;
	__be32 to;
	__u32 dest_qp;
	__u16 sport;
	__u8 light;
	__u8 pad;
};

/* The map holds it as words: bpf2go has no Go type for bpf_fib_lookup's
 * unions. */
struct wan_cnp_buf {
	__u64 words[(sizeof(struct wan_cnp_work) + 7) / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wan_cnp_buf);
} wan_cnp_work SEC(".maps");

struct ppfc_scratch {
	union {
		struct ppfc_frame f;
		struct wan_cnp_frame c;
	};
	__u32 ready; /* a frame for the next marked clone */
	__u32 len;   /* its length: PPFC_V4_LEN or WAN_CNP_V4_LEN */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ppfc_scratch);
} ppfc_scratch SEC(".maps");

/* The sources the port has stopped, per class. LRU: a switch forgets the
 * longest-idle source rather than refusing a new one. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ppfc_key);
	__type(value, struct ppfc_source);
} ppfc_sources SEC(".maps");

/* What a notification says; addresses in network order. */
struct ppfc_args {
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u32 local_ip; /* the switch's address toward the target */
	__u32 target;   /* the source being stopped or resumed */
	__u32 dest;     /* the congested destination */
	__u32 pt;       /* enum ppfc_action */
	__u32 pause_us;
	__u32 psn;
	__u32 dscp;
	__u32 cport;
};

/* ppfc_build writes the notification a describes into f, with its ICRC. A
 * function of its own: it is called from several places, and the CRC loop
 * would otherwise be inlined into each. */
static __attribute__((noinline)) int ppfc_build(struct ppfc_frame *f, const struct ppfc_args *a)
{
	struct iphdr *ip = &f->ip;
	struct ppfc_l4 *l4 = &f->l4;

	__builtin_memcpy(f->eth.h_dest, a->dmac, ETH_ALEN);
	__builtin_memcpy(f->eth.h_source, a->smac, ETH_ALEN);
	f->eth.h_proto = bpf_htons(ETH_P_IP);
	/* The fields the ICRC masks as ones first. */
	roce_ipv4_masked(ip, PPFC_L4_LEN, a->local_ip, a->target);
	l4->udp.source = bpf_htons(PPFC_UDP_SPORT);
	l4->udp.dest = bpf_htons(ROCE_UDP_PORT);
	l4->udp.len = bpf_htons(PPFC_L4_LEN);
	l4->udp.check = 0xFFFF;
	l4->bth.opcode = ROCE_OP_CNP; /* 0x81: a CNP without P, a PPFC with it */
	l4->bth.flags = 0;
	l4->bth.pkey = 0xFFFF;
	l4->bth.ecn = ICRC_MASKED;
	l4->bth.destqp[0] = 0;
	l4->bth.destqp[1] = 0;
	l4->bth.destqp[2] = 0;
	l4->bth.ack = 0;
	l4->bth.psn[0] = a->psn >> 16;
	l4->bth.psn[1] = a->psn >> 8;
	l4->bth.psn[2] = a->psn;
	__builtin_memset(l4->dest, 0, 10);
	l4->dest[10] = 0xFF;
	l4->dest[11] = 0xFF;
	__builtin_memcpy(&l4->dest[12], &a->dest, 4);
	l4->flags_pt = bpf_htons(a->pt & 3);
	l4->cport = bpf_htons(a->cport);
	l4->rsvd = 0;
	l4->pause_us = bpf_htons(a->pause_us);
	l4->icrc = icrc_crc((const __u8 *)ip, sizeof(*ip) + PPFC_L4_LEN - ROCE_ICRC_LEN,
			    sizeof(*ip) + PPFC_L4_LEN - ROCE_ICRC_LEN);
	/* The masked fields, as sent. */
	roce_ipv4_as_sent(ip, (a->dscp & 0x3F) << 2, PPFC_TTL);
	l4->udp.check = 0; /* IPv4: no checksum, as rxe sends */
	l4->bth.ecn = ROCE_BTH_PPFC;
	return 0;
}

/* ppfc_clone sends the frame in the scratch out of ifindex: the clone of
 * skb that ppfc_egress rewrites there. The packet's own mark is put back. */
static __always_inline long ppfc_clone(struct __sk_buff *skb, struct ppfc_scratch *sc, __u32 ifindex)
{
	__u32 mark = skb->mark;
	long ret;

	sc->ready = 1;
	sc->len = PPFC_V4_LEN;
	skb->mark = ppfc_mark;
	ret = bpf_clone_redirect(skb, ifindex, 0);
	skb->mark = mark;
	sc->ready = 0;
	return ret;
}

/* ppfc_drain_us is the time the class takes to drain from backlog to
 * floor, in µs, at least 1, at most what the field carries. */
static __always_inline __u32 ppfc_drain_us(const struct class_config *cc, __u64 backlog, __u64 floor)
{
	__u64 excess = backlog > floor ? backlog - floor : 0;
	__u64 us = ((excess * cc->vq_ns_per_byte_fp) >> VQ_FP_SHIFT) / 1000;

	if (us < 1)
		return 1;
	return us > PPFC_MAX_PAUSE_US ? PPFC_MAX_PAUSE_US : us;
}

/* ppfc_enqueued sends what a packet that takes its class's backlog to
 * after (above xon_bytes) owes its source: a stop at xoff_bytes, else a
 * hold to a source of this episode whose pause ran out, else an alarm at
 * alarm_bytes once per episode. Stops and holds claim the source's
 * paused_until_ns, alarms its alarmed episode, by compare-and-swap; a
 * notification that could not be sent gives the claim back, so that a
 * later packet tries again. */
static __always_inline void ppfc_enqueued(struct __sk_buff *skb, const struct port_config *pc,
					  const struct class_config *cc, struct class_state *cs,
					  struct class_stats *st, struct port_stats *ps,
					  const struct pkt_info *pi, __u32 class_id, __u64 after)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	bool stop = after >= cc->xoff_bytes;
	bool alarm = cc->alarm_bytes && after >= cc->alarm_bytes;
	struct bpf_fib_lookup fib = {};
	struct ppfc_args a = {};
	struct ppfc_key key = {};
	struct ppfc_source *src, fresh = {};
	struct ppfc_scratch *sc;
	struct iphdr *ip;
	__u64 now, old, claim, episode;
	__u32 zero = 0, pt;
	long rc;

	if (pi->l3_proto != ETH_P_IP) {
		if (stop || alarm)
			ps->ppfc_not_ipv4++;
		return;
	}
	ip = data + (pi->l3_off & 0xFF);
	if ((void *)(ip + 1) > data_end)
		return;
	key.addr = ip->saddr;
	key.dest = ip->daddr;
	key.class_id = class_id;
	src = bpf_map_lookup_elem(&ppfc_sources, &key);
	if (!src) {
		if (!stop && !alarm)
			return; /* never stopped: nothing to hold */
		bpf_map_update_elem(&ppfc_sources, &key, &fresh, BPF_NOEXIST);
		src = bpf_map_lookup_elem(&ppfc_sources, &key);
		if (!src)
			return;
	}
	now = now_ns();
	episode = READ_ONCE(cs->ppfc_episode);
	old = READ_ONCE(src->paused_until_ns);
	if (stop) {
		if (old > now) {
			st->ppfc_stop_coalesced++;
			return;
		}
		pt = PPFC_STOP;
	} else if (old && READ_ONCE(src->episode) == episode) {
		/* Stopped or held in this episode, not resumed. */
		if (old > now) {
			st->ppfc_hold_coalesced++;
			return;
		}
		pt = PPFC_HOLD;
	} else if (alarm) {
		old = READ_ONCE(src->alarmed);
		if (old == episode + 1) {
			st->ppfc_alarm_coalesced++;
			return;
		}
		pt = PPFC_ALARM;
	} else {
		return;
	}

	if (pt == PPFC_ALARM) {
		a.pause_us = ppfc_drain_us(cc, after, cc->xon_bytes);
		claim = episode + 1;
		if (__sync_val_compare_and_swap(&src->alarmed, old, claim) != old) {
			st->ppfc_alarm_coalesced++; /* another CPU alarmed it */
			return;
		}
	} else {
		a.pause_us = ppfc_drain_us(cc, after, cc->xon_bytes / 2);
		claim = now + (__u64)a.pause_us * 1000;
		if (__sync_val_compare_and_swap(&src->paused_until_ns, old, claim) != old) {
			/* another CPU stopped or held it */
			if (pt == PPFC_STOP)
				st->ppfc_stop_coalesced++;
			else
				st->ppfc_hold_coalesced++;
			return;
		}
	}

	fib.family = NET_AF_INET;
	fib.ipv4_dst = ip->saddr;
	fib.ifindex = skb->ingress_ifindex;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SRC);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
			ps->ppfc_no_neigh++;
		else
			ps->ppfc_no_route++;
		goto undo;
	}
	if (fib.ifindex == skb->ifindex) {
		ps->ppfc_self++;
		goto undo;
	}
	sc = bpf_map_lookup_elem(&ppfc_scratch, &zero);
	if (!sc)
		goto undo;
	src->ifindex = fib.ifindex;
	src->local_ip = fib.ipv4_src;
	__builtin_memcpy(a.dmac, fib.dmac, ETH_ALEN);
	__builtin_memcpy(a.smac, fib.smac, ETH_ALEN);
	a.local_ip = fib.ipv4_src;
	a.target = ip->saddr;
	a.dest = ip->daddr;
	a.pt = pt;
	a.psn = __sync_fetch_and_add(&src->psn, 1);
	a.dscp = pc->ppfc_dscp;
	a.cport = pc->ppfc_port;
	ppfc_build(&sc->f, &a);
	if (ppfc_clone(skb, sc, fib.ifindex)) {
		ps->ppfc_redirect_errors++;
		goto undo;
	}
	switch (pt) {
	case PPFC_STOP:
		src->episode = episode;
		__sync_fetch_and_add(&src->stops, 1);
		st->ppfc_stop_sent++;
		break;
	case PPFC_HOLD:
		__sync_fetch_and_add(&src->holds, 1);
		st->ppfc_hold_sent++;
		break;
	default:
		__sync_fetch_and_add(&src->alarms, 1);
		st->ppfc_alarm_sent++;
		break;
	}
	return;
undo:
	if (pt == PPFC_ALARM)
		__sync_val_compare_and_swap(&src->alarmed, claim, old);
	else
		__sync_val_compare_and_swap(&src->paused_until_ns, claim, old);
}

/* Packet trimming (UET, issue 11 §3): a switch that trims turns a packet its
 * class would tail-drop into its headers. The first trim_bytes bytes of the
 * IP packet leave with DSCP trim_dscp (ECN kept) through trim_class, which
 * is served in strict priority, so the receiver learns at once what was lost
 * and NACKs it (TRIMMED) instead of waiting for a timeout. Linux switches do
 * not trim: this port does it here.
 *
 * Only IPv4 UDP is trimmed. IPv4 lets a UDP datagram carry no checksum (0),
 * so the cut needs no sum over the payload that is left. IPv6 requires one
 * (RFC 8200 §8.1) and would need it recomputed over what is kept, up to
 * trim_bytes of packet: IPv6 packets are not trimmable and are tail-dropped
 * as before, like every other packet that is not IPv4 UDP, IPv4 fragments,
 * GSO super-packets (several wire packets in one skb) and packets no longer
 * than trim_bytes. */
#define TRIM_L3_OFF_MAX (sizeof(struct ethhdr) + VLAN_MAX_DEPTH * sizeof(struct vlan_hdr))

/* A trimmed packet is sent through the device's egress once more
 * (bpf_redirect to itself): the stack sized it for the qdisc
 * (qdisc_skb_cb->pkt_len) before this hook ran, and HTB would charge the
 * trim class the whole packet's length; the second pass sizes it anew.
 * trim_mark (set by the loader per port, like ppfc_mark) tells
 * port_enqueue's second pass that the packet is accounted already; the
 * packet's own mark waits in cb[TRIM_CB_MARK] meanwhile (nothing runs
 * between the two passes). A redirect the kernel fails (the device going
 * down at that moment) would leave the packet in the trim class's backlog
 * for good. */
volatile const __u32 trim_mark = 0x54520000; /* "TR" */
#define TRIM_CB_MARK 0
#define UDP_CHECK_OFF 6 /* offsetof(struct net_udphdr, check) */

enum trim_result {
	TRIM_NOT_TRIMMABLE = -1, /* the packet is as it was */
	TRIM_FAILED = -2,        /* a helper failed, maybe after the cut: drop it */
};

/* udp4_seed is what the stack leaves in the checksum field of an IPv4 UDP
 * packet whose checksum is completed later, by a device or by
 * skb_checksum_help (CHECKSUM_PARTIAL): the pseudo-header sum, folded, not
 * complemented (udp4_hwcsum). */
static __always_inline __u16 udp4_seed(__be32 saddr, __be32 daddr, __u32 udp_len)
{
	__u32 s = bpf_ntohl(saddr), d = bpf_ntohl(daddr);
	__u32 sum = (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + NET_IPPROTO_UDP + udp_len;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return bpf_htons(sum);
}

/* trim_packet cuts an IPv4 UDP packet whose IP header starts at l3_off to
 * trim_bytes of IP packet and rewrites its headers: DSCP trim_dscp with the
 * ECN bits kept, total length and header checksum, UDP length, UDP checksum
 * none. It returns the frame's new length, or a trim_result. A global
 * function: the verifier checks it once, on its own. */
__attribute__((noinline)) int trim_packet(struct __sk_buff *skb, __u32 l3_off, __u32 trim_bytes,
					  __u32 trim_dscp)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u16 old_word, old_len, check, seed;
	__u32 ihl, tot_len, new_len, check_off, sum;
	struct net_udphdr *udp;
	__be32 saddr, daddr;
	struct iphdr *ip;

	if (l3_off > TRIM_L3_OFF_MAX || skb->gso_segs > 1)
		return TRIM_NOT_TRIMMABLE;
	ip = data + l3_off;
	if ((void *)(ip + 1) > data_end)
		return TRIM_NOT_TRIMMABLE;
	if (ip->version != 4 || ip->protocol != NET_IPPROTO_UDP ||
	    (ip->frag_off & bpf_htons(NET_IPV4_FLAG_MF | NET_IPV4_FRAG_OFFSET)))
		return TRIM_NOT_TRIMMABLE;
	ihl = ip->ihl * 4;
	tot_len = bpf_ntohs(ip->tot_len);
	/* The IP and UDP headers must survive the cut, and the packet must
	 * be all there. */
	if (ihl < sizeof(*ip) || ihl + sizeof(*udp) > trim_bytes || tot_len <= trim_bytes ||
	    skb->len < l3_off + tot_len)
		return TRIM_NOT_TRIMMABLE;
	saddr = ip->saddr;
	daddr = ip->daddr;
	new_len = l3_off + trim_bytes;
	if (bpf_skb_change_tail(skb, new_len, 0))
		return TRIM_FAILED;

	/* The cut invalidated every packet pointer: find the headers again. */
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ip = data + l3_off;
	if ((void *)(ip + 1) > data_end)
		return TRIM_FAILED;
	udp = (void *)ip + ihl;
	if ((void *)(udp + 1) > data_end)
		return TRIM_FAILED;
	old_word = *(__u16 *)ip; /* version, ihl, tos */
	old_len = ip->tot_len;
	ip->tos = (trim_dscp & 0x3F) << 2 | (ip->tos & ECN_MASK);
	ip->tot_len = bpf_htons(trim_bytes);
	/* HC' = ~(~HC + ~m + m') for both words (RFC 1624). */
	sum = (__u16)~ip->check + (__u16)~old_word + *(__u16 *)ip + (__u16)~old_len + ip->tot_len;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->check = ~sum;
	udp->len = bpf_htons(trim_bytes - ihl);
	udp->check = 0;

	/* Is the UDP checksum still to be computed (CHECKSUM_PARTIAL: sent by
	 * this host, or forwarded from a veth, which offloads it)? Then the
	 * stack completes it from the seed in the field wherever the packet
	 * leaves without an offload (skb_checksum_help), and a 0 there would
	 * turn into a wrong checksum: the field must hold the seed of the
	 * new length instead. __sk_buff does not say; bpf_l4_csum_replace
	 * does: without BPF_F_PSEUDO_HDR it leaves the field of a
	 * CHECKSUM_PARTIAL skb alone and updates any other's
	 * (inet_proto_csum_replace4). So replace 0 by 1 and look. */
	check_off = l3_off + ihl + UDP_CHECK_OFF;
	if (bpf_l4_csum_replace(skb, check_off, 0, 1, sizeof(__u16)))
		return TRIM_FAILED;
	if (bpf_skb_load_bytes(skb, check_off, &check, sizeof(check)))
		return TRIM_FAILED;
	seed = check ? 0 : udp4_seed(saddr, daddr, trim_bytes - ihl);
	if (bpf_skb_store_bytes(skb, check_off, &seed, sizeof(seed), 0))
		return TRIM_FAILED;
	return new_len;
}

/* enqueue_trimmed puts a trimmed packet of len bytes into the trim class,
 * where only the limit applies (no marking, no early drop, no PPFC), and
 * counts it there. It returns VERDICT_TRIMMED, or VERDICT_DROP_TRIM when the
 * trim class is full too. */
static __always_inline enum verdict enqueue_trimmed(struct __sk_buff *skb, const struct port_config *pc,
						  __u32 trim_class, __u32 len, __u8 ecn)
{
	struct class_config *tcc;
	struct class_state *tcs;
	struct class_stats *tst;
	enum verdict v = VERDICT_PASS;
	__u64 backlog, after;

	tcc = bpf_map_lookup_elem(&class_cfg, &trim_class);
	tcs = bpf_map_lookup_elem(&class_queue, &trim_class);
	tst = bpf_map_lookup_elem(&class_counters, &trim_class);
	if (!tcc || !tcs || !tst)
		return VERDICT_DROP_TRIM;
	if (pc->queue_mode == QUEUE_MODE_VIRTUAL) {
		enqueue_virtual(tcs, tst, tcc, len, ecn, true, &v);
		if (READ_ONCE(tcs->idle_pending_ns))
			idle_end_pending(tcs, tst, pc, trim_class);
		if (v != VERDICT_PASS)
			return VERDICT_DROP_TRIM;
	} else {
		/* It leaves through the trim class's queue: that class's
		 * stamp (the same call succeeded on this skb before). */
		if (bpf_skb_set_tstamp(skb, (now_ns() & ~STAMP_MASK) | STAMP_MAGIC | trim_class,
				       BPF_SKB_CLOCK_MONOTONIC))
			return VERDICT_DROP_TRIM;
		backlog = __sync_fetch_and_add(&tcs->backlog_bytes, len);
		if (backlog + len > tcc->limit_bytes) {
			__sync_fetch_and_add(&tcs->backlog_bytes, -(__s64)len);
			return VERDICT_DROP_TRIM;
		}
		if (backlog == 0)
			idle_end(tcs, tst, pc, trim_class);
		after = __sync_fetch_and_add(&tcs->backlog_packets, 1) + 1;
		note_max(&tcs->max_backlog_bytes, backlog + len);
		note_max(&tcs->max_backlog_packets, after);
	}
	if (pc->flags & PORT_F_SET_PRIORITY)
		skb->priority = pc->priority_base + trim_class;
	tst->enqueued_packets++;
	tst->enqueued_bytes += len;
	tst->arrived_by_ecn[ecn & ECN_MASK]++;
	tst->trim_in_packets++;
	tst->trim_in_bytes += len;
	return VERDICT_TRIMMED;
}

/*
 * WAN CNPs (seed 001 "Two Threshold ECN Mechanism"; issue 13 §4). A WAN
 * port that marks a tunnelled packet, light (ECT(1) past T1) or heavy (CE
 * past T2), sends a CNP to the tunnel-ingress PE, the packet's outer
 * source, so that it reacts within a one-way delay instead of a round
 * trip through the receiver. In RoCEv2 CNP format (IBTA A17.9.3), as the
 * tunnel's far end would send it: from the outer destination (the egress
 * PE, which names the tunnel) to the outer source, UDP 4791 from the inner
 * flow's UDP source port, the inner BTH's destination QP (0 if the inner
 * packet is not RoCEv2), BECN set, DSCP ppfc_dscp (CNP), Not-ECT, the 16
 * reserved bytes zero, the ICRC computed. Light and heavy differ in one
 * bit the ICRC masks, L (ROCE_BTH_WAN_LIGHT, BTH byte 4): set for light.
 * At most one per PE, class and kind per wan_cnp_interval_ns (claimed by
 * compare-and-swap in wan_cnp_last). The frame goes out like a PPFC
 * notification: built in ppfc_scratch, a clone sent to the device toward
 * the PE, rewritten there by ppfc_egress.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct wan_cnp_key);
	__type(value, __u64);
} wan_cnp_last SEC(".maps");

/* wan_cnp sends the CNP a marked packet owes its tunnel's ingress PE. A
 * function of its own, building in the scratch map: port_enqueue's stack
 * has no room for the frame or the FIB lookup. */
static __attribute__((noinline)) int wan_cnp(struct __sk_buff *skb, const struct class_config *cc,
					     struct class_stats *st, __u32 l3_off, __u32 class_and_kind)
{
	struct wan_cnp_frame *f;
	struct wan_cnp_work *w;
	struct ppfc_scratch *sc;
	struct port_config *pc;
	struct port_stats *ps;
	__u64 *last, zero64 = 0;
	__u32 zero = 0, off, mark;
	long rc;

	pc = bpf_map_lookup_elem(&port_cfg, &zero);
	ps = bpf_map_lookup_elem(&port_counters, &zero);
	sc = bpf_map_lookup_elem(&ppfc_scratch, &zero);
	w = bpf_map_lookup_elem(&wan_cnp_work, &zero);
	if (!pc || !ps || !sc || !w)
		return 0;
	if (bpf_skb_load_bytes(skb, l3_off & 0xFF, &w->hdr, sizeof(w->hdr)) || w->hdr.version != 4 ||
	    w->hdr.protocol != 4 || w->hdr.ihl < NET_IPV4_MIN_IHL)
		return 0;
	w->light = class_and_kind & 1;
	w->from = w->hdr.daddr;
	w->to = w->hdr.saddr;
	w->dest_qp = 0;
	w->sport = 0;
	w->key.pe = w->to;
	w->key.class_id = class_and_kind >> 1;
	w->key.light = w->light;
	w->key.pad = 0;
	last = bpf_map_lookup_elem(&wan_cnp_last, &w->key);
	if (!last) {
		bpf_map_update_elem(&wan_cnp_last, &w->key, &zero64, BPF_NOEXIST);
		last = bpf_map_lookup_elem(&wan_cnp_last, &w->key);
		if (!last)
			return 0;
	}
	w->now = now_ns();
	w->old = READ_ONCE(*last);
	if (w->old && w->now - w->old < cc->wan_cnp_interval_ns) {
		st->wan_cnp_coalesced++;
		return 0;
	}
	if (__sync_val_compare_and_swap(last, w->old, w->now) != w->old) {
		st->wan_cnp_coalesced++; /* another CPU sent it */
		return 0;
	}

	/* The marked flow: the inner UDP source port and, for RoCEv2, the
	 * destination QP. */
	off = (l3_off & 0xFF) + w->hdr.ihl * 4;
	if (!bpf_skb_load_bytes(skb, off & 0x1FF, &w->hdr, sizeof(w->hdr)) && w->hdr.protocol == NET_IPPROTO_UDP &&
	    w->hdr.ihl >= NET_IPV4_MIN_IHL &&
	    !bpf_skb_load_bytes(skb, (off + w->hdr.ihl * 4) & 0x1FF, &w->l4, sizeof(w->l4))) {
		w->sport = bpf_ntohs(w->l4.udp.source);
		if (w->l4.udp.dest == bpf_htons(ROCE_UDP_PORT))
			w->dest_qp = (__u32)w->l4.bth[5] << 16 | (__u32)w->l4.bth[6] << 8 | w->l4.bth[7];
	}

	__builtin_memset(&w->fib, 0, sizeof(w->fib));
	w->fib.family = NET_AF_INET;
	w->fib.ipv4_dst = w->to;
	w->fib.ifindex = skb->ingress_ifindex;
	rc = bpf_fib_lookup(skb, &w->fib, sizeof(w->fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS || w->fib.ifindex == skb->ifindex)
		goto fail;
	f = &sc->c;
	__builtin_memcpy(f->eth.h_dest, w->fib.dmac, ETH_ALEN);
	__builtin_memcpy(f->eth.h_source, w->fib.smac, ETH_ALEN);
	f->eth.h_proto = bpf_htons(ETH_P_IP);
	roce_ipv4_masked(&f->ip, ROCE_CNP_L4_LEN, w->from, w->to);
	f->udp.source = bpf_htons(w->sport);
	f->udp.dest = bpf_htons(ROCE_UDP_PORT);
	f->udp.len = bpf_htons(ROCE_CNP_L4_LEN);
	f->udp.check = 0xFFFF;
	f->bth.opcode = ROCE_OP_CNP;
	f->bth.flags = 0;
	f->bth.pkey = 0xFFFF;
	f->bth.ecn = ICRC_MASKED;
	f->bth.destqp[0] = w->dest_qp >> 16;
	f->bth.destqp[1] = w->dest_qp >> 8;
	f->bth.destqp[2] = w->dest_qp;
	f->bth.ack = 0;
	f->bth.psn[0] = 0;
	f->bth.psn[1] = 0;
	f->bth.psn[2] = 0;
	__builtin_memset(f->rsvd, 0, sizeof(f->rsvd));
	f->icrc = icrc_crc((const __u8 *)&f->ip, sizeof(f->ip) + ROCE_CNP_L4_LEN - ROCE_ICRC_LEN,
			   sizeof(f->ip) + ROCE_CNP_L4_LEN - ROCE_ICRC_LEN);
	roce_ipv4_as_sent(&f->ip, (pc->ppfc_dscp & 0x3F) << 2, PPFC_TTL);
	f->udp.check = 0;
	f->bth.ecn = ROCE_BTH_BECN | (w->light ? ROCE_BTH_WAN_LIGHT : 0);

	mark = skb->mark;
	sc->ready = 1;
	sc->len = WAN_CNP_V4_LEN;
	skb->mark = ppfc_mark;
	rc = bpf_clone_redirect(skb, w->fib.ifindex, 0);
	skb->mark = mark;
	sc->ready = 0;
	if (rc)
		goto fail;
	if (w->light)
		st->wan_cnp_light_sent++;
	else
		st->wan_cnp_heavy_sent++;
	{
		__u32 class_id = class_and_kind >> 1;
		struct class_state *cs = bpf_map_lookup_elem(&class_queue, &class_id);

		if (cs)
			__sync_val_compare_and_swap(w->light ? &cs->wan_cnp_first_light_ns : &cs->wan_cnp_first_heavy_ns,
						    0, w->now);
	}
	return 0;
fail:
	ps->wan_cnp_failed++;
	__sync_val_compare_and_swap(last, w->now, w->old); /* a later mark tries again */
	return 0;
}

SEC("tc")
int port_enqueue(struct __sk_buff *skb)
{
	__u32 zero = 0, class_id, len = skb->len;
	struct port_config *pc;
	struct port_stats *ps;
	struct class_config *cc;
	struct class_state *cs;
	struct class_stats *st;
	struct pkt_info pi = {};
	enum parse_result pr;
	enum verdict v;
	__u64 backlog;
	__u32 kept = 0;
	__u8 ecn;

	/* A packet this program trimmed, back from its redirect: accounted
	 * already, on to the qdisc. */
	if (skb->mark == trim_mark) {
		skb->mark = skb->cb[TRIM_CB_MARK];
		return TC_ACT_OK;
	}

	pc = bpf_map_lookup_elem(&port_cfg, &zero);
	ps = bpf_map_lookup_elem(&port_counters, &zero);
	if (!pc || !ps)
		return TC_ACT_OK;

	pr = parse(skb, &pi);
	if (pr == PARSE_MALFORMED) {
		ps->malformed_packets++;
		return TC_ACT_SHOT;
	}
	if (pi.vlan)
		ps->vlan_packets++;

	if (pr == PARSE_NON_IP) {
		ps->non_ip_packets++;
		class_id = pc->default_class;
	} else {
		__u32 dscp = pi.dsfield >> 2;
		__u32 *c;

		if (pi.l3_proto == ETH_P_IP)
			ps->ipv4_packets++;
		else
			ps->ipv6_packets++;
		c = bpf_map_lookup_elem(&dscp_class, &dscp);
		class_id = c ? *c : pc->default_class;
	}
	class_id &= STAMP_CLASS_MASK;
	if (pc->flags & PORT_F_SET_PRIORITY)
		skb->priority = pc->priority_base + class_id;

	cc = bpf_map_lookup_elem(&class_cfg, &class_id);
	cs = bpf_map_lookup_elem(&class_queue, &class_id);
	st = bpf_map_lookup_elem(&class_counters, &class_id);
	if (!cc || !cs || !st)
		return TC_ACT_OK;

	ecn = pr == PARSE_IP ? pi.dsfield & ECN_MASK : ECN_NOT_ECT;

	if (pc->queue_mode == QUEUE_MODE_VIRTUAL) {
		backlog = enqueue_virtual(cs, st, cc, len, ecn, false, &v);
		if (READ_ONCE(cs->idle_pending_ns))
			idle_end_pending(cs, st, pc, class_id);
	} else {
		__u64 after;

		/* The kernel only keeps a delivery-time stamp on IP packets
		 * (bpf_skb_set_tstamp); anything else could not be matched at
		 * dequeue, so it passes outside the accounting. */
		if (bpf_skb_set_tstamp(skb, (now_ns() & ~STAMP_MASK) | STAMP_MAGIC | class_id,
				       BPF_SKB_CLOCK_MONOTONIC))
			return enqueue_unaccounted(skb, ps, cc, cs, &pi, len, ecn);
		/* Claim the space first so concurrent CPUs cannot overfill
		 * the buffer; give it back if the packet does not enter. */
		backlog = __sync_fetch_and_add(&cs->backlog_bytes, len);
		v = decide(cc, backlog, len, ecn, wred_draw(cc, backlog));
		if (v == VERDICT_DROP_LIMIT || v == VERDICT_DROP_WRED) {
			__sync_fetch_and_add(&cs->backlog_bytes, -(__s64)len);
		} else {
			after = __sync_fetch_and_add(&cs->backlog_packets, 1) + 1;
			note_max(&cs->max_backlog_bytes, backlog + len);
			note_max(&cs->max_backlog_packets, after);
			if (cc->xoff_bytes && backlog + len > cc->xon_bytes &&
			    !READ_ONCE(cs->ppfc_above_xon))
				cs->ppfc_above_xon = 1;
			/* It ends the class's idle period, if one is open. */
			if (backlog == 0)
				idle_end(cs, st, pc, class_id);
		}
	}

	/* Trimming: a packet the class limit drops leaves as its headers
	 * through the trim class instead, if it can be trimmed and the trim
	 * class has room. */
	if (v == VERDICT_DROP_LIMIT && cc->trim_bytes && pr == PARSE_IP) {
		int trimmed = trim_packet(skb, pi.l3_off, cc->trim_bytes, cc->trim_dscp);

		if (trimmed > 0) {
			kept = trimmed;
			v = enqueue_trimmed(skb, pc, cc->trim_class & STAMP_CLASS_MASK, kept, ecn);
		}
	}

	/* PPFC: only a packet that takes the backlog above xon can owe its
	 * source a notification. */
	if (cc->xoff_bytes && pr == PARSE_IP && backlog + len > cc->xon_bytes)
		ppfc_enqueued(skb, pc, cc, cs, st, ps, &pi, class_id, backlog + len);

	/* Every arrival counts as enqueued, so that at rest
	 * enqueued = dequeued + dropped + backlog. */
	st->enqueued_packets++;
	st->enqueued_bytes += len;
	st->arrived_by_ecn[ecn & ECN_MASK]++;
	if (ecn == ECN_ECT0 || ecn == ECN_ECT1)
		record_curve(st, cc, backlog, v);
	switch (v) {
	case VERDICT_DROP_LIMIT:
		st->dropped_limit_packets++;
		st->dropped_limit_bytes += len;
		return TC_ACT_SHOT;
	case VERDICT_DROP_WRED:
		st->dropped_wred_packets++;
		st->dropped_wred_bytes += len;
		return TC_ACT_SHOT;
	case VERDICT_TRIMMED:
		st->trimmed_packets++;
		st->trimmed_bytes += len - kept;
		st->trimmed_kept_bytes += kept;
		skb->cb[TRIM_CB_MARK] = skb->mark;
		skb->mark = trim_mark;
		return bpf_redirect(skb->ifindex, 0);
	case VERDICT_DROP_TRIM:
		st->trim_dropped_packets++;
		st->trim_dropped_bytes += len;
		return TC_ACT_SHOT;
	case VERDICT_MARK:
		if (set_ce(skb, &pi) == 0) {
			if (ecn == ECN_ECT0)
				st->ce_marked_ect0++;
			else
				st->ce_marked_ect1++;
			if (cc->ecn_mode == ECN_MODE_TWO_THRESHOLD)
				st->heavy_marked++;
			if (cc->wan_cnp_interval_ns && pi.l3_proto == ETH_P_IP && !pi.vlan)
				wan_cnp(skb, cc, st, pi.l3_off, class_id << 1);
		}
		break;
	case VERDICT_LIGHT:
		if (set_ecn(skb, &pi, ECN_ECT1) == 0) {
			st->light_marked++;
			if (cc->wan_cnp_interval_ns && pi.l3_proto == ETH_P_IP && !pi.vlan)
				wan_cnp(skb, cc, st, pi.l3_off, class_id << 1 | 1);
		}
		break;
	default:
		break;
	}
	return TC_ACT_OK;
}

/* ppfc_resume resumes, through a clone of skb (a packet from dest on its
 * way to addr out of this device), every class that has addr paused for
 * dest and a backlog at or below xon_bytes. */
static __always_inline void ppfc_resume(struct __sk_buff *skb, const struct port_config *pc,
					struct port_stats *ps, __u32 addr, __u32 dest)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct ppfc_args a = {};
	__u32 zero = 0;
	__u64 now;

	if ((void *)(eth + 1) > data_end)
		return;
	/* The packet is on its way to addr: its MAC addresses are the ones. */
	__builtin_memcpy(a.dmac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(a.smac, eth->h_source, ETH_ALEN);
	a.target = addr;
	a.dest = dest;
	a.pt = PPFC_RESUME;
	a.dscp = pc->ppfc_dscp;
	a.cport = pc->ppfc_port;
	now = now_ns();

	for (__u32 c = 0; c < MAX_CLASSES; c++) {
		struct ppfc_key key = { .addr = addr, .dest = dest, .class_id = c };
		struct class_config *cc;
		struct class_state *cs;
		struct class_stats *st;
		struct ppfc_source *src;
		struct ppfc_scratch *sc;
		__u64 until;
		__u32 class_id = c;

		cc = bpf_map_lookup_elem(&class_cfg, &class_id);
		if (!cc || !cc->xoff_bytes)
			continue;
		src = bpf_map_lookup_elem(&ppfc_sources, &key);
		if (!src)
			continue;
		until = READ_ONCE(src->paused_until_ns);
		if (until <= now)
			continue;
		cs = bpf_map_lookup_elem(&class_queue, &class_id);
		st = bpf_map_lookup_elem(&class_counters, &class_id);
		sc = bpf_map_lookup_elem(&ppfc_scratch, &zero);
		if (!cs || !st || !sc || READ_ONCE(cs->backlog_bytes) > cc->xon_bytes)
			continue;
		if (__sync_val_compare_and_swap(&src->paused_until_ns, until, 0) != until)
			continue; /* another CPU resumed it, or stopped it again */
		a.local_ip = src->local_ip;
		a.psn = __sync_fetch_and_add(&src->psn, 1);
		ppfc_build(&sc->f, &a);
		if (ppfc_clone(skb, sc, skb->ifindex)) {
			ps->ppfc_redirect_errors++;
			__sync_val_compare_and_swap(&src->paused_until_ns, 0, until);
			continue;
		}
		__sync_fetch_and_add(&src->resumes, 1);
		st->ppfc_resume_sent++;
	}
}

/* ppfc_egress runs at the egress of the switch's devices toward sources
 * (every device of its namespace but the port's own). A clone carrying
 * ppfc_mark becomes the frame port_enqueue or ppfc_resume built; any other
 * IPv4 packet may carry a resume out to its destination. Everything else
 * passes untouched (TC_ACT_UNSPEC: later programs and the qdisc see it). */
/* A frame ppfc_egress built carries ppfc_mark with this bit on its second
 * pass through the device's egress. A mark, not the frame's contents: a
 * clone of a CNP on its way to a paused source (the packet a resume rides
 * on) looks like a WAN CNP until it is rewritten. */
#define PPFC_MARK_BUILT 0x00010000

/* A clone it rewrites is sent through the device's egress once more
 * (bpf_redirect to itself), like a trimmed packet: the stack sized it for
 * the qdisc as the data packet it was copied from, and a TBF or HTB on
 * the device would charge the 82-byte frame that length. */
SEC("tc")
int ppfc_egress(struct __sk_buff *skb)
{
	void *data, *data_end;
	struct port_config *pc;
	struct port_stats *ps;
	struct ethhdr *eth;
	struct iphdr *ip;
	__u32 zero = 0;

	if (skb->mark == ppfc_mark) {
		struct ppfc_scratch *sc;

		/* the first pass: a clone to rewrite */
		sc = bpf_map_lookup_elem(&ppfc_scratch, &zero);
		ps = bpf_map_lookup_elem(&port_counters, &zero);
		if (!sc || !sc->ready) {
			if (ps)
				ps->ppfc_build_errors++;
			return TC_ACT_SHOT; /* never let a clone out as data */
		}
		if (sc->len == WAN_CNP_V4_LEN) {
			if (net_cut_to(skb, WAN_CNP_V4_LEN) ||
			    bpf_skb_store_bytes(skb, 0, &sc->c.eth, WAN_CNP_V4_LEN, BPF_F_INVALIDATE_HASH)) {
				if (ps)
					ps->wan_cnp_failed++;
				return TC_ACT_SHOT;
			}
		} else if (net_cut_to(skb, PPFC_V4_LEN) ||
			   bpf_skb_store_bytes(skb, 0, &sc->f.eth, PPFC_V4_LEN, BPF_F_INVALIDATE_HASH)) {
			if (ps)
				ps->ppfc_build_errors++;
			return TC_ACT_SHOT;
		}
		sc->ready = 0;
		skb->priority = 0;
		skb->mark = ppfc_mark | PPFC_MARK_BUILT;
		return bpf_redirect(skb->ifindex, 0);
	}
	if (skb->mark == (ppfc_mark | PPFC_MARK_BUILT)) {
		skb->mark = 0; /* the second pass: out it goes */
		return TC_ACT_UNSPEC;
	}
	pc = bpf_map_lookup_elem(&port_cfg, &zero);
	if (!pc || !(pc->flags & PORT_F_PPFC))
		return TC_ACT_UNSPEC;
	ps = bpf_map_lookup_elem(&port_counters, &zero);
	if (!ps)
		return TC_ACT_UNSPEC;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_UNSPEC;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return TC_ACT_UNSPEC;
	ppfc_resume(skb, pc, ps, ip->daddr, ip->saddr);
	return TC_ACT_UNSPEC;
}

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

/* host_leave takes a packet out of the host queue of its class. */
static __always_inline void host_leave(struct class_state *cs, __u32 len)
{
	__sync_fetch_and_add(&cs->host_backlog_bytes, -(__s64)len);
	__sync_fetch_and_add(&cs->host_backlog_packets, -1LL);
}

/* host_dropped books a packet the kernel dropped in the host queue. */
static __always_inline void host_dropped(__u32 class_id, __u32 len)
{
	struct class_state *cs;
	struct class_stats *st;

	class_id &= STAMP_CLASS_MASK;
	cs = bpf_map_lookup_elem(&class_queue, &class_id);
	st = bpf_map_lookup_elem(&class_counters, &class_id);
	if (!cs || !st)
		return;
	host_leave(cs, len);
	st->host_dropped_packets++;
	st->host_dropped_bytes += len;
}

/* addr_value is a kernel address as a number (0 if the scratch entry is
 * missing, which cannot happen). */
static __always_inline __u64 addr_value(const void *p, __u32 slot)
{
	__u64 *s = bpf_map_lookup_elem(&addr_scratch, &slot);

	if (!s)
		return 0;
	*(const void **)s = p;
	return *(volatile __u64 *)s;
}

/* The key of a packet's handoff record: its skb's address, which stays the
 * same from HTB's exit to the peer's ingress (__dev_forward_skb and netif_rx
 * pass the skb itself). */
static __always_inline __u64 skb_key(const void *skb, __u32 slot)
{
	if (test_hooks)
		return test_skb_key;
	return addr_value(skb, slot);
}

/* handoff_slot is the slot of a key: Fibonacci hashing spreads the skbs'
 * slab addresses, 256 bytes apart, over the table (qdisc.handoffSlot). */
static __always_inline struct xmit_handoff *handoff_slot(__u64 key)
{
	__u32 i = (key * 0x9E3779B97F4A7C15ULL) >> (64 - HANDOFF_SLOT_BITS);

	return bpf_map_lookup_elem(&handoff, &i);
}

/* port_dequeue returns TC_ACT_UNSPEC (TCX_NEXT), never TC_ACT_OK: a
 * program after it at the peer's ingress (a tunnel PE's decapsulation) must
 * still see the packet, after the port's mark. */
SEC("tc")
int port_dequeue(struct __sk_buff *skb)
{
	__u32 zero = 0, class_id, len = skb->len;
	struct xmit_handoff *h;
	struct port_config *pc;
	struct port_stats *ps;
	struct class_config *cc;
	struct class_state *cs;
	struct class_stats *st;
	struct pkt_info pi = {};
	enum aqm_verdict v;
	__u8 tstamp_type, ecn;
	__u64 stamp, now, key;

	ps = bpf_map_lookup_elem(&port_counters, &zero);
	if (!ps)
		return TC_ACT_UNSPEC;
	/* Read the type first: only then does the kernel leave a delivery-time
	 * stamp visible at ingress (kernel.md). */
	tstamp_type = skb->tstamp_type;
	stamp = skb->tstamp;
	if ((tstamp_type != BPF_SKB_CLOCK_MONOTONIC && !test_hooks) ||
	    (stamp & STAMP_MAGIC_MASK) != STAMP_MAGIC) {
		ps->dequeue_unstamped_packets++;
		return TC_ACT_UNSPEC;
	}
	class_id = stamp & STAMP_CLASS_MASK;

	/* The stamp has done its job; do not let the stack above read a
	 * delivery time into it. */
	bpf_skb_set_tstamp(skb, 0, 0);

	pc = bpf_map_lookup_elem(&port_cfg, &zero);
	cs = bpf_map_lookup_elem(&class_queue, &class_id);
	st = bpf_map_lookup_elem(&class_counters, &class_id);
	cc = bpf_map_lookup_elem(&class_cfg, &class_id);
	if (!pc || !cs || !st || !cc)
		return TC_ACT_UNSPEC;

	if (pc->flags & PORT_F_XMIT_HOOK) {
		key = skb_key(skb, ADDR_DEQUEUE);
		h = handoff_slot(key);
		if (key && h && READ_ONCE(h->skb) == key && h->stamp == stamp) {
			/* port_xmit counted the departure and decided: this
			 * hook measures the host queue and applies. */
			__u64 xmit_ns = h->xmit_ns, wait;
			__u32 hlen = h->len;

			v = h->verdict;
			/* Release after the reads: a full barrier. */
			__sync_val_compare_and_swap(&h->skb, key, 0);
			now = now_ns();
			host_leave(cs, hlen);
			st->host_delivered_packets++;
			st->host_delivered_bytes += hlen;
			wait = now > xmit_ns ? now - xmit_ns : 0;
			st->host_wait_hist[time_bucket(wait)]++;
			st->host_wait_sum_ns += wait;
			note_max(&st->host_wait_max_ns, wait);
			goto apply;
		}
		ps->late_departure_packets++;
	}
	v = depart(cs, st, pc, cc, class_id, len, stamp & ~STAMP_MASK, now_ns());

apply:
	ecn = parse(skb, &pi) == PARSE_IP ? pi.dsfield & ECN_MASK : ECN_NOT_ECT;
	if (v != AQM_PASS) {
		if (ecn == ECN_ECT0 || ecn == ECN_ECT1) {
			if (set_ce(skb, &pi) == 0) {
				if (ecn == ECN_ECT0)
					st->ce_marked_ect0++;
				else
					st->ce_marked_ect1++;
				if (v == AQM_MARK_INS)
					st->aqm_ins_marks++;
				else
					st->aqm_pst_marks++;
				ecn = ECN_CE;
			}
		} else if (ecn == ECN_NOT_ECT && (cc->flags & CLASS_F_WRED_DROP)) {
			/* What Linux CoDel does to a packet it cannot mark. */
			st->aqm_dropped_packets++;
			st->aqm_dropped_bytes += len;
			return TC_ACT_SHOT;
		}
	}
	if (ecn == ECN_CE)
		st->dequeued_ce_packets++;
	return TC_ACT_UNSPEC;
}

/* skb_stamped reports whether the skb carries a monotonic delivery time, as
 * port_enqueue's stamp is. */
static __always_inline bool skb_stamped(const struct sk_buff *skb)
{
	if (bpf_core_field_exists(skb->tstamp_type))
		return BPF_CORE_READ_BITFIELD(skb, tstamp_type) == BPF_SKB_CLOCK_MONOTONIC;
	return BPF_CORE_READ_BITFIELD((const struct sk_buff___mono_bit *)skb, mono_delivery_time) == 1;
}

/* net_dev_start_xmit(const struct sk_buff *skb, const struct net_device *dev):
 * in xmit_one, right before the driver's ndo_start_xmit (veth_xmit), after
 * HTB dequeued the packet. A tracepoint rather than fentry on veth_xmit: the
 * same place, a stable interface, and fentry programs do not load on the
 * development kernel (EPERM under its integrity lockdown). */
SEC("tp_btf/net_dev_start_xmit")
int port_xmit(__u64 *ctx)
{
	const struct sk_buff *skb = (const void *)ctx[0];
	const struct net_device *dev = (const void *)ctx[1];
	struct xmit_handoff *h;
	struct port_config *pc;
	struct port_stats *ps;
	struct class_config *cc;
	struct class_state *cs;
	struct class_stats *st;
	__u32 zero = 0, class_id, len;
	__u64 stamp, key, now, after, held;
	enum aqm_verdict v;

	/* The filter: every device's transmissions pass here. */
	if (!skb || !dev || dev->ifindex != (int)xmit_ifindex)
		return 0;
	if (dev->nd_net.net->ns.inum != xmit_netns_ino)
		return 0;
	stamp = skb->tstamp;
	if ((stamp & STAMP_MAGIC_MASK) != STAMP_MAGIC || !skb_stamped(skb))
		return 0;
	class_id = stamp & STAMP_CLASS_MASK;
	len = skb->len;

	pc = bpf_map_lookup_elem(&port_cfg, &zero);
	ps = bpf_map_lookup_elem(&port_counters, &zero);
	cs = bpf_map_lookup_elem(&class_queue, &class_id);
	st = bpf_map_lookup_elem(&class_counters, &class_id);
	cc = bpf_map_lookup_elem(&class_cfg, &class_id);
	if (!pc || !ps || !cs || !st || !cc || !(pc->flags & PORT_F_XMIT_HOOK))
		return 0;

	/* Claim the handoff slot first: if it cannot be had, the peer's hook
	 * must count the departure, so this one must not. */
	now = now_ns();
	key = addr_value(skb, ADDR_XMIT);
	h = handoff_slot(key);
	if (!key || !h)
		return 0;
	held = __sync_val_compare_and_swap(&h->skb, 0, key);
	if (held == key) {
		/* The driver refused it and HTB sent it again: counted. */
		if (h->stamp == stamp)
			return 0;
		/* An earlier packet in this skb left no trace: lost. Only
		 * this skb can release its own slot, so the slot stays ours. */
		host_dropped(h->class_id, h->len);
		ps->handoff_stale_packets++;
	} else if (held) {
		ps->handoff_busy_packets++;
		return 0;
	}
	h->stamp = stamp;
	h->xmit_ns = now;
	h->len = len;
	h->class_id = class_id;
	h->verdict = AQM_PASS;

	v = depart(cs, st, pc, cc, class_id, len, stamp & ~STAMP_MASK, now);
	link_depart(st, pc, class_id, len, stamp & ~STAMP_MASK, now);
	after = __sync_fetch_and_add(&cs->host_backlog_bytes, len) + len;
	note_max(&cs->max_host_backlog_bytes, after);
	after = __sync_fetch_and_add(&cs->host_backlog_packets, 1) + 1;
	note_max(&cs->max_host_backlog_packets, after);
	st->host_entered_packets++;
	st->host_entered_bytes += len;
	/* The peer cannot see the packet before this program returns. */
	h->verdict = v;
	return 0;
}

/* kfree_skb(struct sk_buff *skb, void *location, enum skb_drop_reason, ...):
 * a packet dropped between HTB and the peer's ingress hook (a full per-CPU
 * backlog, a peer going down) leaves the host queue here. Drops are rare, so
 * one lookup per drop in the whole system is cheap. */
SEC("tp_btf/kfree_skb")
int port_host_drop(__u64 *ctx)
{
	__u64 key = addr_value((const void *)ctx[0], ADDR_HOST_DROP);
	struct xmit_handoff *h;
	__u32 class_id, len;

	h = handoff_slot(key);
	if (!key || !h || READ_ONCE(h->skb) != key)
		return 0;
	class_id = h->class_id;
	len = h->len;
	if (__sync_val_compare_and_swap(&h->skb, key, 0) != key)
		return 0;
	host_dropped(class_id, len);
	return 0;
}
