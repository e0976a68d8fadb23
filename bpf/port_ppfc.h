// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * PPFC (seed 003): the notifications a port sends its sources, built
 * in a scratch map and sent as clones; stop, alarm, hold and resume.
 *
 * Part of port.c, included once from it: it uses port.c's maps and
 * helpers and is not a header of its own.
 */
#ifndef PORT_PPFC_H
#define PORT_PPFC_H

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
 * Each packet above xon_bytes from an IP source thus costs a lookup in
 * ppfc_sources.
 *
 * On the wire (the draft leaves these open): the source's family, IPv4 or
 * IPv6 (no extension headers); UDP 4791 from PPFC_UDP_SPORT, checksum 0
 * over IPv4 as rxe sends, computed over IPv6 where UDP requires one; BTH
 * opcode 0x81 with P (byte 4, 0x20) set, P_Key 0xFFFF, DestQP 0, PSN a
 * per-source sequence; the congested destination as an IPv6 address
 * (IPv4-mapped for IPv4); Congestion Port = ppfc_port; DSCP ppfc_dscp,
 * Not-ECT, flow label 0; the ICRC as for any RoCEv2 packet; Pause
 * Duration 0 in a resume. A source keyed by its address as IPv6
 * (IPv4-mapped) keeps the two families in one map. */
#define PPFC_UDP_SPORT 0xC0FC
#define PPFC_TTL 64
#define PPFC_MAX_PAUSE_US 0xFFFF
#define PPFC_L4_LEN ROCE_PPFC_L4_LEN
#define PPFC_V4_LEN (sizeof(struct ethhdr) + sizeof(struct iphdr) + PPFC_L4_LEN)   /* 82 */
#define PPFC_V6_LEN (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + PPFC_L4_LEN) /* 102 */
#define NET_AF_INET 2
#define NET_AF_INET6 10

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
	union {
		struct {
			struct iphdr ip;
			struct ppfc_l4 l4;
		} v4;
		struct {
			struct ipv6hdr ip6;
			struct ppfc_l4 l4;
		} v6;
	};
};

_Static_assert(sizeof(struct ppfc_l4) == PPFC_L4_LEN, "ppfc_l4 is 48 bytes");
_Static_assert(__builtin_offsetof(struct ppfc_frame, v4.ip) == 16, "IP header aligned");
_Static_assert(sizeof(struct ppfc_frame) - 2 == PPFC_V6_LEN, "ppfc_frame holds an IPv6 PPFC");

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
	__u32 len;   /* its length: PPFC_V4_LEN, PPFC_V6_LEN or WAN_CNP_V4_LEN */
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

/* What a notification says; addresses as IPv6, IPv4-mapped for IPv4. */
struct ppfc_args {
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u32 family;      /* NET_AF_INET or NET_AF_INET6 */
	__u8 local_ip[16]; /* the switch's address toward the target */
	__u8 target[16];   /* the source being stopped or resumed */
	__u8 dest[16];     /* the congested destination */
	__u32 pt;          /* enum ppfc_action */
	__u32 pause_us;
	__u32 psn;
	__u32 dscp;
	__u32 cport;
};

/* ppfc_work is ppfc_enqueued's working memory: port_enqueue leaves it too
 * little stack (as wan_cnp's). */
struct ppfc_work {
	struct bpf_fib_lookup fib;
	struct ppfc_args a;
	struct ppfc_key key;
	struct ppfc_source fresh;
};

/* The map holds it as words: bpf2go has no Go type for bpf_fib_lookup's
 * unions. */
struct ppfc_work_buf {
	__u64 words[(sizeof(struct ppfc_work) + 7) / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ppfc_work_buf);
} ppfc_work SEC(".maps");

/* ppfc_map4 writes the IPv4 address a (network order) as IPv4-mapped IPv6. */
static __always_inline void ppfc_map4(__u8 *out, __be32 a)
{
	__builtin_memset(out, 0, 10);
	out[10] = 0xFF;
	out[11] = 0xFF;
	__builtin_memcpy(&out[12], &a, 4);
}

/* ppfc_l4_fill writes the UDP header and the PPFC with the fields the ICRC
 * masks set to ones (UDP checksum, BTH byte 4). */
