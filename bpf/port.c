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
 *
 * This file holds the maps and the programs; each concern is a header it
 * includes once: port_mark.h (parsing, ECN marking on the backlog),
 * port_ppfc.h (PPFC notifications, ppfc_egress's helpers), port_trim.h
 * (trimming), port_wancnp.h (WAN CNPs), port_aqm.h (the departure AQMs)
 * and port_xmit.h (the xmit handoff and the host queue's books).
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

/* The kernel's structures port_xmit and port_host_drop read (CO-RE). */
#include "kernel_types.h"

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

/* log2_u64 is floor(log2(v)) (0 for 0) without a branch: each step's bit
 * ((v >> k) + 2^k - 1) >> k is 1 iff v >> k is not 0 (v < 2^2k there), and
 * the step shifts by k times it. The branching form split the verifier's
 * state six ways at every call, and port_enqueue's paths multiplied it.
 * A global function: the verifier checks it once, not at each of the
 * hundreds of states that reach a call. */
__attribute__((noinline)) int log2_u64(__u64 v)
{
	__u64 r = 0, s;

	s = (((v >> 32) + 0xFFFFFFFFull) >> 32) << 5; v >>= s; r += s;
	s = (((v >> 16) + 0xFFFFull) >> 16) << 4; v >>= s; r += s;
	s = (((v >> 8) + 0xFFull) >> 8) << 3; v >>= s; r += s;
	s = (((v >> 4) + 0xFull) >> 4) << 2; v >>= s; r += s;
	s = (((v >> 2) + 0x3ull) >> 2) << 1; v >>= s; r += s;
	s = ((v >> 1) + 1) >> 1; r += s;
	return r;
}

static __always_inline __u32 time_bucket(__u64 ns)
{
	__u32 b = (__u32)log2_u64(ns);

	return b < SOJOURN_BUCKETS ? b : SOJOURN_BUCKETS - 1;
}

static __always_inline void record_sojourn(struct class_stats *st, __u64 sojourn_ns)
{
	st->sojourn_hist[time_bucket(sojourn_ns)]++;
	st->sojourn_sum_ns += sojourn_ns;
	st->sojourn_samples++;
}

#include "port_mark.h"
#include "port_ppfc.h"
#include "port_trim.h"
#include "port_wancnp.h"
#include "port_aqm.h"
#include "port_xmit.h"
#include "port_flowq.h"

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
	if (cc->flow_queues) {
		__u32 fq = flowq_priority(skb, pc, cc, &pi, class_id);

		if (fq)
			skb->priority = fq;
	}

	ecn = pr == PARSE_IP ? pi.dsfield & ECN_MASK : ECN_NOT_ECT;

	if (pc->queue_mode == QUEUE_MODE_VIRTUAL) {
		backlog = enqueue_virtual(cs, st, cc, len, ecn, false, &v);
		if (READ_ONCE(cs->idle_pending_ns))
			idle_end_pending(cs, st, pc, class_id);
	} else {
		__u64 after;

		/* The kernel only keeps a delivery-time stamp on IP packets
		 * (bpf_skb_set_tstamp); anything else could not be matched at
		 * dequeue, so it passes outside the accounting. So does a UDP
		 * GSO super-packet (port_mark.h udp_gso). */
		if (udp_gso(skb, &pi) ||
		    bpf_skb_set_tstamp(skb, (now_ns() & ~STAMP_MASK) | STAMP_MAGIC | class_id,
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
		ppfc_enqueued(skb, class_id, pi.l3_off, pi.l3_proto, backlog + len);

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
	/* Remarking last: this port classified and marked by the code point
	 * as it arrived; the next hop sees the new one. */
	if ((cc->flags & CLASS_F_REMARK) && pr == PARSE_IP &&
	    set_ds(skb, &pi, DSCP_MASK, cc->remark_dscp << 2) == 0)
		st->remarked_packets++;
	return TC_ACT_OK;
}

/* ppfc_egress runs at the egress of the switch's devices toward sources
 * (every device of its namespace but the port's own). A clone carrying
 * ppfc_mark becomes the frame port_enqueue or ppfc_resume built; any other
 * IP packet may carry a resume out to its destination. Everything else
 * passes untouched (TC_ACT_UNSPEC: later programs and the qdisc see it). */
/* A frame ppfc_egress built carries ppfc_mark with this bit on its second
 * pass through the device's egress. A mark, not the frame's contents: a
 * clone of a CNP on its way to a paused source (the packet a resume rides
 * on) looks like a WAN CNP until it is rewritten. */
#define PPFC_MARK_BUILT 0x00010000

/* A clone it rewrites is sent through the device's egress once more
 * (bpf_redirect to itself), like a trimmed packet: the stack sized it for
 * the qdisc as the data packet it was copied from, and a TBF or HTB on
 * the device would charge the 82- or 102-byte frame that length. */
SEC("tc")
int ppfc_egress(struct __sk_buff *skb)
{
	void *data, *data_end;
	struct port_config *pc;
	struct port_stats *ps;
	struct ethhdr *eth;
	__u8 to[16], from[16];
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
		} else if (sc->len == PPFC_V6_LEN) {
			if (net_cut_to(skb, PPFC_V6_LEN) ||
			    bpf_skb_store_bytes(skb, 0, &sc->f.eth, PPFC_V6_LEN, BPF_F_INVALIDATE_HASH)) {
				if (ps)
					ps->ppfc_build_errors++;
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
	if ((void *)(eth + 1) > data_end)
		return TC_ACT_UNSPEC;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end)
			return TC_ACT_UNSPEC;
		ppfc_map4(to, ip->daddr);
		ppfc_map4(from, ip->saddr);
		ppfc_resume(skb, pc, ps, NET_AF_INET, to, from);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			return TC_ACT_UNSPEC;
		__builtin_memcpy(to, ip6->daddr, 16);
		__builtin_memcpy(from, ip6->saddr, 16);
		ppfc_resume(skb, pc, ps, NET_AF_INET6, to, from);
	}
	return TC_ACT_UNSPEC;
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

	/* The stamp has done its job. Replace it with a delivery time that is
	 * not a port's (low byte 0, no magic): the stack above then stamps the
	 * packet's receive time as it delivers it (skb_clear_delivery_time, at
	 * ip_local_deliver_finish), on this softirq pass. Cleared to 0 here,
	 * the stamp is lost: netif_rx did not stamp the packet (its tstamp was
	 * set then), so a socket's SO_TIMESTAMPNS read the recvmsg time, and
	 * a train read late looked like a burst. */
	bpf_skb_set_tstamp(skb, bpf_ktime_get_ns() & ~STAMP_MASK, BPF_SKB_CLOCK_MONOTONIC);

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
