// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Packet trimming (UET): a packet its class would tail-drop leaves
 * as its headers through the trim class.
 *
 * Part of port.c, included once from it: it uses port.c's maps and
 * helpers and is not a header of its own.
 */
#ifndef PORT_TRIM_H
#define PORT_TRIM_H

/* Packet trimming (UET, issue 11 §3): a switch that trims turns a packet its
 * class would tail-drop into its headers. The first trim_bytes bytes of the
 * IP packet leave with DSCP trim_dscp (ECN kept) through trim_class, which
 * is served in strict priority, so the receiver learns at once what was lost
 * and NACKs it (TRIMMED) instead of waiting for a timeout. Linux switches do
 * not trim: this port does it here.
 *
 * IPv4 and IPv6 UDP are trimmed. IPv4 lets a UDP datagram carry no
 * checksum (0), so the cut needs no sum over the payload that is left. IPv6
 * requires one (RFC 8200 §8.1): it is computed anew over what is kept (at
 * most trim_bytes of packet). An IPv6 packet with extension headers is not
 * trimmed (tail-dropped as before), nor is any other packet that is not
 * UDP, IPv4 fragments, GSO super-packets (several wire packets in one skb)
 * and packets no longer than trim_bytes. */
#define TRIM_L3_OFF_MAX (sizeof(struct ethhdr) + VLAN_MAX_DEPTH * sizeof(struct vlan_hdr))

/* A trimmed packet is sent through the device's egress once more
 * (bpf_redirect to itself): the stack sized it for the qdisc
 * (qdisc_skb_cb->pkt_len) before this hook ran, and HTB would charge the
 * trim class the whole packet's length; the second pass sizes it anew.
 * trim_mark (set by the loader per port, like ppfc_mark) tells
 * port_enqueue's second pass that the packet is accounted already; the
 * packet's own mark waits in cb[TRIM_CB_MARK] meanwhile (nothing runs
 * between the two passes). A redirect the kernel fails (the device going
 * down at that moment) would leave the packet in the trim class's backlog
 * for good. */
volatile const __u32 trim_mark = 0x54520000; /* "TR" */
#define TRIM_CB_MARK 0
#define UDP_CHECK_OFF 6 /* offsetof(struct net_udphdr, check) */

enum trim_result {
	TRIM_NOT_TRIMMABLE = -1, /* the packet is as it was */
	TRIM_FAILED = -2,        /* a helper failed, maybe after the cut: drop it */
};

/* udp4_seed is what the stack leaves in the checksum field of an IPv4 UDP
 * packet whose checksum is completed later, by a device or by
 * skb_checksum_help (CHECKSUM_PARTIAL): the pseudo-header sum, folded, not
 * complemented (udp4_hwcsum). */
static __always_inline __u16 udp4_seed(__be32 saddr, __be32 daddr, __u32 udp_len)
{
	__u32 s = bpf_ntohl(saddr), d = bpf_ntohl(daddr);
	__u32 sum = (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + NET_IPPROTO_UDP + udp_len;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return bpf_htons(sum);
}

/* TRIM_UDP6_MAX bounds the UDP part of a trimmed IPv6 packet
 * (MaxTrimBytes less the IPv6 header), whose checksum is summed anew. */
#define TRIM_UDP6_MAX (1500 - 40)

/* trim_sum is the scratch trim_packet6 sums the kept UDP bytes in: they
 * are too many for the stack. Room for TRIM_UDP6_MAX bytes and the zeros
 * that pad them to a multiple of 4 for bpf_csum_diff. */
struct trim_sum {
	__u16 w[TRIM_UDP6_MAX / 2 + 2];
};

/* TRIM_CSUM_CHUNK is the most bytes one bpf_csum_diff sums (the kernel's
 * scratch of 128 words). */
#define TRIM_CSUM_CHUNK 512

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct trim_sum);
} trim_scratch SEC(".maps");

/* udp6_seed is the IPv6 counterpart of udp4_seed: the pseudo-header sum
 * (RFC 8200 §8.1) of addrs (source then destination, 32 bytes), folded,
 * not complemented, in network order. */
