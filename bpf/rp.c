//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The DCQCN reaction point's CNP intake in the kernel: the sender's device
 * takes a CNP when it arrives, not when the agent's receive loop gets to it
 * (issue 9 §2: that wait was p50 270 µs, p99 16 ms). host/rpbpf loads and
 * attaches it; host/agent's QPs read what it counts.
 *
 * rp_ingress runs at TCX ingress of the sender's devices. It parses
 * Ethernet / up to two VLAN tags / IPv4 (no options) or IPv6 / UDP 4791 /
 * BTH (net.h). A CNP (opcode 0x81 without the PPFC P bit, a 40-byte UDP
 * datagram) to a QP in rp_qps, from the QP's peer to its local address,
 * that passes the BTH rules (roce_check.h: TVer 0, PadCnt 0, the QP's
 * P_Key) with a correct ICRC, is counted in the QP's slot of rp_cnps: its arrival
 * time (bpf_ktime_get_ns, CLOCK_MONOTONIC) goes into a ring of RP_RING
 * times, then the count goes up.
 *
 * rp_cnps is a BPF_F_MMAPABLE array that the agent maps read-only. A QP
 * reads its slot before every decision that uses Rc (its transmit loop's
 * pacing, window and AckReq spacing) and runs its host/dcqcn RP on each CNP
 * counted since the last read, at that CNP's arrival time. So the cut holds
 * from the arrival on: no packet is paced at the old Rc after the CNP
 * reached the device. The rate arithmetic stays in one place (host/dcqcn,
 * every profile and rule); the kernel only takes the CNP and its time, as
 * a NIC's RP takes it from the wire.
 *
 * PPFC (seed 003) likewise: a notification (opcode 0x81 with the P bit, a
 * 48-byte UDP datagram: BTH, the 24-byte extension, ICRC) with TVer 0, sent to a local address toward whose peer (the congested
 * destination it names) a QP sends, rp_ppfc_peers says which, and has a
 * correct ICRC is recorded in that pair's slot of rp_ppfc: its arrival
 * time, source, action and Pause Duration in a ring of RP_PPFC_RING, then
 * the count goes up. The agent's QPs toward that peer read the slot before
 * each transmit decision and obey each notification from its arrival on
 * (host/agent ppfc.go: the rules, the sources it takes, the watchdog stay
 * there), not when the receive loop, which may lag tens of ms behind the
 * ACKs queued ahead of it, gets to it.
 *
 * A run of datagrams a device with GRO on coalesced into one sk_buff
 * (gso_size set) is left to the agent whole (gro_runs): the ICRC of each
 * CNP in it covers an IP header the run no longer has.
 *
 * Every packet continues untouched (TC_ACT_UNSPEC: the agent still receives
 * the CNP and counts it). What is not a CNP of a known QP nor a PPFC
 * notification of a known pair is counted by cause in rp_counters and
 * passed.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "net.h"
#include "icrc.h"
#include "roce_check.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define TC_ACT_UNSPEC (-1) /* TCX_NEXT */

#define RP_FAMILY_IPV4 4
#define RP_FAMILY_IPV6 6

/* Arrival times kept per QP: the agent reads its slot at least every
 * pacing pass (at most a few hundred µs apart), and CNPs of one QP come at
 * most one per min_time_between_cnps (4-50 µs). */
#define RP_RING 14

/* QP slots in rp_cnps: 16384 x 128 bytes, 512 pages (2 MiB): as many as
 * host/perf lets one client open (issue 28: 10,000 QPs on one agent). */
#define RP_SLOTS 16384

/* The longest IP packet rp_ingress checks the ICRC of: an IPv6 PPFC
 * notification. */
#define RP_ICRC_IP_MAX (40 + ROCE_PPFC_L4_LEN)

/* PPFC notifications kept per pair: a QP reads its pair's slot before
 * each transmit decision, and a port sends one per packet at most. */