static __always_inline void ppfc_l4_fill(struct ppfc_l4 *l4, const struct ppfc_args *a)
{
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
	__builtin_memcpy(l4->dest, a->dest, 16);
	l4->flags_pt = bpf_htons(a->pt & 3);
	l4->cport = bpf_htons(a->cport);
	l4->rsvd = 0;
	l4->pause_us = bpf_htons(a->pause_us);
}

/* ppfc_build writes the notification a describes into sc, with its ICRC
 * (and over IPv6 its UDP checksum), and sets sc->len; it returns that
 * length, 0 for an unknown family. A global function: the verifier checks
 * it once, not at every call with the CRC loops of both families (the
 * resume path calls it once per class). */
__attribute__((noinline)) int ppfc_build(struct ppfc_scratch *sc, const struct ppfc_args *a)
{
	struct ppfc_frame *f;
	struct ppfc_l4 *l4;
	__u8 tos;

	if (!sc || !a)
		return 0;
	f = &sc->f;
	tos = (a->dscp & 0x3F) << 2; /* Not-ECT */

	__builtin_memcpy(f->eth.h_dest, a->dmac, ETH_ALEN);
	__builtin_memcpy(f->eth.h_source, a->smac, ETH_ALEN);
	if (a->family == NET_AF_INET) {
		struct iphdr *ip = &f->v4.ip;
		__be32 saddr, daddr;

		l4 = &f->v4.l4;
		f->eth.h_proto = bpf_htons(ETH_P_IP);
		__builtin_memcpy(&saddr, &a->local_ip[12], 4);
		__builtin_memcpy(&daddr, &a->target[12], 4);
		/* The fields the ICRC masks as ones first. */
		roce_ipv4_masked(ip, PPFC_L4_LEN, saddr, daddr);
		ppfc_l4_fill(l4, a);
		l4->icrc = icrc_crc((const __u8 *)ip, sizeof(*ip) + PPFC_L4_LEN - ROCE_ICRC_LEN,
				    sizeof(*ip) + PPFC_L4_LEN - ROCE_ICRC_LEN);
		/* The masked fields, as sent. */
		roce_ipv4_as_sent(ip, tos, PPFC_TTL);
		l4->udp.check = 0; /* IPv4: no checksum, as rxe sends */
		l4->bth.ecn = ROCE_BTH_PPFC;
		sc->len = PPFC_V4_LEN;
		return PPFC_V4_LEN;
	}
	if (a->family == NET_AF_INET6) {
		struct ipv6hdr *ip6 = &f->v6.ip6;

		l4 = &f->v6.l4;
		f->eth.h_proto = bpf_htons(ETH_P_IPV6);
		roce_ipv6_masked(ip6, PPFC_L4_LEN, a->local_ip, a->target);
		ppfc_l4_fill(l4, a);
		l4->icrc = icrc_crc((const __u8 *)ip6, sizeof(*ip6) + PPFC_L4_LEN - ROCE_ICRC_LEN,
				    sizeof(*ip6) + PPFC_L4_LEN - ROCE_ICRC_LEN);
		roce_ipv6_as_sent(ip6, tos, PPFC_TTL);
		l4->bth.ecn = ROCE_BTH_PPFC;
		l4->udp.check = 0;
		l4->udp.check = udp6_csum(ip6, l4, PPFC_L4_LEN);
		sc->len = PPFC_V6_LEN;
		return PPFC_V6_LEN;
	}
	sc->len = 0;
	return 0;
}

/* ppfc_clone sends the frame ppfc_build left in the scratch out of
 * ifindex: the clone of skb that ppfc_egress rewrites there. The packet's
 * own mark is put back. */
