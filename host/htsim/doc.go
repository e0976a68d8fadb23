// Package htsim runs the lab's UET incast in htsim, the UEC reference
// simulator (github.com/ultraethernet/uet-htsim, BSD-2, snapshot 40ccb05),
// so that the lab can print its own results beside htsim's for the same
// setting. Sources: reference/htsim.md (build, flags, mapping, its
// results table) and reference/uet.md; htsim's main_uec.cpp and
// fat_tree_topology.cpp for how it derives its RTT, queues and rate.
// None of htsim's code is here: Runner runs its binaries from the
// directory the project names in $HTSIM.
//
// A Scenario is an N → 1 incast in the lab's words (senders, bytes, line
// rate, IP MTU, base RTT, the receiver's port: limit, ECN thresholds,
// trimming; NSCC, RCCC or both; seed). NewPlan turns it into htsim's
// settings, Runner.Run writes the connection matrix, runs htsim_uec,
// reads its output and its queue log (parse_output -ascii) and returns a
// Result: per-flow FCT, tail and mean FCT over the ideal, trims (NACKs),
// retransmits, and the receiver's downlink queue p50/p99/max in bytes and
// BDPs, sampled every ideal/1000 until the last flow finishes.
//
// # What maps exactly
//
//   - The fabric: a 2-tier leaf-spine (htsim's own fat tree, K = 2N):
//     every sender on one ToR, the receiver on another, N spines, so only
//     the receiver's downlink is oversubscribed, as the lab's dumbbell
//     port (the senders' sprayed uplinks held at most 0.46 BDP in an
//     8 → 1).
//   - The rate, to a whole number of ps per byte: htsim truncates
//     8e12/rate, so 41666.667 Mbit/s would run at 41.885 Gbit/s; the rate
//     is spelt so that it truncates back (41666.666).
//   - The base RTT: the hop latency is solved, to the ps, so that
//     htsim's unloaded RTT (calculate_rtt: twice the hops' latency and
//     the serialisation of an MTU packet and a 64-B ACK at every hop),
//     which NSCC takes as its base RTT and BDP, is the scenario's. A run
//     checks htsim's printed value against it.
//   - The MTU: the lab's IP packet plus 14 bytes of Ethernet is htsim's
//     packet (4096 → 4110); its 64-B header leaves 4046 B of payload.
//     Trimmed packets keep TrimBytes + 14 (128 → 142).
//   - Limit and thresholds: whole packets of the wire MTU, the limit as
//     many as fit (62 500 B → 15, 4 MiB → 1020), the thresholds the
//     nearest (6250 B → 2, 25 000 B → 6).
//   - Scaled: htsim's reference network (12 µs) slowed down to the lab's
//     RTT (500 Mbit/s, 1 ms → 41666.666 Mbit/s, 12 µs): the same BDP in
//     bytes and packets, queue, thresholds and flows in BDPs, and NSCC's
//     scaling b = tq/12 µs at its reference value. FCT/ideal and
//     queue/BDP compare directly; times are reported in the lab's time.
//   - The ideal: N × size × (mtu/mss) × 8 / rate, no RTT.
//
// # What does not
//
//   - Marking: htsim marks at dequeue, on the queue the leaving packet
//     leaves behind, with a probability linear between the thresholds;
//     the lab's WRED marks at enqueue on the backlog an arrival finds.
//   - Trimming: on a full queue htsim trims a random one of the arriving
//     packet and the oldest queued one; the lab trims the arriving one.
//   - With RCCC (rccc or both) htsim turns ECN off on the ToR downlink
//     (main_uec.cpp set_ecn_parameters), so under both NSCC sees no ECN
//     at the last hop; the lab's port marks in every mode. In the deep
//     queue htsim's both therefore behaves nearly as rccc.
//   - ACKs: htsim's sink coalesces 16 KiB and has no ACK request: with
//     trimming off and a window under 4 packets a flow can stall until
//     an RTO. The lab ACKs every receive batch and on AR, so without
//     trimming the default here is an ACK per packet and no SLEEK (the
//     closer mapping); SetHtsimRecovery gives htsim's own setting (SLEEK,
//     which hides the stall but resends spuriously).
//   - NSCC's parameters: htsim derives tq = 0.75 × RTT with trimming and
//     b = tq/12 µs; the lab's nscc.LabParams has tq = RTT and b = 1.
//     Native at 1 ms makes b 62.5 (a proportional increase of ~7 BDP per
//     round trip); Scaled keeps htsim's reference b. TargetQDelay sets tq.
//   - Every switch queue of htsim's fabric has the port's limit and
//     thresholds; the lab has one port.
//   - htsim sends whole packets (a 2 MiB flow is 519 of 4046 B), has no
//     host (no scheduling delays, no base-RTT floor) and its minimum RTO
//     (15 µs + 6 drains of a full queue) does not scale with the mapping.
//   - The queue statistic: htsim's is sampled in time (ideal/1000); the
//     lab's tests sample the backlog every 3 ms.
//
// A run takes 0.5–2 s on this project's machines (htsim and the log's
// parse), and is deterministic for a seed.
package htsim