static __always_inline __u32 udp6_pseudo(const __u16 *addrs, __u32 udp_len)
{
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < 16; i++)
		sum += addrs[i];
	sum += bpf_htons(udp_len) + bpf_htons(NET_IPPROTO_UDP);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

/* trim_packet6 is trim_packet for an IPv6 packet (ip6 points at its fixed
 * header, checked there): the cut, traffic class trim_dscp with the ECN
 * bits kept, payload and UDP lengths, and the UDP checksum over what is
 * kept, or the seed of the new length where the stack completes it. */
static __always_inline int trim_packet6(struct __sk_buff *skb, __u32 l3_off, __u32 trim_bytes, __u32 trim_dscp)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + l3_off;
	__u32 tot_len, new_len, check_off, udp_len, sum, len4, wsum, zero = 0;
	__u16 addrs[16], check, out;
	__u64 total;
	struct net_udphdr *udp;
	struct trim_sum *ts;
	__u8 tc;

	if ((void *)(ip6 + 1) > data_end)
		return TRIM_NOT_TRIMMABLE;
	if (ip6->nexthdr != NET_IPPROTO_UDP)
		return TRIM_NOT_TRIMMABLE; /* extension headers: not walked */
	tot_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	if (sizeof(*ip6) + sizeof(*udp) > trim_bytes || tot_len <= trim_bytes || skb->len < l3_off + tot_len ||
	    trim_bytes - sizeof(*ip6) > TRIM_UDP6_MAX)
		return TRIM_NOT_TRIMMABLE;
	__builtin_memcpy(addrs, ip6->saddr, sizeof(addrs));
	udp_len = trim_bytes - sizeof(*ip6);
	new_len = l3_off + trim_bytes;
	if (bpf_skb_change_tail(skb, new_len, 0))
		return TRIM_FAILED;

	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ip6 = data + l3_off;
	if ((void *)(ip6 + 1) > data_end)
		return TRIM_FAILED;
	udp = (void *)(ip6 + 1);
	if ((void *)(udp + 1) > data_end)
		return TRIM_FAILED;
	tc = (trim_dscp & 0x3F) << 2 | (ipv6_dsfield(ip6) & ECN_MASK);
	ip6->priority = tc >> 4;
	ip6->flow_lbl[0] = (ip6->flow_lbl[0] & 0x0F) | (tc & 0x0F) << 4;
	ip6->payload_len = bpf_htons(udp_len);
	udp->len = bpf_htons(udp_len);
	udp->check = 0;

	/* CHECKSUM_PARTIAL or not, as trim_packet tells. */
	check_off = l3_off + sizeof(*ip6) + UDP_CHECK_OFF;
	if (bpf_l4_csum_replace(skb, check_off, 0, 1, sizeof(__u16)))
		return TRIM_FAILED;
	if (bpf_skb_load_bytes(skb, check_off, &check, sizeof(check)))
		return TRIM_FAILED;
	sum = udp6_pseudo(addrs, udp_len);
	if (!check) {
		out = sum; /* the stack completes it */
	} else {
		/* The full sum: pseudo-header, the UDP header with its check
		 * 0, and the payload kept (an odd last byte padded with 0). */
		ts = bpf_map_lookup_elem(&trim_scratch, &zero);
		if (!ts)
			return TRIM_FAILED;
		if (udp_len > TRIM_UDP6_MAX || bpf_skb_load_bytes(skb, l3_off + sizeof(*ip6), ts->w, udp_len))
			return TRIM_FAILED;
		((__u8 *)ts->w)[udp_len] = 0;
		((__u8 *)ts->w)[udp_len + 1] = 0;
		((__u8 *)ts->w)[udp_len + 2] = 0;
		ts->w[UDP_CHECK_OFF / 2] = 0;
		/* bpf_csum_diff sums words in a helper: a loop over 730 of
		 * them cost the verifier a tenth of port_enqueue's check. Its
		 * 32-bit one's complement sum folds to the 16-bit one. */
		len4 = (udp_len + 3) & ~3u;
		wsum = 0;
#pragma unroll
		for (__u32 off = 0; off < sizeof(*ts); off += TRIM_CSUM_CHUNK) {
			__u32 n;
			__s64 r;

			if (off >= len4)
				break;
			n = len4 - off;
			if (n > TRIM_CSUM_CHUNK)
				n = TRIM_CSUM_CHUNK;
			if (n > sizeof(*ts) - off)
				n = sizeof(*ts) - off;
			r = bpf_csum_diff(NULL, 0, (void *)ts->w + off, n, wsum);
			if (r < 0)
				return TRIM_FAILED;
			wsum = r;
		}
		total = (__u64)sum + wsum;
		total = (total & 0xffff) + (total >> 16);
		total = (total & 0xffff) + (total >> 16);
		total = (total & 0xffff) + (total >> 16);
		out = ~total & 0xffff;
		if (!out)
			out = 0xffff; /* RFC 768: a computed zero is sent as ones */
	}
	if (bpf_skb_store_bytes(skb, check_off, &out, sizeof(out), 0))
		return TRIM_FAILED;
	return new_len;
}