#define RP_PPFC_RING 7

/* Pair slots in rp_ppfc: 4096 x 256 bytes (1 MiB). */
#define RP_PPFC_SLOTS 4096

/* Load-time settings. */

/* Tests only: read the clock from test_now_ns. */
volatile const __u8 test_hooks = 0;

__u64 test_now_ns = 0;

/* The QP, keyed by its local (sender) QPN: the DestQP of its CNPs. Go
 * writes it when the QP connects (host/rpbpf AddQP). */
struct rp_qp {
	/* Addresses in network order, IPv4 in the first 4 bytes. */
	__u8 local_ip[16]; /* the sender: the CNP's destination */
	__u8 peer_ip[16];  /* the receiver (the NP): the CNP's source */
	__u32 slot;        /* the QP's index in rp_cnps */
	__u16 pkey;        /* the QP's P_Key, host order */
	__u8 family;       /* RP_FAMILY_IPV4 or RP_FAMILY_IPV6 */
	__u8 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RP_SLOTS);
	__type(key, __u32);
	__type(value, struct rp_qp);
} rp_qps SEC(".maps");

/* One QP's CNPs. CNP i (from 0, since the slot was created) arrived at
 * at_ns[i % RP_RING]; counted goes up only after that time is stored, so a
 * reader that sees counted = n may read the times of CNPs n-RP_RING..n-1.
 * claimed hands out the places: two CPUs counting CNPs of one QP at once
 * each get their own. */
struct rp_slot {
	__u64 counted;
	__u64 claimed;
	__u64 at_ns[RP_RING];
};

_Static_assert(sizeof(struct rp_slot) == 128, "two cache lines per slot");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, RP_SLOTS);
	__type(key, __u32);
	__type(value, struct rp_slot);
} rp_cnps SEC(".maps");

/* A local address and a peer a QP sends to: both 16 bytes, an IPv4 address
 * IPv4-mapped (::ffff:a.b.c.d), as a PPFC notification names its
 * destination. Go writes it when the first QP of the pair connects
 * (host/rpbpf AddQP). */
struct rp_ppfc_key {
	__u8 local_ip[16]; /* the source a port pauses: the notification's destination */
	__u8 peer_ip[16];  /* the congested destination it names */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RP_PPFC_SLOTS);
	__type(key, struct rp_ppfc_key);
	__type(value, __u32); /* the pair's index in rp_ppfc */
} rp_ppfc_peers SEC(".maps");

/* One PPFC notification as the device took it. */
struct rp_ppfc_event {
	__u64 at_ns;     /* arrival, CLOCK_MONOTONIC */
	__u8 src_ip[16]; /* the port that sent it, IPv4-mapped */
	__u16 action;    /* PT: 0 stop, 1 resume, 2 alarm, 3 hold */
	__u16 pause_us;  /* Pause Duration */
	__u32 psn;       /* the BTH PSN: the port's sequence per source */
};

/* One pair's notifications, as rp_slot: event i at ev[i % RP_PPFC_RING];
 * counted goes up after the event is stored. */
struct rp_ppfc_slot {
	__u64 counted;
	__u64 claimed;
	struct rp_ppfc_event ev[RP_PPFC_RING];
	__u64 _pad[2];
};

_Static_assert(sizeof(struct rp_ppfc_event) == 32, "an event is 32 bytes");
_Static_assert(sizeof(struct rp_ppfc_slot) == 256, "four cache lines per slot");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, RP_PPFC_SLOTS);
	__type(key, __u32);
	__type(value, struct rp_ppfc_slot);
} rp_ppfc SEC(".maps");

/* Per-CPU counters, summed by Go. Every packet rp_ingress sees is counted
 * once in packets and once in exactly one of not_roce, truncated,
 * gro_runs, ip_options, not_cnp, ppfc, malformed, unknown_qp,
 * pkey_violations, icrc_errors, counted, ppfc_counted. */
