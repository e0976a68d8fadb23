/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The packet headers the programs parse, declared here rather than taken
 * from the distribution's <linux/if_ether.h>, <linux/ip.h>, <linux/ipv6.h>
 * (which drag in <asm/...> headers). Little-endian targets only (bpfel).
 */
#ifndef FABRICLAB_NET_H
#define FABRICLAB_NET_H

#include <linux/types.h>

#define ETH_ALEN 6
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8

/* QinQ at most: one S-tag and one C-tag. */
#define VLAN_MAX_DEPTH 2

/* RFC 3168 codepoints: the low two bits of the DS field. */
#define ECN_MASK 0x3
#define ECN_NOT_ECT 0x0
#define ECN_ECT1 0x1
#define ECN_ECT0 0x2
#define ECN_CE 0x3
/* RFC 2474: the DSCP is the DS field's high six bits. */
#define DSCP_MASK 0xFC

struct ethhdr {
	unsigned char h_dest[ETH_ALEN];
	unsigned char h_source[ETH_ALEN];
	__be16 h_proto;
} __attribute__((packed));

struct vlan_hdr {
	__be16 h_vlan_TCI;
	__be16 h_vlan_encapsulated_proto;
};

struct iphdr {
	__u8 ihl : 4, version : 4;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__sum16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6hdr {
	__u8 priority : 4, version : 4;
	__u8 flow_lbl[3];
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* The IPv6 traffic class straddles the first two bytes. */
static __always_inline __u8 ipv6_dsfield(const struct ipv6hdr *ip6)
{
	return (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
}

/*
 * Shared parsing helpers, added for np.c (the other programs keep their own
 * parsers). Everything above this comment is unchanged. Names carry a net_
 * or roce_ prefix so that they cannot clash with what a program declares for
 * itself (drop.c has its own struct udphdr and IPPROTO_UDP).
 */
#include <bpf/bpf_endian.h>

#define NET_IPPROTO_UDP 17
#define NET_IPV4_FLAG_DF 0x4000
#define NET_IPV4_FLAG_MF 0x2000
#define NET_IPV4_FRAG_OFFSET 0x1FFF /* in 8-byte units */
#define NET_IPV4_MIN_IHL 5          /* 32-bit words: a header without options */

/* UDP (RFC 768). */
struct net_udphdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__sum16 check;
};

/* net_l3 walks Ethernet and up to VLAN_MAX_DEPTH in-band 802.1Q/802.1ad tags
 * to the network header. It sets *proto (network order; a VLAN ethertype if
 * there were more tags), *off and *tags, and returns -1 if a header is cut
 * short of data_end. */
static __always_inline int net_l3(void *data, void *data_end, __be16 *proto, __u32 *off, __u8 *tags)
{
	struct ethhdr *eth = data;
	__u32 o = sizeof(*eth);
	__u8 n = 0;
	__be16 p;

	if ((void *)(eth + 1) > data_end)
		return -1;
	p = eth->h_proto;

#pragma unroll
	for (int i = 0; i < VLAN_MAX_DEPTH; i++) {
		struct vlan_hdr *vh;

		if (p != bpf_htons(ETH_P_8021Q) && p != bpf_htons(ETH_P_8021AD))
			break;
		vh = data + o;
		if ((void *)(vh + 1) > data_end)
			return -1;
		p = vh->h_vlan_encapsulated_proto;
		o += sizeof(*vh);
		n++;
	}
	*proto = p;
	*off = o;
	*tags = n;
	return 0;
}

/* RoCEv2 (shared/reference/roce-wire.md; IBTA Vol. 1 §9.2, Annex A17). */
#define ROCE_UDP_PORT 4791
#define ROCE_BTH_LEN 12
#define ROCE_ICRC_LEN 4
#define ROCE_CNP_RSVD_LEN 16    /* zero bytes after a CNP's BTH (A17.9.3) */
#define ROCE_OP_RC_LAST_REQUEST 0x0B /* RC SEND_FIRST 0x00 .. RDMA_WRITE_ONLY_WITH_IMMEDIATE */
#define ROCE_OP_CNP 0x81
#define ROCE_BTH_TVER_MASK 0x0F /* byte 1 */
#define ROCE_BTH_FECN 0x80      /* byte 4 */
#define ROCE_BTH_BECN 0x40      /* byte 4 */
#define ROCE_BTH_PPFC 0x20      /* byte 4: P, a PPFC notification (seed 003), not a CNP */
#define ROCE_BTH_WAN_LIGHT 0x10 /* byte 4: L, a WAN port's light-congestion CNP to a
				 * tunnel-ingress PE (seed 001); without it, heavy */
#define ROCE_CNP_L4_LEN 40      /* UDP 8 + BTH 12 + 16 reserved + ICRC 4 */
#define ROCE_PPFC_EXT_LEN 24    /* a PPFC notification's extension after the BTH (seed 003) */
#define ROCE_PPFC_L4_LEN 48     /* UDP 8 + BTH 12 + extension 24 + ICRC 4 */
#define ROCE_QPN_MASK 0xFFFFFF

/* Base Transport Header, 12 bytes, big-endian fields. */
struct roce_bth {
	__u8 opcode;
	__u8 flags;     /* SE 0x80 | M 0x40 | PadCnt 0x30 | TVer 0x0F */
	__be16 pkey;
	__u8 ecn;       /* F 0x80 | B 0x40 | reserved: the byte the ICRC masks */
	__u8 destqp[3];
	__u8 ack;       /* AckReq 0x80 | reserved */
	__u8 psn[3];
};

static __always_inline __u32 roce_bth_destqp(const struct roce_bth *bth)
{
	return (__u32)bth->destqp[0] << 16 | (__u32)bth->destqp[1] << 8 | bth->destqp[2];
}

enum net_roce_result {
	NET_ROCE_OK = 0,    /* RoCEv2, the BTH inside the linear data */
	NET_ROCE_OTHER,     /* not RoCEv2: non-IP, not UDP to 4791, IPv6 extension
			     * headers, an IPv4 fragment other than the first */
	NET_ROCE_TRUNCATED, /* a header cut short by data_end or by the UDP length */
};

/* Where a RoCEv2 packet's headers are. The pointers are bounds-checked
 * against the data_end given to net_parse_roce. */
struct net_roce {
	void *l3; /* struct iphdr or struct ipv6hdr */
	struct net_udphdr *udp;
	struct roce_bth *bth;
	__u32 l3_off;
	__be16 l3_proto;     /* ETH_P_IP or ETH_P_IPV6, network order */
	__u8 vlan_tags;      /* in-band tags in front of the IP header */
	__u8 dsfield;        /* DSCP << 2 | ECN */
	__u8 ipv4_options;   /* the IPv4 header is longer than 20 bytes */
	__u8 ipv4_fragment;  /* the first fragment of a fragmented datagram */
};

/* net_parse_roce finds the BTH of a RoCEv2 packet behind Ethernet, up to
 * VLAN_MAX_DEPTH tags, IPv4 (options allowed) or IPv6 (no extension
 * headers) and UDP to ROCE_UDP_PORT. The UDP length must cover a BTH and an
 * ICRC. */
static __always_inline enum net_roce_result net_parse_roce(void *data, void *data_end, struct net_roce *r)
{
	struct net_udphdr *udp;
	struct roce_bth *bth;
	__be16 proto;
	__u32 off;

	if (net_l3(data, data_end, &proto, &off, &r->vlan_tags))
		return NET_ROCE_TRUNCATED;
	r->l3_off = off;
	r->l3_proto = proto;
	r->l3 = data + off;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;

		if ((void *)(ip + 1) > data_end)
			return NET_ROCE_TRUNCATED;
		if (ip->version != 4 || ip->ihl < NET_IPV4_MIN_IHL)
			return NET_ROCE_OTHER;
		if (ip->protocol != NET_IPPROTO_UDP)
			return NET_ROCE_OTHER;
		if (ip->frag_off & bpf_htons(NET_IPV4_FRAG_OFFSET))
			return NET_ROCE_OTHER; /* no UDP header in a later fragment */
		r->ipv4_fragment = !!(ip->frag_off & bpf_htons(NET_IPV4_FLAG_MF));
		r->ipv4_options = ip->ihl > NET_IPV4_MIN_IHL;
		r->dsfield = ip->tos;
		udp = (void *)ip + ip->ihl * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;

		if ((void *)(ip6 + 1) > data_end)
			return NET_ROCE_TRUNCATED;
		if (ip6->version != 6 || ip6->nexthdr != NET_IPPROTO_UDP)
			return NET_ROCE_OTHER;
		r->ipv4_fragment = 0;
		r->ipv4_options = 0;
		r->dsfield = ipv6_dsfield(ip6);
		udp = (void *)(ip6 + 1);
	} else {
		return NET_ROCE_OTHER;
	}
	if ((void *)(udp + 1) > data_end)
		return NET_ROCE_TRUNCATED;
	if (udp->dest != bpf_htons(ROCE_UDP_PORT))
		return NET_ROCE_OTHER;
	if (bpf_ntohs(udp->len) < sizeof(*udp) + ROCE_BTH_LEN + ROCE_ICRC_LEN)
		return NET_ROCE_TRUNCATED;
	bth = (void *)(udp + 1);
	if ((void *)(bth + 1) > data_end)
		return NET_ROCE_TRUNCATED;
	r->udp = udp;
	r->bth = bth;
	return NET_ROCE_OK;
}

/* The most net_parse_roce reads: Ethernet, two tags, an IPv4 header with the
 * longest options (60 bytes, more than IPv6's 40), UDP and the BTH. */
#define NET_ROCE_PARSE_LEN (sizeof(struct ethhdr) + VLAN_MAX_DEPTH * sizeof(struct vlan_hdr) + 60 + \
			    sizeof(struct net_udphdr) + ROCE_BTH_LEN)