/* trim_packet cuts an IPv4 or IPv6 UDP packet whose IP header starts at
 * l3_off to trim_bytes of IP packet and rewrites its headers: DSCP
 * trim_dscp with the ECN bits kept, the lengths, IPv4's header checksum,
 * and the UDP checksum (none over IPv4, computed anew over IPv6). It
 * returns the frame's new length, or a trim_result. A global function:
 * the verifier checks it once, on its own. */
__attribute__((noinline)) int trim_packet(struct __sk_buff *skb, __u32 l3_off, __u32 trim_bytes,
					  __u32 trim_dscp)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u16 old_word, old_len, check, seed;
	__u32 ihl, tot_len, new_len, check_off, sum;
	struct net_udphdr *udp;
	__be32 saddr, daddr;
	struct iphdr *ip;

	if (l3_off > TRIM_L3_OFF_MAX || skb->gso_segs > 1)
		return TRIM_NOT_TRIMMABLE;
	ip = data + l3_off;
	if ((void *)ip + 1 > data_end)
		return TRIM_NOT_TRIMMABLE;
	if (ip->version == 6)
		return trim_packet6(skb, l3_off, trim_bytes, trim_dscp);
	if ((void *)(ip + 1) > data_end)
		return TRIM_NOT_TRIMMABLE;
	if (ip->version != 4 || ip->protocol != NET_IPPROTO_UDP ||
	    (ip->frag_off & bpf_htons(NET_IPV4_FLAG_MF | NET_IPV4_FRAG_OFFSET)))
		return TRIM_NOT_TRIMMABLE;
	ihl = ip->ihl * 4;
	tot_len = bpf_ntohs(ip->tot_len);
	/* The IP and UDP headers must survive the cut, and the packet must
	 * be all there. */
	if (ihl < sizeof(*ip) || ihl + sizeof(*udp) > trim_bytes || tot_len <= trim_bytes ||
	    skb->len < l3_off + tot_len)
		return TRIM_NOT_TRIMMABLE;
	saddr = ip->saddr;
	daddr = ip->daddr;
	new_len = l3_off + trim_bytes;
	if (bpf_skb_change_tail(skb, new_len, 0))
		return TRIM_FAILED;

	/* The cut invalidated every packet pointer: find the headers again. */
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ip = data + l3_off;
	if ((void *)(ip + 1) > data_end)
		return TRIM_FAILED;
	udp = (void *)ip + ihl;
	if ((void *)(udp + 1) > data_end)
		return TRIM_FAILED;
	old_word = *(__u16 *)ip; /* version, ihl, tos */
	old_len = ip->tot_len;
	ip->tos = (trim_dscp & 0x3F) << 2 | (ip->tos & ECN_MASK);
	ip->tot_len = bpf_htons(trim_bytes);
	/* HC' = ~(~HC + ~m + m') for both words (RFC 1624). */
	sum = (__u16)~ip->check + (__u16)~old_word + *(__u16 *)ip + (__u16)~old_len + ip->tot_len;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->check = ~sum;
	udp->len = bpf_htons(trim_bytes - ihl);
	udp->check = 0;

	/* Is the UDP checksum still to be computed (CHECKSUM_PARTIAL: sent by
	 * this host, or forwarded from a veth, which offloads it)? Then the
	 * stack completes it from the seed in the field wherever the packet
	 * leaves without an offload (skb_checksum_help), and a 0 there would
	 * turn into a wrong checksum: the field must hold the seed of the
	 * new length instead. __sk_buff does not say; bpf_l4_csum_replace
	 * does: without BPF_F_PSEUDO_HDR it leaves the field of a
	 * CHECKSUM_PARTIAL skb alone and updates any other's
	 * (inet_proto_csum_replace4). So replace 0 by 1 and look. */
	check_off = l3_off + ihl + UDP_CHECK_OFF;
	if (bpf_l4_csum_replace(skb, check_off, 0, 1, sizeof(__u16)))
		return TRIM_FAILED;
	if (bpf_skb_load_bytes(skb, check_off, &check, sizeof(check)))
		return TRIM_FAILED;
	seed = check ? 0 : udp4_seed(saddr, daddr, trim_bytes - ihl);
	if (bpf_skb_store_bytes(skb, check_off, &seed, sizeof(seed), 0))
		return TRIM_FAILED;
	return new_len;
}

