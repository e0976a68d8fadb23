//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Delay link: the kernel half of a delay element for kernels without netem.
 *
 * delay_divert runs at TC egress of the delayed device (a veth). It sends
 * every unicast IP packet to the egress of an L3 TUN device instead, where a
 * user-space forwarder (netns-tests/topo/delay.go) reads it, holds it for the
 * configured delay and writes it back. Redirecting to an L3 device strips the
 * Ethernet header.
 *
 * delay_return runs at TC ingress of that TUN: every packet written by the
 * forwarder goes out of the delayed device through bpf_redirect_neigh, which
 * looks up the route and the neighbour on that device and fills in the
 * Ethernet header, so routing and ARP/ND stay as they were. The helper needs
 * room for that header in front of the packet (it drops an skb whose MAC
 * header offset is not below its network header, which is how an L3 TUN
 * delivers it), so delay_return pushes an empty one first.
 *
 * The returning packet crosses the device's TC egress hook a second time;
 * delay_divert recognises it by its ingress ifindex (the TUN's) and lets it
 * through to the device's qdisc.
 *
 * Not delayed (passed at once): non-IP frames (ARP), L2 multicast and
 * broadcast, IPv6 neighbour discovery, VLAN-accelerated frames (the tag would
 * not survive the TUN), and frames too short to parse.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "net.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define TC_ACT_UNSPEC (-1) /* TCX_NEXT: let later programs and the qdisc see it */
#define TC_ACT_SHOT 2
#define TC_ACT_REDIRECT 7

#define IPPROTO_ICMPV6 58
#define ICMPV6_ND_FIRST 133 /* router solicitation */
#define ICMPV6_ND_LAST 137  /* redirect */

/* Load-time settings: one load per delay link. */
volatile const __u32 tun_ifindex = 0;
volatile const __u32 dev_ifindex = 0;

/* Per-CPU counters, summed by the Go side. */
struct delay_stats {
	__u64 diverted;        /* packets sent to the TUN (delay_divert) */
	__u64 diverted_bytes;  /* their L3 bytes (without the Ethernet header) */
	__u64 returned;        /* packets the forwarder wrote back, redirected to dev */
	__u64 returned_bytes;
	__u64 reentered;       /* returned packets seen again at dev egress, passed */
	__u64 bypassed;        /* not delayed: non-IP, multicast, ND, VLAN offload */
	__u64 malformed;       /* too short to parse: passed, not delayed */
	__u64 return_dropped;  /* non-IP packet written to the TUN: dropped */
	__u64 redirect_errors; /* a redirect helper refused: dropped */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct delay_stats);
} delay_counters SEC(".maps");

static __always_inline struct delay_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&delay_counters, &zero);
}

enum verdict {
	VERDICT_DIVERT,
	VERDICT_BYPASS,
	VERDICT_MALFORMED,
};

/* classify decides whether a frame at dev egress is delayed. Every header
 * read is bounds-checked against the linear data. */
static __always_inline enum verdict classify(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if (skb->vlan_present)
		return VERDICT_BYPASS;
	if ((void *)(eth + 1) > data_end)
		return VERDICT_MALFORMED;
	/* Group bit: broadcast and multicast, which bpf_redirect_neigh drops. */
	if (eth->h_dest[0] & 1)
		return VERDICT_BYPASS;

	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end)
			return VERDICT_MALFORMED;
		if (ip->version != 4 || ip->ihl < 5)
			return VERDICT_MALFORMED;
		return VERDICT_DIVERT;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		__u8 *icmp_type;

		if ((void *)(ip6 + 1) > data_end)
			return VERDICT_MALFORMED;
		if (ip6->version != 6)
			return VERDICT_MALFORMED;
		if (ip6->daddr[0] == 0xff)
			return VERDICT_BYPASS;
		if (ip6->nexthdr != IPPROTO_ICMPV6)
			return VERDICT_DIVERT;
		/* Neighbour discovery keeps its own timing. */
		icmp_type = (void *)(ip6 + 1);
		if ((void *)(icmp_type + 1) > data_end)
			return VERDICT_MALFORMED;
		if (*icmp_type >= ICMPV6_ND_FIRST && *icmp_type <= ICMPV6_ND_LAST)
			return VERDICT_BYPASS;
		return VERDICT_DIVERT;
	}
	return VERDICT_BYPASS;
}

/* The headers classify reads: Ethernet, IPv6 (the larger IP header) and the
 * ICMPv6 type byte. */
#define PARSE_LEN (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + 1)

SEC("tc")
int delay_divert(struct __sk_buff *skb)
{
	struct delay_stats *st = stats();
	enum verdict v;
	long ret;

	if (!st)
		return TC_ACT_UNSPEC;
	if (skb->ingress_ifindex == tun_ifindex) {
		st->reentered++;
		return TC_ACT_UNSPEC;
	}

	v = classify(skb);
	if (v == VERDICT_MALFORMED && skb->len > skb->data_end - skb->data) {
		/* Headers in a fragment (rare at egress): pull them and retry. */
		__u32 want = skb->len < PARSE_LEN ? skb->len : PARSE_LEN;

		if (bpf_skb_pull_data(skb, want) == 0)
			v = classify(skb);
	}
	if (v == VERDICT_BYPASS) {
		st->bypassed++;
		return TC_ACT_UNSPEC;
	}
	if (v == VERDICT_MALFORMED) {
		st->malformed++;
		return TC_ACT_UNSPEC;
	}

	ret = bpf_redirect(tun_ifindex, 0);
	if (ret != TC_ACT_REDIRECT) {
		st->redirect_errors++;
		return TC_ACT_SHOT;
	}
	st->diverted++;
	st->diverted_bytes += skb->len - sizeof(struct ethhdr);
	return TC_ACT_REDIRECT;
}

SEC("tc")
int delay_return(struct __sk_buff *skb)
{
	struct delay_stats *st = stats();
	__be16 proto;
	__u32 len;
	long ret;

	if (!st)
		return TC_ACT_SHOT;
	if (skb->protocol != bpf_htons(ETH_P_IP) && skb->protocol != bpf_htons(ETH_P_IPV6)) {
		st->return_dropped++;
		return TC_ACT_SHOT;
	}
	len = skb->len;
	/* bpf_redirect_neigh drops a packet without room for a MAC header
	 * (mac_header >= network_header, as on any L3 device): push a zeroed
	 * one for it to replace. It reads the protocol from skb->protocol;
	 * h_proto is set only so the frame is well formed. */
	if (bpf_skb_change_head(skb, sizeof(struct ethhdr), 0)) {
		st->redirect_errors++;
		return TC_ACT_SHOT;
	}
	proto = skb->protocol;
	if (bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_proto), &proto, sizeof(proto), 0)) {
		st->redirect_errors++;
		return TC_ACT_SHOT;
	}
	ret = bpf_redirect_neigh(dev_ifindex, NULL, 0, 0);
	if (ret != TC_ACT_REDIRECT) {
		st->redirect_errors++;
		return TC_ACT_SHOT;
	}
	st->returned++;
	st->returned_bytes += len;
	return TC_ACT_REDIRECT;
}
