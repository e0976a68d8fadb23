// Package npbpf is the DCQCN notification point (NP) in the kernel: eBPF
// programs on the receiver's device turn a CE-marked RoCEv2 data packet
// into a CNP sent back out of the same device, so the CNP does not wait for
// the agent's receive loop (dcqcn.md §NP, roce-wire.md §CNP). The programs
// are bpf/np.c; its header comment has the packet path.
//
// The agent tells the NP about a QP when the QP connects (AddQP) and when
// it goes away (RemoveQP); Counters reads the QP's mlx5-named counters. NP
// (attached to a device) and Objects (loaded only, for BPF_PROG_RUN tests)
// both implement NPOffload, the interface the agent depends on. A QP the
// kernel NP answers for must not run the agent's own NP too (agent
// QPConfig.NP), or each CE gets two CNPs.
//
// Coalescing per QP follows host/dcqcn.NP with one difference: there is no
// timer. A CE within N (min_time_between_cnps) of the QP's last CNP makes a
// CNP pending; it leaves with the QP's first RC request packet that arrives
// N or more after the last CNP, not exactly at N.
//
// N counts from the CNP's transmit: a tracing program at the
// net_dev_start_xmit tracepoint (after the packet taps, before the driver)
// sees each CNP go, and the QP decides no CNP while its last one has not
// gone. So two CNPs of a QP are never less than N apart where a tap on the
// device sees them, provided each is transmitted within
// max(N, LoadOptions.XmitTimeout) of being built (a device without a
// qdisc transmits at once). Without that program (Objects alone, or when
// the tracing link cannot attach: NP.XmitHookErr), N counts from the CNP
// leaving the egress program, and the guarantee holds there only.
// Stats.XmitStamped and EgressStamped count which applied. The programs
// need a kernel with BTF (>= 6.6 for TCX, as before).
//
// Rarely the tracing program does not run for a CNP the device did
// transmit (seen on 6.18 behind a TBF: about 1 CNP in 30,000; the device's
// TX counter, the tap and the peer all had it, the program never saw its
// sk_buff, and its recursion-miss counter stayed 0). Its QP then waits
// LoadOptions.XmitTimeout, counted in XmitTimeouts, before it decides
// again: that CNP's follower leaves later, never earlier, than N.
package npbpf

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/roce"
)

const (
	// DefaultCNPDSCP is the DSCP of CNPs when QPContext.CNPDSCP is 0:
	// priority 6, so a CNP does not queue behind what it reports (mlx5
	// cnp_dscp).
	DefaultCNPDSCP = 48
	// MaxMinTimeBetweenCNPs bounds QPContext.MinTimeBetweenCNPs.
	MaxMinTimeBetweenCNPs = time.Second
	// DefaultMark is the skb mark of the clones np_ingress sends to
	// np_egress, which the CNPs keep.
	DefaultMark = 0x4e50434e // "NPCN"
	// DefaultXmitTimeout is LoadOptions.XmitTimeout when it is 0.
	DefaultXmitTimeout = time.Millisecond

	minXmitTimeout = time.Microsecond
	maxXmitTimeout = time.Second

	// CNPLenIPv4 and CNPLenIPv6 are the CNP frames' lengths from the
	// Ethernet header: 14 + 20 (or 40) + UDP 8 + BTH 12 + 16 + ICRC 4.
	CNPLenIPv4 = 74
	CNPLenIPv6 = 94

	noSpacing  = ^uint64(0)
	familyIPv4 = 4 // NP_FAMILY_IPV4
	familyIPv6 = 6 // NP_FAMILY_IPV6
	maxDSCP    = 63
)

// ErrUnknownQP is wrapped by RemoveQP and Counters for a QPN that was not
// added (or was removed).
var ErrUnknownQP = errors.New("unknown qp")

// QPContext is what the NP needs about one connected QP to answer its CE
// packets.
type QPContext struct {
	// QPN is the local (receiver) QPN: the BTH DestQP of the data packets
	// the QP receives. 1..0xffffff.
	QPN uint32
	// PeerQPN is the sender's QPN: the DestQP of the CNPs. 1..0xffffff.
	PeerQPN uint32
	// Local is the receiver's address (the data's destination, the CNP's
	// source) and Peer the sender's; both IPv4 or both IPv6. The ICRC
	// covers both. A packet to QPN from another address pair is not
	// answered (Stats.UnknownQP).
	Local, Peer netip.Addr
	// SrcPort is the UDP source port this QP sends from (its ECMP
	// entropy); CNPs go to UDP 4791 like every RoCEv2 packet.
	SrcPort uint16
	// PKey is the QP's P_Key: its CNPs carry it, and a request whose
	// P_Key does not match it (roce.PKeyMatch) is not answered
	// (Stats.PKeyViolations). Optional: 0 (an invalid P_Key) means
	// roce.DefaultPKey (0xffff).
	PKey uint16
	// CNPDSCP is the CNP's DSCP, 0..63; it is sent ECT(0). Optional: 0
	// means DefaultCNPDSCP (48).
	CNPDSCP uint8
	// MinTimeBetweenCNPs is N: at most one CNP per QP per N. 0 answers
	// every CE packet. 0..MaxMinTimeBetweenCNPs.
	MinTimeBetweenCNPs time.Duration
}

