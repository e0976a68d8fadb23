// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#ifndef PORT_FLOWQ_H
#define PORT_FLOWQ_H

/* Flow queues: a class with flow_queues > 0 is an HTB inner class whose
 * leaves, one per flow bucket, HTB serves round robin (DRR), as a NIC's
 * scheduler serves its QPs or PDCs and htsim's UecNIC its sources, one
 * packet each in turn. A FIFO instead shares the link by what each flow
 * has queued: a flow starting beside a running one took half the link at
 * once and more, and the two finished together (docs/collectives.md).
 *
 * A UET packet's flow is its source PDC (SPDCID, bytes 8-9 of every PDS
 * header): a host numbers its PDCs in turn, so the flows of one NIC take
 * distinct queues, and a sprayed flow's UDP source port changes with every
 * packet and could not name it. Any other packet: the kernel's hash of its
 * 5-tuple. */

#define FLOWQ_MAX 256 /* qdisc.MaxFlowQueues */
#define FLOWQ_UET_PORT 4793
#define FLOWQ_PDS_SPDCID_OFF 8

/* flowq_minor is the HTB minor of class_id's flow queue bucket: its own
 * 256 minors above the class leaves' (qdisc/htb.go flowQueueClassID). */
static __always_inline __u32 flowq_minor(__u32 class_id, __u32 bucket)
{
	return ((class_id + 1) << 8) | bucket;
}

static __always_inline __u32 flowq_bucket(struct __sk_buff *skb, const struct pkt_info *pi, __u32 n)
{
	__u32 l4 = 0;
	__u8 proto = 0;
	__be16 dport, spdcid;

	if (pi->l3_proto == ETH_P_IP) {
		__u8 vihl;
		__be16 frag;

		if (bpf_skb_load_bytes(skb, pi->l3_off, &vihl, 1) ||
		    bpf_skb_load_bytes(skb, pi->l3_off + 6, &frag, 2) ||
		    bpf_skb_load_bytes(skb, pi->l3_off + 9, &proto, 1))
			goto hash;
		if (frag & bpf_htons(NET_IPV4_FRAG_OFFSET))
			goto hash; /* no UDP header in a later fragment */
		l4 = pi->l3_off + (vihl & 0xf) * 4;
	} else if (pi->l3_proto == ETH_P_IPV6) {
		if (bpf_skb_load_bytes(skb, pi->l3_off + 6, &proto, 1))
			goto hash;
		l4 = pi->l3_off + 40;
	}
	if (proto == NET_IPPROTO_UDP && !bpf_skb_load_bytes(skb, l4 + 2, &dport, 2) &&
	    dport == bpf_htons(FLOWQ_UET_PORT) &&
	    !bpf_skb_load_bytes(skb, l4 + sizeof(struct net_udphdr) + FLOWQ_PDS_SPDCID_OFF, &spdcid, 2))
		return bpf_ntohs(spdcid) % n;
hash:
	return bpf_get_hash_recalc(skb) % n;
}

/* flowq_priority is the skb->priority that puts the packet in its flow's
 * queue of class_id, or 0 when the class has no flow queues. */
static __always_inline __u32 flowq_priority(struct __sk_buff *skb, const struct port_config *pc,
					    const struct class_config *cc, const struct pkt_info *pi,
					    __u32 class_id)
{
	__u32 n = cc->flow_queues;

	if (!n || n > FLOWQ_MAX || !(pc->flags & PORT_F_SET_PRIORITY))
		return 0;
	return (pc->priority_base & 0xffff0000) | flowq_minor(class_id, flowq_bucket(skb, pi, n));
}

#endif /* PORT_FLOWQ_H */
