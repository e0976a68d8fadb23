// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The xmit handoff: port_xmit's decision handed to port_dequeue (or
 * port_host_drop) in a slot of the skb's address, and the host queue's
 * books.
 *
 * Part of port.c, included once from it: it uses port.c's maps and
 * helpers and is not a header of its own.
 */
#ifndef PORT_XMIT_H
#define PORT_XMIT_H

/* host_leave takes a packet out of the host queue of its class. */
static __always_inline void host_leave(struct class_state *cs, __u32 len)
{
	__sync_fetch_and_add(&cs->host_backlog_bytes, -(__s64)len);
	__sync_fetch_and_add(&cs->host_backlog_packets, -1LL);
}

/* host_dropped books a packet the kernel dropped in the host queue. */
static __always_inline void host_dropped(__u32 class_id, __u32 len)
{
	struct class_state *cs;
	struct class_stats *st;

	class_id &= STAMP_CLASS_MASK;
	cs = bpf_map_lookup_elem(&class_queue, &class_id);
	st = bpf_map_lookup_elem(&class_counters, &class_id);
	if (!cs || !st)
		return;
	host_leave(cs, len);
	st->host_dropped_packets++;
	st->host_dropped_bytes += len;
}

/* addr_value is a kernel address as a number (0 if the scratch entry is
 * missing, which cannot happen). */
static __always_inline __u64 addr_value(const void *p, __u32 slot)
{
	__u64 *s = bpf_map_lookup_elem(&addr_scratch, &slot);

	if (!s)
		return 0;
	*(const void **)s = p;
	return *(volatile __u64 *)s;
}

/* The key of a packet's handoff record: its skb's address, which stays the
 * same from HTB's exit to the peer's ingress (__dev_forward_skb and netif_rx
 * pass the skb itself). */
static __always_inline __u64 skb_key(const void *skb, __u32 slot)
{
	if (test_hooks)
		return test_skb_key;
	return addr_value(skb, slot);
}

/* handoff_slot is the slot of a key: Fibonacci hashing spreads the skbs'
 * slab addresses, 256 bytes apart, over the table (qdisc.handoffSlot). */
static __always_inline struct xmit_handoff *handoff_slot(__u64 key)
{
	__u32 i = (key * 0x9E3779B97F4A7C15ULL) >> (64 - HANDOFF_SLOT_BITS);

	return bpf_map_lookup_elem(&handoff, &i);
}


/* skb_stamped reports whether the skb carries a monotonic delivery time, as
 * port_enqueue's stamp is. */
static __always_inline bool skb_stamped(const struct sk_buff *skb)
{
	if (bpf_core_field_exists(skb->tstamp_type))
		return BPF_CORE_READ_BITFIELD(skb, tstamp_type) == BPF_SKB_CLOCK_MONOTONIC;
	return BPF_CORE_READ_BITFIELD((const struct sk_buff___mono_bit *)skb, mono_delivery_time) == 1;
}

#endif /* PORT_XMIT_H */
