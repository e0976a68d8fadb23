//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * DCQCN notification point (NP) in the kernel: a CE-marked RoCEv2 data
 * packet turns into a CNP sent back out of the device it arrived on, without
 * waiting for the user-space agent's receive loop (dcqcn.md §NP,
 * roce-wire.md §CNP). host/npbpf loads and attaches it.
 *
 * np_ingress runs at TCX ingress of the receiver's device. It parses
 * Ethernet / IPv4 or IPv6 / UDP 4791 / BTH (net.h). An RC request (opcodes
 * 0x00-0x0B) with ECN = CE, to a QP in np_qps whose peer and local addresses
 * are the packet's source and destination, is a congestion notification:
 *
 *   - if no CNP left for the QP in the last N (min_time_between_cnps), the
 *     packet is cloned to the device's own egress (bpf_clone_redirect) with
 *     skb->mark = np_mark, and np_egress turns the clone into the CNP;
 *   - otherwise it is counted as coalesced and the QP has a CNP pending.
 *
 * A pending CNP leaves with the QP's first RC request packet (CE or not)
 * that arrives N or more after the last CNP. There is no timer: a BPF timer
 * callback has no packet to clone, so it could not send anything. This
 * differs from the user-space NP (host/dcqcn.NP), which sends the pending
 * CNP exactly N after the last one, by at most one packet inter-arrival
 * time, and sends nothing if the QP receives no packet after N.
 *
 * Every packet continues untouched: np_ingress returns TC_ACT_UNSPEC
 * (TCX_NEXT), so programs after it in the TCX chain and the stack see it as
 * if the NP were not there (the agent still receives the CE packet).
 * In-band VLAN tags, IPv4 options and IPv4 fragments are not answered (the
 * CNP would need its own tag and priority; the ICRC covers a whole datagram):
 * such packets pass and are counted.
 *
 * np_egress runs at TCX egress of the same device, first in the chain: a
 * packet carrying np_mark is a clone np_ingress made. bpf_clone_redirect
 * runs the device's egress path synchronously, so np_egress has finished
 * before np_ingress resumes. It trims the clone to the CNP's length
 * (net_cut_to) and writes the whole CNP over it in one
 * bpf_skb_store_bytes: Ethernet addresses swapped, the IP and UDP headers
 * from the QP context (source = local, destination = peer, UDP source port
 * = the QP's, destination 4791), BTH opcode 0x81 with B = 1 and DestQP = the
 * peer QP, 16 zero bytes and the ICRC, computed here with a table-driven
 * CRC-32. A clone it cannot rewrite is dropped, never sent as data. The CNP
 * keeps np_mark, so other programs can tell it, and its opcode (0x81) is not
 * a trigger, so it can never loop.
 *
 * The stack sized the clone for the qdisc (qdisc_skb_cb->pkt_len) before
 * the egress hook ran, as the data packet it was: a TBF or HTB on the
 * device would charge a 74-byte CNP the data packet's length (up to the
 * MTU). So np_egress sends the CNP it built through the device's egress
 * once more (bpf_redirect to itself), where the stack sizes it anew; the
 * second pass finds opcode 0x81 and lets it through to the programs after
 * np_egress and the qdisc. The redirect returns NET_XMIT_SUCCESS to
 * bpf_clone_redirect whatever the qdisc then does: a CNP the qdisc drops
 * at that enqueue ends its QP's wait at xmit_timeout_ns, not at once.
 *
 * Spacing: N counts from where the CNP is transmitted. np_xmit runs at the
 * net_dev_start_xmit tracepoint, which xmit_one() fires after
 * dev_queue_xmit_nit() (where a packet tap takes its copy and stamp) and
 * right before the driver's ndo_start_xmit. np_egress records the CNP's
 * kernel sk_buff (bpf_cast_to_kern_ctx, kernel >= 6.2) and device in
 * np_xmits; np_xmit, for a packet carrying np_mark that is in np_xmits,
 * moves the QP's last CNP time to that moment. A decision takes the QP's
 * spin lock and needs N since that time, and none is made while another
 * CNP of the QP is between its decision and its transmit (inflight: a CE
 * meanwhile is coalesced and makes a CNP pending). The tap stamps CNP k
 * before np_xmit reads the clock for it, and CNP k+1 after its decision, so
 * two CNPs of a QP are never less than N apart on a tap either, whatever
 * CPUs the CE packets arrive on and whatever takes the CPU between
 * np_egress and the transmit. np_xmit keeps the least spacing it saw
 * (min_spacing_ns).
 *
 * On a device without a qdisc (veth's noqueue) the whole egress path runs
 * inside bpf_clone_redirect, np_xmit included. With a qdisc the CNP may
 * leave later, from another CPU: the QP waits for it at most
 * xmit_timeout_ns after np_egress (counted in xmit_timeouts), so a CNP lost
 * silently after np_egress (a drop at the qdisc's enqueue, a qdisc reset, a
 * dequeue drop) cannot stop the QP's CNPs; a clone that fails (an error
 * back from bpf_clone_redirect) ends the wait at once. The
 * guarantee holds for CNPs transmitted within max(N, xmit_timeout_ns) of
 * np_egress; one transmitted later still moves the time (xmit_late) and
 * shows in min_spacing_ns. A driver that answers NETDEV_TX_BUSY makes the
 * stack retry xmit_one later: np_xmit took the first attempt's time.
 *
 * np_xmit sees every packet sent on the machine, in every namespace: it
 * reads the mark and returns for any other. Several NP objects (one per
 * device, in other namespaces) may use the same mark; each looks up only
 * its own np_xmits, keyed by the sk_buff's address, and checks the device,
 * so none takes another's CNP. If np_xmit is not attached (xmit_hook 0:
 * BPF_PROG_RUN tests, a kernel where the tracing link fails) or np_xmits
 * refuses the entry, N counts from the CNP leaving np_egress, and the time
 * between two CNPs of a QP leaving np_egress is never below N; what
 * follows np_egress (the qdisc, an interrupt before the transmit) is then
 * outside the guarantee (egress_stamped counts those CNPs).
 *
 * A device with GRO on (veth: gro and rx-udp-gro-forwarding) hands
 * np_ingress a run of datagrams of one flow as one sk_buff (gso_segs
 * datagrams of gso_size bytes of UDP payload behind one IP header, so one
 * ECN). The run counts as one packet in the device counters (gro_runs,
 * gro_segments say how many were runs), and as what it holds for its QP:
 * a CE run is that many CE packets at once (ecn_marked, coalesced), one
 * decision. Datagrams of the run to another QP than the first's (two QPs
 * whose source ports hash alike share a flow) are counted in gro_other_qp
 * and not answered.
 *
 * No program writes packet data directly (only through helpers), so the
 * verifier adds no unclone prologue: packets the NP does not answer are
 * never copied.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "net.h"
