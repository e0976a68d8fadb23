//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Tunnel PEs: IPv4-in-IPv4 (RFC 2003) with the ECN rules of RFC 6040, in eBPF,
 * for kernels without the ipip module (seed 001; issue 13 §2).
 *
 * tunnel_encap runs at TC egress of the PE's WAN device, first in the chain:
 * an untagged IPv4 packet whose destination matches a prefix in tunnel_routes
 * gets an outer IPv4 header toward that route's egress PE. The outer ECN is
 * the inner's in RFC 6040 normal mode and Not-ECT in compatibility mode
 * (§4.1); the DSCP is copied (RFC 2983 uniform model) and so is DF (RFC 2003
 * §3.1). The inner MTU is the device's less 20 bytes: a DF packet that no
 * longer fits is answered with ICMP Fragmentation Needed carrying that MTU
 * (RFC 1191), sent back out of the device the FIB names for its source, as a
 * router would; a packet without DF that does not fit is dropped and counted
 * (the kernel fragments it first when the route carries that MTU).
 *
 * tunnel_decap runs at TC ingress of the same device: an IPv4 packet of
 * protocol 4 addressed to the PE, from a known peer PE, loses its outer header
 * and its inner ECN field becomes what RFC 6040 §4.2's table says, with the
 * inner IPv4 checksum fixed. Each (inner, outer) cell is counted; the cells
 * the RFC calls currently unused ((!) and (!!!)) are also reported on a ring
 * buffer, at most one event per cell per log interval, for the agent to log.
 * In two-threshold mode (seed 001) an outer ECT(1) means "light congestion"
 * seen by a WAN port and is for the PE alone: it is counted, not copied in.
 *
 * WAN congestion notifications (seed 001; issue 13 §4): a WAN port that
 * marks a tunnelled packet sends a RoCEv2 CNP to the packet's outer source,
 * this PE, from the outer destination (the egress PE, which names the
 * tunnel), to UDP 4791 from the inner flow's UDP source port, with the
 * inner BTH's destination QP; BTH byte 4 carries L (ROCE_BTH_WAN_LIGHT)
 * for light congestion (an ECT(1) mark past T1) and not for heavy (CE past
 * T2). tunnel_decap takes these CNPs (from peer PEs only), counts them per
 * tunnel in tunnel_congestion, reports each on the tunnel_cnps ring buffer
 * for the PE agent (which slows or reroutes the tunnel on light
 * congestion), and drops them: they end here. On heavy congestion
 * tunnel_encap also marks CE in the inner header of ECN-capable packets
 * into that tunnel for heavy_hold_ns, so the receivers' NPs send CNPs end
 * to end and the senders' DCQCN cuts.
 *
 * Neither program touches VLAN-tagged frames or IPv6: they pass untouched
 * (counted). GSO packets stay out of the decap path (dropped and counted:
 * the agent refuses devices with GRO on, which is what would make them).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "net.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* TCX verdicts (TC_ACT_*): UNSPEC is TCX_NEXT, so a port program after
 * this one on the device still sees the packet. */
#define TC_ACT_UNSPEC (-1)
#define TC_ACT_SHOT 2

#define TUNNEL_IPPROTO_IPIP 4
#define TUNNEL_IPPROTO_ICMP 1
#define TUNNEL_IPPROTO_TCP 6
#define TUNNEL_OUTER_LEN 20 /* the outer header never carries options */
#define TUNNEL_ICMP_DEST_UNREACH 3
#define TUNNEL_ICMP_FRAG_NEEDED 4
#define TUNNEL_ICMP_QUOTE 8 /* bytes of the datagram after its header (RFC 792) */
#define TUNNEL_AF_INET 2

enum encap_ecn_mode {
	ENCAP_ECN_NORMAL = 0, /* RFC 6040 §4.1 normal mode: copy the inner ECN */
	ENCAP_ECN_COMPAT = 1, /* compatibility mode: outer Not-ECT */
};

/* What RFC 6040 §4.2 says of a decapsulation cell. */
enum decap_cell {
	DECAP_CELL_OK = 0,
	DECAP_CELL_WARN = 1,  /* (!): currently unused, log */
	DECAP_CELL_ALARM = 2, /* (!!!): currently unused, log (and maybe alarm) */
};