struct rp_stats {
	__u64 packets;     /* every frame rp_ingress saw */
	__u64 not_roce;    /* non-IP, not UDP to 4791, IPv6 extension headers, later fragments */
	__u64 truncated;   /* headers cut short */
	__u64 ip_options;  /* RoCEv2 in an IPv4 header with options: no CNP is sent so */
	__u64 not_cnp;     /* RoCEv2 but not opcode 0x81 (data, ACKs, ...) */
	__u64 ppfc;        /* a PPFC notification (opcode 0x81, P bit) to no known pair:
			    * the agent's */
	__u64 malformed;   /* a CNP (PPFC notification) that is not a 40-byte (48-byte)
			    * unfragmented datagram, or breaks a BTH rule
			    * (roce_check.h: TVer, PadCnt) */
	__u64 unknown_qp;  /* a CNP to a QP not in rp_qps, or not from its peer to its address */
	__u64 icrc_errors; /* a CNP of a known QP (PPFC notification of a known pair)
			    * whose ICRC does not verify */
	__u64 counted;     /* CNPs counted in their QP's slot */
	__u64 pkey_violations; /* a CNP of a known QP whose P_Key does not match the QP's */
	__u64 gro_runs;        /* RoCEv2 runs of datagrams a device coalesced (GRO): the agent's */
	__u64 ppfc_counted;    /* PPFC notifications recorded in their pair's slot */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rp_stats);
} rp_counters SEC(".maps");

static __always_inline __u64 now_ns(void)
{
	if (test_hooks)
		return test_now_ns;
	return bpf_ktime_get_ns();
}

/* icrc_ok checks the ICRC of a CNP or PPFC notification, l4_len bytes
 * from its UDP header on (roce-wire.md §ICRC): the IP packet copied out
 * with the fields the ICRC masks set to ones, CRC-32 from the LRH state,
 * compared with the last 4 bytes (little-endian on the wire). l4_len is a
 * constant at each call. */
static __always_inline int icrc_ok(struct __sk_buff *skb, const struct net_roce *r, const __u32 l4_len)
{
	__u8 buf[RP_ICRC_IP_MAX] = {};
	__u32 ip_len, icrc;

	if (r->l3_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (struct iphdr *)buf;

		ip_len = sizeof(*ip) + l4_len;
		if (bpf_skb_load_bytes(skb, r->l3_off, buf, sizeof(*ip) + l4_len))
			return 0;
		ip->tos = ICRC_MASKED;
		ip->ttl = ICRC_MASKED;
		ip->check = 0xFFFF;
	} else {
		struct ipv6hdr *ip6 = (struct ipv6hdr *)buf;

		ip_len = sizeof(*ip6) + l4_len;
		if (bpf_skb_load_bytes(skb, r->l3_off, buf, sizeof(*ip6) + l4_len))
			return 0;
		ip6->priority = 0xF;
		ip6->flow_lbl[0] = ICRC_MASKED;
		ip6->flow_lbl[1] = ICRC_MASKED;
		ip6->flow_lbl[2] = ICRC_MASKED;
		ip6->hop_limit = ICRC_MASKED;
	}
	/* The UDP checksum and BTH byte 4 (F, B, P, reserved). */
	buf[ip_len - l4_len + 6] = ICRC_MASKED;
	buf[ip_len - l4_len + 7] = ICRC_MASKED;
	buf[ip_len - l4_len + sizeof(struct net_udphdr) + 4] = ICRC_MASKED;
	__builtin_memcpy(&icrc, &buf[ip_len - ROCE_ICRC_LEN], sizeof(icrc));
	return icrc_crc(buf, ip_len - ROCE_ICRC_LEN, RP_ICRC_IP_MAX - ROCE_ICRC_LEN) == icrc;
}

