//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * DCTCP (RFC 8257) as a TCP congestion control written in BPF: a
 * struct_ops map of type tcp_congestion_ops, registered through a BPF link
 * (host/dctcp), so a socket picks it with TCP_CONGESTION like any other
 * congestion control, in every network namespace. The kernel this lab runs
 * on has no DCTCP module (reference/kernel.md).
 *
 * The rules, with the section of RFC 8257 each comes from; the arithmetic
 * is Linux's (net/ipv4/tcp_dctcp.c), so that numbers compare with the
 * kernel's DCTCP where a lab server has it:
 *
 *   - ECN is negotiated whatever net.ipv4.tcp_ecn says (flags
 *     TCP_CONG_NEEDS_ECN: the SYN asks for it, ECT(0) on every packet).
 *     A connection where it was not negotiated falls back to Reno (§3.5)
 *     through bpf_setsockopt(TCP_CONGESTION, "reno") in init.
 *   - α, the fraction of marked data (§3.3), in 1/1024: once per
 *     observation window (snd_una passes the snd_nxt of the window's
 *     start: about one round trip), α ← α − α·g + g·F with g = 1/16 and
 *     F = delivered_ce / delivered of the window, counted in packets
 *     (tp->delivered, tp->delivered_ce; RFC 8257 counts bytes, the same F
 *     for MSS-sized segments). Linux's integer form: α −= α >> 4, or all of
 *     α once that is 0, then α += (delivered_ce << 6) / delivered, capped
 *     at 1024. α starts at 1024 (§4.2's note on Linux).
 *   - On an ECE the stack enters CWR once per window and asks ssthresh:
 *     cwnd × (1 − α/2) (§3.3), at least 2 segments.
 *   - Loss is answered like Reno (§3.4): ssthresh = cwnd / 2 on entering
 *     Recovery and on an RTO (CA_EVENT_LOSS); undo restores the cwnd seen
 *     before the last cut.
 *   - The receiver's CE state machine (§3.2): ECE follows the CE state of
 *     the last data segment (TCP_ECN_DEMAND_CWR), and when the state
 *     changes, a delayed ACK still pending for the segments of the old
 *     state is sent first with the old state's ECE (bpf_tcp_send_ack at
 *     the old rcv_nxt), and the segment that changed it is ACKed at once.
 *
 * The window itself is set here (cong_control), not by the kernel's
 * tcp_cong_control: Reno's growth (slow start, then one segment per window,
 * tcp_slow_start and tcp_cong_avoid_ai) outside a reduction, and
 * Proportional Rate Reduction (RFC 6937, Linux's tcp_cwnd_reduction) from
 * the cut's cwnd down to ssthresh in CWR and Recovery, then cwnd =
 * ssthresh when the reduction ends (tcp_end_cwnd_reduction). The program
 * keeps its own ssthresh and the reduction's state, so the window never
 * depends on a socket field it did not write. Why: on the development
 * kernel (6.18.44-fc, a PVM guest with SRSO "safe RET"), a socket run by
 * any BPF congestion control (even one that only calls the kernel's Reno
 * kfuncs) has tcp_sock.snd_ssthresh overwritten, a few times a second
 * under ECN marking, with 0x822028e5 (the low half of a return address of
 * srso_return_thunk, a stale stack word), by no write a hardware
 * watchpoint sees and never right after the ssthresh op; the kernel's PRR
 * then computes a window of hundreds of millions of segments from it and
 * floods the port. Kernel Reno and CUBIC on the same paths never show it.
 * So every ACK checks snd_cwnd and snd_ssthresh: a value beyond any window
 * (or an ssthresh below 2, which the kernel never writes) is put back to
 * the program's and counted (state_repairs); a plausible ssthresh the
 * kernel wrote itself (an application-limited or idle restart, an undo)
 * is adopted. Likewise the socket's congestion state, when it is not the
 * one set_state last gave, is taken over (state_resyncs; cong_control
 * says why).
 *
 * What it keeps for user space, none of it on the per-ACK path but the
 * window test (a window ends about once per round trip; at a receiver,
 * which sends no data, at every segment, and is then skipped): per flow
 * (dctcp_flows, LRU hash by the 4-tuple) α, its sum over windows (the mean
 * α of an interval), the delivered and CE counts at the last window, cuts
 * and loss reactions, and the receiver's CE transitions; totals in
 * dctcp_counters; with trace set at load time, a record of every window
 * and every cut in dctcp_trace, which the tests replay through the pure-Go
 * reference (host/dctcp) decision for decision.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char __license[] SEC("license") = "Dual BSD/GPL";

/* The kernel's structs, only the members used here; CO-RE relocates every
 * access against the running kernel's BTF. */
struct in6_addr {
	union {
		__u32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	unsigned long sk_pacing_rate;
	unsigned long sk_max_pacing_rate;
} __attribute__((preserve_access_index));

struct inet_sock {
	struct sock sk;
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	struct inet_sock icsk_inet;
	__u8 icsk_ca_state:5;
	struct {
		__u8 pending;
	} icsk_ack;
	__u64 icsk_ca_priv[13];
} __attribute__((preserve_access_index));

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	__u32 rcv_nxt;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 snd_cwnd;
	__u32 snd_cwnd_cnt;
	__u32 snd_cwnd_clamp;
	__u32 snd_ssthresh;
	__u32 mss_cache;
	__u32 srtt_us;
	__u32 packets_out;
	__u32 sacked_out;
	__u32 lost_out;
	__u32 retrans_out;
	__u32 prr_out;
	__u32 max_packets_out;
	__u32 delivered;
	__u32 delivered_ce;
	__u8 ecn_flags;
	__u8 is_cwnd_limited:1;
} __attribute__((preserve_access_index));

struct rate_sample {
	__u32 acked_sacked; /* packets newly delivered by this ACK */
	int losses;         /* packets newly marked lost */
} __attribute__((preserve_access_index));

/* enum inet_csk_ack_state_t (include/net/inet_connection_sock.h). */
enum inet_csk_ack_state_t {
	ICSK_ACK_TIMER = 2,
	ICSK_ACK_NOW = 16,
};

/* enum tcp_ca_event and enum tcp_ca_state (include/net/tcp.h, uapi). */
enum tcp_ca_event {
	CA_EVENT_LOSS = 3,
	CA_EVENT_ECN_NO_CE = 4,
	CA_EVENT_ECN_IS_CE = 5,
};

enum tcp_ca_state {
	TCP_CA_Open = 0,
	TCP_CA_Disorder = 1,
	TCP_CA_CWR = 2,
	TCP_CA_Recovery = 3,
	TCP_CA_Loss = 4,
};

struct tcp_congestion_ops {
	void (*init)(struct sock *sk);
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_control)(struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs);
	void (*set_state)(struct sock *sk, __u8 new_state);
	void (*cwnd_event)(struct sock *sk, enum tcp_ca_event ev);
	void (*in_ack_event)(struct sock *sk, __u32 flags);
	__u32 (*undo_cwnd)(struct sock *sk);
	__u32 flags;
	char name[16];
};

