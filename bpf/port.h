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

/* Marking policy of a traffic class. OFF, STEP, WRED and TWO_THRESHOLD decide
 * at enqueue on the backlog a packet finds; TCN, CODEL and ECNSHARP decide at
 * dequeue on the packet's sojourn (veth mode only: they need the dequeue
 * hook). Go: qdisc/mode_NAME.go, one file per mode. */
enum ecn_mode {
	ECN_MODE_OFF = 0,      /* never mark: tail drop only */
	ECN_MODE_STEP = 1,     /* mark when backlog > min_th (K) */
	ECN_MODE_WRED = 2,     /* mark on the min_th/max_th/max_p curve */
	ECN_MODE_TCN = 3,      /* mark when sojourn > ins_lo */
	ECN_MODE_CODEL = 4,    /* CoDel's control law (aqm_target, aqm_interval_ns) */
	ECN_MODE_ECNSHARP = 5, /* ECN#: instantaneous OR persistent (seed 002) */
	/* Two thresholds (seed 001): ECT(0) -> ECT(1) from t1_bytes, CE from
	 * t2_bytes (enqueue, both queue modes) */
	ECN_MODE_TWO_THRESHOLD = 6,
};

enum aqm_flags {
	/* ECN#: marking_next = now + interval/sqrt(count), the authors' ns-3
	 * code, instead of Algorithm 1's marking_next += interval/count. */
	AQM_F_SQRT_LAW = 1 << 0,
	/* ECN#: the signal is the class backlog in bytes when the packet
	 * leaves, not its sojourn; ins_lo/ins_hi/aqm_target are then bytes. */
	AQM_F_QLEN_SIGNAL = 1 << 1,
};

enum class_flags {
	/* Not-ECT packets are dropped on the marking curve instead of
	 * passing (RED behaviour); off by default, as on RoCE switches. */
	CLASS_F_WRED_DROP = 1 << 0,
	/* Remark: the class's packets leave with DSCP remark_dscp, their ECN
	 * bits kept, as a switch's egress rewrite does (and seed 000's "a
	 * switch in the middle clears DSCP" when the next hop classifies by
	 * the old one). */
	CLASS_F_REMARK = 1 << 1,
};

enum port_flags {
	/* Set skb->priority = priority_base + class so an HTB root qdisc
	 * puts the packet in the class's queue. */
	PORT_F_SET_PRIORITY = 1 << 0,
	/* The xmit hook is attached: a packet leaves the port's queue where
	 * HTB hands it to the device (port_xmit), not at the peer's ingress.
	 * Set once after the hook attaches, never cleared while attached. */
	PORT_F_XMIT_HOOK = 1 << 1,
	/* Some class has PPFC thresholds: ppfc_egress looks for paused
	 * sources to resume. */
	PORT_F_PPFC = 1 << 2,
	/* A reader drains idle_log: every idle period a class ends is
	 * written there (idle.h). */
	PORT_F_IDLE_LOG = 1 << 3,
};

/* The handoff table: one record per packet between HTB's exit and the peer's
 * ingress hook, in a slot picked by a hash of the skb's address. The kernel
 * holds at most netdev_max_backlog (1000) such packets per CPU, typically a
 * few dozen: a packet whose slot another one holds (about one in
 * HANDOFF_SLOTS / packets in flight) is left to the peer's hook. */
#define HANDOFF_SLOT_BITS 15
#define HANDOFF_SLOTS (1 << HANDOFF_SLOT_BITS)

/* A dequeue AQM's decision for one departing packet. */
enum aqm_verdict {
	AQM_PASS = 0,
	AQM_MARK_INS = 1, /* TCN, ECN# instantaneous (also when both fire) */
	AQM_MARK_PST = 2, /* ECN# persistent, CoDel */
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
	/* PPFC notifications: their DSCP, and the Congestion Port they
	 * name (the port's ifindex). */
	__u32 ppfc_dscp;
	__u32 ppfc_port;
};