/* enqueue_trimmed puts a trimmed packet of len bytes into the trim class,
 * where only the limit applies (no marking, no early drop, no PPFC), and
 * counts it there. It returns VERDICT_TRIMMED, or VERDICT_DROP_TRIM when the
 * trim class is full too. */
static __always_inline enum verdict enqueue_trimmed(struct __sk_buff *skb, const struct port_config *pc,
						  __u32 trim_class, __u32 len, __u8 ecn)
{
	struct class_config *tcc;
	struct class_state *tcs;
	struct class_stats *tst;
	enum verdict v = VERDICT_PASS;
	__u64 backlog, after;

	tcc = bpf_map_lookup_elem(&class_cfg, &trim_class);
	tcs = bpf_map_lookup_elem(&class_queue, &trim_class);
	tst = bpf_map_lookup_elem(&class_counters, &trim_class);
	if (!tcc || !tcs || !tst)
		return VERDICT_DROP_TRIM;
	if (pc->queue_mode == QUEUE_MODE_VIRTUAL) {
		enqueue_virtual(tcs, tst, tcc, len, ecn, true, &v);
		if (READ_ONCE(tcs->idle_pending_ns))
			idle_end_pending(tcs, tst, pc, trim_class);
		if (v != VERDICT_PASS)
			return VERDICT_DROP_TRIM;
	} else {
		/* It leaves through the trim class's queue: that class's
		 * stamp (the same call succeeded on this skb before). */
		if (bpf_skb_set_tstamp(skb, (now_ns() & ~STAMP_MASK) | STAMP_MAGIC | trim_class,
				       BPF_SKB_CLOCK_MONOTONIC))
			return VERDICT_DROP_TRIM;
		backlog = __sync_fetch_and_add(&tcs->backlog_bytes, len);
		if (backlog + len > tcc->limit_bytes) {
			__sync_fetch_and_add(&tcs->backlog_bytes, -(__s64)len);
			return VERDICT_DROP_TRIM;
		}
		if (backlog == 0)
			idle_end(tcs, tst, pc, trim_class);
		after = __sync_fetch_and_add(&tcs->backlog_packets, 1) + 1;
		note_max(&tcs->max_backlog_bytes, backlog + len);
		note_max(&tcs->max_backlog_packets, after);
	}
	if (pc->flags & PORT_F_SET_PRIORITY)
		skb->priority = pc->priority_base + trim_class;
	tst->enqueued_packets++;
	tst->enqueued_bytes += len;
	tst->arrived_by_ecn[ecn & ECN_MASK]++;
	tst->trim_in_packets++;
	tst->trim_in_bytes += len;
	return VERDICT_TRIMMED;
}

#endif /* PORT_TRIM_H */