/* include/net/tcp.h, include/net/tcp_ecn.h, uapi linux/tcp.h, tcp_states.h */
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_OK 1         /* RFC 3168 ECN negotiated (TCP_ECN_MODE_RFC3168) */
#define TCP_ECN_DEMAND_CWR 4 /* the receiver sets ECE on its ACKs */
#define TCP_INFINITE_SSTHRESH 0x7fffffff
#define FLAG_DATA_ACKED 0x04       /* this ACK acknowledged new data */
#define FLAG_SND_UNA_ADVANCED 0x400 /* snd_una moved */
#define TCP_LISTEN 10
#define TCP_CLOSE 7
#define SOL_TCP 6
#define TCP_CONGESTION 13
#define AF_INET 2
#define AF_INET6 10
#define USEC_PER_SEC 1000000ULL

#define DCTCP_MAX_ALPHA 1024U
/* No real window is this large (2^20 segments, 1.5 GB at 1448 B). */
#define DCTCP_CWND_MAX (1U << 20)
/* tcp_update_pacing_rate's ratios (net.ipv4.tcp_pacing_ss_ratio, _ca_ratio
 * defaults), percent. */
#define PACING_SS_RATIO 200
#define PACING_CA_RATIO 120

/* Load-time settings. */

/* g = 1/2^shift_g (RFC 8257 §4.2: 1/16). */
volatile const __u32 shift_g = 4;
/* α when a flow starts, in 1/1024. */
volatile const __u32 alpha_on_init = DCTCP_MAX_ALPHA;
/* Record every window and cut in dctcp_trace. */
volatile const __u8 trace = 0;

