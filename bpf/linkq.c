//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The host queue in front of a switch port: what a lab host has sent on
 * its link and the switch has not yet received. On a veth pair a sent
 * packet waits in the per-CPU backlog until softirq work (often
 * ksoftirqd, a thread like any other) carries it into the switch; when the
 * host holds that work off for tens of ms, up to netdev_max_backlog
 * packets (1,000: 4 MB at MTU 4096) pile up there, past any PPFC stop or
 * CNP, and reach the port in one burst (kernel.md: "Where the 2 CPUs go").
 * A NIC bounds its own (BQL); host/linkq bounds this one: a sender's
 * transmit loop waits while the link holds more than a limit.
 *
 * linkq_egress runs at TCX egress of the host's end of a link and counts
 * what leaves; linkq_ingress runs first at TCX ingress of the switch's end
 * and counts what arrives. Both pass every packet on. The queue is the
 * difference; slot (set per link at load time) picks the link's counters
 * in linkq_slots, which user space maps read-only.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual BSD/GPL";

#define TC_ACT_UNSPEC (-1) /* TCX_NEXT */

/* Links one set of maps serves (host/linkq MaxLinks). */
#define LINKQ_SLOTS 1024

/* Load-time setting: the link's slot in linkq_slots. */
volatile const __u32 slot = 0;

/* One link's counters, one cache line. */
struct linkq_slot {
	__u64 sent_bytes;   /* at the host's egress (L2 lengths) */
	__u64 sent_packets;
	__u64 recv_bytes;   /* at the switch's ingress */
	__u64 recv_packets;
	__u64 max_bytes;    /* the most a packet left behind it on arrival */
	__u64 _pad[3];
};

_Static_assert(sizeof(struct linkq_slot) == 64, "one cache line per link");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, LINKQ_SLOTS);
	__type(key, __u32);
	__type(value, struct linkq_slot);
} linkq_slots SEC(".maps");

SEC("tc")
int linkq_egress(struct __sk_buff *skb)
{
	__u32 k = slot;
	struct linkq_slot *s = bpf_map_lookup_elem(&linkq_slots, &k);

	if (s) {
		__sync_fetch_and_add(&s->sent_bytes, skb->len);
		__sync_fetch_and_add(&s->sent_packets, 1);
	}
	return TC_ACT_UNSPEC;
}

SEC("tc")
int linkq_ingress(struct __sk_buff *skb)
{
	__u32 k = slot;
	struct linkq_slot *s = bpf_map_lookup_elem(&linkq_slots, &k);
	__u64 recv, sent;

	if (s) {
		recv = __sync_fetch_and_add(&s->recv_bytes, skb->len) + skb->len;
		__sync_fetch_and_add(&s->recv_packets, 1);
		sent = *(volatile __u64 *)&s->sent_bytes;
		/* A statistic: two CPUs may race on it, and the lower may win. */
		if (sent > recv && sent - recv > s->max_bytes)
			s->max_bytes = sent - recv;
	}
	return TC_ACT_UNSPEC;
}