/* Runtime settings: the one entry of tunnel_cfg, written by the agent. */
struct pe_config {
	__be32 local;        /* this PE: outer source, and the decap address */
	__u32 mtu;           /* the device's MTU: outer packets may not exceed it */
	__u32 ecn_mode;      /* enum encap_ecn_mode */
	__u32 two_threshold; /* decap: outer ECT(1) is light congestion, not copied */
	__u32 ttl;           /* of the outer header */
	__u32 pad;
	__u64 log_interval_ns; /* per unused cell, between ring buffer events */
	__u64 heavy_hold_ns;   /* inner CE marking after a heavy CNP; 0: off */
};

/* What this PE knows of congestion in one tunnel (key: the remote PE). */
struct pe_congestion {
	__u64 light_cnps;
	__u64 heavy_cnps;
	__u64 last_light_ns;
	__u64 last_heavy_ns;
	__u64 heavy_until_ns;  /* inner CE marking until then */
	__u64 inner_ce_marked; /* packets tunnel_encap marked CE inside */
};

/* A WAN CNP as the PE received it. */
struct cnp_event {
	__u64 time_ns;
	__be32 remote; /* the egress PE: the tunnel */
	__u32 dest_qp;
	__u16 sport;   /* the marked flow's UDP source port, host order */
	__u8 light;
	__u8 pad[5];
};

struct route_prefix {
	__u32 prefixlen;
	__be32 addr;
};

/* Where traffic to a prefix goes. */
struct encap_route {
	__be32 remote; /* the egress PE: outer destination */
};

struct pe_stats {
	/* tunnel_encap */
	__u64 encap_packets;
	__u64 encap_bytes;  /* inner bytes (IP packet) */
	__u64 encap_passed; /* not for a tunnel: no route, not IPv4, tagged */
	__u64 encap_too_big;
	__u64 encap_icmp_sent;    /* Fragmentation Needed answered */
	__u64 encap_icmp_failed;  /* could not be built or routed */
	__u64 encap_malformed;    /* truncated or bad IPv4 header: dropped */
	__u64 encap_errors;       /* a helper failed: dropped */
	__u64 encap_gso_fixed;    /* GSO packets whose segments grew by 20 bytes */
	__u64 encap_inner_ce;     /* inner CE set under heavy congestion */
	__u64 encap_outer_ecn[4]; /* by outer codepoint written */
	/* tunnel_decap */
	__u64 decap_packets;
	__u64 decap_bytes;     /* inner bytes */
	__u64 decap_passed;    /* not a tunnel packet for this PE */
	__u64 decap_malformed; /* truncated, bad inner header, outer fragment */
	__u64 decap_spoofed;   /* outer source not a peer PE */
	__u64 decap_gso;       /* GSO packet: dropped */
	__u64 decap_errors;
	__u64 decap_dropped;   /* RFC 6040: inner Not-ECT under outer CE */
	__u64 decap_warn;      /* (!) cells */
	__u64 decap_alarm;     /* (!!!) cells */
	__u64 decap_light;     /* two-threshold: outer ECT(1) kept from the inner */
	__u64 decap_events_lost;
	__u64 cnp_light;       /* WAN CNPs from peer PEs, by kind */
	__u64 cnp_heavy;
	__u64 cnp_unknown;     /* CNPs to this PE from others: passed on */
	__u64 cnp_events_lost;
	__u64 decap_cells[16]; /* [inner << 2 | outer] */
	__u64 decap_bad_checksum; /* outer IPv4 header checksum wrong: dropped */
};

/* A decapsulated packet in an unused cell. */
struct decap_event {
	__u64 time_ns;
	__be32 outer_src;
	__be32 outer_dst;
	__be32 inner_src;
	__be32 inner_dst;
	__u8 inner_ecn;
	__u8 outer_ecn;
	__u8 result_ecn;
	__u8 cell;    /* enum decap_cell */
	__u8 dropped; /* the cell drops */
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pe_config);
} tunnel_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct route_prefix);
	__type(value, struct encap_route);
} tunnel_routes SEC(".maps");

