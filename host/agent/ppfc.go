package agent

import (
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
)

// PPFC (seed 003): a switch port whose queue fills tells the traffic
// source to stop sending towards a congested destination, for a Pause
// Duration or until it sends a resume. The agent obeys for each connected
// QP whose peer is that destination: its requester sends nothing, new or
// retransmitted, until the pause ends; what it owes as a responder (ACKs,
// NAKs, CNPs) still goes out, and its DCQCN reaction point runs on (the RP
// is a state machine of its own: Advance catches its timers up). The
// notification names no QP, so it is the agent's, not a QP's, packet.
//
// alarm (PT 10) and hold (PT 11): the draft names them and defines nothing
// ("to be discussed in future versions of this document"). This project's
// meaning, which bpf/port.c sends:
//   - hold, "still congested: stay paused": the port's answer to the first
//     packet of a source whose pause ran out before its queue was down to
//     xon. Obeyed as a stop (the pause starts again or is extended).
//   - alarm, an early warning below xoff: for its Pause Duration (the
//     time the port's queue takes to drain to xon) the QP's DCQCN rate
//     does not grow: its increase events are skipped
//     (dcqcn.RP.HoldIncreases). It neither pauses nor cuts. A QP without
//     DCQCN has nothing to hold.
// A resume ends a pause; it leaves an alarm's hold to run out.

// receivePPFC obeys one PPFC notification, parsed by roce.Parse as far as
// its BTH.
func (a *Agent) receivePPFC(now time.Duration, m *pktio.Message, b []byte) {
	var p roce.PPFC
	if err := roce.ParsePPFC(b, &p); err != nil {
		a.drops.malformed.Add(1)
		return
	}
	if !a.cfg.SkipICRCCheck && !a.ppfcICRCOK(m.Addr, b) {
		a.drops.icrc.Add(1)
		return
	}
	a.ppfc.received[p.Action].Add(1)
	if !a.ppfcSourceAllowed(m.Addr.Addr().Unmap()) {
		a.ppfc.ignoredSource.Add(1)
		return
	}
	pause := a.ppfcPause(p.Pause)
	named, resumed := false, false
	for qp := range a.liveQPs() {
		qp.mu.Lock()
		// Both unmapped: ParsePPFC and Connect see to it.
		if qp.mu.connected && !qp.mu.destroyed && qp.mu.peer.Addr.Addr().WithZone("") == p.Dest {
			named = true
			if qp.mu.req.kCNPs != nil && !m.Coalesced {
				// The kernel took it at its arrival (syncKernelPPFCLocked);
				// a resume wakes the transmit loop to read it.
				resumed = resumed || p.Action == roce.PPFCResume
			} else {
				resumed = qp.obeyPPFCLocked(now, p.Action, pause) || resumed
			}
		}
		qp.mu.Unlock()
	}
	if !named {
		a.ppfc.ignoredDestination.Add(1)
	}
	if resumed {
		a.kick()
	}
}

// obeyPPFCLocked obeys one notification for the QP at now, with its pause
// already bounded; it reports whether a resume ended a pause.
// Precondition: qp.mu is held.
func (qp *QP) obeyPPFCLocked(now time.Duration, action roce.PPFCAction, pause time.Duration) bool {
	switch action {
	case roce.PPFCStop:
		qp.mu.ctr.PPFCPauses++
		qp.ppfcStopLocked(now, pause)
	case roce.PPFCHold:
		qp.mu.ctr.PPFCHolds++
		qp.ppfcStopLocked(now, pause)
	case roce.PPFCResume:
		return qp.ppfcResumeLocked(now)
	case roce.PPFCAlarm:
		qp.ppfcAlarmLocked(now, pause)
	}
	return false
}

// ppfcPause is how long a notification's Pause Duration d pauses: d
// bounded by Config.PPFCMaxPause, which a stop with 0 gets.
func (a *Agent) ppfcPause(d time.Duration) time.Duration {
	if d > 0 {
		return min(d, a.cfg.PPFCMaxPause)
	}
	return a.cfg.PPFCMaxPause
}

// ppfcSourceAllowed reports whether Config.PPFCSources lets src pause this
// agent's QPs.
func (a *Agent) ppfcSourceAllowed(src netip.Addr) bool {
	if len(a.cfg.PPFCSources) == 0 {
		return true
	}
	src = src.WithZone("")
	for _, p := range a.cfg.PPFCSources {
		if p.Contains(src) {
			return true
		}
	}
	return false
}

