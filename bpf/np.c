//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * DCQCN notification point (NP) in the kernel: a CE-marked RoCEv2 data
 * packet turns into a CNP sent back out of the device it arrived on, without
 * waiting for the user-space agent's receive loop (dcqcn.md §NP,
 * roce-wire.md §CNP). host/npbpf loads and attaches it.
 *
 * np_ingress runs at TCX ingress of the receiver's device. It parses
 * Ethernet / IPv4 or IPv6 / UDP 4791 / BTH (net.h). An RC request (opcodes
 * 0x00-0x0B) with ECN = CE, to a QP in np_qps whose peer and local addresses
 * are the packet's source and destination, is a congestion notification:
 *
 *   - if no CNP left for the QP in the last N (min_time_between_cnps), the
 *     packet is cloned to the device's own egress (bpf_clone_redirect) with
 *     skb->mark = np_mark, and np_egress turns the clone into the CNP;
 *   - otherwise it is counted as coalesced and the QP has a CNP pending.
 *
 * A pending CNP leaves with the QP's first RC request packet (CE or not)
 * that arrives N or more after the last CNP. There is no timer: a BPF timer
 * callback has no packet to clone, so it could not send anything. This
 * differs from the user-space NP (host/dcqcn.NP), which sends the pending
 * CNP exactly N after the last one, by at most one packet inter-arrival
 * time, and sends nothing if the QP receives no packet after N.
 *
 * Every packet continues untouched: np_ingress returns TC_ACT_UNSPEC
 * (TCX_NEXT), so programs after it in the TCX chain and the stack see it as
 * if the NP were not there (the agent still receives the CE packet).
 * In-band VLAN tags, IPv4 options and IPv4 fragments are not answered (the
 * CNP would need its own tag and priority; the ICRC covers a whole datagram):
 * such packets pass and are counted.
 *
 * np_egress runs at TCX egress of the same device, first in the chain: a
 * packet carrying np_mark is a clone np_ingress made. bpf_clone_redirect
 * runs the device's egress path synchronously, so np_egress has finished
 * before np_ingress resumes. It trims the clone to the CNP's length
 * (bpf_skb_change_tail) and writes the whole CNP over it in one
 * bpf_skb_store_bytes: Ethernet addresses swapped, the IP and UDP headers
 * from the QP context (source = local, destination = peer, UDP source port
 * = the QP's, destination 4791), BTH opcode 0x81 with B = 1 and DestQP = the
 * peer QP, 16 zero bytes and the ICRC, computed here with a table-driven
 * CRC-32. A clone it cannot rewrite is dropped, never sent as data. The CNP
 * keeps np_mark, so other programs can tell it, and its opcode (0x81) is not
 * a trigger, so it can never loop.
 *
 * Spacing: the decision takes the QP's spin lock and compares with the time
 * of the last CNP; np_egress moves that time forward to the moment the CNP
 * leaves the program, and no CNP is decided while another of the QP is
 * between its decision and np_egress (inflight; a CE meanwhile is coalesced
 * and makes a CNP pending). So the time between two CNPs of a QP leaving
 * np_egress is never below N, whatever CPUs the CE packets arrive on, and
 * np_egress keeps the smallest spacing it saw (min_spacing_ns) to show it.
 * What follows np_egress (the qdisc, the driver) is outside the guarantee.
 *
 * No program writes packet data directly (only through helpers), so the
 * verifier adds no unclone prologue: packets the NP does not answer are
 * never copied.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "net.h"
#include "icrc.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))

#define TC_ACT_UNSPEC (-1) /* TCX_NEXT: later programs and the stack see it */
#define TC_ACT_SHOT 2

#define NP_FAMILY_IPV4 4
#define NP_FAMILY_IPV6 6

/* The CNP on the wire (roce-wire.md §CNP). */
#define CNP_TTL 64
#define CNP_L4_LEN (sizeof(struct net_udphdr) + ROCE_BTH_LEN + ROCE_CNP_RSVD_LEN + ROCE_ICRC_LEN) /* 40 */
#define CNP_V4_LEN (sizeof(struct ethhdr) + sizeof(struct iphdr) + CNP_L4_LEN)   /* 74 */
#define CNP_V6_LEN (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + CNP_L4_LEN) /* 94 */

/* The longest IP packet (without its ICRC) np_icrc_test takes. */
#define ICRC_TEST_MAX 128

/* Load-time settings. */

/* The mark np_ingress gives its clones, and the CNPs keep. */
volatile const __u32 np_mark = 0x4e50434e; /* "NPCN" */

/* Tests only: read the clock from test_now_ns, and count a CNP in
 * test_redirects instead of cloning the packet (BPF_PROG_RUN has no device
 * whose egress np_egress is attached to). */
volatile const __u8 test_hooks = 0;

__u64 test_now_ns = 0;
__u64 test_redirects = 0;
__s32 test_redirect_ret = 0;

/* The QP context, keyed by the local (receiver) QPN: the DestQP of the data
 * packets the QP receives. Go writes the first part when the QP connects
 * (host/npbpf AddQP) with the state zero; the programs own the rest. */
struct np_qp {
	/* Addresses in network order, IPv4 in the first 4 bytes. */
	__u8 local_ip[16]; /* the receiver: the data's destination, the CNP's source */
	__u8 peer_ip[16];  /* the sender: the data's source, the CNP's destination */
	__u32 peer_qpn;    /* the sender's QPN: the CNP's DestQP (24 bits) */
	__u16 src_port;    /* the UDP source port of this QP's packets, host order */
	__u16 pkey;        /* P_Key, host order */
	__u8 family;       /* NP_FAMILY_IPV4 or NP_FAMILY_IPV6 */
	__u8 cnp_dscp;     /* the CNP's DSCP (48: priority 6) */
	__u8 _pad[6];
	__u64 min_time_ns; /* N, min_time_between_cnps */

	/* State, under lock. */
	struct bpf_spin_lock lock;
	__u8 sent_any;        /* a CNP was decided: last_cnp_ns is valid */
	__u8 pending;         /* a CE since the last CNP got no CNP yet */
	__u8 inflight;        /* a CNP is between its decision and np_egress */
	__u8 _pad2;
	__u64 last_cnp_ns;    /* when the last CNP was decided, then left np_egress */
	__u64 last_out_ns;    /* when the last CNP left np_egress (0: none yet) */
	__u64 min_spacing_ns; /* the least time between two CNPs leaving np_egress (Go starts it at ~0) */
	__u64 ecn_marked;     /* np_ecn_marked_roce_packets */
	__u64 cnp_sent;       /* np_cnp_sent, held_sent included */
	__u64 coalesced;      /* CE packets within N of the last CNP: no CNP of their own */
	__u64 held_sent;      /* CNPs for a coalesced CE, sent by a later packet after N */
	__u64 redirect_errors; /* bpf_clone_redirect failed: the CNP stays pending */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct np_qp);
} np_qps SEC(".maps");

