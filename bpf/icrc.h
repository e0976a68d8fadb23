/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The RoCEv2 ICRC, the IPv4 header checksum and the UDP checksum over IPv6,
 * for the programs that build RoCEv2 packets (np.c's CNPs, port.c's PPFC
 * notifications).
 */
#ifndef FABRICLAB_ICRC_H
#define FABRICLAB_ICRC_H

#include <linux/types.h>

#include "net.h"

/* The ICRC (roce-wire.md §ICRC): CRC-32, IEEE polynomial reflected, over
 * 8 bytes of 0xFF and the IP packet up to the ICRC, with the fields a router
 * may change set to ones. ICRC_LRH_STATE is the CRC register after the 8
 * bytes of 0xFF from the usual all-ones start (rxe_icrc.c starts there);
 * the result is the register inverted, sent little-endian. */
#define ICRC_LRH_STATE 0xdebb20e3
#define ICRC_MASKED 0xFF

static const __u32 crc32_table[256] = {
	0x00000000, 0x77073096, 0xee0e612c, 0x990951ba,
	0x076dc419, 0x706af48f, 0xe963a535, 0x9e6495a3,
	0x0edb8832, 0x79dcb8a4, 0xe0d5e91e, 0x97d2d988,
	0x09b64c2b, 0x7eb17cbd, 0xe7b82d07, 0x90bf1d91,
	0x1db71064, 0x6ab020f2, 0xf3b97148, 0x84be41de,
	0x1adad47d, 0x6ddde4eb, 0xf4d4b551, 0x83d385c7,
	0x136c9856, 0x646ba8c0, 0xfd62f97a, 0x8a65c9ec,
	0x14015c4f, 0x63066cd9, 0xfa0f3d63, 0x8d080df5,
	0x3b6e20c8, 0x4c69105e, 0xd56041e4, 0xa2677172,
	0x3c03e4d1, 0x4b04d447, 0xd20d85fd, 0xa50ab56b,
	0x35b5a8fa, 0x42b2986c, 0xdbbbc9d6, 0xacbcf940,
	0x32d86ce3, 0x45df5c75, 0xdcd60dcf, 0xabd13d59,
	0x26d930ac, 0x51de003a, 0xc8d75180, 0xbfd06116,
	0x21b4f4b5, 0x56b3c423, 0xcfba9599, 0xb8bda50f,
	0x2802b89e, 0x5f058808, 0xc60cd9b2, 0xb10be924,
	0x2f6f7c87, 0x58684c11, 0xc1611dab, 0xb6662d3d,
	0x76dc4190, 0x01db7106, 0x98d220bc, 0xefd5102a,
	0x71b18589, 0x06b6b51f, 0x9fbfe4a5, 0xe8b8d433,
	0x7807c9a2, 0x0f00f934, 0x9609a88e, 0xe10e9818,
	0x7f6a0dbb, 0x086d3d2d, 0x91646c97, 0xe6635c01,
	0x6b6b51f4, 0x1c6c6162, 0x856530d8, 0xf262004e,
	0x6c0695ed, 0x1b01a57b, 0x8208f4c1, 0xf50fc457,
	0x65b0d9c6, 0x12b7e950, 0x8bbeb8ea, 0xfcb9887c,
	0x62dd1ddf, 0x15da2d49, 0x8cd37cf3, 0xfbd44c65,
	0x4db26158, 0x3ab551ce, 0xa3bc0074, 0xd4bb30e2,
	0x4adfa541, 0x3dd895d7, 0xa4d1c46d, 0xd3d6f4fb,
	0x4369e96a, 0x346ed9fc, 0xad678846, 0xda60b8d0,
	0x44042d73, 0x33031de5, 0xaa0a4c5f, 0xdd0d7cc9,
	0x5005713c, 0x270241aa, 0xbe0b1010, 0xc90c2086,
	0x5768b525, 0x206f85b3, 0xb966d409, 0xce61e49f,
	0x5edef90e, 0x29d9c998, 0xb0d09822, 0xc7d7a8b4,
	0x59b33d17, 0x2eb40d81, 0xb7bd5c3b, 0xc0ba6cad,
	0xedb88320, 0x9abfb3b6, 0x03b6e20c, 0x74b1d29a,
	0xead54739, 0x9dd277af, 0x04db2615, 0x73dc1683,
	0xe3630b12, 0x94643b84, 0x0d6d6a3e, 0x7a6a5aa8,
	0xe40ecf0b, 0x9309ff9d, 0x0a00ae27, 0x7d079eb1,
	0xf00f9344, 0x8708a3d2, 0x1e01f268, 0x6906c2fe,
	0xf762575d, 0x806567cb, 0x196c3671, 0x6e6b06e7,
	0xfed41b76, 0x89d32be0, 0x10da7a5a, 0x67dd4acc,
	0xf9b9df6f, 0x8ebeeff9, 0x17b7be43, 0x60b08ed5,
	0xd6d6a3e8, 0xa1d1937e, 0x38d8c2c4, 0x4fdff252,
	0xd1bb67f1, 0xa6bc5767, 0x3fb506dd, 0x48b2364b,
	0xd80d2bda, 0xaf0a1b4c, 0x36034af6, 0x41047a60,
	0xdf60efc3, 0xa867df55, 0x316e8eef, 0x4669be79,
	0xcb61b38c, 0xbc66831a, 0x256fd2a0, 0x5268e236,
	0xcc0c7795, 0xbb0b4703, 0x220216b9, 0x5505262f,
	0xc5ba3bbe, 0xb2bd0b28, 0x2bb45a92, 0x5cb36a04,
	0xc2d7ffa7, 0xb5d0cf31, 0x2cd99e8b, 0x5bdeae1d,
	0x9b64c2b0, 0xec63f226, 0x756aa39c, 0x026d930a,
	0x9c0906a9, 0xeb0e363f, 0x72076785, 0x05005713,
	0x95bf4a82, 0xe2b87a14, 0x7bb12bae, 0x0cb61b38,
	0x92d28e9b, 0xe5d5be0d, 0x7cdcefb7, 0x0bdbdf21,
	0x86d3d2d4, 0xf1d4e242, 0x68ddb3f8, 0x1fda836e,
	0x81be16cd, 0xf6b9265b, 0x6fb077e1, 0x18b74777,
	0x88085ae6, 0xff0f6a70, 0x66063bca, 0x11010b5c,
	0x8f659eff, 0xf862ae69, 0x616bffd3, 0x166ccf45,
	0xa00ae278, 0xd70dd2ee, 0x4e048354, 0x3903b3c2,
	0xa7672661, 0xd06016f7, 0x4969474d, 0x3e6e77db,
	0xaed16a4a, 0xd9d65adc, 0x40df0b66, 0x37d83bf0,
	0xa9bcae53, 0xdebb9ec5, 0x47b2cf7f, 0x30b5ffe9,
	0xbdbdf21c, 0xcabac28a, 0x53b39330, 0x24b4a3a6,
	0xbad03605, 0xcdd70693, 0x54de5729, 0x23d967bf,
	0xb3667a2e, 0xc4614ab8, 0x5d681b02, 0x2a6f2b94,
	0xb40bbe37, 0xc30c8ea1, 0x5a05df1b, 0x2d02ef8d,
};

