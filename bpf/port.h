/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Structures shared between the switch-port programs (port.c) and Go.
 * bpf2go mirrors every struct named with -type in gen.go; keep fields
 * 64-bit aligned and add new ones at the end of a struct.
 */
#ifndef FABRICLAB_PORT_H
#define FABRICLAB_PORT_H

#include <linux/types.h>
#include <linux/bpf.h> /* struct bpf_spin_lock */

#define MAX_CLASSES 8
#define DSCP_COUNT 64
/* log2 buckets of sojourn in ns: bucket b holds [2^b, 2^(b+1)), b = 0 also
 * holds 0 and 1 ns; the last bucket holds everything from 2^31 ns (2.1 s). */
#define SOJOURN_BUCKETS 32
/* The observed marking curve: ECN-capable arrivals and CE marks in
 * CURVE_BINS equal bins of the backlog they found, from 0 to the limit. */
#define CURVE_BINS 32

/* How the port finds its backlog. */
enum queue_mode {
	/* A real qdisc on a veth whose peer runs port_dequeue: exact backlog,
	 * measured sojourn. */
	QUEUE_MODE_VETH = 0,
	/* No dequeue hook (tun, physical NIC): a virtual queue per class that
	 * drains at rate_bps. */
	QUEUE_MODE_VIRTUAL = 1,
};

/* Marking policy of a traffic class, decided on the instantaneous backlog a
 * packet finds when it arrives. */
enum ecn_mode {
	ECN_MODE_OFF = 0,  /* never mark: tail drop only */
	ECN_MODE_STEP = 1, /* mark when backlog > min_th (K) */
	ECN_MODE_WRED = 2, /* mark on the min_th/max_th/max_p curve */
};

enum class_flags {
	/* Not-ECT packets are dropped on the marking curve instead of
	 * passing (RED behaviour); off by default, as on RoCE switches. */
	CLASS_F_WRED_DROP = 1 << 0,
};

enum port_flags {
	/* Set skb->priority = priority_base + class so an HTB root qdisc
	 * puts the packet in the class's queue. */
	PORT_F_SET_PRIORITY = 1 << 0,
};

/* Probabilities are fixed point: PROB_ONE means 1.0. */
#define PROB_SHIFT 32
#define PROB_ONE (1ULL << PROB_SHIFT)

struct port_config {
	__u64 rate_bps; /* port speed; the virtual queue's drain rate */
	__u32 queue_mode;
	__u32 flags;
	__u32 priority_base; /* TC_H_MAKE(major, minor of class 0) */
	__u32 default_class; /* for non-IP frames */
};

struct class_config {
	__u64 limit_bytes;  /* tail drop when backlog + len exceeds it */
	__u64 min_th_bytes; /* WRED min_th, or K in step mode */
	__u64 max_th_bytes; /* WRED max_th */
	__u64 max_p;        /* marking probability at max_th, PROB_ONE = 1.0 */
	__u64 rate_bps;     /* virtual-queue drain rate; 0 = the port's */
	__u32 ecn_mode;
	__u32 flags;
	/* Virtual queue: ns per byte at the effective drain rate, 16.16 fixed
	 * point, from user space so the hot path multiplies instead of
	 * dividing. 0 = no drain. */
	__u64 vq_ns_per_byte_fp;
};

/* Shared (not per-CPU): the backlog must be one number every CPU sees. */
struct class_state {
	__u64 backlog_bytes;
	__u64 backlog_packets;
	__u64 max_backlog_bytes;
	__u64 max_backlog_packets;
	/* virtual queue only, under vq_lock */
	__u64 vq_last_ns;
	struct bpf_spin_lock vq_lock;
	__u32 pad;
};

/* Per-CPU counters of one class; Go sums them. */
struct class_stats {
	__u64 enqueued_packets; /* every arrival, dropped or not */
	__u64 enqueued_bytes;
	__u64 dequeued_packets;
	__u64 dequeued_bytes;
	/* arrivals by ECN codepoint: Not-ECT, ECT(1), ECT(0), CE */
	__u64 arrived_by_ecn[4];
	__u64 ce_marked_ect0;
	__u64 ce_marked_ect1;
	__u64 dropped_limit_packets; /* tail drop at limit_bytes */
	__u64 dropped_limit_bytes;
	__u64 dropped_wred_packets; /* early drop of Not-ECT (CLASS_F_WRED_DROP) */
	__u64 dropped_wred_bytes;
	__u64 sojourn_sum_ns;
	__u64 sojourn_samples;
	__u64 sojourn_hist[SOJOURN_BUCKETS];
	__u64 curve_ect_arrivals[CURVE_BINS];
	__u64 curve_ce_marks[CURVE_BINS];
	/* CE packets leaving the queue: what the receiver sees */
	__u64 dequeued_ce_packets;
};

/* Per-CPU counters of the port as a whole. */
struct port_stats {
	__u64 ipv4_packets;
	__u64 ipv6_packets;
	__u64 vlan_packets;
	__u64 non_ip_packets;
	__u64 malformed_packets; /* truncated or invalid IP header: dropped */
	/* Frames whose protocol the kernel cannot stamp (non-IP, in-band VLAN
	 * tag): classified, limited and marked on the backlog they find, but
	 * kept out of the class counters and the backlog. */
	__u64 unaccounted_packets;
	__u64 unaccounted_bytes;
	__u64 unaccounted_ce_marked_packets;
	__u64 unaccounted_dropped_packets;
	/* arrivals at the dequeue hook that carried no enqueue stamp */
	__u64 dequeue_unstamped_packets;
};

#endif