#include "icrc.h"
#include "roce_check.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))

#define TC_ACT_UNSPEC (-1) /* TCX_NEXT: later programs and the stack see it */
#define TC_ACT_SHOT 2

/* dev_queue_xmit's "queued, but the device is congested": not a drop
 * (include/linux/netdevice.h, net_xmit_eval). */
#define NET_XMIT_CN 2

#define NP_FAMILY_IPV4 4
#define NP_FAMILY_IPV6 6

/* The most datagrams the kernel coalesces into one UDP run (UDP_GRO_CNT_MAX). */
#define NP_GRO_MAX_SEGS 64

/* The CNP on the wire (roce-wire.md §CNP). */
#define CNP_TTL 64
#define CNP_V4_LEN (sizeof(struct ethhdr) + sizeof(struct iphdr) + ROCE_CNP_L4_LEN)   /* 74 */
#define CNP_V6_LEN (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + ROCE_CNP_L4_LEN) /* 94 */

/* The longest IP packet (without its ICRC) np_icrc_test takes. */
#define ICRC_TEST_MAX 128

/* Load-time settings. */

/* The mark np_ingress gives its clones, and the CNPs keep. */
volatile const __u32 np_mark = 0x4e50434e; /* "NPCN" */

/* How long a QP waits for its built CNP to reach the transmit hook
 * before it may decide the next one (host/npbpf LoadOptions.XmitTimeout). */
volatile const __u64 xmit_timeout_ns = 1000000;

/* Tests only: read the clock from test_now_ns, and count a CNP in
 * test_redirects instead of cloning the packet (BPF_PROG_RUN has no device
 * whose egress np_egress is attached to). np_egress records test_skb and
 * test_dev as the CNP's sk_buff and device, np_xmit_test transmits them,
 * and with test_qdisc_holds the simulated clone comes back built by
 * np_egress and held by a qdisc. */
volatile const __u8 test_hooks = 0;

__u64 test_now_ns = 0;
__u64 test_redirects = 0;
__s32 test_redirect_ret = 0;
__u64 test_skb = 0;
__u64 test_dev = 0;
__u8 test_qdisc_holds = 0;

/* Runtime: np_xmit is attached (host/npbpf sets it once the tracing link
 * is up): np_egress records CNPs for it. */
__u8 xmit_hook = 0;

/* The kernel's structures, only the fields read here; CO-RE relocates them
 * against the running kernel's BTF. */
struct net_device;
struct sk_buff {
	__u32 mark;
	struct net_device *dev;
} __attribute__((preserve_access_index));

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

/* Where the QP's last decided CNP is (np_qp.inflight). */
enum np_out {
	NP_OUT_NONE = 0,    /* transmitted, failed, or given up on: the QP may decide */
	NP_OUT_DECIDED = 1, /* between np_ingress's decision and np_egress */
	NP_OUT_BUILT = 2,   /* built by np_egress, not yet seen by np_xmit */
};

