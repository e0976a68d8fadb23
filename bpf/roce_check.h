/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The receive rules for a RoCEv2 packet's BTH, one rule set for the agent
 * (host/roce.Parse and roce.PKeyMatch) and the kernel roles (rp.c, np.c):
 * a packet one of them drops as malformed or as a P_Key violation, the
 * others drop too (host/agent's TestBTHVerdictsAgree feeds the same packets
 * to all three).
 *
 *   malformed: TVer not 0 (IBTA Vol. 1 §9.2); the UDP length shorter than
 *     the opcode's headers and the ICRC; a PadCnt larger than the payload
 *     (so not 0 where the opcode carries none, a CNP); a CNP that is not 40
 *     bytes of UDP (Annex A17.9.3).
 *   P_Key violation: the packet's P_Key does not match the QP's (§10.9.3).
 */
#ifndef ROCE_CHECK_H
#define ROCE_CHECK_H

#include "net.h"

#define ROCE_BTH_PADCNT_MASK 0x30 /* byte 1 */
#define ROCE_BTH_PADCNT_SHIFT 4
#define ROCE_PKEY_BASE 0x7FFF
#define ROCE_PKEY_FULL 0x8000
#define ROCE_RETH_LEN 16
#define ROCE_IMMDT_LEN 4

/* roce_pkey_match is IBTA Vol. 1 §10.9.3's P_Key check: the bases (low 15
 * bits) are equal and not 0 (0x0000 and 0x8000 are the invalid P_Key), and
 * at least one of the two keys is a full member (top bit set). Host order. */
static __always_inline int roce_pkey_match(__u16 pkt, __u16 qp)
{
	if ((pkt & ROCE_PKEY_BASE) != (qp & ROCE_PKEY_BASE) || !(pkt & ROCE_PKEY_BASE))
		return 0;
	return !!((pkt | qp) & ROCE_PKEY_FULL);
}

/* roce_rc_request_hdr_len is the headers of an RC request opcode, BTH
 * included (0x00 SEND_FIRST .. 0x0B RDMA_WRITE_ONLY_WITH_IMMEDIATE): RETH on
 * a WRITE's first or only packet, ImmDt on the last or only one "with
 * immediate". 0 for other opcodes. */
static __always_inline __u32 roce_rc_request_hdr_len(__u8 op)
{
	switch (op) {
	case 0x00: /* SEND_FIRST */
	case 0x01: /* SEND_MIDDLE */
	case 0x02: /* SEND_LAST */
	case 0x04: /* SEND_ONLY */
	case 0x07: /* RDMA_WRITE_MIDDLE */
	case 0x08: /* RDMA_WRITE_LAST */
		return ROCE_BTH_LEN;
	case 0x03: /* SEND_LAST_WITH_IMMEDIATE */
	case 0x05: /* SEND_ONLY_WITH_IMMEDIATE */
	case 0x09: /* RDMA_WRITE_LAST_WITH_IMMEDIATE */
		return ROCE_BTH_LEN + ROCE_IMMDT_LEN;
	case 0x06: /* RDMA_WRITE_FIRST */
	case 0x0A: /* RDMA_WRITE_ONLY */
		return ROCE_BTH_LEN + ROCE_RETH_LEN;
	case 0x0B: /* RDMA_WRITE_ONLY_WITH_IMMEDIATE */
		return ROCE_BTH_LEN + ROCE_RETH_LEN + ROCE_IMMDT_LEN;
	}
	return 0;
}

/* roce_bth_ok applies the rules that need no QP to a packet whose opcode
 * has hdr_len bytes of headers (BTH included) in a UDP datagram of udp_len
 * bytes (the UDP header's length field): TVer 0, room for the headers and
 * the ICRC, and a PadCnt no larger than the payload between them. */
static __always_inline int roce_bth_ok(const struct roce_bth *bth, __u32 hdr_len, __u32 udp_len)
{
	__u32 pad = (bth->flags & ROCE_BTH_PADCNT_MASK) >> ROCE_BTH_PADCNT_SHIFT;
	__u32 min = sizeof(struct net_udphdr) + hdr_len + ROCE_ICRC_LEN;

	if (bth->flags & ROCE_BTH_TVER_MASK)
		return 0;
	if (udp_len < min)
		return 0;
	return pad <= udp_len - min;
}

#endif