/* Per-CPU counters of the device, summed by Go. Every packet np_ingress sees
 * is counted once in packets and once in exactly one of not_roce, truncated,
 * vlan, ip_options, fragment, not_request, unknown_qp, not_ce, ce. */
struct np_stats {
	__u64 packets;      /* every frame np_ingress saw */
	__u64 not_roce;     /* non-IP, not UDP to 4791, IPv6 extension headers, later fragments */
	__u64 truncated;    /* headers cut short, or a UDP length without room for BTH and ICRC */
	__u64 vlan;         /* RoCEv2 behind an in-band VLAN tag: not answered */
	__u64 ip_options;   /* RoCEv2 in an IPv4 header with options: not answered */
	__u64 fragment;     /* RoCEv2 in the first fragment of an IPv4 datagram: not answered */
	__u64 not_request;  /* RoCEv2 but not an RC request (ACK, read response, CNP, UC, UD): passed */
	__u64 unknown_qp;   /* an RC request to a QP not in np_qps, or not from its peer to its address */
	__u64 not_ce;       /* an RC request of a known QP without CE */
	__u64 ce;           /* an RC request of a known QP with CE */
	__u64 cnp_sent;     /* CNPs cloned to egress (held_sent included) */
	__u64 coalesced;    /* CE packets within N of their QP's last CNP */
	__u64 held_sent;    /* CNPs sent for a coalesced CE by a later packet */
	__u64 redirect_errors;
	/* np_egress */
	__u64 egress_clones;  /* packets carrying np_mark */
	__u64 egress_built;   /* clones turned into CNPs */
	__u64 egress_dropped; /* clones that could not be: dropped */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct np_stats);
} np_counters SEC(".maps");

/* CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320) byte table. */
/* The CNP from the UDP header on: the same after IPv4 and IPv6. */
struct cnp_l4 {
	struct net_udphdr udp;
	struct roce_bth bth;
	__u8 rsvd[ROCE_CNP_RSVD_LEN];
	__u32 icrc; /* little-endian on the wire: stored natively (bpfel) */
};

/* The CNP built on the stack. Stack accesses must be aligned, so the frame
 * starts 2 bytes in: the IP header then sits on a 16-byte boundary. */
struct cnp_frame {
	__u8 align[2];
	struct ethhdr eth;
	union {
		struct {
			struct iphdr ip;
			struct cnp_l4 l4;
		} v4;
		struct {
			struct ipv6hdr ip6;
			struct cnp_l4 l4;
		} v6;
	};
};

_Static_assert(sizeof(struct cnp_l4) == CNP_L4_LEN, "cnp_l4 is 40 bytes");
_Static_assert(__builtin_offsetof(struct cnp_frame, v4.ip) == 16, "IP header aligned");
_Static_assert(sizeof(struct cnp_frame) - 2 == CNP_V6_LEN, "cnp_frame holds an IPv6 CNP");

/* udp6_csum is the UDP checksum of a CNP over IPv6 (RFC 8200 §8.1: it may
 * not be zero), with l4->udp.check zero. */
static __always_inline __u16 udp6_csum(const struct ipv6hdr *ip6, const struct cnp_l4 *l4)
{
	const __u16 *a = (const __u16 *)ip6->saddr; /* saddr and daddr: 16 words */
	const __u16 *w = (const __u16 *)l4;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < 16; i++)
		sum += a[i];
	/* Upper-layer length (32 bits) and next header (32 bits, zero-filled). */
	sum += bpf_htons(CNP_L4_LEN) + bpf_htons(NET_IPPROTO_UDP);
#pragma unroll
	for (int i = 0; i < (int)(sizeof(*l4) / 2); i++)
		sum += w[i];
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum = ~sum & 0xFFFF;
	return sum ? sum : 0xFFFF; /* RFC 768: a computed zero is sent as ones */
}

static __always_inline void put_qpn(__u8 *b, __u32 qpn)
{
	b[0] = qpn >> 16;
	b[1] = qpn >> 8;
	b[2] = qpn;
}

/* cnp_l4_fill writes the UDP header and the CNP's BTH and reserved bytes
 * with the fields the ICRC masks set to ones (UDP checksum, BTH byte 4). */
static __always_inline void cnp_l4_fill(struct cnp_l4 *l4, const struct np_qp *qp)
{
	l4->udp.source = bpf_htons(qp->src_port);
	l4->udp.dest = bpf_htons(ROCE_UDP_PORT);
	l4->udp.len = bpf_htons(CNP_L4_LEN);
	l4->udp.check = 0xFFFF;
	l4->bth.opcode = ROCE_OP_CNP;
	l4->bth.flags = 0; /* SE, M, PadCnt, TVer: 0 */
	l4->bth.pkey = bpf_htons(qp->pkey);
	l4->bth.ecn = ICRC_MASKED;
	put_qpn(l4->bth.destqp, qp->peer_qpn);
	l4->bth.ack = 0; /* AckReq 0, PSN 0 */
	/* rsvd and psn are zero from the frame's initialisation. */
}

