package main

// The three schemes of issue 13 §5, as port, tunnel and PE-agent settings.
// Pure: unit-tested without root.

import (
	"fmt"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Scheme names, in the order they run.
const (
	schemeRFC6040 = "rfc6040" // (a)
	schemeRate    = "pe-rate" // (b)
	schemeReroute = "reroute" // (c)
)

var schemeNames = []string{schemeRFC6040, schemeRate, schemeReroute}

// schemeLabels are the table's names.
var schemeLabels = map[string]string{
	schemeRFC6040: "(a) RFC 6040, one threshold",
	schemeRate:    "(b) two thresholds, PE rate",
	schemeReroute: "(c) two thresholds, reroute",
}

// Thresholds are the WAN port's marking thresholds. (a) marks CE on
// DCQCN's RED curve from T2 (0) to T2Max (HeavyMaxP), every packet above;
// (b) and (c) add the light marks from T1 (seed 001's early warning) on
// the same CE curve, so the two-threshold schemes differ from (a) only by
// what happens between T1 and T2.
type Thresholds struct {
	T1, T2, T2Max units.ByteSize
	LightMaxP     float64
	HeavyMaxP     float64
	// Notify is the port's least interval between two CNPs to a PE
	// (per kind).
	Notify time.Duration
}

// Scheme is one scheme's complete setting.
type Scheme struct {
	Name, Label string
	// Core is c1's port (and c2's with SecondPath).
	Core qdisc.Config
	// SecondPath builds the lab with core c2 (reroute).
	SecondPath bool
	// TwoThreshold is the PEs' decapsulation mode: keep the light marks
	// out of the inner header.
	TwoThreshold bool
	// Agent is PE1's agent policy.
	Agent pe.Config
	// Limiter is PE1's rate limiter port on its WAN device (PE rate), or
	// nil.
	Limiter *qdisc.Config
}

// schemeSetup is what every scheme shares.
type schemeSetup struct {
	coreRate, peRate units.Rate
	peMinRate        units.Rate // 0: the agent's default
	wanRTT           time.Duration
	th               Thresholds
	limit            units.ByteSize // every RoCE class's buffer: lossless
}

// roceClassWRED is a RoCE class marking CE on DCQCN's RED curve between
// t2 and t2max.
func (s schemeSetup) roceClassWRED(name string) qdisc.ClassConfig {
	return qdisc.ClassConfig{Name: name, LimitBytes: s.limit, ECN: qdisc.ECNWRED,
		MinThBytes: s.th.T2, MaxThBytes: s.th.T2Max, MaxP: s.th.HeavyMaxP}
}

func (s schemeSetup) roceClassTwoThreshold() qdisc.ClassConfig {
	return qdisc.ClassConfig{Name: "wan", LimitBytes: s.limit, ECN: qdisc.ECNTwoThreshold,
		TwoThreshold: qdisc.TwoThreshold{T1Bytes: s.th.T1, T2Bytes: s.th.T2, T2MaxBytes: s.th.T2Max,
			LightMaxP: s.th.LightMaxP, HeavyMaxP: s.th.HeavyMaxP, NotifyInterval: s.th.Notify}}
}

// scheme builds the named scheme.
func (s schemeSetup) scheme(name string) (Scheme, error) {
	sc := Scheme{Name: name, Label: schemeLabels[name]}
	sc.Core = qdisc.DefaultConfig(s.coreRate)
	agent := pe.Config{RTT: s.wanRTT}
	switch name {
	case schemeRFC6040:
		sc.Core.Classes[qdisc.ClassRoCE] = s.roceClassWRED("wan")
		agent.Mode = pe.Observe
	case schemeRate:
		sc.Core.Classes[qdisc.ClassRoCE] = s.roceClassTwoThreshold()
		sc.TwoThreshold = true
		agent.Mode, agent.LineRate, agent.MinRate = pe.RateLimit, s.peRate, s.peMinRate
		// The PE's buffer is where the tunnel's excess now waits: its
		// class marks the outer header on the same CE curve, which PE2
		// copies inside, so the senders hear of it end to end.
		lim := qdisc.DefaultConfig(s.peRate)
		lim.Classes[qdisc.ClassRoCE] = s.roceClassWRED("tunnel")
		sc.Limiter = &lim
	case schemeReroute:
		sc.Core.Classes[qdisc.ClassRoCE] = s.roceClassTwoThreshold()
		sc.TwoThreshold = true
		sc.SecondPath = true
		agent.Mode = pe.Reroute
	default:
		return Scheme{}, fmt.Errorf("scheme %q: want one of %s", name, strings.Join(schemeNames, ", "))
	}
	sc.Agent = agent
	if err := sc.Core.Validate(); err != nil {
		return Scheme{}, fmt.Errorf("scheme %s: core port: %w", name, err)
	}
	if sc.Limiter != nil {
		if err := sc.Limiter.Validate(); err != nil {
			return Scheme{}, fmt.Errorf("scheme %s: PE limiter: %w", name, err)
		}
	}
	return sc, nil
}

// describe is the scheme's settings in one line.
func (sc *Scheme) describe() string {
	c := sc.Core.Classes[qdisc.ClassRoCE]
	var b strings.Builder
	switch c.ECN {
	case qdisc.ECNWRED:
		fmt.Fprintf(&b, "core %s: CE on WRED %s-%s p %.2g", sc.Core.Rate, c.MinThBytes, c.MaxThBytes, c.MaxP)
	case qdisc.ECNTwoThreshold:
		t := c.TwoThreshold
		fmt.Fprintf(&b, "core %s: ECT(1) from %s (p %.2g at %s), CE %s-%s p %.2g, CNP to PE1 every %v",
			sc.Core.Rate, t.T1Bytes, t.LightMaxP, t.T2Bytes, t.T2Bytes, t.T2MaxBytes, t.HeavyMaxP, t.NotifyInterval)
	}
	fmt.Fprintf(&b, "; PE agent %s", sc.Agent.Mode)
	if sc.Limiter != nil {
		fmt.Fprintf(&b, " at %s", sc.Limiter.Rate)
		if sc.Agent.MinRate > 0 {
			fmt.Fprintf(&b, ", floor %s", sc.Agent.MinRate)
		}
		fmt.Fprintf(&b, " (PE buffer marks CE from %s)", sc.Limiter.Classes[qdisc.ClassRoCE].MinThBytes)
	}
	if sc.SecondPath {
		b.WriteString(", second core c2 (same port)")
	}
	return b.String()
}
