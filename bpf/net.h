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

#endif