struct class_config {
	__u64 limit_bytes;  /* tail drop when backlog + len exceeds it */
	__u64 min_th_bytes; /* WRED min_th, or K in step mode */
	__u64 max_th_bytes; /* WRED max_th */
	__u64 max_p;        /* marking probability at max_th, PROB_ONE = 1.0 */
	__u64 rate_bps;     /* virtual-queue drain rate; 0 = the port's */
	enum ecn_mode ecn_mode; /* 4 bytes, as the __u32 it was */
	__u32 flags;
	/* Virtual queue: ns per byte at the effective drain rate, 16.16 fixed
	 * point, from user space so the hot path multiplies instead of
	 * dividing. 0 = no drain. */
	__u64 vq_ns_per_byte_fp;
	/* Dequeue AQMs. The signal is ns of sojourn, or bytes of backlog with
	 * AQM_F_QLEN_SIGNAL. */
	__u64 ins_lo;          /* TCN threshold; ECN# ins_target, or Kmin of its curve */
	__u64 ins_hi;          /* ECN# Kmax of the probabilistic curve (max_p); 0 = cut-off */
	__u64 aqm_target;      /* ECN# pst_target; CoDel target (ns) */
	__u64 aqm_interval_ns; /* ECN# pst_interval; CoDel interval */
	__u64 mtu_bytes;       /* CoDel: a backlog of at most this is never "above target" */
	__u32 aqm_flags;
	__u32 aqm_pad;
	/* PPFC (seed 003): stop a source whose packet takes the backlog to
	 * xoff_bytes or above, for the time the queue takes to drain to
	 * xon_bytes (at vq_ns_per_byte_fp); resume it when the backlog is at
	 * or below xon_bytes. xoff_bytes 0: off. */
	__u64 xoff_bytes;
	__u64 xon_bytes;
	/* PPFC alarm: a packet that takes the backlog to alarm_bytes or above
	 * (below xoff_bytes) alarms its source, once per congestion episode.
	 * 0: no alarms. xon_bytes < alarm_bytes < xoff_bytes. */
	__u64 alarm_bytes;
	/* Packet trimming (UET): a packet the class limit would tail-drop
	 * leaves instead as its first trim_bytes bytes of IP packet, with
	 * DSCP trim_dscp (ECN kept), in class trim_class. 0: off. Only UDP
	 * packets longer than trim_bytes are trimmed (IPv4, or IPv6 without
	 * extension headers). */
	__u64 trim_bytes;
	__u32 trim_dscp;
	__u32 trim_class;
	/* Two-threshold marking (seed 001, ECN_MODE_TWO_THRESHOLD) on the
	 * backlog a packet finds: from t1_bytes ECT(0) becomes ECT(1) with a
	 * probability rising linearly to light_max_p at t2_bytes (and staying
	 * there above it); from t2_bytes ECT packets become CE with a
	 * probability rising linearly to heavy_max_p at t2_max_bytes, every
	 * one at or above it. t1 < t2 < t2_max <= limit. */
	__u64 t1_bytes;
	__u64 t2_bytes;
	__u64 t2_max_bytes;
	__u64 light_max_p; /* PROB_ONE = 1.0 */
	__u64 heavy_max_p;
	/* Seed 001's notification: a tunnelled (IPv4 protocol 4) packet
	 * marked light or heavy makes the port send a RoCEv2 CNP to its outer
	 * source, the tunnel-ingress PE, at most one per PE, class and kind
	 * per wan_cnp_interval_ns. 0: off. */
	__u64 wan_cnp_interval_ns;
	__u32 remark_dscp; /* with CLASS_F_REMARK */
	/* Flow queues (port_flowq.h): the class is an HTB inner class with
	 * this many leaves, one per flow bucket, served round robin. 0: the
	 * class is one leaf, a FIFO. */
	__u32 flow_queues;
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
	/* The host queue (xmit hook only): packets that left HTB and have not
	 * reached the peer's ingress hook yet, waiting in the kernel's per-CPU
	 * backlog. Not part of the port's backlog. */
	__u64 host_backlog_bytes;
	__u64 host_backlog_packets;
	__u64 max_host_backlog_bytes;
	__u64 max_host_backlog_packets;
	/* PPFC congestion episodes: ppfc_above_xon is set while the backlog
	 * is above xon_bytes; each fall to xon_bytes or below clears it and
	 * ends the episode (ppfc_episode + 1). */
	__u64 ppfc_episode;
	__u32 ppfc_above_xon;
	__u32 ppfc_pad;
	/* When the class sent its first WAN CNP of each kind (CLOCK_MONOTONIC,
	 * 0: none yet): the onset of light and heavy congestion as the PE
	 * learns of it, for measuring the PE's reaction exactly. */
	__u64 wan_cnp_first_light_ns;
	__u64 wan_cnp_first_heavy_ns;
	/* When the class's link went idle: its last departure's end (the
	 * departure plus its serialization at the class's rate) once the
	 * backlog fell to 0; 0 while busy or unknown. The next arrival that
	 * finds the class empty ends the idle period (idle.h). */
	__u64 idle_since_ns;
	/* Virtual queue: an idle period an arrival ended under vq_lock, for
	 * booking after it (idle_end_pending). */
	__u64 idle_pending_ns;
};

