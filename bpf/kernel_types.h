/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The kernel's structures the tracing programs read (port.c,
 * xmit_dispatch.c), resolved against the running kernel's BTF when the
 * programs load (CO-RE): only the fields used, at whatever offsets the
 * kernel has them.
 */
#ifndef FABRICLAB_KERNEL_TYPES_H
#define FABRICLAB_KERNEL_TYPES_H

#include <linux/types.h>

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
struct sk_buff {
	unsigned int len;
	__s64 tstamp;
	__u8 tstamp_type : 2; /* 6.11+: SKB_CLOCK_REALTIME, _MONOTONIC, _TAI */
	struct net_device *dev;
};
/* 5.18 to 6.10 had one bit: 1 = the stamp is a monotonic delivery time. */
struct sk_buff___mono_bit {
	__u8 mono_delivery_time : 1;
};
#pragma clang attribute pop

#endif /* FABRICLAB_KERNEL_TYPES_H */
