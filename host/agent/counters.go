package agent

import (
	"sync/atomic"

	"github.com/fabriclab/fabriclab/host/roce"
)

// Counters are the NIC counters people grep when a fabric misbehaves, with
// the mlx5 names (reference/dcqcn.md), kept per QP and summed per agent.
type Counters struct {
	// DCQCN notification point (receiver).
	NPCNPSent              uint64 `json:"np_cnp_sent"`
	NPECNMarkedRoCEPackets uint64 `json:"np_ecn_marked_roce_packets"`
	// DCQCN reaction point (sender).
	RPCNPHandled uint64 `json:"rp_cnp_handled"`
	RPCNPIgnored uint64 `json:"rp_cnp_ignored"`
	// With the RP's CNP intake in the kernel (Config.RPOffload): the CNPs
	// it counted for the QP (each handled or ignored by the RP), those
	// whose arrival time was overwritten before the QP read it (the RP
	// took them at the read's time), and the CNPs this agent's receive
	// loop read for the QP (not RP input then: a socket drop does not
	// lose a cut).
	RPCNPKernel      uint64 `json:"rp_cnp_kernel"`
	RPCNPTimeUnknown uint64 `json:"rp_cnp_time_unknown"`
	RPCNPAgentRead   uint64 `json:"rp_cnp_agent_read"`
	// RC transport. out_of_sequence and duplicate_request count at the
	// responder, packet_seq_err (NAKs received) and local_ack_timeout_err at
	// the requester, as mlx5 does.
	OutOfSequence      uint64 `json:"out_of_sequence"`
	PacketSeqErr       uint64 `json:"packet_seq_err"`
	LocalAckTimeoutErr uint64 `json:"local_ack_timeout_err"`
	DuplicateRequest   uint64 `json:"duplicate_request"`
	// Traffic: every RoCE packet of this QP, data and control.
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	// Requester progress: payload bytes and messages acknowledged, packets
	// sent again by go-back-N.
	AckedBytes        uint64 `json:"acked_bytes"`
	AckedMessages     uint64 `json:"acked_messages"`
	RetransmitPackets uint64 `json:"retransmitted_packets"`
	// Responder progress: payload bytes and messages placed in order.
	RecvBytes    uint64 `json:"received_bytes"`
	RecvMessages uint64 `json:"received_messages"`
	// End-to-end content check (Stream.Verify): packets whose payload did not
	// match the sender's pattern.
	VerifyErrors uint64 `json:"verify_errors"`
	// NAKs other than PSN sequence error, sent (responder) or received.
	RemoteAccessErr uint64 `json:"remote_access_err"`
	InvalidRequest  uint64 `json:"invalid_request"`
	// ACKs and NAKs dropped at the requester because their PSN names a
	// packet it never sent (or, for a NAK, one already acknowledged): a
	// NIC drops them, and a spoofed NAK must not kill the QP.
	InvalidAckPSN uint64 `json:"invalid_ack_psn"`
	// PPFC (seed 003) at the requester: stops that named this QP's peer
	// (each one, whether it started, extended or left a pause), resumes
	// that ended a pause, and the time paused in ns. A pause counts in
	// ppfc_paused_ns once it has ended: one still running when read is
	// left out.
	PPFCPauses   uint64 `json:"ppfc_pauses"`
	PPFCResumes  uint64 `json:"ppfc_resumes"`
	PPFCPausedNs uint64 `json:"ppfc_paused_ns"`
	// Holds that named this QP's peer (each one paused it as a stop
	// does, and counts here, not in ppfc_pauses), and alarms that held
	// its DCQCN rate increases (QPs without DCQCN ignore alarms).
	PPFCHolds        uint64 `json:"ppfc_holds"`
	PPFCAlarmsObeyed uint64 `json:"ppfc_alarms_obeyed"`
	// The PPFC watchdog (Config.PPFCWatchdog): pause storms it ended, and
	// the stops and holds it then ignored.
	PPFCWatchdogTrips   uint64 `json:"ppfc_watchdog_trips"`
	PPFCWatchdogIgnored uint64 `json:"ppfc_watchdog_ignored"`
	// PPFC notifications toward this QP's peer that the kernel took
	// (Config.RPOffload) and the QP obeyed from their arrival on, and
	// those a burst overwrote in the kernel's ring before the QP read
	// them (the QP obeyed the later ones).
	PPFCKernel     uint64 `json:"ppfc_kernel"`
	PPFCKernelLost uint64 `json:"ppfc_kernel_lost"`
}