/* The per-connection state, in the socket's icsk_ca_priv (at most 104
 * bytes). */
struct dctcp_ca {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 prior_rcv_nxt;
	__u32 alpha;
	__u32 next_seq;
	__u32 ce_state;
	__u32 loss_cwnd;
	__u32 ca_state;      /* the last state set_state was given */
	__u32 ssthresh;      /* the program's; written to the socket */
	__u32 cwnd;          /* the last window the program set */
	__u32 prior_cwnd;    /* cwnd when the reduction began (PRR's RecoverFS) */
	__u32 prr_delivered; /* packets delivered since it began */
	__u32 undone;        /* undo_cwnd ran: the next state change keeps cwnd */
};

_Static_assert(sizeof(struct dctcp_ca) <= 104, "fits icsk_ca_priv");

struct dctcp_flow_key {
	__u32 saddr[4]; /* IPv4 in saddr[0], network order */
	__u32 daddr[4];
	__u16 sport;    /* host order */
	__u16 dport;    /* host order */
	__u16 family;
	__u16 pad;
};

struct dctcp_flow {
	__u64 init_ns;         /* when the congestion control took the connection */
	__u64 updated_ns;      /* the last window's end */
	__u64 windows;         /* observation windows of data ended (α updates) */
	__u64 alpha_sum;       /* Σ α after each, 1/1024 */
	__u64 cuts;            /* ssthresh on an ECE (CWR) */
	__u64 loss_reactions;  /* Recovery entered or an RTO: cwnd / 2 */
	__u64 ce_transitions;  /* receiver: the CE state changed */
	__u64 acks_flushed;    /* receiver: a delayed ACK sent with the old ECE at a change */
	__u64 state_repairs;   /* snd_cwnd or snd_ssthresh no window can have, put back */
	__u32 alpha;           /* now, 1/1024 */
	__u32 delivered;       /* tp->delivered at the last window's end, packets */
	__u32 delivered_ce;    /* tp->delivered_ce then */
	__u32 cwnd;            /* at the last window's end or cut, packets */
	__u32 ssthresh;
	__u32 mss;
	__u32 ce_state;        /* receiver: the last data segment was CE */
	__u32 fallback;        /* 1: ECN was not negotiated, Reno runs it */
	__u32 ca_state;        /* the program's at the last window's end */
	__u32 sk_ca_state;     /* the socket's icsk_ca_state then */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct dctcp_flow_key);
	__type(value, struct dctcp_flow);
} dctcp_flows SEC(".maps");

struct dctcp_stats {
	__u64 inits;
	__u64 fallbacks;      /* ECN not negotiated: Reno */
	__u64 fallback_errors;
	__u64 windows;
	__u64 cuts;
	__u64 loss_reactions;
	__u64 ce_transitions;
	__u64 acks_flushed;
	__u64 trace_lost;     /* dctcp_trace was full */
	__u64 state_repairs;  /* snd_cwnd or snd_ssthresh no window can have, put back */
	__u64 ssthresh_adopted; /* a plausible ssthresh the kernel wrote, taken over */
	__u64 state_resyncs;  /* the socket's congestion state was not the last set_state gave: taken over */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dctcp_stats);
} dctcp_counters SEC(".maps");

enum dctcp_event_kind {
	DCTCP_EV_INIT = 0,   /* the congestion control took the connection: α set */
	DCTCP_EV_WINDOW = 1, /* an observation window ended: α updated */
	DCTCP_EV_CUT = 2,    /* ssthresh: cwnd × (1 − α/2) */
	DCTCP_EV_LOSS = 3,   /* Recovery or RTO: cwnd / 2 */
	DCTCP_EV_REPAIR = 4, /* snd_cwnd (cwnd) or snd_ssthresh (ssthresh) no window can have */
};