/* icrc_crc returns the ICRC of the IP packet p[0:len), already masked:
 * the register after the 8 bytes of 0xFF, through p, inverted. */
static __always_inline __u32 icrc_crc(const __u8 *p, __u32 len, __u32 max)
{
	__u32 crc = ICRC_LRH_STATE;

	for (__u32 i = 0; i < max; i++) {
		if (i >= len)
			break;
		crc = crc32_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
	}
	return ~crc;
}

/* ip_csum is the IPv4 header checksum (RFC 1071) of a 20-byte header whose
 * check field is zero. Summing native 16-bit words and storing the result
 * natively is right on either byte order. */
static __always_inline __u16 ip_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*ip) / 2); i++)
		sum += w[i];
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum = (sum & 0xFFFF) + (sum >> 16);
	return ~sum;
}

/* roce_ipv4_masked writes a 20-byte IPv4 header for a RoCEv2 packet of
 * l4_len bytes (UDP header to ICRC) with the fields the ICRC masks set to
 * ones (TOS, TTL, checksum): compute the ICRC over it, then
 * roce_ipv4_as_sent. ID 0 and DF, as rxe sends. */
static __always_inline void roce_ipv4_masked(struct iphdr *ip, __u16 l4_len, __be32 saddr, __be32 daddr)
{
	ip->version = 4;
	ip->ihl = NET_IPV4_MIN_IHL;
	ip->tos = ICRC_MASKED;
	ip->tot_len = bpf_htons(sizeof(*ip) + l4_len);
	ip->id = 0;
	ip->frag_off = bpf_htons(NET_IPV4_FLAG_DF);
	ip->ttl = ICRC_MASKED;
	ip->protocol = NET_IPPROTO_UDP;
	ip->check = 0xFFFF;
	ip->saddr = saddr;
	ip->daddr = daddr;
}