// Validate checks every field and names the one at fault.
func (c QPContext) Validate() error {
	local, peer := c.Local.Unmap(), c.Peer.Unmap()
	switch {
	case c.QPN == 0 || c.QPN > roce.QPNMask:
		return fmt.Errorf("npbpf: qpn %#x: must be 1..0xffffff", c.QPN)
	case c.PeerQPN == 0 || c.PeerQPN > roce.QPNMask:
		return fmt.Errorf("npbpf: qp %#x: peer qpn %#x: must be 1..0xffffff", c.QPN, c.PeerQPN)
	case !local.IsValid() || !peer.IsValid():
		return fmt.Errorf("npbpf: qp %#x: needs both addresses (local %v, peer %v)", c.QPN, c.Local, c.Peer)
	case local.Is4() != peer.Is4():
		return fmt.Errorf("npbpf: qp %#x: local %v and peer %v are different IP families", c.QPN, c.Local, c.Peer)
	case c.PKey != 0 && !roce.ValidPKey(c.PKey):
		return fmt.Errorf("npbpf: qp %#x: pkey %#04x: must have a base (low 15 bits) of 1..0x7fff", c.QPN, c.PKey)
	case c.CNPDSCP > maxDSCP:
		return fmt.Errorf("npbpf: qp %#x: cnp_dscp %d: must be 0..63", c.QPN, c.CNPDSCP)
	case c.MinTimeBetweenCNPs < 0 || c.MinTimeBetweenCNPs > MaxMinTimeBetweenCNPs:
		return fmt.Errorf("npbpf: qp %#x: min_time_between_cnps %v: must be 0..%v", c.QPN, c.MinTimeBetweenCNPs, MaxMinTimeBetweenCNPs)
	}
	return nil
}

// value is the np_qps entry of c with the state zero. Precondition: c is
// valid.
func (c QPContext) value() bpf.NpNpQp {
	v := bpf.NpNpQp{
		PeerQpn:   c.PeerQPN,
		SrcPort:   c.SrcPort,
		Pkey:      c.PKey,
		CnpDscp:   c.CNPDSCP,
		MinTimeNs: uint64(c.MinTimeBetweenCNPs),
		// No spacing seen yet: np_egress keeps the minimum.
		MinSpacingNs: noSpacing,
	}
	if v.Pkey == 0 {
		v.Pkey = roce.DefaultPKey
	}
	if v.CnpDscp == 0 {
		v.CnpDscp = DefaultCNPDSCP
	}
	v.Family, v.LocalIp, v.PeerIp = bpf.QPAddrs(c.Local, c.Peer)
	return v
}

// NPCounters are one QP's NP counters; the first two carry the mlx5 names
// (dcqcn.md) and match host/agent.Counters.
type NPCounters struct {
	// NPECNMarkedRoCEPackets counts the QP's CE-marked RC request packets.
	NPECNMarkedRoCEPackets uint64 `json:"np_ecn_marked_roce_packets"`
	// NPCNPSent counts the CNPs sent, NPCNPHeldSent included.
	NPCNPSent uint64 `json:"np_cnp_sent"`
	// NPCNPCoalesced counts CE packets that arrived within N of the last
	// CNP and so got no CNP of their own (held back).
	NPCNPCoalesced uint64 `json:"np_cnp_coalesced"`
	// NPCNPHeldSent counts CNPs sent for held-back CE packets, by the
	// first packet of the QP N after the last CNP.
	NPCNPHeldSent uint64 `json:"np_cnp_held_sent"`
	// NPCNPErrors counts CNPs that could not be sent (the clone to the
	// device's egress failed); the CNP stays pending.
	NPCNPErrors uint64 `json:"np_cnp_errors"`
	// MinCNPSpacing is the least time between two of the QP's CNPs where
	// N counts from: their transmit (the egress program without the
	// transmit hook); 0 until two have gone.
	MinCNPSpacing time.Duration `json:"np_min_cnp_spacing_ns"`
	// NPCNPXmitTimeouts counts CNPs the QP stopped waiting for because
	// the transmit hook had not seen them LoadOptions.XmitTimeout after
	// they were built (lost in a qdisc, or still queued).
	NPCNPXmitTimeouts uint64 `json:"np_cnp_xmit_timeouts"`
}