/* The QP context, keyed by the local (receiver) QPN: the DestQP of the data
 * packets the QP receives. Go writes the first part when the QP connects
 * (host/npbpf AddQP) with the state zero; the programs own the rest. */
struct np_qp {
	/* Addresses in network order, IPv4 in the first 4 bytes. */
	__u8 local_ip[16]; /* the receiver: the data's destination, the CNP's source */
	__u8 peer_ip[16];  /* the sender: the data's source, the CNP's destination */
	__u32 peer_qpn;    /* the sender's QPN: the CNP's DestQP (24 bits) */
	__u16 src_port;    /* the UDP source port of this QP's packets, host order */
	__u16 pkey;        /* P_Key, host order */
	__u8 family;       /* NP_FAMILY_IPV4 or NP_FAMILY_IPV6 */
	__u8 cnp_dscp;     /* the CNP's DSCP (48: priority 6) */
	__u8 _pad[6];
	__u64 min_time_ns; /* N, min_time_between_cnps */

	/* State, under lock. */
	struct bpf_spin_lock lock;
	__u8 sent_any;        /* a CNP was decided: last_cnp_ns is valid */
	__u8 pending;         /* a CE since the last CNP got no CNP yet */
	__u8 inflight;        /* enum np_out: where the last decided CNP is */
	__u8 _pad2;
	__u32 seq;            /* CNPs decided: np_ingress knows its own after the clone */
	__u32 _pad3;
	__u64 last_cnp_ns;    /* N counts from here: the decision, np_egress, then the transmit */
	__u64 last_out_ns;    /* when the last CNP was transmitted (np_egress without np_xmit; 0: none yet) */
	__u64 min_spacing_ns; /* the least time between two of those (Go starts it at ~0) */
	__u64 out_skb;        /* NP_OUT_BUILT: the CNP's kernel sk_buff */
	__u64 built_ns;       /* NP_OUT_BUILT: when np_egress built it */
	__u64 ecn_marked;     /* np_ecn_marked_roce_packets */
	__u64 cnp_sent;       /* np_cnp_sent, held_sent included */
	__u64 coalesced;      /* CE packets within N of the last CNP: no CNP of their own */
	__u64 held_sent;      /* CNPs for a coalesced CE, sent by a later packet after N */
	__u64 redirect_errors; /* bpf_clone_redirect failed: the CNP stays pending */
	__u64 xmit_timeouts;   /* built CNPs np_xmit did not see within xmit_timeout_ns */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct np_qp);
} np_qps SEC(".maps");

/* Per-CPU counters of the device, summed by Go. Every packet np_ingress sees
 * is counted once in packets and once in exactly one of not_roce, truncated,
 * vlan, ip_options, fragment, not_request, malformed, unknown_qp,
 * pkey_violations, not_ce, ce. */
struct np_stats {
	__u64 packets;      /* every frame np_ingress saw */
	__u64 not_roce;     /* non-IP, not UDP to 4791, IPv6 extension headers, later fragments */
	__u64 truncated;    /* headers cut short, or a UDP length without room for BTH and ICRC */
	__u64 vlan;         /* RoCEv2 behind an in-band VLAN tag: not answered */
	__u64 ip_options;   /* RoCEv2 in an IPv4 header with options: not answered */
	__u64 fragment;     /* RoCEv2 in the first fragment of an IPv4 datagram: not answered */
	__u64 not_request;  /* RoCEv2 but not an RC request (ACK, read response, CNP, UC, UD): passed */
	__u64 unknown_qp;   /* an RC request to a QP not in np_qps, or not from its peer to its address */
	__u64 not_ce;       /* an RC request of a known QP without CE */
	__u64 ce;           /* an RC request of a known QP with CE */
	__u64 cnp_sent;     /* CNPs cloned to egress (held_sent included) */
	__u64 coalesced;    /* CE packets within N of their QP's last CNP */
	__u64 held_sent;    /* CNPs sent for a coalesced CE by a later packet */
	__u64 redirect_errors;
	/* np_egress */
	__u64 egress_clones;  /* packets carrying np_mark */
	__u64 egress_built;   /* clones turned into CNPs */
	__u64 egress_dropped; /* clones that could not be: dropped */
	/* Where N counted from. A built CNP is counted in one of
	 * egress_stamped, xmit_stamped less xmit_late, or xmit_timeouts,
	 * unless it still waits for its transmit, a qdisc refused it
	 * (redirect_errors) or its QP was removed. */
	__u64 egress_stamped; /* np_egress: np_xmit not attached, or np_xmits refused the CNP */
	__u64 xmit_stamped;   /* np_xmit saw the CNP's transmit (xmit_late included) */
	__u64 xmit_late;      /* ... after its QP had stopped waiting (xmit_timeouts) */
	__u64 xmit_timeouts;  /* the QP stopped waiting after xmit_timeout_ns */
	__u64 xmit_queued;    /* CNPs not yet transmitted when bpf_clone_redirect returned (a qdisc held them) */
	/* np_ingress, after not_request: the BTH rules (roce_check.h) */
	__u64 malformed;       /* an RC request with TVer not 0, cut short for its opcode, or a PadCnt past its payload */
	__u64 pkey_violations; /* an RC request of a known QP whose P_Key does not match the QP's */
	/* Runs a device coalesced (GRO), each counted above as one packet */
	__u64 gro_runs;     /* RC requests of a known QP that were runs of datagrams */
	__u64 gro_segments; /* the datagrams of those runs */
	__u64 gro_other_qp; /* datagrams of a run to another QP than its first: not answered */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct np_stats);
} np_counters SEC(".maps");