/* roce_ipv4_as_sent puts the masked fields back to what goes on the wire. */
static __always_inline void roce_ipv4_as_sent(struct iphdr *ip, __u8 tos, __u8 ttl)
{
	ip->tos = tos;
	ip->ttl = ttl;
	ip->check = 0;
	ip->check = ip_csum(ip);
}

/* roce_ipv6_masked writes a 40-byte IPv6 header for a RoCEv2 packet of
 * l4_len bytes with the fields the ICRC masks set to ones (traffic class,
 * flow label, hop limit): compute the ICRC over it, then
 * roce_ipv6_as_sent. */
static __always_inline void roce_ipv6_masked(struct ipv6hdr *ip6, __u16 l4_len, const __u8 *saddr,
					     const __u8 *daddr)
{
	ip6->version = 6;
	ip6->priority = 0xF;
	ip6->flow_lbl[0] = ICRC_MASKED;
	ip6->flow_lbl[1] = ICRC_MASKED;
	ip6->flow_lbl[2] = ICRC_MASKED;
	ip6->payload_len = bpf_htons(l4_len);
	ip6->nexthdr = NET_IPPROTO_UDP;
	ip6->hop_limit = ICRC_MASKED;
	__builtin_memcpy(ip6->saddr, saddr, 16);
	__builtin_memcpy(ip6->daddr, daddr, 16);
}

/* roce_ipv6_as_sent puts the masked fields back: the traffic class tos,
 * flow label 0 (as the raw path sends), hop limit hops. */
static __always_inline void roce_ipv6_as_sent(struct ipv6hdr *ip6, __u8 tos, __u8 hops)
{
	ip6->priority = tos >> 4;
	ip6->flow_lbl[0] = (tos & 0xF) << 4;
	ip6->flow_lbl[1] = 0;
	ip6->flow_lbl[2] = 0;
	ip6->hop_limit = hops;
}

/* udp6_csum is the UDP checksum over IPv6 (RFC 8200 §8.1: it may not be
 * zero) of the l4_len bytes at l4, UDP header first, its check field zero;
 * l4_len even. */
static __always_inline __u16 udp6_csum(const struct ipv6hdr *ip6, const void *l4, const __u32 l4_len)
{
	const __u16 *a = (const __u16 *)ip6->saddr; /* saddr and daddr: 16 words */
	const __u16 *w = l4;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < 16; i++)
		sum += a[i];
	/* Upper-layer length (32 bits) and next header (32 bits, zero-filled). */
	sum += bpf_htons(l4_len) + bpf_htons(NET_IPPROTO_UDP);
#pragma unroll
	for (int i = 0; i < (int)(l4_len / 2); i++)
		sum += w[i];
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum = ~sum & 0xFFFF;
	return sum ? sum : 0xFFFF; /* RFC 768: a computed zero is sent as ones */
}

#endif