/* The PEs whose packets this one decapsulates: outer source -> 1. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __be32);
	__type(value, __u32);
} tunnel_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pe_stats);
} tunnel_counters SEC(".maps");

/* When each cell last produced an event (races between CPUs only let an
 * extra event through). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} tunnel_log_last SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096 * 16);
} tunnel_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __be32);
	__type(value, struct pe_congestion);
} tunnel_congestion SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096 * 64);
} tunnel_cnps SEC(".maps");

/* For bpf2go -type. */
const struct decap_event *unused_decap_event __attribute__((unused));
const struct cnp_event *unused_cnp_event __attribute__((unused));
const enum decap_cell *unused_decap_cell __attribute__((unused));
const enum encap_ecn_mode *unused_encap_ecn_mode __attribute__((unused));

/*
 * RFC 6040 §4.2, rows the arriving inner header, columns the arriving outer:
 *
 *            Not-ECT      ECT(0)       ECT(1)       CE
 * Not-ECT    Not-ECT      Not-ECT(!!!) Not-ECT(!!!) drop(!!!)
 * ECT(0)     ECT(0)       ECT(0)       ECT(1)       CE
 * ECT(1)     ECT(1)       ECT(1)(!)    ECT(1)       CE
 * CE         CE           CE           CE(!!!)      CE
 *
 * Indexed [inner << 2 | outer] by codepoint value (Not-ECT 0, ECT(1) 1,
 * ECT(0) 2, CE 3). 0xff: drop.
 */
#define TUNNEL_DROP 0xff
static const __u8 rfc6040_result[16] = {
	/* inner Not-ECT: outer Not-ECT, ECT(1), ECT(0), CE */
	ECN_NOT_ECT, ECN_NOT_ECT, ECN_NOT_ECT, TUNNEL_DROP,
	/* inner ECT(1) */
	ECN_ECT1, ECN_ECT1, ECN_ECT1, ECN_CE,
	/* inner ECT(0) */
	ECN_ECT0, ECN_ECT1, ECN_ECT0, ECN_CE,
	/* inner CE */
	ECN_CE, ECN_CE, ECN_CE, ECN_CE,
};
static const __u8 rfc6040_cell[16] = {
	/* inner Not-ECT */
	DECAP_CELL_OK, DECAP_CELL_ALARM, DECAP_CELL_ALARM, DECAP_CELL_ALARM,
	/* inner ECT(1): outer ECT(0) is (!) */
	DECAP_CELL_OK, DECAP_CELL_OK, DECAP_CELL_WARN, DECAP_CELL_OK,
	/* inner ECT(0) */
	DECAP_CELL_OK, DECAP_CELL_OK, DECAP_CELL_OK, DECAP_CELL_OK,
	/* inner CE: outer ECT(1) is (!!!) */
	DECAP_CELL_OK, DECAP_CELL_ALARM, DECAP_CELL_OK, DECAP_CELL_OK,
};

#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))

/* Tests only: the clock for the event rate limit. */
volatile const __u8 test_hooks = 0;
__u64 test_now_ns = 0;

static __always_inline __u64 now_ns(void)
{
	if (test_hooks)
		return test_now_ns;
	return bpf_ktime_get_ns();
}

static __always_inline struct pe_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&tunnel_counters, &zero);
}

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* pull_ipv4 brings Ethernet and a 20-byte IPv4 header into the linear data
 * if the packet has them. Every packet pointer is stale afterwards. */
static __always_inline void pull_ipv4(struct __sk_buff *skb)
{
	const __u32 want = sizeof(struct ethhdr) + sizeof(struct iphdr);

	if (skb->data_end - skb->data < want && skb->len >= want)
		bpf_skb_pull_data(skb, want);
}

/* ipv4_head finds the IPv4 header of an untagged IPv4 frame, pulled into
 * the linear data: NULL if the frame is something else (*cut = 0) or too
 * short for the header (*cut = 1). */
static __always_inline struct iphdr *ipv4_head(struct __sk_buff *skb, int *cut)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;

	*cut = 0;
	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return NULL;
	pull_ipv4(skb);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > data_end) {
		*cut = 1;
		return NULL;
	}
	return ip;
}

/* ipv4_csum is the header checksum of a 20-byte header whose check is 0. */
static __always_inline __u16 ipv4_csum(struct iphdr *ip)
{
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)ip, sizeof(*ip), 0);

	return csum_fold((__u32)sum);
}