/* net_parse_roce_skb runs net_parse_roce on a TC packet, first pulling the
 * headers into the linear data if they are in a fragment of the skb. */
static __always_inline enum net_roce_result net_parse_roce_skb(struct __sk_buff *skb, struct net_roce *r)
{
	enum net_roce_result res;

	res = net_parse_roce((void *)(long)skb->data, (void *)(long)skb->data_end, r);
	if (res == NET_ROCE_TRUNCATED && skb->len > skb->data_end - skb->data) {
		__u32 want = skb->len < NET_ROCE_PARSE_LEN ? skb->len : NET_ROCE_PARSE_LEN;

		if (bpf_skb_pull_data(skb, want) == 0)
			res = net_parse_roce((void *)(long)skb->data, (void *)(long)skb->data_end, r);
	}
	return res;
}

/* net_cut_to makes a clone that becomes a notification len bytes long,
 * which the caller then overwrites whole. bpf_skb_change_tail refuses an
 * skb with the encapsulation flag set (-ENOTSUPP): a packet a tunnel PE
 * encapsulated keeps it across a veth into the next namespace, and after
 * decapsulation too. Removing (or adding) room after the MAC header does
 * not look at the flag; it moves at most 0xfff bytes a call and needs an IP
 * packet. A GSO clone is refused there: its GSO type would stay on a
 * single small frame (bpf_skb_change_tail resets it, this cannot). */
