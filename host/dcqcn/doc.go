// Package dcqcn implements DCQCN, the RoCEv2 congestion control of Zhu et
// al., "Congestion Control for Large-Scale RDMA Deployments" (SIGCOMM 2015),
// as two pure state machines: NP, the notification point (receiver) that
// turns CE marks into CNPs, and RP, the per-QP reaction point (sender) that
// sets the send rate. The switch (CP) is not here.
//
// Nothing in the package owns a goroutine or a timer or reads the clock:
// every method takes now, a monotonic time.Duration since an arbitrary
// epoch, and RP.NextEvent and NP.Next tell the caller's scheduler when to
// call back. Equal inputs give equal outputs.
//
// Knobs carry their mlx5 names (Params, Set, Get, KnobNames). Sources read:
// the paper; the first author's ns-3 (bobzhuyb/ns3-rdma, qbb-net-device.cc,
// rpr_*); HPCC's ns-3 (alibaba-edu/High-Precision-Congestion-Control,
// rdma-hw.cc, *Mlx), which models the Mellanox firmware; the NVIDIA DCQCN
// parameter table (knob meanings and ranges); Linux mlx5 cong.c (names).
//
// # Profiles
//
// "paper" (PaperParams): the paper's constants at 40 Gbit/s, R_AI 40
// Mbit/s, R_HAI 200 Mbit/s and Rmin 100 Mbit/s scaled by lineRate/40G.
// "mlx5" (MLX5Params): the firmware defaults, whose absolute rate knobs
// (rpg_ai_rate 5, rpg_hai_rate 50, rpg_min_rate 1 Mbit/s) are taken as
// those of a 25 Gbit/s ConnectX-4 Lx and scaled by lineRate/25G. Times and
// rpg_byte_reset are never scaled.
//
// # Variants
//
// Where implementations disagree, Params holds a switch or the mlx5 knob
// decides; the profiles choose:
//
//	rule (switch)                  paper profile                       mlx5 profile
//	-----------------------------  ----------------------------------  -----------------------------------
//	α update vs cut (alpha_rule)   after_cut: cut with the old α, then per_period: every K, α ← (1−g)α +
//	                               α ← (1−g)α + g (paper eq. (1)       g·[CNP in the period] (NVIDIA
//	                               order); before_cut is ns3-rdma's    dce_tcp_g; HPCC UpdateAlphaMlx)
//	α timer (alpha_timer_restart)  re-armed by every cut: α decays     free-running from the first CNP
//	                               only after K without a CNP (paper,  (HPCC)
//	                               ns3-rdma)
//	stages (increase_rule)         paper: F fast-recovery steps, fast  paper, with F = 1; increase_rule=ns3
//	                               while max(T,BC) ≤ F; hyper when     is ns3-rdma's F−1 steps and
//	                               min(T,BC) > F, Rt += (min−F)·R_HAI  (min−F+1)·R_HAI
//	clamp_tgt_rate                 1: Rt = Rc on every cut (paper)     0
//	clamp_tgt_rate_after_time_inc  moot                                1: Rt = Rc on a cut if the increase
//	                                                                   timer fired since the last cut (T >
//	                                                                   0, HPCC); both 0: Rt stays
//	rate_reduce_monitor_period     0: every CNP cuts at once           4 µs, deferred: cut at the end of a
//	(reduce_timing)                                                    period with a CNP, periods on a grid
//	                                                                   from the first CNP, the period's
//	                                                                   other CNPs ignored (HPCC);
//	                                                                   leading_edge is the other reading
//	first CNP                      α = initial_alpha_value/1024 = 1;   α = 1023/1024; rate_to_set_on_
//	                               rate_to_set_on_first_cnp 0          first_cnp, if set, sets Rc = Rt,
//	                                                                   then the cut follows (HPCC)
//	Rt clamp at the max rate       no: Rt may pass it, Rc is capped    yes (HPCC ActiveIncreaseMlx)
//	(clamp_rt_at_max_rate)         (dcqcn.md vector 1: Rt 40.04 G)
//	rpg_min_dec_fac                0: no floor (not in the paper)      50 %
//	rpg_gd                         11: cut α/2                         11: cut α/2
//	rpg_byte_reset                 B = 10 MB                           32767 bytes
//
// Not firmware, off in both profiles: rate_validation (percent) skips an
// increase step, stage included, when the QP sent less than that share of
// Rc since the previous step or cut. A NIC always sends at Rc; a software
// sender held back by its CPU or its window must not see Rc drift up to the
// line rate meanwhile and then burst (RFC 7661's congestion window
// validation, applied to a rate). The lab (netns tests, the demo's lab files) runs 75.
// Not DCQCN either: RP.HoldIncreases skips the increase events until a
// given time the same way, the agent's reaction to a PPFC alarm (seed 003).
//
// In both, rpg_byte_reset 0 turns the byte counter off (BC stays 0, so
// after fast recovery every step is additive), the rate limiter stays
// engaged after the first CNP (only that CNP is "first"), and events due at
// the same instant run α timer, increase timer, deferred cut, then the
// caller's CNP or transmit.
//
// The mlx5 first-CNP factor of dcqcn.md (α period 1 µs, g = 1/256, monitor
// period 4 µs: Rc × 0.50777; × 0.50969 with g = 5/1024) comes out of
// per_period + deferred with α = 1 on the first CNP: the first CNP sets α
// without counting as "CNP seen", four α periods decay it to (1−g)^4 =
// 0.984466 before the deferred cut at 4 µs, and 1 − 0.984466/2 = 0.50777.
// With the mlx5 default initial_alpha_value 1023 the factor is 0.51017.
//
// Not copied from ns3-rdma: Rt /= 8 on the first stage when Rt > 10·Rc;
// halving the timer period and byte threshold in hyper increase (QCN
// heritage); clamping Rt after byte-counter stages when both clamp flags
// are 0, and after any stage with clamp_tgt_rate_after_time_inc. Not copied from HPCC: deciding stages by T alone with a
// single additive step; here the byte counter (rpg_byte_reset) takes part
// as in the paper and dcbnl.h's QCN rpg_threshold.
package dcqcn