/* State of a class's dequeue AQM (TCN has none). Go zeroes it when the
 * class's AQM settings change. */
struct aqm_state {
	struct bpf_spin_lock lock;
	__u32 marking;         /* ECN# marking_state; CoDel dropping */
	__u64 first_above_ns;  /* ECN# first_above_time; CoDel first_above_time */
	__u64 next_ns;         /* ECN# marking_next; CoDel drop_next */
	__u64 count;           /* ECN# marking_count; CoDel count */
	__u64 lastcount;       /* CoDel lastcount */
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
	/* Dequeue AQM decisions that marked (ECT -> CE) or, for Not-ECT
	 * packets of a drop profile, dropped. A packet both conditions of ECN#
	 * pick counts as instantaneous. */
	__u64 aqm_ins_marks;   /* TCN, ECN# instantaneous */
	__u64 aqm_pst_marks;   /* ECN# persistent, CoDel */
	__u64 aqm_dropped_packets;
	__u64 aqm_dropped_bytes;
	/* The host queue between HTB's exit and the peer's ingress hook (xmit
	 * hook only): entered = delivered + dropped + host backlog. Packets
	 * the xmit hook counts as dequeued enter it. */
	__u64 host_entered_packets;
	__u64 host_entered_bytes;
	__u64 host_delivered_packets; /* reached the peer's ingress hook */
	__u64 host_delivered_bytes;
	/* freed by the kernel on the way (kfree_skb), or lost without a trace
	 * and found stale later */
	__u64 host_dropped_packets;
	__u64 host_dropped_bytes;
	/* the wait from HTB's exit to the peer's ingress hook of the
	 * delivered packets, log2 buckets like the sojourn's */
	__u64 host_wait_sum_ns;
	__u64 host_wait_max_ns; /* this CPU's maximum */
	__u64 host_wait_hist[SOJOURN_BUCKETS];
	/* PPFC notifications sent to this class's sources, and stops not
	 * sent because the source was already paused (coalesced). */
	__u64 ppfc_stop_sent;
	__u64 ppfc_resume_sent;
	__u64 ppfc_stop_coalesced;
	/* holds (a stopped source whose pause ran out while the episode
	 * goes on) and alarms (alarm_bytes) sent; and not sent: a hold
	 * because the source was paused, an alarm because the source was
	 * alarmed in this episode already. */
	__u64 ppfc_hold_sent;
	__u64 ppfc_hold_coalesced;
	__u64 ppfc_alarm_sent;
	__u64 ppfc_alarm_coalesced;
	/* Trimming, in the class that trims: packets cut to trim_bytes and
	 * moved to the trim class, the bytes cut off them and the bytes they
	 * kept; and packets it would have trimmed but the trim class was full
	 * (dropped). At rest enqueued = dequeued + dropped + trimmed +
	 * backlog, in bytes with both trimmed byte counts. */
	__u64 trimmed_packets;
	__u64 trimmed_bytes;
	__u64 trimmed_kept_bytes;
	__u64 trim_dropped_packets;
	__u64 trim_dropped_bytes;
	/* In the trim class: trimmed packets that entered it from other
	 * classes (included in its enqueued counters). */
	__u64 trim_in_packets;
	__u64 trim_in_bytes;
	/* Two-threshold marking (seed 001): ECT(0) -> ECT(1) light marks, and
	 * CE heavy marks (also counted in ce_marked_ect0/ect1). */
	__u64 light_marked;
	__u64 heavy_marked;
	/* CNPs to tunnel-ingress PEs (wan_cnp_interval_ns), by kind, and marks
	 * that found one sent within the interval. */
	__u64 wan_cnp_light_sent;
	__u64 wan_cnp_heavy_sent;
	__u64 wan_cnp_coalesced;
	/* Idle periods (idle.h): ended by an arrival that found the class
	 * empty after its link had gone idle, their total length, and those
	 * idle_log had no room for (PORT_F_IDLE_LOG). */
	__u64 idle_periods;
	__u64 idle_ns;
	__u64 idle_log_lost;
	/* Service the port lost (IDLE_HELD, xmit hook only): time a departure
	 * of this class came after the link was free and the packet was
	 * queued, summed, and how many departures were late. */
	__u64 held_back_ns;
	__u64 held_back_packets;
	/* Of the lateness, what HTB's bucket made up by sending ahead of
	 * the line afterwards: not booked as held back. */
	__u64 caught_up_ns;
	/* Packets that left with the class's remark_dscp (CLASS_F_REMARK). */
	__u64 remarked_packets;
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
	/* With the xmit hook: departures the peer's ingress hook counted
	 * because the xmit hook had not (the tracepoint did not run it, or the
	 * packet's handoff slot was busy): their sojourn includes the host
	 * queue. */
	__u64 late_departure_packets;
	__u64 handoff_busy_packets; /* of which: another packet held the slot */
	/* handoff records of packets the kernel freed without kfree_skb,
	 * found when their skb was reused: counted as host drops */
	__u64 handoff_stale_packets;
	/* PPFC notifications not sent: no route or neighbour toward the
	 * source, the source sits behind this port itself, the frame could
	 * not be built or the clone failed; and clones ppfc_egress could not
	 * rewrite (dropped). */
	__u64 ppfc_no_route;
	__u64 ppfc_no_neigh;
	__u64 ppfc_self;
	__u64 ppfc_redirect_errors;
	__u64 ppfc_build_errors;
	/* WAN CNPs that could not be sent: no route or neighbour toward the
	 * PE, the PE behind the port itself, a failed clone. */
	__u64 wan_cnp_failed;
};