// AgentCounters add what cannot be charged to a QP.
type AgentCounters struct {
	Counters
	// Dropped before reaching a QP: not a RoCEv2 packet or truncated, a bad
	// ICRC, an unknown destination QP, from an IP address other than the
	// QP's peer's, an opcode this agent does not serve.
	Malformed  uint64 `json:"malformed"`
	ICRCErrors uint64 `json:"icrc_errors"`
	UnknownQP  uint64 `json:"unknown_qp"`
	WrongPeer  uint64 `json:"wrong_peer"`
	// PKeyViolations: packets from the QP's peer whose P_Key does not
	// match the QP's (roce.PKeyMatch).
	PKeyViolations uint64 `json:"pkey_violations"`
	Unsupported    uint64 `json:"unsupported_opcode"`
	SendErrors     uint64 `json:"send_errors"`
	// NeighborResolves counts the peers' link-layer addresses whose
	// resolution an ACK timeout restarted: the kernel held them
	// unresolved (after a link flap, until its next ARP retransmit).
	NeighborResolves uint64 `json:"neighbor_resolves"`
	// ReplyOverruns counts replies (ACKs, NAKs, CNPs) that did not fit in
	// the receive loop's reply batch and were not sent: the peer recovers
	// as from a loss.
	ReplyOverruns uint64 `json:"reply_overruns"`
	// PPFC notifications with a good ICRC, by PT (malformed ones count in
	// Malformed, bad ICRCs in ICRCErrors); of them, those ignored because
	// they came from outside Config.PPFCSources or named a destination no
	// connected QP has for peer.
	PPFCReceivedStop       uint64 `json:"ppfc_received_stop"`
	PPFCReceivedResume     uint64 `json:"ppfc_received_resume"`
	PPFCReceivedAlarm      uint64 `json:"ppfc_received_alarm"`
	PPFCReceivedHold       uint64 `json:"ppfc_received_hold"`
	PPFCIgnoredSource      uint64 `json:"ppfc_ignored_source"`
	PPFCIgnoredDestination uint64 `json:"ppfc_ignored_destination"`
}

// Add adds o to c, field by field.
func (c *Counters) Add(o *Counters) {
	c.NPCNPSent += o.NPCNPSent
	c.NPECNMarkedRoCEPackets += o.NPECNMarkedRoCEPackets
	c.RPCNPHandled += o.RPCNPHandled
	c.RPCNPIgnored += o.RPCNPIgnored
	c.RPCNPKernel += o.RPCNPKernel
	c.RPCNPTimeUnknown += o.RPCNPTimeUnknown
	c.RPCNPAgentRead += o.RPCNPAgentRead
	c.OutOfSequence += o.OutOfSequence
	c.PacketSeqErr += o.PacketSeqErr
	c.LocalAckTimeoutErr += o.LocalAckTimeoutErr
	c.DuplicateRequest += o.DuplicateRequest
	c.TxPackets += o.TxPackets
	c.TxBytes += o.TxBytes
	c.RxPackets += o.RxPackets
	c.RxBytes += o.RxBytes
	c.AckedBytes += o.AckedBytes
	c.AckedMessages += o.AckedMessages
	c.RetransmitPackets += o.RetransmitPackets
	c.RecvBytes += o.RecvBytes
	c.RecvMessages += o.RecvMessages
	c.VerifyErrors += o.VerifyErrors
	c.RemoteAccessErr += o.RemoteAccessErr
	c.InvalidRequest += o.InvalidRequest
	c.InvalidAckPSN += o.InvalidAckPSN
	c.PPFCPauses += o.PPFCPauses
	c.PPFCResumes += o.PPFCResumes
	c.PPFCPausedNs += o.PPFCPausedNs
	c.PPFCHolds += o.PPFCHolds
	c.PPFCAlarmsObeyed += o.PPFCAlarmsObeyed
	c.PPFCWatchdogTrips += o.PPFCWatchdogTrips
	c.PPFCWatchdogIgnored += o.PPFCWatchdogIgnored
	c.PPFCKernel += o.PPFCKernel
	c.PPFCKernelLost += o.PPFCKernelLost
}

// agentDrops are updated from the receive loop without a QP lock.
type agentDrops struct {
	malformed, icrc, unknownQP, wrongPeer, pkey, unsupported atomic.Uint64
	// neighbor counts AgentCounters.NeighborResolves.
	neighbor atomic.Uint64
	// Counters of QPs already destroyed, so agent totals never go back.
	// Guarded by Agent.mu.
	gone Counters
}

// agentPPFC counts PPFC notifications, from the receive loop.
type agentPPFC struct {
	received                          [roce.PPFCHold + 1]atomic.Uint64 // by PT
	ignoredSource, ignoredDestination atomic.Uint64
}
