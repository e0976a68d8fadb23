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
 * The port's other tracing program, port_host_drop on tp_btf/kfree_skb,
 * books the packets the kernel drops between port_xmit and the peer's
 * ingress; kfree_skb fires for every drop of the machine, so it is
 * dispatched too, by the dropped packet's device: the port's own device
 * (a drop in veth_xmit, before the packet crosses) or its veth peer (the
 * per-CPU backlog, the peer's ingress). A device is the port device of at
 * most one port and the peer of at most one (the port on its own veth
 * peer), so two programs, one per role, cover every port: two lookups
 * per drop, whatever the number of ports.
 *
 * A kernel NP (bpf/np.c) watches its CNPs leave with np_xmit on the same
 * tracepoint: np_xmit_dispatch tail-calls it by the NP's device, a second
 * program beside xmit_dispatch (a host's device can carry a port and an NP
 * at once).
 *
 * qdisc/xmitdispatch.go pins it under bpffs, claims and frees the slots
 * (xmit_owners, atomically) and removes it with its last port.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "xmit_dispatch.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#include "kernel_types.h"

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

/* A kernel NP's device -> its slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XMIT_DISPATCH_SLOTS);
	__type(key, struct xmit_dev);
	__type(value, __u32);
} np_slots SEC(".maps");

/* Slot -> the NP's np_xmit. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, XMIT_DISPATCH_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} np_progs SEC(".maps");

/* A port's veth peer -> its slot (drops in the host queue). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XMIT_DISPATCH_SLOTS);
	__type(key, struct xmit_dev);
	__type(value, __u32);
} drop_peer_slots SEC(".maps");

/* Slot -> the port's port_host_drop. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, XMIT_DISPATCH_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} drop_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xmit_dispatch_stats);
} xmit_dispatch_counters SEC(".maps");

/* dev_key is a device's key in the slot maps. */
static __always_inline void dev_key(struct xmit_dev *key, const struct net_device *dev)
{
	key->ifindex = dev->ifindex;
	key->netns_ino = dev->nd_net.net->ns.inum;
}

/* Which counter a dispatch to an empty slot adds to. */
enum empty_counter {
	EMPTY_XMIT,
	EMPTY_DROP,
	EMPTY_NP,
};

/* dispatch tail-calls the program that slots and progs give dev; it
 * returns only where there is none. */
static __always_inline int dispatch(__u64 *ctx, const struct net_device *dev, void *slots, void *progs,
				    enum empty_counter empty)
{
	struct xmit_dispatch_stats *st;
	struct xmit_dev key = {};
	__u32 *slot, zero = 0;

	if (!dev)
		return 0;
	dev_key(&key, dev);
	slot = bpf_map_lookup_elem(slots, &key);
	if (!slot)
		return 0;
	bpf_tail_call(ctx, progs, *slot);
	/* Only when the slot's program is gone (its user halfway out). */
	st = bpf_map_lookup_elem(&xmit_dispatch_counters, &zero);
	if (!st)
		return 0;
	if (empty == EMPTY_XMIT)
		st->empty_slot++;
	else if (empty == EMPTY_DROP)
		st->drop_empty_slot++;
	else
		st->np_empty_slot++;
	return 0;
}

/* net_dev_start_xmit(const struct sk_buff *skb, const struct net_device *dev) */
SEC("tp_btf/net_dev_start_xmit")
int xmit_dispatch(__u64 *ctx)
{
	return dispatch(ctx, (const void *)ctx[1], &xmit_slots, &xmit_progs, EMPTY_XMIT);
}

/* The same for the kernel NPs' np_xmit. */
SEC("tp_btf/net_dev_start_xmit")
int np_xmit_dispatch(__u64 *ctx)
{
	return dispatch(ctx, (const void *)ctx[1], &np_slots, &np_progs, EMPTY_NP);
}

/* kfree_skb(struct sk_buff *skb, void *location, enum skb_drop_reason, ...):
 * a drop on a port's own device. */
SEC("tp_btf/kfree_skb")
int host_drop_dispatch_dev(__u64 *ctx)
{
	const struct sk_buff *skb = (const void *)ctx[0];

	return skb ? dispatch(ctx, skb->dev, &xmit_slots, &drop_progs, EMPTY_DROP) : 0;
}

/* A drop on a port's veth peer. */
SEC("tp_btf/kfree_skb")
int host_drop_dispatch_peer(__u64 *ctx)
{
	const struct sk_buff *skb = (const void *)ctx[0];

	return skb ? dispatch(ctx, skb->dev, &drop_peer_slots, &drop_progs, EMPTY_DROP) : 0;
}
