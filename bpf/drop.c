//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Random loss for kernels without netem: drop_udp runs at TC (TCX) egress or
 * ingress of a device and drops a configurable fraction of the UDP datagrams
 * to one destination port (RoCEv2's 4791 by default), independently for each
 * packet, with bpf_get_prandom_u32. Everything else passes untouched.
 *
 * The fraction is runtime state (drop_cfg, parts per million), so a test can
 * change it on a live link; the port is a load-time setting. Counters are
 * per-CPU and summed by the Go side: with them the loss actually applied is
 * measured, not assumed.
 *
 * Parsed: Ethernet, up to VLAN_MAX_DEPTH in-band 802.1Q/802.1ad tags, IPv4
 * (options allowed; a non-first fragment carries no UDP header and is not a
 * candidate) or IPv6 with UDP as the first next header. Every header read is
 * bounds-checked; a truncated frame is counted and passed.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "net.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define TC_ACT_UNSPEC (-1) /* TCX_NEXT: let later programs and the qdisc see it */
#define TC_ACT_SHOT 2

#define IPPROTO_UDP 17
#define IP_OFFSET_MASK 0x1FFF /* fragment offset, in 8-byte units */

/* drop_cfg holds the drop probability in parts per million. */
#define DROP_PPM_ONE 1000000

struct udphdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__sum16 check;
};

/* Load-time settings. */

/* The UDP destination port whose datagrams are candidates, host order. */
volatile const __u16 udp_dport = ROCE_UDP_PORT;

/* Tests only: draw the random number from test_rand instead of
 * bpf_get_prandom_u32, so BPF_PROG_RUN can check the decision. */
volatile const __u8 test_hooks = 0;

__u32 test_rand = 0;

/* Runtime settings: key 0 is the drop probability in ppm (0 never drops,
 * DROP_PPM_ONE drops every candidate). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} drop_cfg SEC(".maps");

/* Per-CPU counters, summed by the Go side. packets = candidates + other +
 * malformed; candidates = dropped + the candidates passed. */
struct drop_stats {
	__u64 packets;       /* every frame the program saw */
	__u64 candidates;    /* UDP datagrams to udp_dport */
	__u64 dropped;       /* candidates dropped */
	__u64 dropped_bytes; /* their skb->len (L2 frame at TC) */
	__u64 other;         /* not a candidate: other protocol or port, non-IP, later fragment */
	__u64 malformed;     /* headers cut short: passed */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct drop_stats);
} drop_counters SEC(".maps");

enum verdict {
	VERDICT_CANDIDATE,
	VERDICT_OTHER,
	VERDICT_MALFORMED,
};

/* The most classify reads: Ethernet, two tags, an IPv4 header with the
 * longest options (60 bytes, more than IPv6's 40) and UDP. */
#define PARSE_LEN (sizeof(struct ethhdr) + VLAN_MAX_DEPTH * sizeof(struct vlan_hdr) + 60 + sizeof(struct udphdr))

static __always_inline enum verdict check_udp(struct udphdr *udp, void *data_end)
{
	if ((void *)(udp + 1) > data_end)
		return VERDICT_MALFORMED;
	if (udp->dest != bpf_htons(udp_dport))
		return VERDICT_OTHER;
	return VERDICT_CANDIDATE;
}

/* classify says whether the frame is a UDP datagram to udp_dport. */
static __always_inline enum verdict classify(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__be16 proto;
	__u32 off;
	__u8 tags;

	if (net_l3(data, data_end, &proto, &off, &tags))
		return VERDICT_MALFORMED;

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;
		__u32 ihl;

		if ((void *)(ip + 1) > data_end)
			return VERDICT_MALFORMED;
		if (ip->version != 4 || ip->ihl < 5)
			return VERDICT_MALFORMED;
		if (ip->protocol != IPPROTO_UDP)
			return VERDICT_OTHER;
		if (ip->frag_off & bpf_htons(IP_OFFSET_MASK))
			return VERDICT_OTHER; /* no UDP header in a later fragment */
		ihl = ip->ihl * 4;
		return check_udp((void *)ip + ihl, data_end);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;

		if ((void *)(ip6 + 1) > data_end)
			return VERDICT_MALFORMED;
		if (ip6->version != 6)
			return VERDICT_MALFORMED;
		if (ip6->nexthdr != IPPROTO_UDP)
			return VERDICT_OTHER; /* extension headers are not followed */
		return check_udp((void *)(ip6 + 1), data_end);
	}
	return VERDICT_OTHER;
}

static __always_inline __u32 random_u32(void)
{
	if (test_hooks)
		return test_rand;
	return bpf_get_prandom_u32();
}

SEC("tc")
int drop_udp(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct drop_stats *st = bpf_map_lookup_elem(&drop_counters, &zero);
	__u32 *ppm = bpf_map_lookup_elem(&drop_cfg, &zero);
	enum verdict v;

	if (!st || !ppm)
		return TC_ACT_UNSPEC;
	st->packets++;

	v = classify(skb);
	if (v == VERDICT_MALFORMED && skb->len > skb->data_end - skb->data) {
		/* Headers in a fragment of the skb: pull them and retry. */
		__u32 want = skb->len < PARSE_LEN ? skb->len : PARSE_LEN;

		if (bpf_skb_pull_data(skb, want) == 0)
			v = classify(skb);
	}
	if (v == VERDICT_MALFORMED) {
		st->malformed++;
		return TC_ACT_UNSPEC;
	}
	if (v == VERDICT_OTHER) {
		st->other++;
		return TC_ACT_UNSPEC;
	}
	st->candidates++;
	/* A uniform draw in [0, DROP_PPM_ONE): multiply and shift instead of a
	 * modulo, exact at both ends (0 never drops, DROP_PPM_ONE always). */
	if ((((__u64)random_u32() * DROP_PPM_ONE) >> 32) < *ppm) {
		st->dropped++;
		st->dropped_bytes += skb->len;
		return TC_ACT_SHOT;
	}
	return TC_ACT_UNSPEC;
}
