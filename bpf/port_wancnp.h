// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * WAN CNPs (seed 001): the CNP a WAN port owes a tunnel's ingress
 * PE for a light or heavy mark.
 *
 * Part of port.c, included once from it: it uses port.c's maps and
 * helpers and is not a header of its own.
 */
#ifndef PORT_WANCNP_H
#define PORT_WANCNP_H

/*
 * WAN CNPs (seed 001 "Two Threshold ECN Mechanism"; issue 13 §4). A WAN
 * port that marks a tunnelled packet, light (ECT(1) past T1) or heavy (CE
 * past T2), sends a CNP to the tunnel-ingress PE, the packet's outer
 * source, so that it reacts within a one-way delay instead of a round
 * trip through the receiver. In RoCEv2 CNP format (IBTA A17.9.3), as the
 * tunnel's far end would send it: from the outer destination (the egress
 * PE, which names the tunnel) to the outer source, UDP 4791 from the inner
 * flow's UDP source port, the inner BTH's destination QP (0 if the inner
 * packet is not RoCEv2), BECN set, DSCP ppfc_dscp (CNP), Not-ECT, the 16
 * reserved bytes zero, the ICRC computed. Light and heavy differ in one
 * bit the ICRC masks, L (ROCE_BTH_WAN_LIGHT, BTH byte 4): set for light.
 * At most one per PE, class and kind per wan_cnp_interval_ns (claimed by
 * compare-and-swap in wan_cnp_last). The frame goes out like a PPFC
 * notification: built in ppfc_scratch, a clone sent to the device toward
 * the PE, rewritten there by ppfc_egress.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct wan_cnp_key);
	__type(value, __u64);
} wan_cnp_last SEC(".maps");

/* wan_cnp sends the CNP a marked packet owes its tunnel's ingress PE. A
 * function of its own, building in the scratch map: port_enqueue's stack
 * has no room for the frame or the FIB lookup. */
static __attribute__((noinline)) int wan_cnp(struct __sk_buff *skb, const struct class_config *cc,
					     struct class_stats *st, __u32 l3_off, __u32 class_and_kind)
{
	struct wan_cnp_frame *f;
	struct wan_cnp_work *w;
	struct ppfc_scratch *sc;
	struct port_config *pc;
	struct port_stats *ps;
	__u64 *last, zero64 = 0;
	__u32 zero = 0, off, mark;
	long rc;

	pc = bpf_map_lookup_elem(&port_cfg, &zero);
	ps = bpf_map_lookup_elem(&port_counters, &zero);
	sc = bpf_map_lookup_elem(&ppfc_scratch, &zero);
	w = bpf_map_lookup_elem(&wan_cnp_work, &zero);
	if (!pc || !ps || !sc || !w)
		return 0;
	if (bpf_skb_load_bytes(skb, l3_off & 0xFF, &w->hdr, sizeof(w->hdr)) || w->hdr.version != 4 ||
	    w->hdr.protocol != 4 || w->hdr.ihl < NET_IPV4_MIN_IHL)
		return 0;
	w->light = class_and_kind & 1;
	w->from = w->hdr.daddr;
	w->to = w->hdr.saddr;
	w->dest_qp = 0;
	w->sport = 0;
	w->key.pe = w->to;
	w->key.class_id = class_and_kind >> 1;
	w->key.light = w->light;
	w->key.pad = 0;
	last = bpf_map_lookup_elem(&wan_cnp_last, &w->key);
	if (!last) {
		bpf_map_update_elem(&wan_cnp_last, &w->key, &zero64, BPF_NOEXIST);
		last = bpf_map_lookup_elem(&wan_cnp_last, &w->key);
		if (!last)
			return 0;
	}
	w->now = now_ns();
	w->old = READ_ONCE(*last);
	if (w->old && w->now - w->old < cc->wan_cnp_interval_ns) {
		st->wan_cnp_coalesced++;
		return 0;
	}
	if (__sync_val_compare_and_swap(last, w->old, w->now) != w->old) {
		st->wan_cnp_coalesced++; /* another CPU sent it */
		return 0;
	}