static __always_inline long ppfc_clone(struct __sk_buff *skb, struct ppfc_scratch *sc, __u32 ifindex)
{
	__u32 mark = skb->mark;
	long ret;

	sc->ready = 1;
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
 * later packet tries again. A global function, looking its class's state
 * up itself: the verifier checks it once, on its own, instead of on every
 * path of port_enqueue that reaches it (most of port_enqueue's 244,613
 * instructions processed were this). */
__attribute__((noinline)) int ppfc_enqueued(struct __sk_buff *skb, __u32 class_id, __u32 l3_off,
					    __u32 l3_proto, __u64 after)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	const struct port_config *pc;
	const struct class_config *cc;
	struct class_state *cs;
	struct class_stats *st;
	struct port_stats *ps;
	struct ppfc_source *src;
	struct ppfc_scratch *sc;
	struct ppfc_work *w;
	__u64 now, old, claim, episode;
	__u32 zero = 0, pt, family;
	bool stop, alarm;
	long rc;

	pc = bpf_map_lookup_elem(&port_cfg, &zero);
	ps = bpf_map_lookup_elem(&port_counters, &zero);
	cc = bpf_map_lookup_elem(&class_cfg, &class_id);
	cs = bpf_map_lookup_elem(&class_queue, &class_id);
	st = bpf_map_lookup_elem(&class_counters, &class_id);
	w = (struct ppfc_work *)bpf_map_lookup_elem(&ppfc_work, &zero);
	if (!pc || !ps || !cc || !cs || !st || !w)
		return 0;
	stop = after >= cc->xoff_bytes;
	alarm = cc->alarm_bytes && after >= cc->alarm_bytes;
	if (l3_proto == ETH_P_IP) {
		struct iphdr *ip = data + (l3_off & 0xFF);

		if ((void *)(ip + 1) > data_end)
			return 0;
		family = NET_AF_INET;
		ppfc_map4(w->key.addr, ip->saddr);
		ppfc_map4(w->key.dest, ip->daddr);
	} else if (l3_proto == ETH_P_IPV6) {
		struct ipv6hdr *ip6 = data + (l3_off & 0xFF);

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		family = NET_AF_INET6;
		__builtin_memcpy(w->key.addr, ip6->saddr, 16);
		__builtin_memcpy(w->key.dest, ip6->daddr, 16);
	} else {
		return 0; /* port_enqueue calls for IP packets only */
	}
	w->key.class_id = class_id;
	w->key.pad = 0;
	src = bpf_map_lookup_elem(&ppfc_sources, &w->key);
	if (!src) {
		if (!stop && !alarm)
			return 0; /* never stopped: nothing to hold */
		__builtin_memset(&w->fresh, 0, sizeof(w->fresh));
		bpf_map_update_elem(&ppfc_sources, &w->key, &w->fresh, BPF_NOEXIST);
		src = bpf_map_lookup_elem(&ppfc_sources, &w->key);
		if (!src)
			return 0;
	}
	now = now_ns();
	episode = READ_ONCE(cs->ppfc_episode);
	old = READ_ONCE(src->paused_until_ns);
	if (stop) {
		if (old > now) {
			st->ppfc_stop_coalesced++;
			return 0;
		}
		pt = PPFC_STOP;
	} else if (old && READ_ONCE(src->episode) == episode) {
		/* Stopped or held in this episode, not resumed. */
		if (old > now) {
			st->ppfc_hold_coalesced++;
			return 0;
		}
		pt = PPFC_HOLD;
	} else if (alarm) {
		old = READ_ONCE(src->alarmed);
		if (old == episode + 1) {
			st->ppfc_alarm_coalesced++;
			return 0;
		}
		pt = PPFC_ALARM;
	} else {
		return 0;
	}

	if (pt == PPFC_ALARM) {
		w->a.pause_us = ppfc_drain_us(cc, after, cc->xon_bytes);
		claim = episode + 1;
		if (__sync_val_compare_and_swap(&src->alarmed, old, claim) != old) {
			st->ppfc_alarm_coalesced++; /* another CPU alarmed it */
			return 0;
		}
	} else {
		w->a.pause_us = ppfc_drain_us(cc, after, cc->xon_bytes / 2);
		claim = now + (__u64)w->a.pause_us * 1000;
		if (__sync_val_compare_and_swap(&src->paused_until_ns, old, claim) != old) {
			/* another CPU stopped or held it */
			if (pt == PPFC_STOP)
				st->ppfc_stop_coalesced++;
			else
				st->ppfc_hold_coalesced++;
			return 0;
		}
	}

	__builtin_memset(&w->fib, 0, sizeof(w->fib));
	if (family == NET_AF_INET) {
		w->fib.family = NET_AF_INET;
		__builtin_memcpy(&w->fib.ipv4_dst, &w->key.addr[12], 4);
	} else {
		w->fib.family = NET_AF_INET6;
		__builtin_memcpy(w->fib.ipv6_dst, w->key.addr, 16);
	}
	w->fib.ifindex = skb->ingress_ifindex;
	rc = bpf_fib_lookup(skb, &w->fib, sizeof(w->fib), BPF_FIB_LOOKUP_SRC);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
			ps->ppfc_no_neigh++;
		else
			ps->ppfc_no_route++;
		goto undo;
	}
	if (w->fib.ifindex == skb->ifindex) {
		ps->ppfc_self++;
		goto undo;
	}
	sc = bpf_map_lookup_elem(&ppfc_scratch, &zero);
	if (!sc)
		goto undo;
	src->ifindex = w->fib.ifindex;
	if (family == NET_AF_INET)
		ppfc_map4(src->local_ip, w->fib.ipv4_src);
	else
		__builtin_memcpy(src->local_ip, w->fib.ipv6_src, 16);
	__builtin_memcpy(w->a.dmac, w->fib.dmac, ETH_ALEN);
	__builtin_memcpy(w->a.smac, w->fib.smac, ETH_ALEN);
	w->a.family = family;
	__builtin_memcpy(w->a.local_ip, src->local_ip, 16);
	__builtin_memcpy(w->a.target, w->key.addr, 16);
	__builtin_memcpy(w->a.dest, w->key.dest, 16);
	w->a.pt = pt;
	w->a.psn = __sync_fetch_and_add(&src->psn, 1);
	w->a.dscp = pc->ppfc_dscp;
	w->a.cport = pc->ppfc_port;
	if (!ppfc_build(sc, &w->a)) {
		ps->ppfc_build_errors++;
		goto undo;
	}
	if (ppfc_clone(skb, sc, w->fib.ifindex)) {
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
	return 0;
undo:
	if (pt == PPFC_ALARM)
		__sync_val_compare_and_swap(&src->alarmed, claim, old);
	else
		__sync_val_compare_and_swap(&src->paused_until_ns, claim, old);
	return 0;
}


