package dcqcn

import "time"

// NPStats are an NP's counters.
type NPStats struct {
	CNPsSent  uint64 // np_cnp_sent
	CEPackets uint64 // np_ecn_marked_roce_packets
}

// NP is the notification point of one QP: the receiver's CNP generator
// (paper §3.1 NP algorithm; dcqcn.md §NP). A CE-marked packet gets a CNP at
// once if none was sent for the QP in the last N (min_time_between_cnps);
// otherwise a CNP becomes pending and is due N after the last one. Like RP
// it owns no timer: the caller polls at Next. Not safe for concurrent use.
type NP struct {
	n        time.Duration
	lastSent time.Duration
	sentAny  bool
	pending  bool
	stats    NPStats
}

// NewNP returns the notification point of a QP with coalescing period
// minTimeBetweenCNPs (N); 0 sends a CNP for every CE-marked packet.
func NewNP(minTimeBetweenCNPs time.Duration) *NP {
	return &NP{n: max(minTimeBetweenCNPs, 0)}
}

// OnCE handles a CE-marked packet for this QP at now. It returns true if a
// CNP is to be sent now; otherwise a CNP is pending (see Next).
func (n *NP) OnCE(now time.Duration) (sendNow bool) {
	n.stats.CEPackets++
	if n.due(now) {
		n.send(now) // also covers a pending CNP that is due
		return true
	}
	n.pending = true
	return false
}

// Poll returns true if a pending CNP is due at or before now; it is then
// sent (no longer pending) and N starts again from now.
func (n *NP) Poll(now time.Duration) (sendNow bool) {
	if n.pending && n.due(now) {
		n.send(now)
		return true
	}
	return false
}

// Next returns when the pending CNP is due, and whether one is pending.
func (n *NP) Next() (due time.Duration, pending bool) {
	return addSat(n.lastSent, n.n), n.pending
}

// Stats returns the counters.
func (n *NP) Stats() NPStats { return n.stats }

func (n *NP) due(now time.Duration) bool {
	return !n.sentAny || now-n.lastSent >= n.n
}

func (n *NP) send(now time.Duration) {
	n.sentAny, n.pending, n.lastSent = true, false, now
	n.stats.CNPsSent++
}