#define NET_ADJ_ROOM_MAX 0xfff
#define NET_CUT_STEPS 17 /* 64 KiB in NET_ADJ_ROOM_MAX steps */
static __always_inline long net_cut_to(struct __sk_buff *skb, __u32 len)
{
	long rc = bpf_skb_change_tail(skb, len, 0);
	int i;

	if (!rc)
		return 0;
	if (skb->gso_segs > 1)
		return rc;
	if (skb->len < len)
		return bpf_skb_adjust_room(skb, len - skb->len, BPF_ADJ_ROOM_MAC, 0);
	for (i = 0; i < NET_CUT_STEPS && skb->len > len; i++) {
		__u32 cut = skb->len - len;

		if (cut > NET_ADJ_ROOM_MAX)
			cut = NET_ADJ_ROOM_MAX;
		rc = bpf_skb_adjust_room(skb, -(__s32)cut, BPF_ADJ_ROOM_MAC, 0);
		if (rc)
			return rc;
	}
	return skb->len == len ? 0 : -1;
}

/* net_roce_from_to reports whether the packet r parsed goes from src to
 * dst: both 16 bytes in network order, an IPv4 address in the first 4;
 * is_v4 says which family the pair is. A packet of the other family does
 * not match. */
static __always_inline int net_roce_from_to(const struct net_roce *r, void *data_end, int is_v4,
					    const __u8 *src, const __u8 *dst)
{
	if (r->l3_proto == bpf_htons(ETH_P_IP)) {
		const struct iphdr *ip = r->l3;

		if (!is_v4 || (void *)(ip + 1) > data_end)
			return 0;
		return ip->saddr == *(const __u32 *)src && ip->daddr == *(const __u32 *)dst;
	}
	if (r->l3_proto == bpf_htons(ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = r->l3;
		const __u32 *s, *d, *p = (const __u32 *)src, *l = (const __u32 *)dst;

		if (is_v4 || (void *)(ip6 + 1) > data_end)
			return 0;
		s = (const __u32 *)ip6->saddr;
		d = (const __u32 *)ip6->daddr;
		return s[0] == p[0] && s[1] == p[1] && s[2] == p[2] && s[3] == p[3] &&
		       d[0] == l[0] && d[1] == l[1] && d[2] == l[2] && d[3] == l[3];
	}
	return 0;
}

#endif