/* ipv4_header_ok verifies the checksum of the IPv4 header at the frame's
 * offset 14, options included (olen bytes, 20..60): RFC 1071, its 16-bit
 * words, the checksum among them, sum to 0xffff. */
static __always_inline int ipv4_header_ok(struct __sk_buff *skb, __u32 olen)
{
	__u8 hdr[60];
	__u32 len = olen & 0x3c;
	__s64 sum;

	if (len < sizeof(struct iphdr) || bpf_skb_load_bytes(skb, sizeof(struct ethhdr), hdr, len))
		return 0;
	sum = bpf_csum_diff(0, 0, (__be32 *)hdr, len, 0);
	return sum >= 0 && csum_fold((__u32)sum) == 0;
}

/*
 * icmp_frag_needed turns the packet (Ethernet and the IPv4 header at 14,
 * ihl bytes long) into ICMP Destination Unreachable / Fragmentation Needed
 * from the PE to its source, quoting the header and 8 bytes, and sends it
 * where the FIB routes the source. Returns the TC verdict.
 */
static __always_inline int icmp_frag_needed(struct __sk_buff *skb, struct pe_stats *st,
					    const struct pe_config *cfg, __u32 ihl_bytes)
{
	struct {
		struct iphdr ip;
		__u8 type;
		__u8 code;
		__sum16 check;
		__be16 unused;
		__be16 mtu;
	} hdr = {};
	struct bpf_fib_lookup fib = {};
	__u8 quote[60 + TUNNEL_ICMP_QUOTE] = {};
	__u32 quote_len = ihl_bytes + TUNNEL_ICMP_QUOTE;
	struct iphdr orig;
	struct ethhdr eth;
	__s64 sum;
	long rc;

	_Static_assert(sizeof(hdr) == 28, "IPv4 and ICMP headers");
	if (ihl_bytes < 20 || ihl_bytes > 60 || skb->len < sizeof(eth) + quote_len)
		goto fail;
	if (bpf_skb_load_bytes(skb, sizeof(eth), &orig, sizeof(orig)))
		goto fail;
	/* The whole quote in one load of a constant-bounded length. */
	if (quote_len > sizeof(quote) || bpf_skb_load_bytes(skb, sizeof(eth), quote, quote_len & 0x7f))
		goto fail;
	/* Keep Ethernet, the new IP and ICMP headers and the quote. */
	if (bpf_skb_change_tail(skb, sizeof(eth) + sizeof(hdr) + quote_len, 0))
		goto fail;
	hdr.ip.version = 4;
	hdr.ip.ihl = NET_IPV4_MIN_IHL;
	hdr.ip.tos = 0xc0; /* CS6, network control, as Linux's icmp_send */
	hdr.ip.tot_len = bpf_htons(sizeof(hdr) + quote_len);
	hdr.ip.frag_off = bpf_htons(NET_IPV4_FLAG_DF);
	hdr.ip.ttl = 64;
	hdr.ip.protocol = TUNNEL_IPPROTO_ICMP;
	hdr.ip.saddr = cfg->local;
	hdr.ip.daddr = orig.saddr;
	hdr.ip.check = ipv4_csum(&hdr.ip);
	hdr.type = TUNNEL_ICMP_DEST_UNREACH;
	hdr.code = TUNNEL_ICMP_FRAG_NEEDED;
	hdr.mtu = bpf_htons(cfg->mtu - TUNNEL_OUTER_LEN);
	/* ICMP checksum: its 8-byte header and the quote (a multiple of 4). */
	sum = bpf_csum_diff(0, 0, (__be32 *)&hdr.type, 8, 0);
	if (sum < 0)
		goto fail;
	sum = bpf_csum_diff(0, 0, (__be32 *)quote, quote_len & 0x7c, (__u32)sum);
	if (sum < 0)
		goto fail;
	hdr.check = csum_fold((__u32)sum);
	if (bpf_skb_store_bytes(skb, sizeof(eth), &hdr, sizeof(hdr), 0) ||
	    bpf_skb_store_bytes(skb, sizeof(eth) + sizeof(hdr), quote, quote_len & 0x7f, 0))
		goto fail;

	fib.family = TUNNEL_AF_INET;
	fib.ipv4_src = cfg->local;
	fib.ipv4_dst = orig.saddr;
	fib.ifindex = skb->ifindex;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0); /* as if it arrived on the device */
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)))
			goto fail;
		__builtin_memcpy(eth.h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(eth.h_source, fib.smac, ETH_ALEN);
		eth.h_proto = bpf_htons(ETH_P_IP);
		if (bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0))
			goto fail;
		st->encap_icmp_sent++;
		return bpf_redirect(fib.ifindex, 0);
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		st->encap_icmp_sent++;
		return bpf_redirect_neigh(fib.ifindex, NULL, 0, 0);
	}