/* cnp_build fills f with the CNP of qp in answer to a data packet with
 * Ethernet header data_eth, and returns its length from the Ethernet
 * header, or 0 for an unknown family. */
static __always_inline __u32 cnp_build(struct cnp_frame *f, const struct np_qp *qp,
				       const struct ethhdr *data_eth)
{
	__u8 tos = qp->cnp_dscp << 2 | ECN_ECT0;
	struct cnp_l4 *l4;

	__builtin_memcpy(f->eth.h_dest, data_eth->h_source, ETH_ALEN);
	__builtin_memcpy(f->eth.h_source, data_eth->h_dest, ETH_ALEN);

	if (qp->family == NP_FAMILY_IPV4) {
		struct iphdr *ip = &f->v4.ip;

		l4 = &f->v4.l4;
		__be32 saddr, daddr;

		f->eth.h_proto = bpf_htons(ETH_P_IP);
		__builtin_memcpy(&saddr, qp->local_ip, 4);
		__builtin_memcpy(&daddr, qp->peer_ip, 4);
		roce_ipv4_masked(ip, CNP_L4_LEN, saddr, daddr);
		cnp_l4_fill(l4, qp);
		l4->icrc = icrc_crc((const __u8 *)ip, sizeof(*ip) + CNP_L4_LEN - ROCE_ICRC_LEN,
				    sizeof(*ip) + CNP_L4_LEN - ROCE_ICRC_LEN);
		/* The masked fields, as sent. */
		roce_ipv4_as_sent(ip, tos, CNP_TTL);
		l4->udp.check = 0; /* IPv4: no checksum, as rxe sends */
		l4->bth.ecn = ROCE_BTH_BECN;
		return CNP_V4_LEN;
	}
	if (qp->family == NP_FAMILY_IPV6) {
		struct ipv6hdr *ip6 = &f->v6.ip6;

		l4 = &f->v6.l4;
		f->eth.h_proto = bpf_htons(ETH_P_IPV6);
		/* Traffic class and flow label masked. */
		ip6->version = 6;
		ip6->priority = 0xF;
		ip6->flow_lbl[0] = ICRC_MASKED;
		ip6->flow_lbl[1] = ICRC_MASKED;
		ip6->flow_lbl[2] = ICRC_MASKED;
		ip6->payload_len = bpf_htons(CNP_L4_LEN);
		ip6->nexthdr = NET_IPPROTO_UDP;
		ip6->hop_limit = ICRC_MASKED;
		__builtin_memcpy(ip6->saddr, qp->local_ip, 16);
		__builtin_memcpy(ip6->daddr, qp->peer_ip, 16);
		cnp_l4_fill(l4, qp);
		l4->icrc = icrc_crc((const __u8 *)ip6, sizeof(*ip6) + CNP_L4_LEN - ROCE_ICRC_LEN,
				    sizeof(*ip6) + CNP_L4_LEN - ROCE_ICRC_LEN);
		ip6->priority = tos >> 4;
		ip6->flow_lbl[0] = (tos & 0xF) << 4; /* flow label 0 */
		ip6->flow_lbl[1] = 0;
		ip6->flow_lbl[2] = 0;
		ip6->hop_limit = CNP_TTL;
		l4->bth.ecn = ROCE_BTH_BECN;
		l4->udp.check = 0;
		l4->udp.check = udp6_csum(ip6, l4);
		return CNP_V6_LEN;
	}
	return 0;
}

static __always_inline struct np_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&np_counters, &zero);
}

static __always_inline __u64 now_ns(void)
{
	if (test_hooks)
		return test_now_ns;
	return bpf_ktime_get_ns();
}