struct dctcp_event {
	struct dctcp_flow_key key;
	__u64 at_ns;
	__u32 kind;
	__u32 alpha_before;
	__u32 alpha_after;
	__u32 delivered;    /* packets in the window (DCTCP_EV_WINDOW) */
	__u32 delivered_ce; /* of which CE-echoed */
	__u32 cwnd;         /* before a cut */
	__u32 ssthresh;     /* after a cut */
	__u32 pad;
};

/* For bpf2go -type: the ring buffer's records have no BTF of their own. */
const struct dctcp_event *unused_dctcp_event __attribute__((unused));
const enum dctcp_event_kind *unused_dctcp_event_kind __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} dctcp_trace SEC(".maps");

static __always_inline struct tcp_sock *tcp_sk(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline struct dctcp_ca *ca_of(struct sock *sk)
{
	return (struct dctcp_ca *)inet_csk(sk)->icsk_ca_priv;
}

static __always_inline int before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

static __always_inline struct dctcp_stats *counters(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&dctcp_counters, &zero);
}

static __always_inline void flow_key(struct sock *sk, struct dctcp_flow_key *k)
{
	struct sock_common *c = &sk->__sk_common;

	k->family = c->skc_family;
	k->sport = c->skc_num;
	k->dport = __builtin_bswap16(c->skc_dport);
	if (k->family == AF_INET6) {
		k->saddr[0] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[0];
		k->saddr[1] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[1];
		k->saddr[2] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[2];
		k->saddr[3] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[3];
		k->daddr[0] = c->skc_v6_daddr.in6_u.u6_addr32[0];
		k->daddr[1] = c->skc_v6_daddr.in6_u.u6_addr32[1];
		k->daddr[2] = c->skc_v6_daddr.in6_u.u6_addr32[2];
		k->daddr[3] = c->skc_v6_daddr.in6_u.u6_addr32[3];
	} else {
		k->saddr[0] = c->skc_rcv_saddr;
		k->daddr[0] = c->skc_daddr;
	}
}

static __always_inline struct dctcp_flow *flow_of(struct sock *sk)
{
	struct dctcp_flow_key k = {};

	flow_key(sk, &k);
	return bpf_map_lookup_elem(&dctcp_flows, &k);
}

