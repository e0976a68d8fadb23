//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Delay link: the kernel half of a delay element for kernels without netem.
 *
 * delay_divert runs at TC egress of the delayed device (a veth). It sends
 * every unicast IP packet to the egress of an L3 TUN device instead, where a
 * user-space forwarder (host/lab/link/delay.go) reads it, holds it for the
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
 * Marks. The TUN's write path (tun_get_user) builds a new sk_buff from the
 * bytes the forwarder writes, so nothing of the diverted one survives the
 * link but its bytes: not skb->mark. Programs after the delay at the
 * device's egress tell their own clones by the mark (np_egress turns a CE
 * packet's clone carrying np_mark into a CNP; ppfc_egress does the same
 * for a port's notifications). Without it, such a clone left as the copy
 * of the data packet it was, addressed to the sender of the clone's own
 * host, and was lost (issue 28, fault 6). delay_divert keys a marked
 * packet's mark and Ethernet header (np_egress builds a CNP's addresses
 * from its clone's) by its length and first MARK_KEY_BYTES L3 bytes, which
 * the forwarder writes back unchanged; delay_return puts both back and
 * sends the packet out as it came, with bpf_redirect.
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
	__u64 marks_kept;      /* marked packets diverted, their mark kept */
	__u64 marks_restored;  /* returned packets given their mark back */
};

/* A marked packet's key: its L3 length and first bytes (zero beyond them). */
#define MARK_KEY_BYTES 64
#define MARK_KEY_MIN 20 /* an IPv4 header */
struct mark_key {
	__u32 len;
	__u8 head[MARK_KEY_BYTES];
};

/* What a marked packet keeps across the link: its mark, and its Ethernet
 * header, which the program that marked it may read (np_egress builds the
 * CNP's addresses from its clone's). */
struct marked {
	__u32 mark;
	struct ethhdr eth;
};

/* Marks of diverted packets until they return. LRU: a packet the forwarder
 * dropped leaves an entry the map forgets in time. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct mark_key);
	__type(value, struct marked);
} delay_marks SEC(".maps");

/* Entries added and not yet taken back (more once the LRU forgot some): the
 * return path looks a packet up only while it is not zero. */
__u64 marks_pending = 0;

/* mark_key_zero_csum zeroes the UDP or TCP checksum in k: a packet that
 * left its sender with the checksum to be completed (CHECKSUM_PARTIAL, as a
 * veth passes it) has it computed on its way into the TUN, so the bytes
 * that come back differ there, and only there. */
static __always_inline void mark_key_zero_csum(struct mark_key *k)
{
	__u32 l4, at;
	__u8 proto;

	if (k->head[0] >> 4 == 4) {
		l4 = (k->head[0] & 0x0f) * 4;
		proto = k->head[9];
	} else if (k->head[0] >> 4 == 6) {
		l4 = 40;
		proto = k->head[6];
	} else {
		return;
	}
	if (proto == 17) /* UDP */
		at = l4 + 6;
	else if (proto == 6) /* TCP */
		at = l4 + 16;
	else
		return;
	if (at > MARK_KEY_BYTES - 2)
		return;
	k->head[at] = 0;
	k->head[at + 1] = 0;
}

/* mark_key_of fills k from the L3 packet at off in skb; 0 if it has fewer
 * than MARK_KEY_MIN bytes there or they cannot be read. */
static __always_inline int mark_key_of(struct __sk_buff *skb, __u32 off, struct mark_key *k)
{
	__u32 n;

	if (skb->len < off + MARK_KEY_MIN)
		return 0;
	k->len = skb->len - off;
	n = k->len;
	if (n > MARK_KEY_BYTES)
		n = MARK_KEY_BYTES;
	if (n < MARK_KEY_MIN) /* for the verifier: n is MARK_KEY_MIN..MARK_KEY_BYTES */
		return 0;
	if (bpf_skb_load_bytes(skb, off, k->head, n))
		return 0;
	mark_key_zero_csum(k);
	return 1;
}

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
	if (skb->mark) {
		struct mark_key k = {};
		struct marked m = {.mark = skb->mark};

		if (mark_key_of(skb, sizeof(struct ethhdr), &k) &&
		    bpf_skb_load_bytes(skb, 0, &m.eth, sizeof(m.eth)) == 0 &&
		    bpf_map_update_elem(&delay_marks, &k, &m, BPF_ANY) == 0) {
			__sync_fetch_and_add(&marks_pending, 1);
			st->marks_kept++;
		}
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
	if (marks_pending) {
		struct mark_key k = {};
		struct marked *mp;

		if (mark_key_of(skb, 0, &k) && (mp = bpf_map_lookup_elem(&delay_marks, &k))) {
			struct marked m = *mp;

			if (bpf_map_delete_elem(&delay_marks, &k) == 0)
				__sync_fetch_and_sub(&marks_pending, 1);
			/* The packet leaves as it came: its mark and its own
			 * Ethernet header, not the neighbour's of its address. */
			skb->mark = m.mark;
			if (bpf_skb_change_head(skb, sizeof(struct ethhdr), 0) ||
			    bpf_skb_store_bytes(skb, 0, &m.eth, sizeof(m.eth), 0)) {
				st->redirect_errors++;
				return TC_ACT_SHOT;
			}
			ret = bpf_redirect(dev_ifindex, 0);
			if (ret != TC_ACT_REDIRECT) {
				st->redirect_errors++;
				return TC_ACT_SHOT;
			}
			st->marks_restored++;
			st->returned++;
			st->returned_bytes += len;
			return TC_ACT_REDIRECT;
		}
	}
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
