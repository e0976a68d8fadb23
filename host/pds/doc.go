// Package pds is the Ultra Ethernet Transport on the host: a fabric
// endpoint (FEP) on UDP 4793 that runs the Packet Delivery Sublayer and
// the Congestion Management Sublayer's CCCs with NSCC, as one transport on
// the engine (host/engine), beside RoCEv2 (host/agent). Its wire format
// is host/uet's; uet.md and seed 004 are the sources.
//
// # PDS Manager
//
// Endpoint.Start looks a PDC up by {JobID, destination FEP, traffic class,
// delivery mode} and allocates one on first use (seed 004): a PDC ID, a
// random start PSN, one entropy value (the UDP source port of all its
// packets, or one per packet with a load balancer). Its
// first packets carry SYN with the dpdcid slot's psn_offset, so the target
// allocates its side from the packet alone (at most 4095 PSNs before the
// first ACK says the target's PDC ID); the first ACK establishes it.
// Delivery is RUD, reliable and unordered:
//
//   - data: RUD_REQ with the SES standard request header (a UET_WRITE of
//     message_id, buffer offset, request length, SOM/EOM) and the payload;
//     AR on a message's last packet and on retransmissions;
//   - the target tracks 1024 PSNs beyond the cumulative one, places every
//     payload by its SES offset (and with Config.Verify checks it against
//     host/pattern), and ACKs with ACK_CC: cumulative PSN, the PSN
//     answered, a 64-PSN SACK bitmap after the first missing PSN, and
//     NSCC's cc_state (service time, rcvd_bytes, ooo_count: the packets
//     it holds above the cumulative PSN, htsim's). It ACKs at
//     once on CE (with M set), on AR, or when AckBytes arrived, otherwise
//     once per receive batch;
//   - loss (Config.Loss; loss.go has SLEEK and none): RACK (RFC 8985),
//     the default: a packet is lost when one sent after it was
//     acknowledged and it has been outstanding longer than that packet's
//     RTT plus a reordering window, checked on every ACK and by a timer.
//     The window is min_RTT/4 (at least a packet's time at the line
//     rate), 0 on a PDC without a balancer that has seen no reordering
//     and has three packets SACKed beyond the oldest (the DupAck rule's
//     speed); it doubles, once per round trip, on a duplicate the target
//     reports (its ACK of the cumulative PSN that moves nothing: the
//     PDS's DSACK, counted as a spurious retransmission), up to half the
//     RTO, and halves after 16 round trips without one if the reordering
//     measured stayed under half of it. With packets in flight and no
//     ACK for the probe timeout (Config.ProbeTimeout, or twice the
//     smoothed RTT) the
//     initiator sends CTRL ACK_REQ for the oldest one, on the data's path
//     and class so it cannot overtake it, and the target answers with its
//     ACK and, if that PSN never came, NACK PKT_NOT_RCVD; the RTO resends
//     all that is unacknowledged when nothing else helped;
//   - NACKs: TRIMMED and PKT_NOT_RCVD resend the PSN; NO_PDC_AVAIL,
//     NO_CCC_AVAIL and INV_DPDCID (the target refused or forgot the PDC)
//     resend everything with SYN after an RTO;
//   - close: a PDC with nothing to send or acknowledge for IdleTimeout
//     sends CTRL CLOSE_CMD; the target frees its side and answers with an
//     ACK whose req is CLOSE, on which the initiator frees its own. A
//     target frees a PDC it heard nothing from for twice IdleTimeout, or
//     for four of its turns when its source serves many PDCs in turn
//     (the source's PDC count × the smoothed gap between its packets),
//     or with a message in progress for the source's retries.
//   - limits: past Config.MaxPDCs or MaxCCCs a SYN is answered with NACK
//     NO_PDC_AVAIL or NO_CCC_AVAIL.
//
// # CCC Manager and NSCC
//
// The sender's CCC is one per {source FEP, destination FEP, traffic
// class}, shared by the PDCs of that pair (every JobID): created IDLE,
// initialised with its window controller (NSCC, nscc.LabParams), and run
// through uet.md's update_state table after every event, IDLE → ACTIVE →
// READY ⇄ ACTIVE, PENDING when only ACKs are awaited, back to IDLE and
// freed once no PDC uses it. Every transition is counted
// (Counters.Transitions) and, with Config.Trace, reported with its time.
// A CCC is the engine's flow: its PDCs send round robin, up to a 16 KiB
// quantum a turn (pdcQuantum), while its congestion control allows
// (Config.CC): NSCC's window (bytes in flight of the whole CCC), RCCC's
// credit, both, or neither; no pacer at the sender, the ACK clock, the
// credit and the engine's port limiter at the line rate.
//
// # RCCC
//
// With CC rccc or both a sender CCC holds an rccc.Sender: it starts with
// speculative credit, spends each data packet's wire bytes, and sends its
// data as RUD_CC_REQ carrying its ccc_id and cumulative credit target.
// Every receiving endpoint runs a credit pacer (rccc.Pacer, keyed by its
// receiver CCCs) as an engine flow: a source joins with its first target,
// and each grant leaves at once as a CTRL CREDIT to the PDC that last
// heard from the source. An ACK_CC carries a CREDIT cc_state instead of
// NSCC's when the source's credit moved since the last one and the source
// is out of the pacer's round robin (while grants go on, the next CTRL
// CREDIT repairs a lost one). A sender with data, no credit and nothing in
// flight sends CTRL CREDIT_REQ (at once if no target went out yet, else
// after a probe timeout without credit), which the receiver answers with
// a CTRL CREDIT of what it granted. CTRL CREDIT and CREDIT_REQ payloads
// put the ccc_id above the 24-bit count, the layout of the *_CC_REQ word:
// a receiver that sees a new ccc_id for a CCC (the sender freed its CCC
// and made a new one, whose counts start at 0) starts the source over,
// and a sender ignores credit for an earlier incarnation. The receiver's
// CCC is freed with its last PDC, and its source with it.
//
// # Trimming and load balancing
//
// A data packet that arrives with Config.TrimDSCP or TrimLastHopDSCP was
// cut by a switch port: the target NACKs it TRIMMED or TRIMMED_LASTHOP at
// once. With Config.NewBalancer each PDC picks every packet's entropy
// value (host/lb) and feeds the balancer every ACK's M flag, trimmed
// NACKs and timeouts.
//
// # Not here
//
// ROD, RUDI and UUD delivery; SES responses and
// any SES semantics beyond a WRITE into a pattern-checked buffer; TSS
// security.
package pds