static __always_inline void trace_event(struct sock *sk, __u32 kind, __u32 alpha_before, __u32 alpha_after,
					__u32 delivered, __u32 delivered_ce, __u32 cwnd, __u32 ssthresh)
{
	struct dctcp_stats *cnt;
	struct dctcp_event *e;

	if (!trace)
		return;
	e = bpf_ringbuf_reserve(&dctcp_trace, sizeof(*e), 0);
	if (!e) {
		cnt = counters();
		if (cnt)
			cnt->trace_lost++;
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	flow_key(sk, &e->key);
	e->at_ns = bpf_ktime_get_ns();
	e->kind = kind;
	e->alpha_before = alpha_before;
	e->alpha_after = alpha_after;
	e->delivered = delivered;
	e->delivered_ce = delivered_ce;
	e->cwnd = cwnd;
	e->ssthresh = ssthresh;
	bpf_ringbuf_submit(e, 0);
}

/* A new observation window starts at the next segment sent. */
static __always_inline void window_reset(struct tcp_sock *tp, struct dctcp_ca *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

/* cwnd_now is snd_cwnd, or the program's last window if it holds a value
 * no window can have. */
static __always_inline __u32 cwnd_now(struct tcp_sock *tp, struct dctcp_ca *ca)
{
	__u32 cwnd = tp->snd_cwnd;

	return cwnd <= DCTCP_CWND_MAX ? cwnd : ca->cwnd;
}

/* set_ssthresh makes ssthresh the program's and the socket's; with start,
 * a reduction begins from cwnd (RFC 6937: RecoverFS = cwnd,
 * prr_delivered = 0; the kernel zeroes prr_out at the same time). */
static __always_inline void set_ssthresh(struct tcp_sock *tp, struct dctcp_ca *ca, __u32 cwnd, __u32 ssthresh, int start)
{
	ca->ssthresh = ssthresh;
	if (start) {
		ca->prior_cwnd = cwnd;
		ca->prr_delivered = 0;
	}
	tp->snd_ssthresh = ssthresh;
}

SEC("struct_ops")
void dctcp_init(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_ca *ca = ca_of(sk);
	struct dctcp_stats *cnt = counters();
	struct dctcp_flow_key k = {};
	struct dctcp_flow f = {};
	unsigned char state = sk->__sk_common.skc_state;
	char reno[] = "reno";

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->ssthresh = tp->snd_ssthresh;
	ca->cwnd = tp->snd_cwnd;
	flow_key(sk, &k);
	f.init_ns = bpf_ktime_get_ns();
	f.mss = tp->mss_cache;
	if ((tp->ecn_flags & TCP_ECN_OK) || state == TCP_LISTEN || state == TCP_CLOSE) {
		ca->prior_rcv_nxt = tp->rcv_nxt;
		ca->alpha = alpha_on_init < DCTCP_MAX_ALPHA ? alpha_on_init : DCTCP_MAX_ALPHA;
		window_reset(tp, ca);
		f.alpha = ca->alpha;
		f.cwnd = tp->snd_cwnd;
		f.ssthresh = tp->snd_ssthresh;
		if (cnt)
			cnt->inits++;
		trace_event(sk, DCTCP_EV_INIT, 0, ca->alpha, 0, 0, tp->snd_cwnd, tp->snd_ssthresh);
		/* A listener or an unconnected socket is no flow yet. */
		if (state != TCP_LISTEN && state != TCP_CLOSE)
			bpf_map_update_elem(&dctcp_flows, &k, &f, BPF_ANY);
		return;
	}
	/* No ECN on this connection (§3.5): Reno runs it, and the stack
	 * stops setting ECT (tcp_reinit_congestion_control). */
	f.fallback = 1;
	bpf_map_update_elem(&dctcp_flows, &k, &f, BPF_ANY);
	if (cnt)
		cnt->fallbacks++;
	if (bpf_setsockopt(sk, SOL_TCP, TCP_CONGESTION, reno, sizeof(reno)) && cnt)
		cnt->fallback_errors++;
}

/* RFC 8257 §3.3: cwnd × (1 − α/2), once per window (the stack's CWR). */
SEC("struct_ops")
__u32 dctcp_ssthresh(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_ca *ca = ca_of(sk);
	struct dctcp_stats *cnt;
	struct dctcp_flow *f;
	__u32 cwnd = cwnd_now(tp, ca), ssthresh;

	ca->loss_cwnd = cwnd;
	ssthresh = cwnd - ((cwnd * ca->alpha) >> 11U);
	if (ssthresh < 2)
		ssthresh = 2;
	/* The kernel calls it as a reduction begins (CWR, Recovery) and on
	 * an RTO, where no reduction follows. */
	set_ssthresh(tp, ca, cwnd, ssthresh, 1);
	cnt = counters();
	if (cnt)
		cnt->cuts++;
	f = flow_of(sk);
	if (f) {
		f->cuts++;
		f->cwnd = cwnd;
		f->ssthresh = ssthresh;
	}
	trace_event(sk, DCTCP_EV_CUT, ca->alpha, ca->alpha, 0, 0, cwnd, ssthresh);
	return ssthresh;
}

/* check_state puts back snd_cwnd and snd_ssthresh when they hold values no
 * window can have (see the top of this file), and takes over a plausible
 * ssthresh the kernel wrote itself. */
static __always_inline void check_state(struct sock *sk, struct tcp_sock *tp, struct dctcp_ca *ca)
{
	__u32 cwnd = tp->snd_cwnd, ss = tp->snd_ssthresh;
	struct dctcp_stats *cnt;
	struct dctcp_flow *f;

	if (cwnd <= DCTCP_CWND_MAX && ((ss >= 2 && ss <= DCTCP_CWND_MAX) || ss == TCP_INFINITE_SSTHRESH)) {
		if (ss != ca->ssthresh) {
			ca->ssthresh = ss;
			cnt = counters();
			if (cnt)
				cnt->ssthresh_adopted++;
		}
		return;
	}
	trace_event(sk, DCTCP_EV_REPAIR, ca->alpha, ca->alpha, 0, 0, cwnd, ss);
	if (cwnd > DCTCP_CWND_MAX)
		tp->snd_cwnd = ca->cwnd > 2 ? ca->cwnd : 2;
	if ((ss < 2 || ss > DCTCP_CWND_MAX) && ss != TCP_INFINITE_SSTHRESH)
		tp->snd_ssthresh = ca->ssthresh;
	cnt = counters();
	if (cnt)
		cnt->state_repairs++;
	f = flow_of(sk);
	if (f)
		f->state_repairs++;
}

/* RFC 8257 §3.3: α once per observation window. */
SEC("struct_ops")
void dctcp_in_ack_event(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_ca *ca = ca_of(sk);
	struct dctcp_stats *cnt;
	struct dctcp_flow *f;
	__u32 delivered, delivered_ce, alpha, before_alpha, dec;

	check_state(sk, tp, ca);
	if (before(tp->snd_una, ca->next_seq))
		return;
	delivered = tp->delivered - ca->old_delivered;
	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	alpha = before_alpha = ca->alpha;
	/* α − α·g, as Linux: α >> shift_g, or α itself once that is 0 */
	dec = alpha >> (shift_g & 15);
	alpha -= dec ? dec : alpha;
	if (delivered_ce) {
		/* + g·F in 1/1024: (ce << (10 − shift_g)) / delivered */
		__u32 add = (delivered_ce << ((10 - shift_g) & 15)) / (delivered ? delivered : 1);

		alpha += add;
		if (alpha > DCTCP_MAX_ALPHA)
			alpha = DCTCP_MAX_ALPHA;
	}
	ca->alpha = alpha;
	window_reset(tp, ca);
	trace_event(sk, DCTCP_EV_WINDOW, before_alpha, alpha, delivered, delivered_ce, tp->snd_cwnd, tp->snd_ssthresh);
	/* A window in which nothing was delivered (a receiver's ACKs, the
	 * handshake, an idle sender) moves α as Linux does, but is no
	 * window of data: it is not counted, and the flow's entry is left
	 * alone (a receiver would otherwise look it up per segment). */
	if (!delivered)
		return;
	cnt = counters();
	if (cnt)
		cnt->windows++;
	f = flow_of(sk);
	if (f) {
		f->updated_ns = bpf_ktime_get_ns();
		f->windows++;
		f->alpha = alpha;
		f->alpha_sum += alpha;
		f->delivered = tp->delivered;
		f->delivered_ce = tp->delivered_ce;
		f->cwnd = tp->snd_cwnd;
		f->ssthresh = tp->snd_ssthresh;
		f->mss = tp->mss_cache;
		f->ca_state = ca->ca_state;
		f->sk_ca_state = BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state);
	}
}

static __always_inline int in_reduction(__u32 state)
{
	return state == TCP_CA_CWR || state == TCP_CA_Recovery;
}

/* RFC 8257 §3.4: a loss halves the window, as Reno. */
static __always_inline void react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_ca *ca = ca_of(sk);
	struct dctcp_stats *cnt;
	struct dctcp_flow *f;
	__u32 cwnd = cwnd_now(tp, ca), ssthresh;

	ssthresh = cwnd >> 1U;
	if (ssthresh < 2)
		ssthresh = 2;
	ca->loss_cwnd = cwnd;
	/* Recovery entered from CWR continues the reduction the kernel
	 * began (it does not reset prr_out then). */
	set_ssthresh(tp, ca, cwnd, ssthresh, !in_reduction(ca->ca_state));
	cnt = counters();
	if (cnt)
		cnt->loss_reactions++;
	f = flow_of(sk);
	if (f) {
		f->loss_reactions++;
		f->cwnd = cwnd;
		f->ssthresh = ssthresh;
	}
	trace_event(sk, DCTCP_EV_LOSS, ca->alpha, ca->alpha, 0, 0, cwnd, ssthresh);
}

