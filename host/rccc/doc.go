// Package rccc implements RCCC, Ultra Ethernet's Receiver Credit-based
// Congestion Control: a receiving NIC's pacer hands out credit to the
// sources sending to it, round robin, at just under its line rate, and a
// sender sends only on credit, so that the receiver's last hop carries no
// more than the line can drain. Sender is a sender CCC's credit, a
// cc.CreditSource; Pacer is a receiving NIC's credit pacer.
//
// Sources: reference/uet.md "RCCC", its htsim paragraph and its wire
// format (credit and credit_target are cumulative 24-bit counts of
// 256-byte units mod 2^24, uet.md's assumption; host/uet's Credit); seed
// 004 (the CCC, which hosts RCCC at both ends); the UEC simulator
// ultraethernet/uet-htsim at 40ccb05: htsim/sim/uec.cpp (UecSrc:
// startConnection, can_send_RCCC, spendCredit, stopSpeculating,
// processPull, handlePull, computePullTarget, sendRTS; UecSink:
// handlePullTarget, pull, backlog, slowCredit; UecPullPacer: its
// constructor, doNextEvent, requestPull), uec.h, uecpacket.h (pull quanta
// of 256 bytes, quantize_ceil) and datacenter/main_uec.cpp (one pacer per
// node at 0.99 × line rate). The spec's RCCC pseudocode is not public.
// Comments name the rule each line implements.
//
// Nothing in the package owns a goroutine or a timer or reads the clock:
// methods take now, a monotonic time.Duration since an arbitrary epoch;
// the pacer's NextEvent says when its Advance has a grant to issue. Equal
// inputs give equal outputs. Neither type is safe for concurrent use.
//
// # Sender
//
//   - A sender CCC starts with SpeculativeBytes (MaxWnd) of credit and
//     speculating: it may send before the receiver knows of it.
//   - A packet may leave while credit > 0 and takes its whole size: the
//     credit may go below zero, and the debt is paid from the next grants.
//   - The first ACK, NACK or credit ends speculation: speculative credit
//     left is dropped (a debt is kept).
//   - Credit arrives as the receiver's cumulative count (CTRL CREDIT's
//     payload, ACK_CC CREDIT's credit). A value ahead of the last accepted
//     one adds the difference; a duplicate or an older value (reordered)
//     adds nothing. Credit never exceeds MaxWnd; what a grant brings above
//     it is lost (counted as ClampedBytes).
//   - Every request carries the cumulative target: what was received so
//     far plus what the sender lacks, ⌈(min(backlog + retransmit backlog,
//     cwnd + MTU, MaxWnd) − credit) / active sources / 256⌉, at least an
//     MTU while speculating with new data (Sender.Target).
//
// # Pacer
//
//   - A source registers with its first target; targets only rise (an
//     older or equal one is ignored).
//   - Sources whose target is ahead of their credit are active and get
//     grants in turn: min(GrantBytes, target − credit) each, so the
//     credit never passes the target.
//   - A source whose target is met joins the slow-pull queue: while no
//     source is active, its members get SlowPullBytes of credit they did
//     not ask for, in turn, until each has SlowPullMaxBytes (MaxWnd)
//     beyond its target, ready for its next message. A target that rises
//     into that credit makes room for more; one that rises past it makes
//     the source active again.
//   - The rate is a schedule, as htsim's pacer event: a grant of b bytes
//     takes b / (PacerRateFactor × LinkRate) of the pacer's time (rounded
//     up to the ns), slow pulls included; an idle pacer grants at once.
//     With CatchUp an Advance that comes late issues the grants the
//     schedule missed, up to CatchUp's worth.
//   - Remove forgets a source: no more grants.
//
// # Wiring in a PDS
//
// Sender CCC (beside NSCC, or alone): can_send = NSCC.CanSend(inflight,
// MTU) && Sender.CanSend() (uet.md). For each data packet, OnTransmit(its
// size), then send it as RUD_CC_REQ with ccc_id and credit_target =
// Target(CreditDemand{Backlog: new bytes still waiting, RetxBacklog,
// Window: cwnd (0 without NSCC), ActiveSources: the endpoint's CCCs with
// data waiting to go out, this one included}). On an ACK_CC with cc_type
// CREDIT: OnAck, then OnCredit(credit); on any other ACK: OnAck; on a
// NACK: OnNack; on a CTRL CREDIT (control type 7): OnCredit(payload). With
// backlog, credit ≤ 0 and nothing in flight to carry a target (no
// speculative credit, or every packet lost), send a CTRL CREDIT_REQ
// (control type 8) whose payload is Target(...), at most once per round
// trip (htsim sendRTS).
//
// Receiver: one Pacer per receiving NIC (endpoint), keyed by the receiver
// CCC. Every *_CC_REQ: OnTarget(now, key, credit_target); a CTRL
// CREDIT_REQ: OnTarget(now, key, payload) and at once a CTRL CREDIT with
// Granted(key) (what it has is re-sent: a lost grant is recovered). Run
// Advance at NextEvent; for each Grant send a CTRL CREDIT with payload
// g.Credit to a PDC of that CCC, at once. Every ACK_CC to a PDC of the CCC
// may carry Granted(key) as a CREDIT cc_state (cc_type 1), which repeats
// the grants, so a lost CTRL CREDIT costs nothing more than the time to
// the next ACK. An ACK_CC has one cc_state: with NSCC on as well, a
// receiver sends CREDIT when the credit moved since its last ACK_CC to
// that CCC, NSCC otherwise. Remove the source when the receiver CCC is
// freed.
//
// Both counts start at 0 when the CCCs are created, so the two ends' CCCs
// must live and die together: a receiver that keeps a source across a new
// sender CCC reads the new targets as old. The pacer's rate counts the
// bytes the senders spend: for arrivals at 0.99 × line rate exactly, a
// sender spends what the link carries (IP packet + 14 Ethernet bytes);
// spending IP sizes gives 0.99 × 4110/4096 = 0.9934 of the line with MTU
// 4096.
//
// # Where this differs from htsim
//
//	rule                       here                                    htsim
//	-------------------------  --------------------------------------  --------------------------------------
//	counts on the wire         24 bits of 256 B mod 2^24, read by      64-bit counts from INIT_PULL = 10^8,
//	                           serial arithmetic (Ahead): a value      never wrapping ("real implementations
//	                           within 2^23 units behind is old         will properly handle modular wrapping")
//	credit in ACKs             ACK_CC CREDIT carries the cumulative    ACKs carry no pull (commented out);
//	                           credit (uet.md's wire format)           only pull packets bring credit
//	a target not ahead of      not queued: nothing to grant            requestPull all the same: a pull of 0
//	the credit (slow-pull                                              bytes re-sends the latest count and
//	credit covers it), a                                               costs 1024 B of pacer time; RTS and
//	trim, an RTS                                                       trims request a pull too; here the PDS
//	                                                                   answers CREDIT_REQ with Granted
//	last slow pull             cut to the ceiling: unrequested         whole grants while below
//	                           credit ≤ SlowPullMaxBytes               ⌊MaxWnd⌋: up to a grant − 1 unit more,
//	                                                                   which the sender's ceiling drops
//	queue membership           a source is in one queue at most        a sink can sit in the active and idle
//	                                                                   lists at once (requestPull during slow
//	                                                                   pull), or twice in the idle list
//	slow-pull ceiling          the receiver's own Params.MaxWnd        the sender's configured maxwnd (one
//	                                                                   global value)
//	grant size                 4 × MTU, the bytes a sender spends per  4 × MSS: 16 384 B for packets of
//	                           full packet (16 384 B at MTU 4096)      4160 B
//	a late pacer               CatchUp (0 in DefaultParams)            never late (discrete events)
//	sink retransmit backlog    not kept                                _retx_backlog: decremented, never
//	                                                                   incremented (dead)
//	pacer rate modulation      none                                    PCIe model and OversubscribedCC
//	                                                                   (updatePullRate)
//	RTO before any answer      speculation ends on the first           a second timeout with retransmissions
//	                           ACK, NACK or credit only                queued ends it too
//
// The division of the credit target by "active sources" is htsim's too,
// and happens where htsim does it: at the sender, by the sources its own
// NIC has waiting to transmit (UecNIC::activeSources), so that a NIC that
// cannot send them all at once does not ask for credit it would hold
// idle (CreditDemand.ActiveSources). The receiver divides its rate among
// its sources by the round robin.
//
// # Scaling to this lab
//
// DefaultParams takes htsim's values; they do not depend on the network's
// size except MaxWnd. At the lab's 1 Gbit/s ports and MTU 4096:
//
//	                             1 Gbit/s  1 Gbit/s  1 Gbit/s  reference
//	base RTT                     50 µs     80 µs     100 µs    12 µs, 100 Gbit/s
//	BDP                          6250 B    10000 B   12500 B   150000 B
//	MaxWnd = speculative credit  9375 B    15000 B   18750 B   225000 B
//	  in MTUs                    2.29      3.66      4.58      54.9
//	grant (4 MTU)                16384 B   16384 B   16384 B   16384 B
//	  in MaxWnd                  1.75      1.09      0.87      0.073
//	pacer rate                   990 Mbit/s                    99 Gbit/s
//	one grant's time             132.4 µs  132.4 µs  132.4 µs  1.324 µs
//	slow-pull ceiling            9216 B    14848 B   18688 B   224768 B
//	LabParams CatchUp            50 µs     80 µs     100 µs    (0)
//	  most extra queue (0.99 BDP) 6188 B   9900 B    12375 B
//
// What the numbers mean:
//
//   - A grant is more than MaxWnd below 100 µs. A sender asks for at most
//     MaxWnd beyond what it holds, so its grants are cut to its target and
//     take less of the pacer's time: the rate holds (TestPacerRate: grants
//     of 59 and 20 units at 0.99 × line rate to 1e-4).
//   - One sender has at most MaxWnd of credit and data outstanding, a
//     window: it fills the line while the credit loop's round trip is
//     under MaxWnd / rate = 1.5 base RTTs (TestClosedLoop: one flow
//     0.9899 of the line with a loop of 78-108 µs at 80 µs).
//   - Speculative credit is a burst by design: N senders starting at once
//     put N·⌈MaxWnd/MTU⌉ packets into the last hop, and the pacer, granting
//     0.99 of the line, drains them at 1 %: 32 senders, 512 KB, 419 ms
//     (TestClosedLoop). htsim's numbers come with trimming and 1-BDP
//     queues, which cut such a burst; Linux has neither. NSCC beside RCCC
//     (its window and ECN) or SpeculativeBytes = 0 (the sender's first
//     CREDIT_REQ costs a round trip) are the lab's choices.
//
// In the closed-loop test (8 senders into one 1 Gbit/s port, return path
// jitter of 0-30 µs) RCCC holds 0.990 of the line with Jain fairness
// 0.99999; after the first round the arrivals' burst above the pacer rate
// is 7.9 KB (senders at 1 Gbit/s) and 15.2 KB with 10 Gbit/s senders and
// no jitter, within one grant (16 384 B), and the last hop's queue stays
// below it.
package rccc