/* count_cnp records a CNP of the QP in slot at now. */
static __always_inline int count_cnp(__u32 slot, __u64 now)
{
	struct rp_slot *s = bpf_map_lookup_elem(&rp_cnps, &slot);
	__u64 idx;

	if (!s)
		return 0;
	idx = __sync_fetch_and_add(&s->claimed, 1) % RP_RING;
	asm volatile("" : "+r"(idx)); /* keep the bound check: the verifier does not follow % */
	if (idx >= RP_RING)
		return 0;
	s->at_ns[idx] = now;
	__sync_fetch_and_add(&s->counted, 1);
	return 1;
}

/* PPFC extension offsets after the BTH (host/roce ppfc.go). */
#define PPFC_OFF_DEST 0
#define PPFC_OFF_FLAGS_PT 16
#define PPFC_OFF_PAUSE 22
#define PPFC_PT_MASK 0x3

/* ip_mapped writes the packet's address a (4 bytes for IPv4, 16 for IPv6)
 * as 16 bytes, IPv4-mapped. */
static __always_inline void ip_mapped(__u8 out[16], const void *a, int is_v4)
{
	if (is_v4) {
		__builtin_memset(out, 0, 10);
		out[10] = 0xFF;
		out[11] = 0xFF;
		__builtin_memcpy(out + 12, a, 4);
	} else {
		__builtin_memcpy(out, a, 16);
	}
}

/* take_ppfc records the PPFC notification r parsed, if its pair is known
 * and it verifies; it counts the packet's cause in st. */
static __always_inline void take_ppfc(struct __sk_buff *skb, const struct net_roce *r, struct rp_stats *st, __u64 now)
{
	void *data_end = (void *)(long)skb->data_end;
	__u8 ext[ROCE_PPFC_EXT_LEN];
	struct rp_ppfc_key key = {};
	const void *daddr, *saddr;
	__u8 src[16];
	struct rp_ppfc_slot *s;
	__u32 *slot, idx;
	__u64 claim;
	int is_v4 = r->l3_proto == bpf_htons(ETH_P_IP);

	if (r->ipv4_options) {
		st->ip_options++;
		return;
	}
	/* roce.ParsePPFC's rules: the length and TVer 0 (PadCnt, P_Key and
	 * the rest carry nothing for the source). */
	if (r->ipv4_fragment || bpf_ntohs(r->udp->len) != ROCE_PPFC_L4_LEN || (r->bth->flags & ROCE_BTH_TVER_MASK) ||
	    bpf_skb_load_bytes(skb, r->l3_off + (is_v4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr)) +
					 sizeof(struct net_udphdr) + ROCE_BTH_LEN, ext, sizeof(ext))) {
		st->malformed++;
		return;
	}
	__builtin_memcpy(key.peer_ip, ext + PPFC_OFF_DEST, 16);
	if (is_v4) {
		const struct iphdr *ip = r->l3;

		if ((void *)(ip + 1) > data_end) {
			st->truncated++;
			return;
		}
		daddr = &ip->daddr;
		saddr = &ip->saddr;
	} else {
		const struct ipv6hdr *ip6 = r->l3;

		if ((void *)(ip6 + 1) > data_end) {
			st->truncated++;
			return;
		}
		daddr = &ip6->daddr;
		saddr = &ip6->saddr;
	}
	ip_mapped(key.local_ip, daddr, is_v4);
	ip_mapped(src, saddr, is_v4);
	slot = bpf_map_lookup_elem(&rp_ppfc_peers, &key);
	if (!slot) {
		st->ppfc++; /* no QP of this host sends there: the agent's */
		return;
	}
	if (!icrc_ok(skb, r, ROCE_PPFC_L4_LEN)) {
		st->icrc_errors++;
		return;
	}
	idx = *slot;
	s = bpf_map_lookup_elem(&rp_ppfc, &idx);
	if (!s) {
		st->ppfc++; /* a slot out of range: Go never writes one */
		return;
	}
	claim = __sync_fetch_and_add(&s->claimed, 1) % RP_PPFC_RING;
	asm volatile("" : "+r"(claim)); /* keep the bound check: the verifier does not follow % */
	if (claim >= RP_PPFC_RING)
		return;
	s->ev[claim].at_ns = now;
	__builtin_memcpy(s->ev[claim].src_ip, src, 16);
	s->ev[claim].action = (((__u16)ext[PPFC_OFF_FLAGS_PT] << 8) | ext[PPFC_OFF_FLAGS_PT + 1]) & PPFC_PT_MASK;
	s->ev[claim].pause_us = ((__u16)ext[PPFC_OFF_PAUSE] << 8) | ext[PPFC_OFF_PAUSE + 1];
	s->ev[claim].psn = (__u32)r->bth->psn[0] << 16 | (__u32)r->bth->psn[1] << 8 | r->bth->psn[2];
	__sync_fetch_and_add(&s->counted, 1);
	st->ppfc_counted++;
}