/* set_cwnd writes the window the program decided (RFC 5681: at least 2,
 * never above the socket's clamp). */
static __always_inline void set_cwnd(struct tcp_sock *tp, struct dctcp_ca *ca, __u32 cwnd)
{
	__u32 clamp = tp->snd_cwnd_clamp;

	if (clamp > DCTCP_CWND_MAX)
		clamp = DCTCP_CWND_MAX;
	if (cwnd > clamp)
		cwnd = clamp;
	if (cwnd < 2)
		cwnd = 2;
	ca->cwnd = cwnd;
	tp->snd_cwnd = cwnd;
}

/* enter_state moves the program to the stack's new congestion state. */
static __always_inline void enter_state(struct sock *sk, struct dctcp_ca *ca, __u32 new_state)
{
	/* Entering Recovery; an RTO comes as CA_EVENT_LOSS (one reaction
	 * per round trip, as Linux). */
	if (new_state == TCP_CA_Recovery && ca->ca_state != TCP_CA_Recovery)
		react_to_loss(sk);
	/* The reduction is over (tcp_end_cwnd_reduction, which the kernel
	 * leaves to a congestion control with cong_control): cwnd =
	 * ssthresh; not after an undo, which restored the window. */
	if (in_reduction(ca->ca_state) && !in_reduction(new_state) && new_state != TCP_CA_Loss &&
	    !ca->undone && ca->ssthresh < TCP_INFINITE_SSTHRESH)
		set_cwnd(tcp_sk(sk), ca, ca->ssthresh);
	ca->undone = 0;
	ca->ca_state = new_state;
}