/* The most net_parse_roce reads: Ethernet, two tags, an IPv4 header with the
 * longest options (60 bytes, more than IPv6's 40), UDP and the BTH. */
#define PARSE_LEN (sizeof(struct ethhdr) + VLAN_MAX_DEPTH * sizeof(struct vlan_hdr) + 60 + \
		   sizeof(struct net_udphdr) + ROCE_BTH_LEN)

/* parse runs net_parse_roce, first pulling the headers into the linear data
 * if they are in a fragment of the skb. */
static __always_inline enum net_roce_result parse(struct __sk_buff *skb, struct net_roce *r)
{
	enum net_roce_result res;

	res = net_parse_roce((void *)(long)skb->data, (void *)(long)skb->data_end, r);
	if (res == NET_ROCE_TRUNCATED && skb->len > skb->data_end - skb->data) {
		__u32 want = skb->len < PARSE_LEN ? skb->len : PARSE_LEN;

		if (bpf_skb_pull_data(skb, want) == 0)
			res = net_parse_roce((void *)(long)skb->data, (void *)(long)skb->data_end, r);
	}
	return res;
}

/* qp_addresses_match reports whether the packet goes from qp's peer to its
 * local address: a stale or foreign packet that names the QP is not its
 * notification. */
static __always_inline int qp_addresses_match(const struct np_qp *qp, const struct net_roce *r,
					      void *data_end)
{
	if (r->l3_proto == bpf_htons(ETH_P_IP)) {
		const struct iphdr *ip = r->l3;

		if (qp->family != NP_FAMILY_IPV4 || (void *)(ip + 1) > data_end)
			return 0;
		return ip->saddr == *(const __u32 *)qp->peer_ip && ip->daddr == *(const __u32 *)qp->local_ip;
	}
	if (r->l3_proto == bpf_htons(ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = r->l3;
		const __u32 *s, *d, *p = (const __u32 *)qp->peer_ip, *l = (const __u32 *)qp->local_ip;

		if (qp->family != NP_FAMILY_IPV6 || (void *)(ip6 + 1) > data_end)
			return 0;
		s = (const __u32 *)ip6->saddr;
		d = (const __u32 *)ip6->daddr;
		return s[0] == p[0] && s[1] == p[1] && s[2] == p[2] && s[3] == p[3] &&
		       d[0] == l[0] && d[1] == l[1] && d[2] == l[2] && d[3] == l[3];
	}
	return 0;
}

enum np_decision {
	NP_NONE = 0,  /* nothing to send */
	NP_SEND = 1,  /* a CNP for this CE */
	NP_HELD = 2,  /* the pending CNP of an earlier CE */
};

/* may_send reports whether the QP may decide a CNP at now: none in flight,
 * and N passed since the last one. Signed: a CPU whose clock reading
 * predates another CPU's CNP must see it as recent. Precondition: qp->lock
 * is held. */
static __always_inline int may_send(const struct np_qp *qp, __u64 now)
{
	if (qp->inflight)
		return 0;
	return !qp->sent_any || (__s64)(now - qp->last_cnp_ns) >= (__s64)qp->min_time_ns;
}

/* decide_send records a CNP decided at now. Precondition: qp->lock is
 * held. */
static __always_inline void decide_send(struct np_qp *qp, __u64 now)
{
	qp->sent_any = 1;
	qp->pending = 0;
	qp->inflight = 1;
	qp->last_cnp_ns = now;
}

/* on_ce is the NP's rule for a CE-marked packet at now (host/dcqcn NP.OnCE). */
static __always_inline enum np_decision on_ce(struct np_qp *qp, __u64 now)
{
	enum np_decision d;

	bpf_spin_lock(&qp->lock);
	qp->ecn_marked++;
	if (may_send(qp, now)) {
		decide_send(qp, now);
		d = NP_SEND;
	} else {
		qp->pending = 1;
		qp->coalesced++;
		d = NP_NONE;
	}
	bpf_spin_unlock(&qp->lock);
	return d;
}

/* on_packet sends a pending CNP once N has passed (host/dcqcn NP.Poll),
 * with any RC request of the QP as the clock tick. */
static __always_inline enum np_decision on_packet(struct np_qp *qp, __u64 now)
{
	enum np_decision d = NP_NONE;

	if (!READ_ONCE(qp->pending)) /* the common case, without the lock */
		return NP_NONE;
	bpf_spin_lock(&qp->lock);
	if (qp->pending && may_send(qp, now)) {
		decide_send(qp, now);
		d = NP_HELD;
	}
	bpf_spin_unlock(&qp->lock);
	return d;
}

/* send_cnp clones the packet to the device's egress, where np_egress turns
 * the clone into the CNP before the call returns; then the QP has no CNP in
 * flight. The packet's own mark is put back. */
static __always_inline void send_cnp(struct __sk_buff *skb, struct np_qp *qp, struct np_stats *st,
				     enum np_decision d)
{
	__u32 mark = skb->mark;
	long ret;

	skb->mark = np_mark;
	if (test_hooks) {
		test_redirects++;
		ret = test_redirect_ret;
	} else {
		ret = bpf_clone_redirect(skb, skb->ifindex, 0);
	}
	skb->mark = mark;

	bpf_spin_lock(&qp->lock);
	qp->inflight = 0;
	if (ret) {
		qp->redirect_errors++;
		qp->pending = 1; /* a later packet tries again, N after this one */
	} else {
		qp->cnp_sent++;
		if (d == NP_HELD)
			qp->held_sent++;
	}
	bpf_spin_unlock(&qp->lock);
	if (ret) {
		st->redirect_errors++;
		return;
	}
	st->cnp_sent++;
	if (d == NP_HELD)
		st->held_sent++;
}

SEC("tc")
int np_ingress(struct __sk_buff *skb)
{
	struct net_roce r = {};
	enum np_decision d;
	struct np_stats *st;
	struct np_qp *qp;
	__u32 qpn;
	__u8 op;

	st = stats();
	if (!st)
		return TC_ACT_UNSPEC;
	st->packets++;

	switch (parse(skb, &r)) {
	case NET_ROCE_OK:
		break;
	case NET_ROCE_TRUNCATED:
		st->truncated++;
		return TC_ACT_UNSPEC;
	default:
		st->not_roce++;
		return TC_ACT_UNSPEC;
	}
	if (r.vlan_tags) {
		st->vlan++;
		return TC_ACT_UNSPEC;
	}
	if (r.ipv4_options) {
		st->ip_options++;
		return TC_ACT_UNSPEC;
	}
	if (r.ipv4_fragment) {
		st->fragment++;
		return TC_ACT_UNSPEC;
	}
	op = r.bth->opcode;
	if (op > ROCE_OP_RC_LAST_REQUEST || (r.bth->flags & ROCE_BTH_TVER_MASK)) {
		st->not_request++;
		return TC_ACT_UNSPEC;
	}
	qpn = roce_bth_destqp(r.bth);
	qp = bpf_map_lookup_elem(&np_qps, &qpn);
	if (!qp || !qp_addresses_match(qp, &r, (void *)(long)skb->data_end)) {
		st->unknown_qp++;
		return TC_ACT_UNSPEC;
	}
	if ((r.dsfield & ECN_MASK) == ECN_CE) {
		st->ce++;
		d = on_ce(qp, now_ns());
		if (d == NP_NONE)
			st->coalesced++;
	} else {
		st->not_ce++;
		d = on_packet(qp, now_ns());
	}
	if (d != NP_NONE)
		send_cnp(skb, qp, st, d);
	return TC_ACT_UNSPEC;
}

SEC("tc")
int np_egress(struct __sk_buff *skb)
{
	struct cnp_frame f = {};
	struct net_roce r = {};
	struct np_stats *st;
	struct ethhdr *eth;
	struct np_qp *qp;
	__u32 qpn, len;
	__u64 now;

	if (skb->mark != np_mark)
		return TC_ACT_UNSPEC;
	st = stats();
	if (!st)
		return TC_ACT_SHOT; /* never let a clone out as data */
	st->egress_clones++;

	if (parse(skb, &r) != NET_ROCE_OK || r.vlan_tags || r.ipv4_options)
		goto drop;
	if (r.bth->opcode == ROCE_OP_CNP)
		return TC_ACT_UNSPEC; /* already a CNP: passing this hook again */
	qpn = roce_bth_destqp(r.bth);
	qp = bpf_map_lookup_elem(&np_qps, &qpn);
	if (!qp) /* removed since np_ingress looked it up */
		goto drop;
	eth = (void *)(long)skb->data;
	if ((void *)(eth + 1) > (void *)(long)skb->data_end)
		goto drop;
	len = cnp_build(&f, qp, eth);
	if (len == 0)
		goto drop;
	if (bpf_skb_change_tail(skb, len, 0))
		goto drop;
	if (bpf_skb_store_bytes(skb, 0, &f.eth, len, BPF_F_RECOMPUTE_CSUM | BPF_F_INVALIDATE_HASH))
		goto drop;

	/* The CNP leaves now: N counts from here. */
	now = now_ns();
	bpf_spin_lock(&qp->lock);
	if (qp->last_out_ns && now - qp->last_out_ns < qp->min_spacing_ns)
		qp->min_spacing_ns = now - qp->last_out_ns;
	qp->last_out_ns = now;
	if ((__s64)(now - qp->last_cnp_ns) > 0)
		qp->last_cnp_ns = now;
	bpf_spin_unlock(&qp->lock);
	st->egress_built++;
	return TC_ACT_UNSPEC;
drop:
	st->egress_dropped++;
	return TC_ACT_SHOT;
}

/* np_icrc_test computes the ICRC of an Ethernet + IPv4 (no options) RoCEv2
 * packet of at most ICRC_TEST_MAX bytes from the IP header through the ICRC,
 * with the routine np_egress uses, and writes it over the packet's last 4
 * bytes. Tests only (the roce-wire.md vectors); never attached. */
SEC("tc")
int np_icrc_test(struct __sk_buff *skb)
{
	__u8 buf[ICRC_TEST_MAX] = {};
	__u32 off = sizeof(struct ethhdr), len, icrc;

	if (skb->len <= off + ROCE_ICRC_LEN || skb->len > off + ICRC_TEST_MAX)
		return TC_ACT_SHOT;
	len = skb->len - off - ROCE_ICRC_LEN; /* covered: IP header up to the ICRC */
	if (len < sizeof(struct iphdr) + sizeof(struct net_udphdr) + ROCE_BTH_LEN || len > ICRC_TEST_MAX)
		return TC_ACT_SHOT;
	if (bpf_skb_load_bytes(skb, off, buf, len))
		return TC_ACT_SHOT;
	/* IPv4 TOS, TTL, checksum; UDP checksum; BTH byte 4. */
	buf[1] = ICRC_MASKED;
	buf[8] = ICRC_MASKED;
	buf[10] = ICRC_MASKED;
	buf[11] = ICRC_MASKED;
	buf[sizeof(struct iphdr) + 6] = ICRC_MASKED;
	buf[sizeof(struct iphdr) + 7] = ICRC_MASKED;
	buf[sizeof(struct iphdr) + sizeof(struct net_udphdr) + 4] = ICRC_MASKED;
	icrc = icrc_crc(buf, len, ICRC_TEST_MAX);
	if (bpf_skb_store_bytes(skb, off + len, &icrc, sizeof(icrc), 0))
		return TC_ACT_SHOT;
	return TC_ACT_UNSPEC;
}
