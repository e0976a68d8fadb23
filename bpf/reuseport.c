//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * QPN steering for the RoCEv2 agents of one host (network namespace).
 *
 * A NIC owns UDP 4791 and hands each packet to the queue pair its BTH
 * DestQP names. Here every agent binds UDP 4791 with SO_REUSEPORT, and
 * rocev2_steer, attached to that reuseport group (SO_ATTACH_REUSEPORT_EBPF),
 * picks the agent's socket by the DestQP's top byte: each agent claims one
 * free slot of rocev2_socks (BPF_NOEXIST) and numbers its QPs
 * slot << 16 | n, so QPNs are unique on the host. The kernel empties a slot
 * when its socket closes.
 *
 * A packet whose slot holds no socket is for a QPN no agent owns: it is
 * dropped and counted (unknown_qp), as a NIC drops it. So is a datagram too
 * short for a BTH (malformed), and one whose slot holds a socket of another
 * reuseport group (misdirected: the other IP family or another port).
 *
 * A PPFC notification (seed 003: opcode 0x81 with the BTH P bit set) names
 * a congested destination, not a QP: its DestQP is 0. It is for the host,
 * and goes to the agent in the lowest occupied slot of this group (ppfc).
 * With several agents on a host only that one receives it: it pauses its
 * own QPs toward the destination, the others' keep sending. An agent
 * that lets only some switches pause it (host/agent Config.PPFCSources)
 * sets its slot in rocev2_ppfc_filter and its prefixes, keyed by slot, in
 * rocev2_ppfc_src: a notification for that slot from any other source is
 * dropped here (ppfc_ignored_source), so a storm of them from a
 * non-switch costs the host no socket wake-up, copy or ICRC check.
 *
 * All agents of a namespace share these maps; rocev2_owner records which
 * namespace they serve and the IDs of the other two, so that an agent
 * starting later finds them (see host/pktio/steer_linux.go).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual BSD/GPL";

#define ENOENT 2

#define UDP_HLEN 8
#define BTH_LEN 12
#define ICRC_LEN 4
/* BTH byte 0 is the OpCode, byte 4 holds F|B|P|RSV5 (P: seed 003), bytes
 * 5-7 are the DestQP; byte 5 is its top byte, the slot. */
#define BTH_OPCODE_OFF 0
#define BTH_FLAGS_OFF 4
#define BTH_DESTQP_OFF 5
#define BTH_HEAD_LEN (BTH_DESTQP_OFF + 1) /* the bytes read */
#define OP_CNP 0x81                       /* CNP, and PPFC with P set */
#define BTH_P 0x20
/* DestQP >> QPN_SLOT_SHIFT is the slot: 256 agents of 65536 QPNs each. */
#define QPN_SLOT_SHIFT 16
#define STEER_SLOTS 256
/* Prefixes of all agents' PPFC sources together. */
#define PPFC_SRC_MAX 4096
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD

/* Slot -> the agent's UDP socket. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, STEER_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} rocev2_socks SEC(".maps");

/* Per-CPU counters, summed by the Go side. */
struct steer_stats {
	__u64 steered;     /* handed to the socket of the DestQP's slot */
	__u64 unknown_qp;  /* dropped: no agent holds the DestQP's slot */
	__u64 misdirected; /* dropped: the slot's socket is in another group */
	__u64 malformed;   /* dropped: shorter than UDP + BTH + ICRC */
	__u64 ppfc;        /* PPFC notifications handed to the lowest slot */
	__u64 ppfc_ignored_source; /* dropped: a PPFC notification from outside its agent's sources */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_stats);
} rocev2_stats SEC(".maps");

/* A source prefix of the agent in slot: the address as IPv6 (IPv4
 * mapped, ::ffff:a.b.c.d), prefixlen counting the slot's 8 bits first. */
struct ppfc_src_key {
	__u32 prefixlen;
	__u8 slot;
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, PPFC_SRC_MAX);
	__type(key, struct ppfc_src_key);
	__type(value, __u8);
} rocev2_ppfc_src SEC(".maps");