/* set_state runs before the stack stores the new state: the last one
 * given is the current. */
SEC("struct_ops")
void dctcp_set_state(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];

	enter_state(sk, ca_of(sk), (__u8)ctx[1]);
}

/* The window, per ACK (the kernel's tcp_cong_control with Reno). */
SEC("struct_ops")
void dctcp_cong_control(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	int flag = (int)ctx[2];
	const struct rate_sample *rs = (const struct rate_sample *)ctx[3];
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_ca *ca = ca_of(sk);
	__u32 cwnd, acked = rs->acked_sacked, ss, sk_state;
	__u64 rate;
	struct dctcp_stats *cnt;

	/* The stack's congestion state is the one its next ECE and its exit
	 * from CWR go by. On the development kernel (the one of the top of
	 * this file) a socket is now and then found Open while the program,
	 * every set_state call run and none missed by recursion, still holds
	 * CWR: PRR then pins cwnd at ssthresh until the next cut, which
	 * below K never comes (whole 4-s runs of TestDCTCPStepPort). So the
	 * stack's state, read here after it moved, is taken over. */
	sk_state = BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state);
	if (sk_state != ca->ca_state) {
		enter_state(sk, ca, sk_state);
		cnt = counters();
		if (cnt)
			cnt->state_resyncs++;
	}
	cwnd = tp->snd_cwnd;
	ss = ca->ssthresh;
	if (cwnd > DCTCP_CWND_MAX)
		cwnd = ca->cwnd;
	if (in_reduction(ca->ca_state)) {
		/* RFC 6937 PRR, as Linux's tcp_cwnd_reduction. */
		__u32 in_flight = tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
		__u32 prr_out = tp->prr_out;
		int delta = (int)(ss - in_flight), sndcnt;

		if ((int)acked > 0 && ca->prior_cwnd) {
			ca->prr_delivered += acked;
			if (delta < 0) {
				__u64 dividend = (__u64)ss * ca->prr_delivered + ca->prior_cwnd - 1;

				sndcnt = (int)(dividend / ca->prior_cwnd) - (int)prr_out;
			} else {
				sndcnt = (int)(ca->prr_delivered - prr_out);
				if (sndcnt < (int)acked)
					sndcnt = (int)acked;
				if ((flag & FLAG_SND_UNA_ADVANCED) && rs->losses <= 0)
					sndcnt++;
				if (sndcnt > delta)
					sndcnt = delta;
			}
			/* Force a fast retransmit upon entering fast recovery. */
			if (sndcnt < (prr_out ? 0 : 1))
				sndcnt = prr_out ? 0 : 1;
			cwnd = in_flight + sndcnt;
		}
	} else if (flag & FLAG_DATA_ACKED) {
		/* RFC 5681 (tcp_reno_cong_avoid): only while the window is
		 * what limits the sender (tcp_is_cwnd_limited). */
		int limited = BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited);

		if (limited || (cwnd < ss && cwnd < 2 * tp->max_packets_out)) {
			if (cwnd < ss) {
				/* slow start, up to ssthresh (tcp_slow_start) */
				__u32 next = cwnd + acked;

				if (next > ss)
					next = ss;
				acked -= next - cwnd;
				cwnd = next;
			}
			if (acked && cwnd >= ss) {
				/* one segment per window (tcp_cong_avoid_ai) */
				__u32 cnt = tp->snd_cwnd_cnt;

				if (cnt >= cwnd) {
					cnt = 0;
					cwnd++;
				}
				cnt += acked;
				if (cnt >= cwnd) {
					__u32 delta_w = cnt / cwnd;

					cnt -= delta_w * cwnd;
					cwnd += delta_w;
				}
				tp->snd_cwnd_cnt = cnt;
			}
		}
	}
	set_cwnd(tp, ca, cwnd);
	/* tcp_update_pacing_rate: 2 x cwnd/srtt in slow start, 1.2 x after. */
	rate = (__u64)tp->mss_cache * ((USEC_PER_SEC / 100) << 3);
	rate *= ca->cwnd < ss / 2 ? PACING_SS_RATIO : PACING_CA_RATIO;
	rate *= ca->cwnd > tp->packets_out ? ca->cwnd : tp->packets_out;
	if (tp->srtt_us)
		rate /= tp->srtt_us;
	if (rate > sk->sk_max_pacing_rate)
		rate = sk->sk_max_pacing_rate;
	sk->sk_pacing_rate = rate;
}