/* The coalescing of WAN CNPs: one per PE, class and kind per interval. */
struct wan_cnp_key {
	__u32 pe; /* the outer source, network order */
	__u32 class_id;
	__u32 light;
	__u32 pad;
};

/* A source the port has paused or alarmed (PPFC) for a destination, per
 * class: who to resume, until when the last stop or hold lasts, in which
 * congestion episode. The agent pauses the QPs toward the destination a
 * notification names, so each destination behind the port gets its own
 * stop. */
struct ppfc_key {
	__u8 addr[16]; /* the source's address; IPv4 as IPv4-mapped IPv6 */
	__u8 dest[16]; /* the congested destination's, the same way */
	__u32 class_id;
	__u32 pad;
};

struct ppfc_source {
	__u64 paused_until_ns; /* 0: not paused (or resumed) */
	__u64 stops;
	__u64 resumes;
	__u32 psn;       /* the next notification's PSN */
	__u32 ifindex;   /* the device toward the source */
	__u8 local_ip[16]; /* the switch's address toward it (FIB); IPv4-mapped */
	__u64 holds;
	__u64 alarms;
	__u64 episode;   /* the class's ppfc_episode at the last stop or hold */
	__u64 alarmed;   /* the class's ppfc_episode + 1 at the last alarm; 0: never */
};

/* What the xmit hook hands the peer's ingress hook about one packet (the same
 * skb crosses the veth), in the slot of its skb's address. */
struct xmit_handoff {
	__u64 skb;     /* the holder's skb address; 0: the slot is free */
	__u64 stamp;   /* the enqueue stamp: a reused skb address never matches */
	__u64 xmit_ns; /* when HTB handed it to the device */
	__u32 len;     /* bytes it took out of the port's backlog */
	__u8 class_id;
	__u8 verdict;  /* the dequeue AQM's decision (enum aqm_verdict) */
	__u16 pad;
};

/* Kinds of idle_log events. */
enum idle_kind {
	/* The class's link sat idle: nothing queued. */
	IDLE_EMPTY = 0,
	/* The port held a packet back while its link was free: HTB, run by
	 * this machine's CPUs, sent it late (a timer or softirq that ran late,
	 * a CPU the hypervisor stopped). No switch does that: host-lost time
	 * with the queue full. */
	IDLE_HELD = 1,
};

/* One period of a class's link, as idle_log carries it: from from_ns to
 * to_ns (CLOCK_MONOTONIC), of kind (enum idle_kind). */
struct idle_event {
	__u64 from_ns;
	__u64 to_ns;
	__u32 class_id;
	__u32 kind;
};

/* The port's link as its departures drive it (xmit hook): when it is free
 * again after the last departure, at the port's rate; how far the last
 * departure ran ahead of that (HTB's bucket catching up after running
 * late); and the lateness not yet booked, which the catch-up shortens.
 * One per port. */
struct link_state {
	__u64 free_ns;
	__u64 lead_ns;
	__u64 pend_from_ns; /* 0: none pending */
	__u64 pend_to_ns;
	__u32 pend_class;
	__u32 pad;
};

#endif