	/* The marked flow: the inner UDP source port and, for RoCEv2, the
	 * destination QP. */
	off = (l3_off & 0xFF) + w->hdr.ihl * 4;
	if (!bpf_skb_load_bytes(skb, off & 0x1FF, &w->hdr, sizeof(w->hdr)) && w->hdr.protocol == NET_IPPROTO_UDP &&
	    w->hdr.ihl >= NET_IPV4_MIN_IHL &&
	    !bpf_skb_load_bytes(skb, (off + w->hdr.ihl * 4) & 0x1FF, &w->l4, sizeof(w->l4))) {
		w->sport = bpf_ntohs(w->l4.udp.source);
		if (w->l4.udp.dest == bpf_htons(ROCE_UDP_PORT))
			w->dest_qp = (__u32)w->l4.bth[5] << 16 | (__u32)w->l4.bth[6] << 8 | w->l4.bth[7];
	}

	__builtin_memset(&w->fib, 0, sizeof(w->fib));
	w->fib.family = NET_AF_INET;
	w->fib.ipv4_dst = w->to;
	w->fib.ifindex = skb->ingress_ifindex;
	rc = bpf_fib_lookup(skb, &w->fib, sizeof(w->fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS || w->fib.ifindex == skb->ifindex)
		goto fail;
	f = &sc->c;
	__builtin_memcpy(f->eth.h_dest, w->fib.dmac, ETH_ALEN);
	__builtin_memcpy(f->eth.h_source, w->fib.smac, ETH_ALEN);
	f->eth.h_proto = bpf_htons(ETH_P_IP);
	roce_ipv4_masked(&f->ip, ROCE_CNP_L4_LEN, w->from, w->to);
	f->udp.source = bpf_htons(w->sport);
	f->udp.dest = bpf_htons(ROCE_UDP_PORT);
	f->udp.len = bpf_htons(ROCE_CNP_L4_LEN);
	f->udp.check = 0xFFFF;
	f->bth.opcode = ROCE_OP_CNP;
	f->bth.flags = 0;
	f->bth.pkey = 0xFFFF;
	f->bth.ecn = ICRC_MASKED;
	f->bth.destqp[0] = w->dest_qp >> 16;
	f->bth.destqp[1] = w->dest_qp >> 8;
	f->bth.destqp[2] = w->dest_qp;
	f->bth.ack = 0;
	f->bth.psn[0] = 0;
	f->bth.psn[1] = 0;
	f->bth.psn[2] = 0;
	__builtin_memset(f->rsvd, 0, sizeof(f->rsvd));
	f->icrc = icrc_crc((const __u8 *)&f->ip, sizeof(f->ip) + ROCE_CNP_L4_LEN - ROCE_ICRC_LEN,
			   sizeof(f->ip) + ROCE_CNP_L4_LEN - ROCE_ICRC_LEN);
	roce_ipv4_as_sent(&f->ip, (pc->ppfc_dscp & 0x3F) << 2, PPFC_TTL);
	f->udp.check = 0;
	f->bth.ecn = ROCE_BTH_BECN | (w->light ? ROCE_BTH_WAN_LIGHT : 0);

	mark = skb->mark;
	sc->ready = 1;
	sc->len = WAN_CNP_V4_LEN;
	skb->mark = ppfc_mark;
	rc = bpf_clone_redirect(skb, w->fib.ifindex, 0);
	skb->mark = mark;
	sc->ready = 0;
	if (rc)
		goto fail;
	if (w->light)
		st->wan_cnp_light_sent++;
	else
		st->wan_cnp_heavy_sent++;
	{
		__u32 class_id = class_and_kind >> 1;
		struct class_state *cs = bpf_map_lookup_elem(&class_queue, &class_id);

		if (cs)
			__sync_val_compare_and_swap(w->light ? &cs->wan_cnp_first_light_ns : &cs->wan_cnp_first_heavy_ns,
						    0, w->now);
	}
	return 0;
fail:
	ps->wan_cnp_failed++;
	__sync_val_compare_and_swap(last, w->now, w->old); /* a later mark tries again */
	return 0;
}

#endif /* PORT_WANCNP_H */
