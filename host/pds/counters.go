package pds

import (
	"crypto/rand"
	"encoding/binary"
	"time"

	"github.com/fabriclab/fabriclab/host/uet"
)

// Counters are an endpoint's totals, as JSON shows them.
type Counters struct {
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"` // UDP payload bytes
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`

	// Initiator side.
	PDCsOpened  uint64 `json:"pdcs_opened"`
	PDCsClosed  uint64 `json:"pdcs_closed"`
	PDCErrors   uint64 `json:"pdc_errors"`
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	// NeighborResolves counts the peers' link-layer addresses whose
	// resolution a timeout restarted (pktio.NeighborResolver).
	NeighborResolves uint64 `json:"neighbor_resolves"`
	InferredLosses   uint64 `json:"inferred_losses"` // Config.Loss's (RACK, SLEEK) and a probe's NACK PKT_NOT_RCVD
	AcksReceived     uint64 `json:"acks_received"`
	ECNEchoes        uint64 `json:"ecn_echoes"` // ACKs with M set
	InvalidAckPSN    uint64 `json:"invalid_ack_psn"`
	ClosesSent       uint64 `json:"closes_sent"`
	ProbesSent       uint64 `json:"probes_sent"` // CTRL ACK_REQ after ProbeTimeout without an ACK
	// SpuriousRetransmits: duplicates the target reported (an ACK of its
	// cumulative PSN that moves nothing, the PDS's DSACK), each a
	// retransmission of a packet that was late, not lost. ReoWnd is the
	// largest reordering window (RACK's reo_wnd) of the live PDCs.
	SpuriousRetransmits uint64        `json:"spurious_retransmits"`
	ReoWnd              time.Duration `json:"reo_wnd_ns"`
	// RCCC at the sender: CTRL CREDIT_REQs sent, CTRL CREDITs received,
	// and those of them for no CCC of ours or an earlier incarnation.
	CreditRequestsSent uint64 `json:"credit_requests_sent"`
	CreditsReceived    uint64 `json:"credits_received"`
	StaleCredits       uint64 `json:"stale_credits"`
	// CreditResyncs: a CCC waiting for credit with nothing in flight heard
	// its receiver count behind it (the receiver lost its side) and
	// started its credit over under a new ccc_id.
	CreditResyncs uint64 `json:"credit_resyncs"`
	// NacksReceived by code.
	NacksReceived map[string]uint64 `json:"nacks_received"`
	// CCC Manager: contexts created and freed, transitions by "FROM->TO".
	CCCsCreated uint64            `json:"cccs_created"`
	CCCsFreed   uint64            `json:"cccs_freed"`
	Transitions map[string]uint64 `json:"ccc_transitions"`

	// Target side.
	TargetPDCsOpened   uint64 `json:"target_pdcs_opened"`
	TargetPDCsClosed   uint64 `json:"target_pdcs_closed"`
	TargetPDCsExpired  uint64 `json:"target_pdcs_expired"`  // of the closed: no CLOSE_CMD, idle
	TargetPDCsReplaced uint64 `json:"target_pdcs_replaced"` // of the closed: a SYN with a new start PSN for the same source PDC ID
	RxCCCsCreated      uint64 `json:"rx_cccs_created"`
	RxCCCsFreed        uint64 `json:"rx_cccs_freed"`
	RxDataPackets      uint64 `json:"rx_data_packets"` // new PSNs
	RxPayloadBytes     uint64 `json:"rx_payload_bytes"`
	Duplicates         uint64 `json:"duplicates"`
	OutOfWindow        uint64 `json:"out_of_window"`
	CEReceived         uint64 `json:"ce_received"`
	// TrimmedReceived: data packets a switch trimmed (their trim DSCP, or
	// a payload shorter than their SES header says), NACKed at once.
	TrimmedReceived uint64 `json:"trimmed_received"`
	// TrimmedDuplicates: of those, copies of a PSN already received (a
	// spurious retransmission trimmed on the way): not NACKed.
	TrimmedDuplicates uint64 `json:"trimmed_duplicates"`
	AcksSent          uint64 `json:"acks_sent"`
	// RCCC at the receiver: CTRL CREDITs sent (and grants that found no
	// slot, carried by the next), ACK_CCs with a CREDIT cc_state,
	// CREDIT_REQs received, sources reset by a new ccc_id.
	CreditsSent            uint64 `json:"credits_sent"`
	CreditsUnsent          uint64 `json:"credits_unsent"`
	CreditAcksSent         uint64 `json:"credit_acks_sent"`
	CreditRequestsReceived uint64 `json:"credit_requests_received"`
	CreditSourcesReset     uint64 `json:"credit_sources_reset"`
	// CreditTargetsCapped: targets further ahead of the grants than a
	// sender asks for (spoofed or broken), cut to that.
	CreditTargetsCapped  uint64 `json:"credit_targets_capped"`
	ClosesReceived       uint64 `json:"closes_received"`
	ProbesReceived       uint64 `json:"probes_received"`
	MessagesReceived     uint64 `json:"messages_received"`
	MessageBytesReceived uint64 `json:"message_bytes_received"`
	VerifyErrors         uint64 `json:"verify_errors"` // messages whose payload failed the check
	// NacksSent by code.
	NacksSent map[string]uint64 `json:"nacks_sent"`

	// Dropped: not a UET packet we decode, or malformed; for no PDC of
	// ours; a form this endpoint does not serve.
	Malformed   uint64 `json:"malformed"`
	UnknownPDC  uint64 `json:"unknown_pdc"`
	Unsupported uint64 `json:"unsupported"`
	// Refusals: a new PDC or CCC past Config.MaxPDCs / MaxCCCs.
	PDCRefused uint64 `json:"pdc_refused"`
	CCCRefused uint64 `json:"ccc_refused"`

	// Engine: datagrams the conn refused; replies that did not fit.
	SendErrors    uint64 `json:"send_errors"`
	ReplyOverruns uint64 `json:"reply_overruns"`

	// Wires (Config.Wires): datagrams held for their wire, dropped past
	// what it holds (a loss the fabric did not make), the most held at
	// once, and how late after their wire the host handed them over
	// (summed, and the most).
	WireDelayed uint64        `json:"wire_delayed,omitempty"`
	WireDropped uint64        `json:"wire_dropped,omitempty"`
	WireMaxHeld int           `json:"wire_max_held,omitempty"`
	WireLate    time.Duration `json:"wire_late_ns,omitempty"`
	WireLateMax time.Duration `json:"wire_late_max_ns,omitempty"`
}

// Counters returns a copy of the endpoint's counters.
func (ep *Endpoint) Counters() Counters {
	ep.mu.Lock()
	c := ep.ctr
	c.NacksReceived = codeNames(ep.nacksRx)
	c.NacksSent = codeNames(ep.nacksTx)
	for _, p := range ep.initiators {
		c.ReoWnd = max(c.ReoWnd, p.reoWnd())
	}
	c.Transitions = make(map[string]uint64, len(ep.ctr.Transitions))
	for k, v := range ep.ctr.Transitions {
		c.Transitions[k] = v
	}
	ep.mu.Unlock()
	es := ep.eng.Stats()
	c.SendErrors, c.ReplyOverruns = es.SendErrors, es.ReplyOverruns
	if ep.wire != nil {
		ws := ep.wire.Stats()
		c.WireDelayed, c.WireDropped, c.WireMaxHeld = ws.Delayed, ws.Dropped, ws.MaxHeld
		c.WireLate, c.WireLateMax = ws.Late, ws.LateMax
	}
	return c
}

// codeNames keys NACK counts by the code's name.
func codeNames(m map[uet.NackCode]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k.String()] = v
	}
	return out
}

// randomPSN is a PDC's start PSN.
func randomPSN() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}