fail:
	st->encap_icmp_failed++;
	return TC_ACT_SHOT;
}

/* gso_fits reports whether a GSO packet's segments, with the outer header,
 * fit mtu: gso_size, the inner IPv4 header and the TCP header (its data
 * offset) or UDP's 8 bytes. Unknown transports do not fit. */
static __always_inline int gso_fits(struct __sk_buff *skb, __u32 ihl_bytes, __u32 mtu)
{
	__u8 proto, doff;
	__u32 l4;

	if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr) + __builtin_offsetof(struct iphdr, protocol), &proto, 1))
		return 0;
	if (proto == NET_IPPROTO_UDP) {
		l4 = sizeof(struct net_udphdr);
	} else if (proto == TUNNEL_IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr) + (ihl_bytes & 0x3c) + 12, &doff, 1))
			return 0;
		l4 = (doff >> 4) * 4;
	} else {
		return 0;
	}
	return skb->gso_size + ihl_bytes + l4 + TUNNEL_OUTER_LEN <= mtu;
}

SEC("tc")
int tunnel_encap(struct __sk_buff *skb)
{
	struct route_prefix key = {.prefixlen = 32};
	struct pe_config *cfg;
	struct encap_route *route;
	struct pe_stats *st;
	int cut;
	struct iphdr *ip, outer = {};
	struct pe_congestion *cong;
	__u32 zero = 0, ihl_bytes, inner_len;
	__u64 flags;
	__be32 remote;
	__be16 df;
	__u8 ecn, tos;

	st = stats();
	cfg = bpf_map_lookup_elem(&tunnel_cfg, &zero);
	if (!st || !cfg)
		return TC_ACT_UNSPEC;
	ip = ipv4_head(skb, &cut);
	if (!ip) {
		if (cut) {
			st->encap_malformed++;
			return TC_ACT_SHOT;
		}
		st->encap_passed++;
		return TC_ACT_UNSPEC;
	}
	key.addr = ip->daddr;
	route = bpf_map_lookup_elem(&tunnel_routes, &key);
	if (!route) {
		st->encap_passed++;
		return TC_ACT_UNSPEC;
	}
	ihl_bytes = ip->ihl * 4;
	inner_len = bpf_ntohs(ip->tot_len);
	if (ip->version != 4 || ihl_bytes < 20 || inner_len < ihl_bytes || inner_len > skb->len - sizeof(struct ethhdr)) {
		st->encap_malformed++;
		return TC_ACT_SHOT;
	}
	df = ip->frag_off & bpf_htons(NET_IPV4_FLAG_DF);
	if (!skb->gso_size && inner_len + TUNNEL_OUTER_LEN > cfg->mtu) {
		st->encap_too_big++;
		if (df)
			return icmp_frag_needed(skb, st, cfg, ihl_bytes);
		return TC_ACT_SHOT;
	}
	tos = ip->tos;
	remote = route->remote;

	/* Heavy congestion in this tunnel: the inner header carries it to the
	 * receiver, whose NP answers the sender (seed 001, T2). With the hold
	 * off, no lookup per packet. */
	cong = cfg->heavy_hold_ns ? bpf_map_lookup_elem(&tunnel_congestion, &remote) : NULL;
	if (cong && ((tos & ECN_MASK) == ECN_ECT0 || (tos & ECN_MASK) == ECN_ECT1) && now_ns() < READ_ONCE(cong->heavy_until_ns)) {
		__u16 old_word = bpf_htons((__u16)(0x40 | (ihl_bytes >> 2)) << 8 | tos);
		__u16 new_word = bpf_htons((__u16)(0x40 | (ihl_bytes >> 2)) << 8 | (tos | ECN_CE));

		if (bpf_l3_csum_replace(skb, sizeof(struct ethhdr) + __builtin_offsetof(struct iphdr, check), old_word, new_word,
					sizeof(__u16))) {
			st->encap_errors++;
			return TC_ACT_SHOT;
		}
		tos |= ECN_CE;
		if (bpf_skb_store_bytes(skb, sizeof(struct ethhdr) + __builtin_offsetof(struct iphdr, tos), &tos, sizeof(tos), 0)) {
			st->encap_errors++;
			return TC_ACT_SHOT;
		}
		st->encap_inner_ce++;
		__sync_fetch_and_add(&cong->inner_ce_marked, 1);
	}

	/* RFC 6040 §4.1. */
	ecn = cfg->ecn_mode == ENCAP_ECN_COMPAT ? ECN_NOT_ECT : tos & ECN_MASK;
	outer.version = 4;
	outer.ihl = NET_IPV4_MIN_IHL;
	outer.tos = (tos & ~ECN_MASK) | ecn;
	outer.tot_len = bpf_htons(inner_len + TUNNEL_OUTER_LEN > 0xffff ? 0xffff : inner_len + TUNNEL_OUTER_LEN);
	/* RFC 2003 §3.1: DF copied from the inner header. An atomic datagram's
	 * ID is not used (RFC 6864); others get a random one. */
	if (df)
		outer.frag_off = bpf_htons(NET_IPV4_FLAG_DF);
	else
		outer.id = (__be16)bpf_get_prandom_u32();
	outer.ttl = cfg->ttl;
	outer.protocol = TUNNEL_IPPROTO_IPIP;
	outer.saddr = cfg->local;
	outer.daddr = remote;
	outer.check = ipv4_csum(&outer);

	/* A GSO packet whose segments fit the MTU with the outer header keeps
	 * its gso_size. One whose segments would not has it cut by the outer
	 * header, so the segments keep their size on the wire; the kernel
	 * allows that for TCP only (UDP's gso_size delimits datagrams): other
	 * GSO packets keep gso_size and their segments grow by 20 bytes. */
	flags = BPF_F_ADJ_ROOM_ENCAP_L3_IPV4;
	if (skb->gso_size && gso_fits(skb, ihl_bytes, cfg->mtu))
		flags |= BPF_F_ADJ_ROOM_FIXED_GSO;
	if (bpf_skb_adjust_room(skb, TUNNEL_OUTER_LEN, BPF_ADJ_ROOM_MAC, flags)) {
		if (!skb->gso_size || (flags & BPF_F_ADJ_ROOM_FIXED_GSO) ||
		    bpf_skb_adjust_room(skb, TUNNEL_OUTER_LEN, BPF_ADJ_ROOM_MAC, flags | BPF_F_ADJ_ROOM_FIXED_GSO)) {
			st->encap_errors++;
			return TC_ACT_SHOT;
		}
		st->encap_gso_fixed++;
	}
	if (bpf_skb_store_bytes(skb, sizeof(struct ethhdr), &outer, sizeof(outer), BPF_F_INVALIDATE_HASH)) {
		st->encap_errors++;
		return TC_ACT_SHOT;
	}
	st->encap_packets++;
	st->encap_bytes += inner_len;
	st->encap_outer_ecn[ecn & ECN_MASK]++;
	return TC_ACT_UNSPEC;
}

