// Package dialect says a port's configuration (qdisc.Config) in the words
// of real switches, and reads one of them back (issue 30 §4): the same
// switch intent in four dialects, as seed 000 puts it.
//
//	sonic  SONiC 202305 config_db.json (config load): WRED_PROFILE, QUEUE,
//	       SCHEDULER, DSCP_TO_TC_MAP, TC_TO_QUEUE_MAP, PORT_QOS_MAP
//	       (pfc_enable), BUFFER_PROFILE, BUFFER_QUEUE, BUFFER_PG
//	eos    Arista EOS 4.30 (7050X3/7280R3 syntax): qos map dscp, tx-queue,
//	       random-detect ecn, priority-flow-control priority N no-drop
//	nxos   Cisco NX-OS 10.3 (Nexus 9000, 8q templates): class-map and
//	       policy-map type qos, queuing, network-qos, random-detect ... ecn
//	junos  Junos OS 23.4 (QFX5000, ELS): class-of-service classifiers,
//	       forwarding-classes, drop-profiles, schedulers,
//	       explicit-congestion-notification, congestion-notification-profile
//
// ParseSONiC reads the SONiC subset Render writes back into a
// qdisc.Config; the other dialects are written only.
//
// # What maps to what
//
// A lab class is the vendor's traffic class and egress queue of the same
// number (and PFC priority of the same number). Its ECN curve is the
// vendor's WRED with ECN on the instantaneous queue (weight 0): wred is
// min/max/probability, step K is min = max = K with probability 100 %
// (the vendors mark at or above K, the lab above K: one byte apart).
// Strict classes are strict-priority queues; the other classes share the
// rest equally, as the lab's HTB shares them (DWRR, equal weights or
// bandwidth shares).
//
// The lossless class is the one with PPFC on (XoffBytes set): it gets
// PFC no-drop. A strict class is not lossless: the lab tail-drops it at
// its limit like any other, and the convention the lab follows (seed
// 000: CNPs on DSCP 48 in priority 6, strict) keeps the CNP queue lossy
// and first; making it no-drop would let a pause hold back the very CNPs
// that end the congestion. PFC is an ingress mechanism (a priority
// group's buffer pauses the upstream port) while the lab's PPFC watches
// the egress class and pauses the source; the thresholds carry over where
// the dialect has a slot for them (SONiC's lossless priority group:
// static_th = xoff, xon = xon, headroom xoff = limit − xoff) and are
// noted otherwise.
//
// # Refused, noted
//
// A setting that changes how a class behaves and has no vendor form is
// refused with an *UnsupportedError naming the class, the field, the
// value and why: the dequeue AQMs (codel, tcn, ecnsharp) and the
// two-threshold WAN mode, trimming, a per-class drain rate, values a
// dialect's units cannot hold (a probability that is not a whole percent,
// a rate that is not whole bytes or kbit per second). A refinement the
// dialect has no slot for is left out and said in the output's header
// comment and in Output.Notes: the PPFC alarm (PFC has no early warning),
// the class of non-IP frames, a limit or PFC thresholds where the dialect
// keeps them in platform buffer profiles. An output without notes says
// the whole configuration; for SONiC, ParseSONiC then gives it back
// unchanged.
//
// # Units
//
// SONiC counts bytes and bytes per second, and probabilities in whole
// percent. EOS and NX-OS thresholds are written in kbytes where they are
// whole kbytes, taking a kbyte as 1024 bytes as the lab (and tc) do, and
// in bytes otherwise; their probabilities are whole percent; EOS shapes in
// kbps. Junos gives a queue's buffer as a percentage of the port's buffer
// and drop-profile fill levels as percentages of the queue's buffer: the
// port buffer is Options.PortBufferBytes (default: the sum of the rendered
// classes' limits, the lab port's buffers side by side), and every rounded
// percentage is noted with what it means in bytes.
package dialect
