// Package lb holds Ultra Ethernet's entropy load balancers: a sender
// chooses each packet's entropy value (EV), the UDP source port that the
// fabric's ECMP hash turns into a path, and learns from what comes back
// which EVs lead somewhere congested. Every balancer is a Balancer, a pure
// state machine (Next, Feedback) that takes now and owns no timer, with
// its randomness drawn from an injected math/rand/v2 generator so that a
// seed reproduces a run.
//
//	kind       --lb        htsim class       Next                                         Feedback
//	Oblivious  oblivious   UecMpOblivious    spray: each EV once per round, XOR order     ignored
//	Bitmap     bitmap      UecMpBitmap       spray, skipping EVs with a penalty           ECN +1, NACK +4, timeout 15 (the cap)
//	REPS       reps        UecMpReps         earliest fresh clean EV, else a random one   clean ACK: into a buffer of 8; timeout: freeze
//	Mixed      mixed       UecMpMixed        oldest clean EV queued, else Bitmap's        both (htsim's default)
//
// Sources: reference/uet.md "Entropy" and its htsim paragraph; the UEC
// simulator ultraethernet/uet-htsim at 40ccb05: htsim/sim/uec_mp.h and
// uec_mp.cpp (the four balancers and UecMpRepsLegacy, Mixed's recycling),
// buffer_reps.h and buffer_reps.cpp (REPS' circular buffer, its freezing
// constants), uec.cpp (where UecSrc calls processEv and nextEntropy) and
// datacenter/main_uec.cpp (-load_balancing_algo, default mixed; -paths,
// default 64). The algorithms are htsim's, rewritten; the comments name
// the htsim member each field stands for.
//
// # The EV space
//
// Params.FirstPort and Params.Ports are the source ports EVs come from
// (0xC000..0xFFFF by default, the range host/pds already draws from), and
// Params.EVs how many one balancer uses (128 by default, the count of the
// published htsim runs; a power of two). Each balancer takes an aligned
// block of EVs ports drawn at random when it is made: htsim's
// _path_random, the random upper bits of a 16-bit EV fixed at startup, so
// that two flows spray over different EVs.
//
// # What the sender reports (htsim uec.cpp)
//
//	event                                      Feedback
//	ACK of a packet (the one that triggered    AckFeedback(M flag): PathECN if CE was echoed, else PathGood
//	  it: htsim's ACK carries that packet's
//	  EV; a UET sender finds it by ack PSN)
//	NACK of a packet trimmed in the fabric     PathNack
//	NACK of a packet trimmed at the last hop   AckFeedback(M flag): the path was fine, the receiver was not
//	retransmission timeout                     PathTimeout, with the EV of the packet that timed out
//
// One Feedback per ACK, not one per packet it acknowledges (a SACK covers
// many packets, but only the one that triggered it reports its path).
// htsim reports nothing for other NACK codes and for losses inferred from
// SACKs; a lab without trimming may map an inferred loss to PathNack, as
// the drop did what a trim would have.
//
// # Where this differs from htsim
//
//	rule                          here                                       htsim
//	----------------------------  -----------------------------------------  ------------------------------------------
//	Bitmap's search               up to 2·EVs EVs past the cursor: every EV   EVs+1: the XOR mask changes at the wrap,
//	                              is looked at, so a clean one is always      so a clean EV can be missed and a
//	                              found when one exists                       penalised one returned
//	timeout's EV                  the EV of the packet that timed out (a      UNKNOWN_EV (0): Bitmap penalises EV 0 of
//	                              UET sender keeps the EV of every PSN)       its block, whatever timed out
//	feedback for a foreign EV     counted (Stats.Foreign), ignored; a         Bitmap masks it into its block; REPS
//	                              timeout still freezes REPS                  recycles it as given
//	REPS' EVs                     the balancer's block of the port range,     0..paths−1 (no upper bits)
//	                              as Oblivious and Bitmap
//	REPS freezing without         allowed: a timeout freezes (on by           exits: "REPS currently requires trimming"
//	  trimming                    default); Params.REPSFreeze turns it off    (the freeze is meant for failures, a
//	                                                                          timeout without trimming may be a drop)
//	REPS buffer entries' reuse    once (htsim's repsMaxLifetimeEntropy = 1,   configurable, never set
//	                              compressed_acks_reuse off)
//	Mixed's recycle list          at most MixedRecycleLimit (4096), oldest    unbounded std::list
//	                              dropped
//	REPS legacy's first window    not kept: only Mixed uses REPS legacy,      nextEntropy sprays the first
//	                              through nextEntropyRecycle, which has none  min(cwnd, paths) packets in order
//
// Bitmap's ECN penalty is 1: an EV whose packets come back CE-marked sits
// out the next round the cursor reaches it first and is used in the one
// after, so on a path where every packet is marked Bitmap alone sends
// about 55 % of its EV share (TestFourPathsOneCongested: 14-18 % against
// Oblivious' 25-31 %), REPS and Mixed under 0.1 % after a warm-up; with
// trim NACKs (penalty 4) Bitmap sends 5-7 %. That is htsim's design: ECN
// on an EV is a hint, a trim or a timeout a verdict.
package lb