static __always_inline void report_cell(struct pe_stats *st, const struct pe_config *cfg, __u32 idx,
					__be32 osrc, __be32 odst, __be32 isrc, __be32 idst, __u8 result)
{
	struct decap_event *ev;
	__u64 now = now_ns(), *last;

	last = bpf_map_lookup_elem(&tunnel_log_last, &idx);
	if (!last)
		return;
	if (*last && now - *last < cfg->log_interval_ns)
		return;
	*last = now ? now : 1;
	ev = bpf_ringbuf_reserve(&tunnel_events, sizeof(*ev), 0);
	if (!ev) {
		st->decap_events_lost++;
		return;
	}
	ev->time_ns = now;
	ev->outer_src = osrc;
	ev->outer_dst = odst;
	ev->inner_src = isrc;
	ev->inner_dst = idst;
	ev->inner_ecn = idx >> 2;
	ev->outer_ecn = idx & ECN_MASK;
	ev->result_ecn = result == TUNNEL_DROP ? 0 : result;
	ev->cell = rfc6040_cell[idx & 15];
	ev->dropped = result == TUNNEL_DROP;
	ev->pad[0] = ev->pad[1] = ev->pad[2] = 0;
	bpf_ringbuf_submit(ev, 0);
}

/*
 * wan_cnp takes a UDP packet to this PE: a WAN CNP from a peer PE is counted
 * against its tunnel, reported and dropped; anything else goes on to the
 * stack.
 */