/* ppfc_resume resumes, through a clone of skb (a packet from dest on its
 * way to addr out of this device; addresses as IPv6, IPv4-mapped for
 * IPv4), every class that has addr paused for dest and a backlog at or
 * below xon_bytes. */
static __always_inline void ppfc_resume(struct __sk_buff *skb, const struct port_config *pc,
					struct port_stats *ps, __u32 family, const __u8 *addr,
					const __u8 *dest)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct ppfc_key key = {};
	struct ppfc_args a = {};
	__u32 zero = 0;
	__u64 now;

	if ((void *)(eth + 1) > data_end)
		return;
	/* The packet is on its way to addr: its MAC addresses are the ones. */
	__builtin_memcpy(a.dmac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(a.smac, eth->h_source, ETH_ALEN);
	a.family = family;
	__builtin_memcpy(a.target, addr, 16);
	__builtin_memcpy(a.dest, dest, 16);
	a.pt = PPFC_RESUME;
	a.dscp = pc->ppfc_dscp;
	a.cport = pc->ppfc_port;
	__builtin_memcpy(key.addr, addr, 16);
	__builtin_memcpy(key.dest, dest, 16);
	now = now_ns();

	for (__u32 c = 0; c < MAX_CLASSES; c++) {
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
		key.class_id = c;
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
		__builtin_memcpy(a.local_ip, src->local_ip, 16);
		a.psn = __sync_fetch_and_add(&src->psn, 1);
		if (!ppfc_build(sc, &a)) {
			ps->ppfc_build_errors++;
			__sync_val_compare_and_swap(&src->paused_until_ns, 0, until);
			continue;
		}
		if (ppfc_clone(skb, sc, skb->ifindex)) {
			ps->ppfc_redirect_errors++;
			__sync_val_compare_and_swap(&src->paused_until_ns, 0, until);
			continue;
		}
		__sync_fetch_and_add(&src->resumes, 1);
		st->ppfc_resume_sent++;
	}
}

#endif /* PORT_PPFC_H */
