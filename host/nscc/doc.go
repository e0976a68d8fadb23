// Package nscc implements NSCC, Ultra Ethernet's Network-Signaled
// Congestion Control: the sender's congestion window of a CCC, moved by
// ACKs that echo ECN (the M flag) and carry an RTT, by NACKs of trimmed
// packets and by inferred losses. Controller is a cc.WindowController.
//
// Sources: reference/uet.md "NSCC" and its htsim paragraph; seed
// 004 (the CCC lifecycle); the UE 1.0 specification §3.6.13 pseudocode as
// quoted in public translations (NSCC.OnACK, OnNACK, OnInferredLoss and
// the internal functions of §3.6.13.6); the UEC simulator
// ultraethernet/uet-htsim at 40ccb05, htsim/sim/uec.cpp (initNsccParams,
// processAck, updateCwndOnAck_NSCC, quick_adapt, fulfill_adjustment,
// update_delay, update_base_rtt, updateCwndOnNack_NSCC). Comments name the
// rule each line implements.
//
// Nothing in the package owns a goroutine or a timer or reads the clock:
// every method takes now, a monotonic time.Duration since an arbitrary
// epoch. NSCC is ACK-clocked: quick adapt's window and the adjust period
// end on the first ACK after them, so NextEvent is always Never. Equal
// inputs give equal outputs.
//
// # Per ACK
//
// In the order of §3.6.13.5: count the newly received bytes (achieved,
// received, ignored); apply the destination's penalty (rcv_cwnd_pend, rc);
// without a valid RTT sample stop there; base_rtt = min(base_rtt, rtt),
// delay = rtt − base_rtt, feed the average delay; quick adapt (may consume
// the ACK); then the quadrant:
//
//	                 delay < target_qdelay            delay ≥ target_qdelay
//	no ECN           proportional increase (+ fast)   fair increase
//	ECN (M flag)     no change (load balancing's)     multiplicative decrease
//
// and the fulfill adjustment once adjust_period_threshold has passed or
// more than adjust_bytes_threshold was received. Increases gather in
// inc_bytes and reach cwnd divided by cwnd at the fulfill adjustment, with
// eta once per adjust period; fast increase and every decrease act at once.
// After every event MTU ≤ cwnd ≤ MaxWnd.
//
// # Where the sources differ
//
//	rule                        followed here                           other side
//	--------------------------  --------------------------------------  ------------------------------------
//	ACK without a valid RTT     spec: nothing after the penalty         htsim: the average delay stands in
//	                                                                    for the sample and NSCC runs on
//	quick adapt window end,     spec: now ≥ qa_endtime,                 htsim: strictly >
//	adjust period               now − last_adjust ≥ period
//	NACK reasons                spec: only trims (0x01, 0x02) move      htsim: every NACK is a trim; quick
//	                            cwnd, last-hop ones not under RCCC;     adapt runs even for last-hop trims
//	                            NackOther only gives its RTT. OnNack    under RCCC
//	                            (no code) is a trim, as in htsim
//	destination penalty         spec, uet.md: 7-bit rcv_cwnd_pend,      htsim: 8-bit, 255 = none, cwnd −=
//	                            cwnd saved once, max(MTU, min(cwnd,     newly·(1 − pen/255), no
//	                            inflight) − pend·newly >> 7), rc        save/restore, increases not gated
//	                            restores; no increase while pend > 0
//	average delay               htsim update_delay: EWMA, gain          spec: left to the implementation
//	                            0.0125; no ECN and delay > tq feeds
//	                            0.25·base_rtt; a trim feeds
//	                            config_base_rtt
//	last_dec_time at creation   spec Table 3-77: now (no MD in the      htsim: 0, the simulation's start
//	                            first base_rtt)
//	cwnd bounds                 htsim set_cwnd_bounds after every       spec: MaxWnd clamped in fulfill and
//	                            event (a restore, a lower base_rtt      fast increase only
//	                            clamp at once); MaxWnd ≥ MTU always
//	arithmetic                  float64 cwnd and inc_bytes; Window()    htsim: integer cwnd, uint32
//	                            is the floor                            inc_bytes, integer-ps average
//	what quick adapt ignores    spec, htsim: ECN-marked ACKs and        uet.md: "the ACKs of what is
//	                            trims of the bytes in flight when it    already in flight"
//	                            ran
//	CanSend                     inflight + packet size ≤ cwnd (htsim)   spec: inflight + MTU ≤ cwnd
//
// htsim's separate gain for delays above 5·base_rtt is the default gain
// hard-coded, not kept. The MD spacing (at most once per base_rtt) and
// eta once per adjust period (htsim PR #129) agree everywhere.
//
// # Scaling to this lab
//
// DefaultParams derives every knob from the link rate, the base RTT and the
// MTU as htsim's initNsccParams does, scaled to htsim's reference network
// of 100 Gbit/s and 12 µs by a = BDP/150 000 B and b = tq/12 µs, with
// target_qdelay tq = base RTT (no trimming in Linux). The lab's ports are
// 1 Gbit/s with MTU 4096 and network namespaces give base RTTs of tens of
// µs:
//
//	                        1 Gbit/s  1 Gbit/s  1 Gbit/s  reference
//	base RTT = tq           50 µs     80 µs     100 µs    12 µs, 100 Gbit/s
//	BDP                     6250 B    10000 B   12500 B   150000 B
//	MaxWnd = initial cwnd   9375 B    15000 B   18750 B   225000 B
//	  in MTUs               2.29      3.66      4.58      54.9
//	a = BDP / 150 000 B     0.0417    0.0667    0.0833    1
//	b = tq / 12 µs          4.17      6.67      8.33      1
//	alpha (B/s)             56.9 M    91.0 M    113.8 M   1365 M
//	alpha·tq per window     2844 B    7282 B    11378 B   16384 B
//	  of BDP                0.46      0.73      0.91      0.11
//	fi per window           853 B     1365 B    1707 B    20480 B (0.137 BDP at every rate)
//	fi_scale                0.0104    0.0167    0.0208    0.25
//	eta per adjust period   25.6 B    40.96 B   51.2 B    614.4 B
//	qa_threshold = 4·tq     200 µs    320 µs    400 µs    48 µs
//	MaxWnd >> qa_gate (3)   1171 B    1875 B    2343 B    28125 B
//	adjust_bytes_threshold  32768 B   32768 B   32768 B   32768 B
//	adjust period           50 µs     80 µs     100 µs    12 µs
//	gamma 0.8, max_md_jump 0.5, "no delay" < 1 µs, delay EWMA gain 0.0125 throughout
//
// What the numbers mean at 1 Gbit/s, MTU 4096, 80 µs:
//
//   - The BDP is 2.4 packets and the window cannot go below one MTU (41 %
//     of the BDP): three or more flows through one port keep a standing
//     queue of N·MTU − BDP whatever NSCC does (TestClosedLoopWindowFloor:
//     8 flows, 22 768 B, 182 µs). Windows act in whole packets (CanSend
//     takes the packet's size), so 4 flows share unevenly between one and
//     two packets each.
//   - b grows with tq, so the proportional increase at zero delay is 0.73
//     BDP per window here against 0.11 BDP at the reference: it, not fast
//     increase, refills the window. fi_scale scales with a and is 1.7 % of
//     each ACK (25 % at the reference), so fast increase barely matters.
//   - MaxWnd >> 3 is below one MTU: quick adapt fires only when a window
//     of base RTT + tq (160 µs) acknowledged under 1875 B, less than one
//     full-size packet, and saw a trim NACK or a delay above 320 µs.
//   - adjust_bytes_threshold (8 MTU) is over twice MaxWnd: the fulfill
//     adjustment runs on the adjust period, once per base RTT.
//   - Software RTTs jitter by microseconds to tens of µs; base_rtt is the
//     smallest sample, so that jitter reads as queueing delay. With tq =
//     base RTT it only moves the proportional increase until it passes tq.
//
// In the closed-loop test (a fake port, ECN above BDP/2, RTT = base +
// queue/rate) two lab flows and eight 10 Gbit/s flows reach Jain fairness
// above 0.98 (asserted: 0.95) with the queue near one BDP, the delay NSCC
// aims at.
package nscc