/* A CNP np_egress built and np_xmit has not seen, keyed by the address of
 * its kernel sk_buff. An entry whose CNP never reaches the transmit (a
 * qdisc dropped it) is overwritten when the address comes back as another
 * CNP of this object, or evicted (LRU). */
struct np_xmit {
	__u64 dev; /* the kernel net_device np_egress saw it on */
	__u32 qpn;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct np_xmit);
} np_xmits SEC(".maps");

/* CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320) byte table. */
/* The CNP from the UDP header on: the same after IPv4 and IPv6. */
struct cnp_l4 {
	struct net_udphdr udp;
	struct roce_bth bth;
	__u8 rsvd[ROCE_CNP_RSVD_LEN];
	__u32 icrc; /* little-endian on the wire: stored natively (bpfel) */
};

/* The CNP built on the stack. Stack accesses must be aligned, so the frame
 * starts 2 bytes in: the IP header then sits on a 16-byte boundary. */
struct cnp_frame {
	__u8 align[2];
	struct ethhdr eth;
	union {
		struct {
			struct iphdr ip;
			struct cnp_l4 l4;
		} v4;
		struct {
			struct ipv6hdr ip6;
			struct cnp_l4 l4;
		} v6;
	};
};

_Static_assert(sizeof(struct cnp_l4) == ROCE_CNP_L4_LEN, "cnp_l4 is 40 bytes");
_Static_assert(__builtin_offsetof(struct cnp_frame, v4.ip) == 16, "IP header aligned");
_Static_assert(sizeof(struct cnp_frame) - 2 == CNP_V6_LEN, "cnp_frame holds an IPv6 CNP");

static __always_inline void put_qpn(__u8 *b, __u32 qpn)
{
	b[0] = qpn >> 16;
	b[1] = qpn >> 8;
	b[2] = qpn;
}

/* cnp_l4_fill writes the UDP header and the CNP's BTH and reserved bytes
 * with the fields the ICRC masks set to ones (UDP checksum, BTH byte 4). */
static __always_inline void cnp_l4_fill(struct cnp_l4 *l4, const struct np_qp *qp)
{
	l4->udp.source = bpf_htons(qp->src_port);
	l4->udp.dest = bpf_htons(ROCE_UDP_PORT);
	l4->udp.len = bpf_htons(ROCE_CNP_L4_LEN);
	l4->udp.check = 0xFFFF;
	l4->bth.opcode = ROCE_OP_CNP;
	l4->bth.flags = 0; /* SE, M, PadCnt, TVer: 0 */
	l4->bth.pkey = bpf_htons(qp->pkey);
	l4->bth.ecn = ICRC_MASKED;
	put_qpn(l4->bth.destqp, qp->peer_qpn);
	l4->bth.ack = 0; /* AckReq 0, PSN 0 */
	/* rsvd and psn are zero from the frame's initialisation. */
}

/* cnp_build fills f with the CNP of qp in answer to a data packet with
 * Ethernet header data_eth, and returns its length from the Ethernet
 * header, or 0 for an unknown family. */