/* Slot -> 1 if its agent takes PPFC notifications only from its prefixes
 * in rocev2_ppfc_src. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} rocev2_ppfc_filter SEC(".maps");

/* Written by the agent that creates the maps, read by the ones that join. */
struct steer_owner {
	__u64 netns_cookie;   /* SO_NETNS_COOKIE of the namespace served */
	__u32 socks_id;       /* map ID of rocev2_socks */
	__u32 stats_id;       /* map ID of rocev2_stats */
	__u32 version;        /* layout of these maps, STEER_VERSION on the Go side */
	__u32 ppfc_src_id;    /* map ID of rocev2_ppfc_src */
	__u32 ppfc_filter_id; /* map ID of rocev2_ppfc_filter */
	__u32 reserved;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_owner);
} rocev2_owner SEC(".maps");

/* bth_head reads the BTH's first BTH_HEAD_LEN bytes into head; -1 if the
 * datagram is too short. */
static __always_inline int bth_head(struct sk_reuseport_md *md, __u8 head[BTH_HEAD_LEN])
{
	void *data = (void *)(long)md->data;
	void *data_end = (void *)(long)md->data_end;
	__u8 *p = data + UDP_HLEN;

	if (md->len < UDP_HLEN + BTH_LEN + ICRC_LEN)
		return -1;
	if ((void *)(p + BTH_HEAD_LEN) <= data_end) {
		__builtin_memcpy(head, p, BTH_HEAD_LEN);
		return 0;
	}
	/* Not in the linear part: copy it out. */
	if (bpf_skb_load_bytes(md, UDP_HLEN, head, BTH_HEAD_LEN) < 0)
		return -1;
	return 0;
}

/* ppfc_source_ok reports whether the agent in slot takes a PPFC
 * notification from the datagram's IP source. */
static __always_inline int ppfc_source_ok(struct sk_reuseport_md *md, __u32 slot)
{
	struct ppfc_src_key k = {.prefixlen = 8 + 128, .slot = slot};
	__u32 *filter = bpf_map_lookup_elem(&rocev2_ppfc_filter, &slot);

	if (!filter || !*filter)
		return 1;
	if (md->eth_protocol == bpf_htons(ETH_P_IP)) {
		k.addr[10] = 0xff;
		k.addr[11] = 0xff;
		/* The IPv4 source address, bytes 12-15 of the header. */
		if (bpf_skb_load_bytes_relative(md, 12, &k.addr[12], 4, BPF_HDR_START_NET))
			return 0;
	} else if (md->eth_protocol == bpf_htons(ETH_P_IPV6)) {
		/* The IPv6 source address, bytes 8-23 of the header. */
		if (bpf_skb_load_bytes_relative(md, 8, k.addr, 16, BPF_HDR_START_NET))
			return 0;
	} else {
		return 0;
	}
	return bpf_map_lookup_elem(&rocev2_ppfc_src, &k) != NULL;
}

/* steer_ppfc hands a PPFC notification to the lowest occupied slot whose
 * socket is in this group (a slot of the other family is skipped), if
 * that slot's agent takes it from its source; with none, it is dropped as
 * unknown_qp. */
static __always_inline int steer_ppfc(struct sk_reuseport_md *md, struct steer_stats *st)
{
	__u32 i;

	for (i = 0; i < STEER_SLOTS; i++) {
		/* A copy: the helper takes the key by pointer, and a counter
		 * kept on the stack would lose its bounds. */
		__u32 key = i;

		if (bpf_sk_select_reuseport(md, &rocev2_socks, &key, 0) == 0) {
			if (!ppfc_source_ok(md, key)) {
				st->ppfc_ignored_source++;
				return SK_DROP;
			}
			st->ppfc++;
			return SK_PASS;
		}
	}
	st->unknown_qp++;
	return SK_DROP;
}

SEC("sk_reuseport")
int rocev2_steer(struct sk_reuseport_md *md)
{
	__u32 zero = 0;
	struct steer_stats *st = bpf_map_lookup_elem(&rocev2_stats, &zero);
	__u8 head[BTH_HEAD_LEN];
	__u32 key;
	long err;

	if (!st)
		return SK_DROP;
	if (bth_head(md, head) < 0) {
		st->malformed++;
		return SK_DROP;
	}
	if (head[BTH_OPCODE_OFF] == OP_CNP && (head[BTH_FLAGS_OFF] & BTH_P))
		return steer_ppfc(md, st);
	key = head[BTH_DESTQP_OFF];
	err = bpf_sk_select_reuseport(md, &rocev2_socks, &key, 0);
	if (err == 0) {
		st->steered++;
		return SK_PASS;
	}
	if (err == -ENOENT)
		st->unknown_qp++;
	else
		st->misdirected++;
	return SK_DROP;
}
