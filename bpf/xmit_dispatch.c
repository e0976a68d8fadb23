//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The xmit dispatcher: the machine's one program on tp_btf/net_dev_start_xmit
 * for every port's xmit hook (port.c's port_xmit). A tracepoint runs each
 * program attached to it on every transmission of every device of the
 * machine, ~60-80 ns a program (docs/measured.md), so a program per port
 * costs every packet of a 64-port lab ~4-5 us. The dispatcher looks the
 * transmitting device up by (namespace inode, ifindex) and tail-calls its
 * port's port_xmit, loaded for the same tracepoint but not attached: one
 * hash lookup per transmission, whatever the number of ports.
 *
 * qdisc/xmitdispatch.go pins it under bpffs, claims and frees the slots
 * (xmit_owners, atomically) and removes it with its last port.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "xmit_dispatch.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* The kernel's structures read here, resolved by CO-RE as in port.c. */
#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)
struct ns_common {
	unsigned int inum;
};
struct net {
	struct ns_common ns;
};
typedef struct {
	struct net *net;
} possible_net_t;
struct net_device {
	int ifindex;
	possible_net_t nd_net;
};
#pragma clang attribute pop

/* Device -> slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XMIT_DISPATCH_SLOTS);
	__type(key, struct xmit_dev);
	__type(value, __u32);
} xmit_slots SEC(".maps");

/* Slot -> the port's port_xmit. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, XMIT_DISPATCH_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} xmit_progs SEC(".maps");

/* Slot -> its holder: claimed with BPF_NOEXIST, so that two processes
 * attaching ports at once never share one. Never read here. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XMIT_DISPATCH_SLOTS);
	__type(key, __u32);
	__type(value, struct xmit_owner);
} xmit_owners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xmit_dispatch_stats);
} xmit_dispatch_counters SEC(".maps");

/* net_dev_start_xmit(const struct sk_buff *skb, const struct net_device *dev) */
SEC("tp_btf/net_dev_start_xmit")
int xmit_dispatch(__u64 *ctx)
{
	const struct net_device *dev = (const void *)ctx[1];
	struct xmit_dispatch_stats *st;
	struct xmit_dev key = {};
	__u32 *slot, zero = 0;

	if (!dev)
		return 0;
	key.ifindex = dev->ifindex;
	key.netns_ino = dev->nd_net.net->ns.inum;
	slot = bpf_map_lookup_elem(&xmit_slots, &key);
	if (!slot)
		return 0;
	bpf_tail_call(ctx, &xmit_progs, *slot);
	/* Only when the slot's program is gone. */
	st = bpf_map_lookup_elem(&xmit_dispatch_counters, &zero);
	if (st)
		st->empty_slot++;
	return 0;
}