static __always_inline __u32 cnp_build(struct cnp_frame *f, const struct np_qp *qp,
				       const struct ethhdr *data_eth)
{
	__u8 tos = qp->cnp_dscp << 2 | ECN_ECT0;
	struct cnp_l4 *l4;

	__builtin_memcpy(f->eth.h_dest, data_eth->h_source, ETH_ALEN);
	__builtin_memcpy(f->eth.h_source, data_eth->h_dest, ETH_ALEN);

	if (qp->family == NP_FAMILY_IPV4) {
		struct iphdr *ip = &f->v4.ip;

		l4 = &f->v4.l4;
		__be32 saddr, daddr;

		f->eth.h_proto = bpf_htons(ETH_P_IP);
		__builtin_memcpy(&saddr, qp->local_ip, 4);
		__builtin_memcpy(&daddr, qp->peer_ip, 4);
		roce_ipv4_masked(ip, ROCE_CNP_L4_LEN, saddr, daddr);
		cnp_l4_fill(l4, qp);
		l4->icrc = icrc_crc((const __u8 *)ip, sizeof(*ip) + ROCE_CNP_L4_LEN - ROCE_ICRC_LEN,
				    sizeof(*ip) + ROCE_CNP_L4_LEN - ROCE_ICRC_LEN);
		/* The masked fields, as sent. */
		roce_ipv4_as_sent(ip, tos, CNP_TTL);
		l4->udp.check = 0; /* IPv4: no checksum, as rxe sends */
		l4->bth.ecn = ROCE_BTH_BECN;
		return CNP_V4_LEN;
	}
	if (qp->family == NP_FAMILY_IPV6) {
		struct ipv6hdr *ip6 = &f->v6.ip6;

		l4 = &f->v6.l4;
		f->eth.h_proto = bpf_htons(ETH_P_IPV6);
		roce_ipv6_masked(ip6, ROCE_CNP_L4_LEN, qp->local_ip, qp->peer_ip);
		cnp_l4_fill(l4, qp);
		l4->icrc = icrc_crc((const __u8 *)ip6, sizeof(*ip6) + ROCE_CNP_L4_LEN - ROCE_ICRC_LEN,
				    sizeof(*ip6) + ROCE_CNP_L4_LEN - ROCE_ICRC_LEN);
		roce_ipv6_as_sent(ip6, tos, CNP_TTL);
		l4->bth.ecn = ROCE_BTH_BECN;
		l4->udp.check = 0;
		l4->udp.check = udp6_csum(ip6, l4, ROCE_CNP_L4_LEN);
		return CNP_V6_LEN;
	}
	return 0;
}

static __always_inline struct np_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&np_counters, &zero);
}

static __always_inline __u64 now_ns(void)
{
	if (test_hooks)
		return test_now_ns;
	return bpf_ktime_get_ns();
}


enum np_decision {
	NP_NONE = 0,  /* nothing to send */
	NP_SEND = 1,  /* a CNP for this CE */
	NP_HELD = 2,  /* the pending CNP of an earlier CE */
};

/* xmit_wait_over stops waiting for a built CNP np_xmit has not seen
 * xmit_timeout_ns after np_egress (lost after np_egress, or still queued)
 * and reports it. Precondition: qp->lock is held. */
static __always_inline int xmit_wait_over(struct np_qp *qp, __u64 now)
{
	if (qp->inflight != NP_OUT_BUILT || (__s64)(now - qp->built_ns) < (__s64)xmit_timeout_ns)
		return 0;
	qp->inflight = NP_OUT_NONE;
	qp->out_skb = 0;
	qp->xmit_timeouts++;
	return 1;
}

/* may_send reports whether the QP may decide a CNP at now: none in flight,
 * and N passed since the last one. Signed: a CPU whose clock reading
 * predates another CPU's CNP must see it as recent. Precondition: qp->lock
 * is held. */
static __always_inline int may_send(const struct np_qp *qp, __u64 now)
{
	if (qp->inflight != NP_OUT_NONE)
		return 0;
	return !qp->sent_any || (__s64)(now - qp->last_cnp_ns) >= (__s64)qp->min_time_ns;
}

/* decide_send records a CNP decided at now and returns its sequence
 * number. Precondition: qp->lock is held. */
static __always_inline __u32 decide_send(struct np_qp *qp, __u64 now)
{
	qp->sent_any = 1;
	qp->pending = 0;
	qp->inflight = NP_OUT_DECIDED;
	qp->last_cnp_ns = now;
	return ++qp->seq;
}

/* A decision: what to send, and the CNP's sequence number. */
struct np_verdict {
	enum np_decision d;
	__u32 seq;
	int timed_out; /* the wait for the previous CNP's transmit ended here */
};

/* on_ce is the NP's rule for a CE-marked packet at now (host/dcqcn NP.OnCE). */
static __always_inline struct np_verdict on_ce(struct np_qp *qp, __u64 now, __u32 n)
{
	struct np_verdict v = {};

	bpf_spin_lock(&qp->lock);
	qp->ecn_marked += n;
	v.timed_out = xmit_wait_over(qp, now);
	if (may_send(qp, now)) {
		v.seq = decide_send(qp, now);
		v.d = NP_SEND;
		n--;
	} else {
		v.d = NP_NONE;
	}
	/* The rest of a coalesced run arrived with the first: within N. */
	if (n) {
		qp->pending = 1;
		qp->coalesced += n;
	}
	bpf_spin_unlock(&qp->lock);
	return v;
}

/* run_segments is how many datagrams, from the first, of a run the device
 * coalesced (GRO: gso_segs datagrams of gso_size bytes of UDP payload, the
 * last possibly shorter) go to the first one's QP: GRO joins datagrams of
 * one flow (addresses and UDP ports), and two QPs whose source ports hash
 * alike share a flow. The rest are counted in gro_other_qp and not
 * answered: their QP's CNP would need a clone of their own. */
static __always_inline __u32 run_segments(struct __sk_buff *skb, const struct net_roce *r, __u32 qpn,
					  struct np_stats *st)
{
	__u32 total = skb->gso_segs, size = skb->gso_size, segs, off, same = 1, i;
	__u8 q[3];