// ppfcICRCOK reports whether the ICRC of b, sent from src, verifies to
// this agent on its receive port: to the conn's address or, on a conn
// bound to a wildcard (which does not tell where a datagram was sent),
// to an address one of its QPs is connected on, the traffic source the
// switch answers.
func (a *Agent) ppfcICRCOK(src netip.AddrPort, b []byte) bool {
	if la := a.conn.LocalAddr().Addr(); la.IsValid() && !la.IsUnspecified() {
		return roce.VerifyICRC(src, netip.AddrPortFrom(la, a.recvPort), b)
	}
	var tried netip.Addr
	for qp := range a.liveQPs() {
		qp.mu.Lock()
		la, ok := qp.mu.local.Addr(), qp.mu.connected
		qp.mu.Unlock()
		if !ok || la == tried {
			continue
		}
		tried = la
		if roce.VerifyICRC(src, netip.AddrPortFrom(la, a.recvPort), b) {
			return true
		}
	}
	return false
}

// ppfcStopLocked pauses the requester until now+pause, or extends a
// running pause to then: a stop (or hold) never shortens a pause. The
// watchdog (Config.PPFCWatchdog) ends a pause that stops keep extending:
// at pausedSince + PPFCWatchdog the QP sends again, and ignores stops and
// holds for as long again. Each notification's pause is bounded by
// PPFCMaxPause, a storm of them by the watchdog (issue 28: a 65,535 µs
// pause repeated forever stalled a QP forever).
// Precondition: qp.mu is held.
func (qp *QP) ppfcStopLocked(now, pause time.Duration) {
	r := &qp.mu.req
	if now < r.releasedUntil {
		qp.mu.ctr.PPFCWatchdogIgnored++
		return
	}
	until := now + pause
	if qp.ppfcPausedLocked(now) {
		until = max(r.pausedUntil, until)
	} else {
		r.paused, r.pausedSince = true, now
	}
	// A pause that ran out was ended by ppfcPausedLocked, so a running one
	// is younger than the watchdog and the clamp never moves it back.
	if wd := qp.agent.cfg.PPFCWatchdog; wd > 0 && until-r.pausedSince > wd {
		until = r.pausedSince + wd
		r.releasedUntil = until + wd
		qp.mu.ctr.PPFCWatchdogTrips++
	}
	r.pausedUntil = until
}

// ppfcAlarmLocked holds the DCQCN rate increases until now+d (extending a
// running hold, never shortening it).
// Precondition: qp.mu is held.
func (qp *QP) ppfcAlarmLocked(now, d time.Duration) {
	rp := qp.mu.req.rp
	if rp == nil {
		return // no DCQCN, or no stream yet: no rate to hold
	}
	// CNPs the kernel took before the alarm act at their arrivals first:
	// the hold must not move the RP past them.
	qp.syncKernelCNPsLocked()
	rp.HoldIncreases(now, now+d)
	qp.mu.ctr.PPFCAlarmsObeyed++
}

// ppfcResumeLocked ends a running pause now and reports whether there was
// one.
// Precondition: qp.mu is held.
func (qp *QP) ppfcResumeLocked(now time.Duration) bool {
	if !qp.ppfcPausedLocked(now) {
		return false
	}
	qp.endPauseLocked(now)
	qp.mu.ctr.PPFCResumes++
	return true
}

// ppfcPausedLocked reports whether the requester is paused at now, ending
// a pause whose time is up (at pausedUntil, however late it is noticed).
// Precondition: qp.mu is held.
func (qp *QP) ppfcPausedLocked(now time.Duration) bool {
	r := &qp.mu.req
	if r.paused && now >= r.pausedUntil {
		qp.endPauseLocked(r.pausedUntil)
	}
	return r.paused
}

// endPauseLocked ends the pause at end. Time paused does not count toward
// the ACK timeout: the requester could not send, so the responder owed it
// nothing. The timer's start moves on by the paused time that followed it
// (the last ACK may have come during the pause).
// Precondition: qp.mu is held.
func (qp *QP) endPauseLocked(end time.Duration) {
	r := &qp.mu.req
	if from := max(r.lastProgress, r.pausedSince); end > from {
		r.lastProgress += end - from
	}
	r.pace.CancelWake() // a pause is not timer lateness: no catch-up credit
	qp.mu.ctr.PPFCPausedNs += uint64(end - r.pausedSince)
	r.paused = false
}
