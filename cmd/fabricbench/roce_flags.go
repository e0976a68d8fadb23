//go:build linux

package main

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// sections are the parts of a run -only can pick.
type sections struct {
	prog, throughput, goodput, reaction, np, delay, incast, scale, ports, soak bool
}

var sectionNames = []string{"prog", "throughput", "roce", "goodput", "reaction", "np", "delay", "incast", "scale", "ports", "soak"}

func parseSections(list string) (sections, error) {
	var s sections
	picks := map[string][]*bool{
		"prog": {&s.prog}, "throughput": {&s.throughput}, "tcp": {&s.throughput},
		"roce": {&s.goodput, &s.reaction}, "goodput": {&s.goodput}, "reaction": {&s.reaction},
		"np": {&s.np}, "delay": {&s.delay}, "incast": {&s.incast}, "scale": {&s.scale},
		"ports": {&s.ports}, "soak": {&s.soak},
	}
	for _, name := range strings.Split(list, ",") {
		on, ok := picks[strings.TrimSpace(name)]
		if !ok {
			return s, fmt.Errorf("-only %q: unknown section %q; want a comma-separated list of %s", list, name, strings.Join(sectionNames, ", "))
		}
		for _, p := range on {
			*p = true
		}
	}
	return s, nil
}

// roceFlagSet holds the RoCEv2 section's flags until they are parsed.
type roceFlagSet struct {
	mtu        *int
	cpu        *int
	burst      *int
	profileDir *string
	rawRows    *bool
	rSeconds   *float64
	rRate      units.Rate
	rLine      units.Rate
	rK         units.ByteSize
	rPeriod    *time.Duration
}

func roceFlags() *roceFlagSet {
	f := &roceFlagSet{
		mtu:        flag.Int("roce-mtu", 1024, "roceperf path MTU for the goodput rows: 1024 (veth MTU 1500, iperf3 -l 1040) or 4096 (veth MTU 9000, -l 4112)"),
		cpu:        flag.Int("roce-cpu", -1, "pin both tools' client and server of the goodput rows to this CPU (-1: no pinning; iperf3 -A, taskset for roceperf)"),
		burst:      flag.Int("roce-burst", 0, "roceperf --burst for the goodput rows (packets per QP per transmit pass; 0: the tool's default)"),
		profileDir: flag.String("roce-profile", "", "write CPU profiles of the roceperf client and server processes (pprof) into this directory"),
		rawRows:    flag.Bool("send-raw-rows", true, "also run roceperf and UET with every packet through the raw socket (--send raw, the path before UDP GSO) in the goodput rounds"),
		rSeconds:   flag.Float64("reaction-seconds", 3, "length of the CNP reaction run"),
		rRate:      200 * units.Mbit,
		rLine:      1 * units.Gbit,
		rK:         20 * units.KiB,
		rPeriod:    flag.Duration("reaction-cnp-period", 4*time.Microsecond, "NP min_time_between_cnps of the reaction run"),
	}
	flag.Var(&f.rRate, "reaction-rate", "port rate in front of the NP in the reaction run")
	flag.Var(&f.rLine, "reaction-line", "the RP's line rate (start rate) in the reaction run; above -reaction-rate so a queue builds")
	flag.Var(&f.rK, "reaction-k", "step marking threshold K of the port's RoCE class in the reaction run")
	return f
}

func (f *roceFlagSet) opts(rounds, seconds int) (roceOpts, error) {
	o := roceOpts{rounds: rounds, seconds: seconds, mtu: *f.mtu, cpu: *f.cpu, burst: *f.burst, profileDir: *f.profileDir, rawRows: *f.rawRows}
	switch {
	case *f.mtu != 1024 && *f.mtu != 4096:
		return o, fmt.Errorf("-roce-mtu %d: must be 1024 or 4096", *f.mtu)
	case *f.cpu >= runtime.NumCPU() || *f.cpu < -1:
		return o, fmt.Errorf("-roce-cpu %d: must be -1..%d", *f.cpu, runtime.NumCPU()-1)
	case *f.burst < 0 || *f.burst > 256:
		return o, fmt.Errorf("-roce-burst %d: must be 0..256", *f.burst)
	case *f.rSeconds < 0.1 || *f.rSeconds > 600:
		return o, fmt.Errorf("-reaction-seconds %g: must be 0.1..600", *f.rSeconds)
	case *f.rPeriod < 0 || *f.rPeriod > time.Second:
		return o, fmt.Errorf("-reaction-cnp-period %v: must be 0..1s", *f.rPeriod)
	}
	o.react = reactionOpts{
		seconds:   time.Duration(*f.rSeconds * float64(time.Second)),
		portRate:  f.rRate,
		lineRate:  f.rLine,
		stepK:     f.rK,
		cnpPeriod: *f.rPeriod,
		mtu:       1024,
	}
	return o, nil
}