/* RFC 8257 §3.2: ECE mirrors the CE state of the last data segment. */
static __always_inline void ece_ack_cwr(struct tcp_sock *tp, __u32 ce_state)
{
	if (ce_state)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

SEC("struct_ops")
void dctcp_cwnd_event(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	enum tcp_ca_event ev = (enum tcp_ca_event)ctx[1];
	struct inet_connection_sock *icsk = inet_csk(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp_ca *ca = ca_of(sk);
	struct dctcp_stats *cnt;
	struct dctcp_flow *f;
	__u32 new_ce_state;
	int flushed = 0;

	if (ev == CA_EVENT_LOSS) {
		react_to_loss(sk);
		return;
	}
	if (ev != CA_EVENT_ECN_IS_CE && ev != CA_EVENT_ECN_NO_CE)
		return;
	new_ce_state = ev == CA_EVENT_ECN_IS_CE;
	if (ca->ce_state != new_ce_state) {
		/* The segments ACKed late so far had the old state: their
		 * delayed ACK goes first, with the old ECE; the segment that
		 * changed the state is ACKed at once. */
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			ece_ack_cwr(tp, ca->ce_state);
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
			flushed = 1;
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
		cnt = counters();
		if (cnt) {
			cnt->ce_transitions++;
			cnt->acks_flushed += flushed;
		}
		f = flow_of(sk);
		if (f) {
			f->ce_transitions++;
			f->acks_flushed += flushed;
			f->ce_state = new_ce_state;
		}
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = new_ce_state;
	ece_ack_cwr(tp, new_ce_state);
}

/* An undo (a reduction that was not needed) restores the window before the
 * last cut. */
SEC("struct_ops")
__u32 dctcp_undo_cwnd(unsigned long long *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct dctcp_ca *ca = ca_of(sk);
	__u32 cwnd = cwnd_now(tcp_sk(sk), ca);

	if (cwnd < ca->loss_cwnd)
		cwnd = ca->loss_cwnd;
	ca->cwnd = cwnd;
	ca->undone = 1;
	return cwnd;
}

/* The name is the loader's (host/dctcp: Options.Name), written over this
 * one before the map is created. */
SEC(".struct_ops.link")
struct tcp_congestion_ops dctcp = {
	.init = (void *)dctcp_init,
	.ssthresh = (void *)dctcp_ssthresh,
	.cong_control = (void *)dctcp_cong_control,
	.set_state = (void *)dctcp_set_state,
	.cwnd_event = (void *)dctcp_cwnd_event,
	.in_ack_event = (void *)dctcp_in_ack_event,
	.undo_cwnd = (void *)dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "bpf_dctcp",
};
