package rccc_test

import (
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The defaults at the lab's ports: 1 Gbit/s, MTU 4096, a namespace base
// RTT of 80 µs (the table in the package documentation).
func ExampleDefaultParams() {
	p := rccc.DefaultParams(units.Gbit, 80*time.Microsecond, 4096)
	fmt.Printf("pacer %v (%.2f × %v), grant %d B every %.1f µs\n", p.PacerRate(), p.PacerRateFactor, p.LinkRate,
		p.GrantBytes, float64(p.GrantBytes)*8e6/float64(p.PacerRate()))
	fmt.Printf("BDP %.0f B, MaxWnd = speculative credit %d B\n", p.BDPBytes(), p.SpeculativeBytes)
	fmt.Printf("slow pull %d B at a time up to %d B, catch-up %v (LabParams: %v)\n",
		p.SlowPullBytes, p.SlowPullMaxBytes, p.CatchUp, rccc.LabParams(p.LinkRate, p.ConfigBaseRTT, p.MTUBytes).CatchUp)
	// Output:
	// pacer 990mbit (0.99 × 1gbit), grant 16384 B every 132.4 µs
	// BDP 10000 B, MaxWnd = speculative credit 15000 B
	// slow pull 16384 B at a time up to 14848 B, catch-up 0s (LabParams: 80µs)
}

// One sender and its receiver's pacer, with the wire between them: the
// sender speculates, its requests carry credit_target, the pacer's grants
// come back as CTRL CREDIT and in every ACK_CC.
func ExampleSender() {
	p := rccc.DefaultParams(units.Gbit, 80*time.Microsecond, 4096)
	s := rccc.NewSender(p, 0)
	pc := rccc.NewPacer[uint32](p, 0) // keyed by the receiver's CCC id
	backlog := 64 << 10
	var targets []uet.Credit
	for s.CanSend() { // speculative credit: MaxWnd
		s.OnTransmit(0, 4096)
		backlog -= 4096
		targets = append(targets, uet.Credit(s.Target(cc.CreditDemand{Backlog: backlog})))
	}
	fmt.Println("speculative packets' credit_target:", targets, "credit", s.Credit())
	// 20 µs later the packets arrive; the pacer grants at once.
	for _, t := range targets {
		pc.OnTarget(20*time.Microsecond, 7, t)
	}
	grants := pc.Advance(20*time.Microsecond, nil)
	fmt.Printf("grant: %+v, next at %v\n", grants[0], pc.NextEvent())
	// The first ACK_CC (cc_type CREDIT) ends speculation; its credit is
	// the cumulative count at the time.
	credit, _ := pc.Granted(7)
	s.OnAck(40 * time.Microsecond)
	s.OnCredit(40*time.Microsecond, uint32(credit))
	fmt.Println("after the ACK_CC: credit", s.Credit(), "speculating", s.Speculating())
	// Output:
	// speculative packets' credit_target: [16 32 48 64] credit -1384
	// grant: {Key:7 Credit:64 Bytes:16384 SlowPull:false At:20µs}, next at 152.396µs
	// after the ACK_CC: credit 15000 speculating false
}