	if (total == 0) /* not set by the device: the first datagram at least */
		total = 1;
	segs = total;
	if (segs > NP_GRO_MAX_SEGS)
		segs = NP_GRO_MAX_SEGS;
	/* No IPv4 options here (np_ingress passed those): BTH DestQP. */
	off = r->l3_off + (r->l3_proto == bpf_htons(ETH_P_IP) ? 20 : 40) + sizeof(struct net_udphdr) + 5;
	for (i = 1; i < NP_GRO_MAX_SEGS; i++) {
		if (i >= segs)
			break;
		if (bpf_skb_load_bytes(skb, off + i * size, q, sizeof(q)))
			break;
		if (((__u32)q[0] << 16 | (__u32)q[1] << 8 | q[2]) != qpn)
			break;
		same++;
	}
	st->gro_runs++;
	st->gro_segments += total;
	st->gro_other_qp += total - same;
	return same;
}

/* on_packet sends a pending CNP once N has passed (host/dcqcn NP.Poll),
 * with any RC request of the QP as the clock tick. The clock is read only
 * then: every data packet of every QP comes through here. */
static __always_inline struct np_verdict on_packet(struct np_qp *qp)
{
	struct np_verdict v = {};
	__u64 now;

	if (!READ_ONCE(qp->pending)) /* the common case, without the lock */
		return v;
	now = now_ns();
	bpf_spin_lock(&qp->lock);
	if (qp->pending) {
		v.timed_out = xmit_wait_over(qp, now);
		if (may_send(qp, now)) {
			v.seq = decide_send(qp, now);
			v.d = NP_HELD;
		}
	}
	bpf_spin_unlock(&qp->lock);
	return v;
}

/* stamp_out records a CNP of the QP transmitted at now: N counts from
 * here, and the spacing from the previous one is kept if it is the least.
 * Precondition: qp->lock is held. */
static __always_inline void stamp_out(struct np_qp *qp, __u64 now)
{
	if (qp->last_out_ns) {
		__s64 d = now - qp->last_out_ns;

		if (d < 0) /* a late CNP out after a later one */
			d = 0;
		if ((__u64)d < qp->min_spacing_ns)
			qp->min_spacing_ns = d;
	}
	if (!qp->last_out_ns || (__s64)(now - qp->last_out_ns) > 0)
		qp->last_out_ns = now;
	if ((__s64)(now - qp->last_cnp_ns) > 0)
		qp->last_cnp_ns = now;
}

/* track records a CNP np_egress built, the kernel sk_buff at key on dev,
 * for np_xmit. */
static __always_inline int track(__u64 key, __u64 dev, __u32 qpn)
{
	struct np_xmit x = {.dev = dev, .qpn = qpn};

	return bpf_map_update_elem(&np_xmits, &key, &x, BPF_ANY) == 0;
}

/* cnp_built records that np_egress built the QP's CNP at now. Tracked (for
 * np_xmit, at key), N counts at least from here and np_xmit moves it to
 * the transmit; the QP decides nothing until then. Otherwise N counts from
 * here: the CNP leaves np_egress. */
static __always_inline void cnp_built(struct np_qp *qp, int tracked, __u64 key, __u64 now)
{
	bpf_spin_lock(&qp->lock);
	if (tracked) {
		if ((__s64)(now - qp->last_cnp_ns) > 0)
			qp->last_cnp_ns = now;
		qp->inflight = NP_OUT_BUILT;
		qp->out_skb = key;
		qp->built_ns = now;
	} else {
		stamp_out(qp, now);
	}
	bpf_spin_unlock(&qp->lock);
}

/* send_cnp clones the packet to the device's egress, where np_egress turns
 * the clone into the CNP before the call returns, and np_xmit sees it
 * transmitted unless a qdisc holds it. Then the decision is over: the CNP
 * is out, failed, or waits in a qdisc for np_xmit. The packet's own mark
 * is put back. */
static __always_inline void send_cnp(struct __sk_buff *skb, __u32 qpn, struct np_qp *qp,
				     struct np_stats *st, struct np_verdict v)
{
	__u32 mark = skb->mark;
	int queued = 0;
	long ret;

	skb->mark = np_mark;
	if (test_hooks) {
		test_redirects++;
		ret = test_redirect_ret;
		if (test_qdisc_holds) /* np_egress built it; a qdisc holds it */
			cnp_built(qp, xmit_hook && track(test_skb, test_dev, qpn), test_skb, now_ns());
	} else {
		ret = bpf_clone_redirect(skb, skb->ifindex, 0);
	}
	skb->mark = mark;
	if (ret == NET_XMIT_CN) /* queued */
		ret = 0;

