//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/link"
)

// The delay link's capacity (host/lab/link, no netem): how many packets per
// second its forwarder releases when offered more than it can take,
// beside the same path without it, in one run. A lab with delay links
// needs its packets through them: the goal is three times the ECN♯
// experiment's 17 kpps. (It was a unit test's bound; it is the machine's
// figure, so it lives here.)

const (
	delayGoalPPS = 50_000
	delayOneWay  = time.Millisecond
)

// DelayReport is the delay section: one row per packet size.
type DelayReport struct {
	Delay   string     `json:"delay"`
	Seconds int        `json:"seconds"`
	Rows    []DelayRow `json:"rows"`
}

// DelayRow is one packet size: what iperf3 -u sent on the bare path, and
// what the forwarder released when it was in the way.
type DelayRow struct {
	IPBytes    int     `json:"ip_bytes"`
	BareKpps   float64 `json:"bare_kpps"`   // sent, no delay link
	DelayKpps  float64 `json:"delay_kpps"`  // the forwarder's releases
	Ratio      float64 `json:"ratio"`       // delay / bare
	QueueFull  uint64  `json:"queue_full"`  // dropped at the forwarder's limit
	TunDropped uint64  `json:"tun_dropped"` // dropped at the TUN's queue
	GoalKpps   float64 `json:"goal_kpps"`
	Verdict    string  `json:"verdict"` // ok, below
}

// runDelay measures the rows on a two-node lab of its own.
func runDelay(ctx context.Context, seconds, cpu int) (*DelayReport, error) {
	rep := &DelayReport{Delay: delayOneWay.String(), Seconds: seconds}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return rep, errIperfMissing
	}
	l, err := pairLab(0)
	if err != nil {
		return rep, err
	}
	defer closeLab(l)
	a, b := l.Node("a"), l.Node("b")
	sizes := []int{1500, 100}
	port := iperfPort + 300
	for _, ip := range sizes {
		progress("delay link: %d-byte packets, no delay (%d s)", ip, seconds)
		run, err := iperfUDP(ctx, a, b, port, seconds, ip-28, cpu)
		port++
		if err != nil {
			return rep, fmt.Errorf("bare path, %d-byte packets: %w", ip, err)
		}
		// What the sender put on the bare path: the same sender's offer
		// the delay link is offered below.
		rep.Rows = append(rep.Rows, DelayRow{IPBytes: ip, BareKpps: float64(run.SentPackets) / run.Seconds / 1e3, GoalKpps: delayGoalPPS / 1e3})
	}
	dl, err := a.AddDelay(devA, link.DelaySpec{Delay: delayOneWay})
	if err != nil {
		return rep, err
	}
	var errs []error
	for i := range rep.Rows {
		r := &rep.Rows[i]
		progress("delay link: %d-byte packets, %v one way (%d s)", r.IPBytes, delayOneWay, seconds)
		before := dl.Stats()
		_, err := iperfUDP(ctx, a, b, port, seconds, r.IPBytes-28, cpu)
		port++
		after := dl.Stats()
		if err != nil {
			errs = append(errs, fmt.Errorf("delay link, %d-byte packets: %w", r.IPBytes, err))
			continue
		}
		// The forwarder's releases while the client sent (its last
		// packets leave a delay later, still inside dt).
		r.DelayKpps = float64(after.Packets-before.Packets) / float64(seconds) / 1e3
		r.QueueFull, r.TunDropped = after.QueueFull-before.QueueFull, after.TunDropped-before.TunDropped
		if r.BareKpps > 0 {
			r.Ratio = r.DelayKpps / r.BareKpps
		}
		r.Verdict = "ok"
		if r.DelayKpps*1e3 < delayGoalPPS {
			r.Verdict = "below"
		}
	}
	return rep, errors.Join(errs...)
}