SEC("tc")
int rp_ingress(struct __sk_buff *skb)
{
	struct net_roce r = {};
	struct rp_stats *st;
	struct rp_qp *qp;
	__u32 zero = 0, qpn;
	__u64 now;

	now = now_ns(); /* first: the time the CNP reached the device */
	st = bpf_map_lookup_elem(&rp_counters, &zero);
	if (!st)
		return TC_ACT_UNSPEC;
	st->packets++;

	switch (net_parse_roce_skb(skb, &r)) {
	case NET_ROCE_OK:
		break;
	case NET_ROCE_TRUNCATED:
		st->truncated++;
		return TC_ACT_UNSPEC;
	default:
		st->not_roce++;
		return TC_ACT_UNSPEC;
	}
	/* A run the device coalesced (GRO) is one sk_buff of several
	 * datagrams behind one IP header: not counted here, whatever it
	 * holds. The agent gets its datagrams marked Coalesced
	 * (pktio.Message) and takes its CNPs itself. */
	if (skb->gso_size) {
		st->gro_runs++;
		return TC_ACT_UNSPEC;
	}
	if (r.bth->opcode != ROCE_OP_CNP) {
		st->not_cnp++;
		return TC_ACT_UNSPEC;
	}
	if (r.bth->ecn & ROCE_BTH_PPFC) {
		take_ppfc(skb, &r, st, now);
		return TC_ACT_UNSPEC;
	}
	if (r.ipv4_options) {
		st->ip_options++;
		return TC_ACT_UNSPEC;
	}
	if (r.ipv4_fragment || bpf_ntohs(r.udp->len) != ROCE_CNP_L4_LEN ||
	    !roce_bth_ok(r.bth, ROCE_BTH_LEN + ROCE_CNP_RSVD_LEN, ROCE_CNP_L4_LEN)) {
		st->malformed++;
		return TC_ACT_UNSPEC;
	}
	qpn = roce_bth_destqp(r.bth);
	qp = bpf_map_lookup_elem(&rp_qps, &qpn);
	/* From the QP's peer (the NP) to its address. */
	if (!qp || !net_roce_from_to(&r, (void *)(long)skb->data_end, qp->family == RP_FAMILY_IPV4,
				     qp->peer_ip, qp->local_ip)) {
		st->unknown_qp++;
		return TC_ACT_UNSPEC;
	}
	if (!roce_pkey_match(bpf_ntohs(r.bth->pkey), qp->pkey)) {
		st->pkey_violations++;
		return TC_ACT_UNSPEC;
	}
	if (!icrc_ok(skb, &r, ROCE_CNP_L4_LEN)) {
		st->icrc_errors++;
		return TC_ACT_UNSPEC;
	}
	if (!count_cnp(qp->slot, now)) {
		st->unknown_qp++; /* a slot out of range: Go never writes one */
		return TC_ACT_UNSPEC;
	}
	st->counted++;
	return TC_ACT_UNSPEC;
}