	bpf_spin_lock(&qp->lock);
	if (qp->seq == v.seq) { /* still this CNP's state */
		if (ret) {
			qp->inflight = NP_OUT_NONE;
			qp->out_skb = 0;
			qp->pending = 1; /* a later packet tries again, N after this one */
		} else if (qp->inflight == NP_OUT_DECIDED) {
			qp->inflight = NP_OUT_NONE; /* np_egress did not build it */
		} else if (qp->inflight == NP_OUT_BUILT) {
			queued = 1; /* np_xmit will see it leave the qdisc */
		}
	}
	if (ret) {
		qp->redirect_errors++;
	} else {
		qp->cnp_sent++;
		if (v.d == NP_HELD)
			qp->held_sent++;
	}
	bpf_spin_unlock(&qp->lock);
	if (ret) {
		st->redirect_errors++;
		return;
	}
	st->cnp_sent++;
	if (v.d == NP_HELD)
		st->held_sent++;
	if (queued)
		st->xmit_queued++;
}

/* on_xmit: the sk_buff at key is being transmitted on dev. If it is a CNP
 * of this object in np_xmits, N counts from now and its QP may decide
 * again. */
static __always_inline void on_xmit(__u64 key, __u64 dev)
{
	struct np_xmit *x;
	struct np_stats *st;
	struct np_qp *qp;
	__u64 now;
	__u32 qpn;
	int late;

	x = bpf_map_lookup_elem(&np_xmits, &key);
	if (!x || x->dev != dev)
		return;
	now = now_ns();
	qpn = x->qpn;
	bpf_map_delete_elem(&np_xmits, &key);
	qp = bpf_map_lookup_elem(&np_qps, &qpn);
	if (!qp) /* removed meanwhile */
		return;
	bpf_spin_lock(&qp->lock);
	late = qp->inflight != NP_OUT_BUILT || qp->out_skb != key;
	if (!late) {
		qp->inflight = NP_OUT_NONE;
		qp->out_skb = 0;
	}
	stamp_out(qp, now);
	bpf_spin_unlock(&qp->lock);
	st = stats();
	if (!st)
		return;
	st->xmit_stamped++;
	if (late)
		st->xmit_late++;
}

SEC("tc")
int np_ingress(struct __sk_buff *skb)
{
	struct net_roce r = {};
	struct np_verdict v;
	struct np_stats *st;
	struct np_qp *qp;
	__u32 qpn, udp_len, same;
	__u8 op;

	st = stats();
	if (!st)
		return TC_ACT_UNSPEC;
	st->packets++;

	switch (net_parse_roce_skb(skb, &r)) {
	case NET_ROCE_OK:
		break;
	case NET_ROCE_TRUNCATED:
		st->truncated++;
		return TC_ACT_UNSPEC;
	default:
		st->not_roce++;
		return TC_ACT_UNSPEC;
	}
	if (r.vlan_tags) {
		st->vlan++;
		return TC_ACT_UNSPEC;
	}
	if (r.ipv4_options) {
		st->ip_options++;
		return TC_ACT_UNSPEC;
	}
	if (r.ipv4_fragment) {
		st->fragment++;
		return TC_ACT_UNSPEC;
	}
	op = r.bth->opcode;
	if (op > ROCE_OP_RC_LAST_REQUEST) {
		st->not_request++;
		return TC_ACT_UNSPEC;
	}
	/* A coalesced run's UDP length is the run's: its first datagram is
	 * gso_size bytes of payload. */
	udp_len = bpf_ntohs(r.udp->len);
	if (skb->gso_size)
		udp_len = sizeof(struct net_udphdr) + skb->gso_size;
	/* What the agent drops, the NP does not answer. */
	if (!roce_bth_ok(r.bth, roce_rc_request_hdr_len(op), udp_len)) {
		st->malformed++;
		return TC_ACT_UNSPEC;
	}
	qpn = roce_bth_destqp(r.bth);
	qp = bpf_map_lookup_elem(&np_qps, &qpn);
	/* From the QP's peer to its address: a stale or foreign packet that
	 * names the QP is not its notification. */
	if (!qp || !net_roce_from_to(&r, (void *)(long)skb->data_end, qp->family == NP_FAMILY_IPV4,
				     qp->peer_ip, qp->local_ip)) {
		st->unknown_qp++;
		return TC_ACT_UNSPEC;
	}
	if (!roce_pkey_match(bpf_ntohs(r.bth->pkey), qp->pkey)) {
		st->pkey_violations++;
		return TC_ACT_UNSPEC;
	}
	/* A run shares its IP header, so its ECN: one decision for its
	 * datagrams of this QP, as for that many CE packets at once. */
	same = 1;
	if (skb->gso_size)
		same = run_segments(skb, &r, qpn, st);
	if ((r.dsfield & ECN_MASK) == ECN_CE) {
		st->ce++;
		v = on_ce(qp, now_ns(), same);
		st->coalesced += same - (v.d != NP_NONE);
	} else {
		st->not_ce++;
		v = on_packet(qp);
	}
	if (v.timed_out)
		st->xmit_timeouts++;
	if (v.d != NP_NONE)
		send_cnp(skb, qpn, qp, st, v);
	return TC_ACT_UNSPEC;
}