static __always_inline int wan_cnp(struct __sk_buff *skb, struct pe_stats *st, const struct pe_config *cfg,
				   __u32 ihl_bytes, __be32 src)
{
	struct {
		struct net_udphdr udp;
		struct roce_bth bth;
	} h;
	struct pe_congestion *cong, fresh = {};
	struct cnp_event *ev;
	__u64 now;
	__u8 light;

	if (ihl_bytes < 20 || bpf_skb_load_bytes(skb, sizeof(struct ethhdr) + (ihl_bytes & 0x3c), &h, sizeof(h)) ||
	    h.udp.dest != bpf_htons(ROCE_UDP_PORT) || h.bth.opcode != ROCE_OP_CNP || h.bth.ecn & ROCE_BTH_PPFC) {
		st->decap_passed++;
		return TC_ACT_UNSPEC;
	}
	if (!bpf_map_lookup_elem(&tunnel_peers, &src)) {
		st->cnp_unknown++;
		return TC_ACT_UNSPEC;
	}
	light = !!(h.bth.ecn & ROCE_BTH_WAN_LIGHT);
	now = now_ns();
	cong = bpf_map_lookup_elem(&tunnel_congestion, &src);
	if (!cong) {
		bpf_map_update_elem(&tunnel_congestion, &src, &fresh, BPF_NOEXIST);
		cong = bpf_map_lookup_elem(&tunnel_congestion, &src);
		if (!cong)
			return TC_ACT_SHOT;
	}
	if (light) {
		st->cnp_light++;
		__sync_fetch_and_add(&cong->light_cnps, 1);
		cong->last_light_ns = now;
	} else {
		st->cnp_heavy++;
		__sync_fetch_and_add(&cong->heavy_cnps, 1);
		cong->last_heavy_ns = now;
		if (cfg->heavy_hold_ns)
			cong->heavy_until_ns = now + cfg->heavy_hold_ns;
	}
	ev = bpf_ringbuf_reserve(&tunnel_cnps, sizeof(*ev), 0);
	if (!ev) {
		st->cnp_events_lost++;
		return TC_ACT_SHOT;
	}
	ev->time_ns = now;
	ev->remote = src;
	ev->dest_qp = roce_bth_destqp(&h.bth);
	ev->sport = bpf_ntohs(h.udp.source);
	ev->light = light;
	__builtin_memset(ev->pad, 0, sizeof(ev->pad));
	bpf_ringbuf_submit(ev, 0);
	return TC_ACT_SHOT;
}