func countersOf(v *bpf.NpNpQp) NPCounters {
	var sp time.Duration
	if v.MinSpacingNs != noSpacing {
		sp = time.Duration(v.MinSpacingNs)
	}
	return NPCounters{
		MinCNPSpacing:          sp,
		NPECNMarkedRoCEPackets: v.EcnMarked,
		NPCNPSent:              v.CnpSent,
		NPCNPCoalesced:         v.Coalesced,
		NPCNPHeldSent:          v.HeldSent,
		NPCNPErrors:            v.RedirectErrors,
		NPCNPXmitTimeouts:      v.XmitTimeouts,
	}
}

// NPOffload is the kernel NP as the agent sees it: a QP is added when it
// connects and removed when it is destroyed.
type NPOffload interface {
	// AddQP starts answering the CE packets of c.QPN. It fails if the QPN
	// is already added.
	AddQP(c QPContext) error
	// RemoveQP stops answering the QP's CE packets and forgets its
	// counters.
	RemoveQP(qpn uint32) error
	// Counters reads the QP's counters.
	Counters(qpn uint32) (NPCounters, error)
}

var (
	_ NPOffload = (*Objects)(nil)
	_ NPOffload = (*NP)(nil)
)

// Stats are the device's counters, summed over CPUs. Every packet the
// ingress program sees is counted in Packets and in exactly one of NotRoCE,
// Truncated, VLAN, IPOptions, Fragment, NotRequest, Malformed, UnknownQP,
// PKeyViolations, NotCE, CE.
type Stats struct {
	Packets    uint64 `json:"packets"`
	NotRoCE    uint64 `json:"not_roce"`    // non-IP, not UDP 4791, IPv6 extension headers, later fragments
	Truncated  uint64 `json:"truncated"`   // headers cut short, UDP length without room for BTH and ICRC
	VLAN       uint64 `json:"vlan"`        // RoCEv2 behind an in-band VLAN tag: not answered
	IPOptions  uint64 `json:"ip_options"`  // RoCEv2 in an IPv4 header with options: not answered
	Fragment   uint64 `json:"fragment"`    // RoCEv2 in the first fragment of an IPv4 datagram: not answered
	NotRequest uint64 `json:"not_request"` // RoCEv2, not an RC request (ACK, read response, CNP, UC, UD)
	// Malformed: an RC request that breaks a BTH rule the agent applies
	// too (bpf/roce_check.h, roce.Parse): TVer not 0, shorter than its
	// opcode's headers and ICRC, a PadCnt past its payload.
	Malformed uint64 `json:"malformed"`
	UnknownQP uint64 `json:"unknown_qp"` // an RC request to a QPN not added, or from another address pair
	// PKeyViolations: an RC request of a known QP whose P_Key does not
	// match the QP's.
	PKeyViolations uint64 `json:"pkey_violations"`
	NotCE          uint64 `json:"not_ce"` // an RC request of a known QP without CE
	CE             uint64 `json:"ce"`     // an RC request of a known QP with CE
	// What the CE packets led to.
	CNPSent        uint64 `json:"cnp_sent"` // HeldSent included
	Coalesced      uint64 `json:"coalesced"`
	HeldSent       uint64 `json:"held_sent"`
	RedirectErrors uint64 `json:"redirect_errors"`
	// The egress program: marked clones seen, turned into CNPs, dropped
	// because they could not be (never sent as data).
	EgressClones  uint64 `json:"egress_clones"`
	EgressBuilt   uint64 `json:"egress_built"`
	EgressDropped uint64 `json:"egress_dropped"`
	// Where N counted from. A built CNP is counted in one of
	// EgressStamped, XmitStamped less XmitLate, or XmitTimeouts, unless it
	// still waits for its transmit, a qdisc refused it (RedirectErrors) or
	// its QP was removed.
	EgressStamped uint64 `json:"egress_stamped"` // the egress program: no transmit hook, or its table refused the CNP
	XmitStamped   uint64 `json:"xmit_stamped"`   // the transmit hook saw the CNP go (XmitLate included)
	XmitLate      uint64 `json:"xmit_late"`      // ... after its QP had stopped waiting (XmitTimeouts)
	XmitTimeouts  uint64 `json:"xmit_timeouts"`  // the QP stopped waiting after LoadOptions.XmitTimeout
	// XmitQueued counts CNPs not yet transmitted when the clone returned
	// to the ingress program: a qdisc held them (0 on a device without
	// one).
	XmitQueued uint64 `json:"xmit_queued"`
	// GRORuns are the RC requests of known QPs that were runs of
	// datagrams a device coalesced (GRO), each counted above as one
	// packet; GROSegments the datagrams they held; GROOtherQP those of a
	// run to another QP than its first (two QPs whose source ports hash
	// alike share a flow): not answered.
	GRORuns     uint64 `json:"gro_runs"`
	GROSegments uint64 `json:"gro_segments"`
	GROOtherQP  uint64 `json:"gro_other_qp"`
}
