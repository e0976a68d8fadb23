/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Structures shared between the xmit dispatcher (xmit_dispatch.c) and Go
 * (qdisc/xmitdispatch.go). bpf2go mirrors every struct named with -type in
 * gen_xmit_dispatch.go; keep fields 64-bit aligned and add new ones at the
 * end of a struct.
 */
#ifndef FABRICLAB_XMIT_DISPATCH_H
#define FABRICLAB_XMIT_DISPATCH_H

#include <linux/types.h>

/* Ports one dispatcher serves: the slots of its program array. */
#define XMIT_DISPATCH_SLOTS 1024

/* A transmitting device: the key of xmit_slots. */
struct xmit_dev {
	__u32 netns_ino; /* the namespace's inode number (net->ns.inum) */
	__u32 ifindex;
};

/* Who holds a slot: the device it serves, its veth peer (where the port's
 * packets wait in the host queue) and the port's owner, a BPF link of the
 * port (its dequeue program's TCX link) whose end frees the slot. */
struct xmit_owner {
	struct xmit_dev dev;
	struct xmit_dev peer; /* zero for a kernel NP */
	__u32 owner_link_id;
	__u32 kind; /* enum xmit_kind */
};

/* What holds a slot. */
enum xmit_kind {
	XMIT_KIND_PORT = 0, /* a port: port_xmit, port_host_drop */
	XMIT_KIND_NP = 1,   /* a kernel NP: np_xmit (bpf/np.c) */
};

/* What the dispatcher saw (per CPU). */
struct xmit_dispatch_stats {
	/* A device with a slot whose program array entry was empty (a port
	 * between its release's two steps): not dispatched. */
	__u64 empty_slot;
	/* The same for a dropped packet's device (host_drop_dispatch_*). */
	__u64 drop_empty_slot;
	/* The same for a kernel NP's device (np_xmit_dispatch). */
	__u64 np_empty_slot;
};

#endif /* FABRICLAB_XMIT_DISPATCH_H */