SEC("tc")
int np_egress(struct __sk_buff *skb)
{
	struct cnp_frame f = {};
	struct net_roce r = {};
	struct np_stats *st;
	struct ethhdr *eth;
	struct np_qp *qp;
	__u32 qpn, len;
	__u64 now, key;
	int tracked;

	if (skb->mark != np_mark)
		return TC_ACT_UNSPEC;
	st = stats();
	if (!st)
		return TC_ACT_SHOT; /* never let a clone out as data */
	st->egress_clones++;

	if (net_parse_roce_skb(skb, &r) != NET_ROCE_OK || r.vlan_tags || r.ipv4_options)
		goto drop;
	if (r.bth->opcode == ROCE_OP_CNP)
		return TC_ACT_UNSPEC; /* already a CNP: passing this hook again */
	qpn = roce_bth_destqp(r.bth);
	qp = bpf_map_lookup_elem(&np_qps, &qpn);
	if (!qp) /* removed since np_ingress looked it up */
		goto drop;
	eth = (void *)(long)skb->data;
	if ((void *)(eth + 1) > (void *)(long)skb->data_end)
		goto drop;
	len = cnp_build(&f, qp, eth);
	if (len == 0)
		goto drop;
	if (net_cut_to(skb, len))
		goto drop;
	if (bpf_skb_store_bytes(skb, 0, &f.eth, len, BPF_F_RECOMPUTE_CSUM | BPF_F_INVALIDATE_HASH))
		goto drop;

	now = now_ns();
	tracked = 0;
	key = 0;
	if (xmit_hook) {
		struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);
		__u64 dev = (__u64)kskb->dev;

		key = (__u64)kskb;
		if (test_hooks) {
			key = test_skb;
			dev = test_dev;
		}
		tracked = track(key, dev, qpn);
	}
	cnp_built(qp, tracked, key, now);
	st->egress_built++;
	if (!tracked)
		st->egress_stamped++;
	/* Once more through the egress, sized as the CNP it now is. */
	return bpf_redirect(skb->ifindex, 0);
drop:
	st->egress_dropped++;
	return TC_ACT_SHOT;
}

/* np_xmit runs for every packet the machine transmits (xmit_one, after
 * the taps); the mark check keeps that cheap. */
SEC("tp_btf/net_dev_start_xmit")
int np_xmit(__u64 *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx[0];

	if (skb->mark != np_mark)
		return 0;
	on_xmit((__u64)skb, ctx[1]);
	return 0;
}

/* np_xmit_test is np_xmit for BPF_PROG_RUN, which cannot run a tracing
 * program: a packet carrying np_mark transmits test_skb on test_dev.
 * Tests only; never attached. */
SEC("tc")
int np_xmit_test(struct __sk_buff *skb)
{
	if (skb->mark == np_mark)
		on_xmit(test_skb, test_dev);
	return TC_ACT_UNSPEC;
}

/* np_icrc_test computes the ICRC of an Ethernet + IPv4 (no options) RoCEv2
 * packet of at most ICRC_TEST_MAX bytes from the IP header through the ICRC,
 * with the routine np_egress uses, and writes it over the packet's last 4
 * bytes. Tests only (the roce-wire.md vectors); never attached. */
SEC("tc")
int np_icrc_test(struct __sk_buff *skb)
{
	__u8 buf[ICRC_TEST_MAX] = {};
	__u32 off = sizeof(struct ethhdr), len, icrc;

	if (skb->len <= off + ROCE_ICRC_LEN || skb->len > off + ICRC_TEST_MAX)
		return TC_ACT_SHOT;
	len = skb->len - off - ROCE_ICRC_LEN; /* covered: IP header up to the ICRC */
	if (len < sizeof(struct iphdr) + sizeof(struct net_udphdr) + ROCE_BTH_LEN || len > ICRC_TEST_MAX)
		return TC_ACT_SHOT;
	if (bpf_skb_load_bytes(skb, off, buf, len))
		return TC_ACT_SHOT;
	/* IPv4 TOS, TTL, checksum; UDP checksum; BTH byte 4. */
	buf[1] = ICRC_MASKED;
	buf[8] = ICRC_MASKED;
	buf[10] = ICRC_MASKED;
	buf[11] = ICRC_MASKED;
	buf[sizeof(struct iphdr) + 6] = ICRC_MASKED;
	buf[sizeof(struct iphdr) + 7] = ICRC_MASKED;
	buf[sizeof(struct iphdr) + sizeof(struct net_udphdr) + 4] = ICRC_MASKED;
	icrc = icrc_crc(buf, len, ICRC_TEST_MAX);
	if (bpf_skb_store_bytes(skb, off + len, &icrc, sizeof(icrc), 0))
		return TC_ACT_SHOT;
	return TC_ACT_UNSPEC;
}