SEC("tc")
int tunnel_decap(struct __sk_buff *skb)
{
	struct pe_config *cfg;
	struct pe_stats *st;
	int cut;
	struct iphdr *ip, inner;
	__u32 zero = 0, olen, idx, inner_len;
	__be32 osrc, odst;
	__u8 outer_ecn, inner_ecn, result;
	__u16 old_word, new_word;

	st = stats();
	cfg = bpf_map_lookup_elem(&tunnel_cfg, &zero);
	if (!st || !cfg)
		return TC_ACT_UNSPEC;
	ip = ipv4_head(skb, &cut);
	if (!ip) {
		st->decap_passed++; /* not ours, or too short to be; the stack judges it */
		return TC_ACT_UNSPEC;
	}
	if (ip->version == 4 && ip->protocol == NET_IPPROTO_UDP && ip->daddr == cfg->local)
		return wan_cnp(skb, st, cfg, ip->ihl * 4, ip->saddr);
	if (ip->version != 4 || ip->protocol != TUNNEL_IPPROTO_IPIP || ip->daddr != cfg->local) {
		st->decap_passed++;
		return TC_ACT_UNSPEC;
	}
	osrc = ip->saddr;
	odst = ip->daddr;
	if (!bpf_map_lookup_elem(&tunnel_peers, &osrc)) {
		st->decap_spoofed++;
		return TC_ACT_SHOT;
	}
	olen = ip->ihl * 4;
	outer_ecn = ip->tos & ECN_MASK;
	if (olen < 20 || bpf_ntohs(ip->tot_len) < olen + sizeof(inner) ||
	    bpf_ntohs(ip->tot_len) > skb->len - sizeof(struct ethhdr) ||
	    ip->frag_off & bpf_htons(NET_IPV4_FLAG_MF | NET_IPV4_FRAG_OFFSET)) {
		st->decap_malformed++;
		return TC_ACT_SHOT;
	}
	/* The PE is the outer packet's destination and runs before the
	 * kernel's IP receive path: no one else checks this header (RFC 1122
	 * 3.2.1.2, RFC 1812 5.2.2). */
	if (!ipv4_header_ok(skb, olen)) {
		st->decap_bad_checksum++;
		return TC_ACT_SHOT;
	}
	if (skb->gso_size) {
		st->decap_gso++;
		return TC_ACT_SHOT;
	}
	if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr) + (olen & 0x3c), &inner, sizeof(inner))) {
		st->decap_malformed++;
		return TC_ACT_SHOT;
	}
	inner_len = bpf_ntohs(inner.tot_len);
	if (inner.version != 4 || inner.ihl < NET_IPV4_MIN_IHL || inner_len < inner.ihl * 4 ||
	    inner_len > bpf_ntohs(ip->tot_len) - olen) {
		st->decap_malformed++;
		return TC_ACT_SHOT;
	}

	inner_ecn = inner.tos & ECN_MASK;
	idx = (inner_ecn << 2 | outer_ecn) & 15;
	st->decap_cells[idx]++;
	result = rfc6040_result[idx];
	/* Seed 001: in two-threshold mode an outer ECT(1) is the WAN's light
	 * congestion signal for the PE; the inner header keeps its codepoint.
	 * Outer CE is still copied. */
	if (cfg->two_threshold && outer_ecn == ECN_ECT1 && inner_ecn != ECN_NOT_ECT) {
		st->decap_light++;
		result = inner_ecn;
	}
	switch (rfc6040_cell[idx]) {
	case DECAP_CELL_WARN:
		st->decap_warn++;
		report_cell(st, cfg, idx, osrc, odst, inner.saddr, inner.daddr, result);
		break;
	case DECAP_CELL_ALARM:
		st->decap_alarm++;
		report_cell(st, cfg, idx, osrc, odst, inner.saddr, inner.daddr, result);
		break;
	}
	if (result == TUNNEL_DROP) {
		st->decap_dropped++;
		return TC_ACT_SHOT;
	}

	if (bpf_skb_adjust_room(skb, -(__s32)(olen & 0x3c), BPF_ADJ_ROOM_MAC, 0)) {
		st->decap_errors++;
		return TC_ACT_SHOT;
	}
	if (result != inner_ecn) {
		/* The first 16-bit word of the header holds version, IHL and
		 * the DS field. */
		old_word = bpf_htons((__u16)(0x40 | inner.ihl) << 8 | inner.tos);
		inner.tos = (inner.tos & ~ECN_MASK) | result;
		new_word = bpf_htons((__u16)(0x40 | inner.ihl) << 8 | inner.tos);
		if (bpf_l3_csum_replace(skb, sizeof(struct ethhdr) + __builtin_offsetof(struct iphdr, check), old_word,
					new_word, sizeof(__u16)) ||
		    bpf_skb_store_bytes(skb, sizeof(struct ethhdr) + __builtin_offsetof(struct iphdr, tos), &inner.tos,
					sizeof(inner.tos), 0)) {
			st->decap_errors++;
			return TC_ACT_SHOT;
		}
	}
	st->decap_packets++;
	st->decap_bytes += inner_len;
	return TC_ACT_UNSPEC;
}
