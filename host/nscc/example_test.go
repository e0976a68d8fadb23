package nscc_test

import (
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The defaults at the lab's ports: 1 Gbit/s, MTU 4096, a namespace base
// RTT of 80 µs (the table in the package documentation).
func ExampleDefaultParams() {
	p := nscc.DefaultParams(units.Gbit, 80*time.Microsecond, 4096)
	a, b := nscc.Scaling(p.LinkRate, p.ConfigBaseRTT, p.TargetQDelay)
	fmt.Printf("BDP %.0f B, MaxWnd = initial cwnd %d B, min cwnd %d B\n", p.BDPBytes(), p.MaxWndBytes(), p.MTUBytes)
	fmt.Printf("a %.4f, b %.4f\n", a, b)
	fmt.Printf("target_qdelay %v, qa_threshold %v, adjust_period_threshold %v\n",
		p.TargetQDelay, p.QAThreshold, p.AdjustPeriodThreshold)
	fmt.Printf("alpha %.0f B/s (alpha·tq %.1f B), fi %.2f B, fi_scale %.5f, eta %.2f B\n",
		p.AlphaBytesPerSecond, p.AlphaBytesPerSecond*p.TargetQDelay.Seconds(), p.FIBytes, p.FIScale, p.EtaBytes)
	fmt.Printf("gamma %v, max_md_jump %v, qa_gate %d (MaxWnd >> 3 = %d B), adjust_bytes_threshold %d B\n",
		p.Gamma, p.MaxMDJump, p.QAGate, p.MaxWndBytes()>>p.QAGate, p.AdjustBytesThreshold)
	fmt.Printf("no delay < %v, delay EWMA gain %v, valid: %v\n", p.NoDelay, p.DelayAlpha, p.Validate())
	// Output:
	// BDP 10000 B, MaxWnd = initial cwnd 15000 B, min cwnd 4096 B
	// a 0.0667, b 6.6667
	// target_qdelay 80µs, qa_threshold 320µs, adjust_period_threshold 80µs
	// alpha 91022222 B/s (alpha·tq 7281.8 B), fi 1365.33 B, fi_scale 0.01667, eta 40.96 B
	// gamma 0.8, max_md_jump 0.5, qa_gate 3 (MaxWnd >> 3 = 1875 B), adjust_bytes_threshold 32768 B
	// no delay < 1µs, delay EWMA gain 0.0125, valid: <nil>
}

// The quadrants at the lab's settings, one MTU ACK at a time: increases
// gather until the adjust period (80 µs) ends, ECN without delay changes
// nothing, a trim NACK takes its packet.
func ExampleController() {
	const us = time.Microsecond
	p := nscc.DefaultParams(units.Gbit, 80*us, 4096)
	p.InitialCwndBytes = 4096
	c := nscc.New(p, 0)
	ack := func(at, delay time.Duration, ecn bool, what string) {
		c.OnAck(at, cc.AckSample{NewlyAcked: 4096, RTT: 80*us + delay, RTTValid: true, ECN: ecn})
		fmt.Println(at, c.Window(), what)
	}
	ack(40*us, 70*us, false, "proportional, gathered")
	ack(80*us, 70*us, false, "proportional; fulfill: 2·alpha·10µs + eta")
	ack(120*us, 90*us, false, "fair, gathered")
	ack(160*us, 90*us, false, "fair; fulfill: 2·fi·4096/cwnd + eta")
	ack(200*us, 30*us, true, "ECN below tq: no change")
	c.OnNack(210*us, 4096)
	fmt.Println(210*us, c.Window(), "trim NACK: − 4096, MTU floor")
	st := c.Stats()
	fmt.Println(st.ProportionalAcks, st.FairAcks, st.ECNBelowTargetAcks, st.Fulfills, st.NackDecreases)
	// Output:
	// 40µs 4096 proportional, gathered
	// 80µs 5957 proportional; fulfill: 2·alpha·10µs + eta
	// 120µs 5957 fair, gathered
	// 160µs 7875 fair; fulfill: 2·fi·4096/cwnd + eta
	// 200µs 7875 ECN below tq: no change
	// 210µs 4096 trim NACK: − 4096, MTU floor
	// 2 2 1 2 1
}

// The destination's flow control (uet.md, §3.6.13.2): rcv_cwnd_pend 64
// on an ACK of 4096 B with 60 000 B in flight takes cwnd from 100 000 to
// min(cwnd, inflight) − 64·4096/128 = 57 952 B; rc restores it.
func ExampleController_OnAckCC() {
	p := nscc.DefaultParams(100*units.Gbit, 12*time.Microsecond, 4096)
	p.InitialCwndBytes = 100000
	c := nscc.New(p, 0)
	s := cc.AckSample{NewlyAcked: 4096, RTT: 15 * time.Microsecond, RTTValid: true, InFlight: 60000}
	c.OnAckCC(time.Microsecond, s, nscc.AckCCState{RcvCwndPend: 64})
	fmt.Println(c.Window())
	c.OnAckCC(2*time.Microsecond, s, nscc.AckCCState{RestoreCwnd: true})
	fmt.Println(c.Window())
	// Output:
	// 57952
	// 100000
}
