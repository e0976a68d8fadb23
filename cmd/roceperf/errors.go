package main

import (
	"errors"

	"github.com/fabriclab/fabriclab/host/perf"
)

// flagOf is the flag that sets a perf setting, as roceperf's errors name it.
var flagOf = map[perf.Field]string{
	perf.FieldServer: "-c", perf.FieldPort: "-p", perf.FieldBind: "-B", perf.FieldTransport: "--transport",
	perf.FieldQPs: "-P", perf.FieldDuration: "-t", perf.FieldSize: "-n", perf.FieldMessageSize: "-l",
	perf.FieldMTU: "--mtu", perf.FieldOp: "--op", perf.FieldLineRate: "-b", perf.FieldCC: "--cc",
	perf.FieldDSCP: "--dscp", perf.FieldCNPDSCP: "--cnp-dscp", perf.FieldPKey: "--pkey", perf.FieldPPFCSources: "--ppfc-sources", perf.FieldPPFCMaxPause: "--ppfc-max-pause", perf.FieldPPFCWatchdog: "--ppfc-watchdog",
	perf.FieldTrimDSCP:    "--trim-dscp",
	perf.FieldTrimLastHop: "--trim-lasthop-dscp", perf.FieldProfile: "--dcqcn-profile", perf.FieldKnobs: "--dcqcn",
	perf.FieldNSCCKnobs: "--nscc", perf.FieldBaseRTT: "--base-rtt", perf.FieldRTO: "--rto", perf.FieldLoss: "--loss", perf.FieldLB: "--lb", perf.FieldRP: "--rp",
	perf.FieldNP: "--np", perf.FieldUDPPort: "--udp-port", perf.FieldInterval: "-i", perf.FieldOmit: "-O",
	perf.FieldWindow: "--window", perf.FieldInflight: "--inflight", perf.FieldAckEvery: "--ack-every",
	perf.FieldBurst: "--burst", perf.FieldTimeout: "--timeout", perf.FieldRetry: "--retry",
	perf.FieldTimescale: "--timescale", perf.FieldVerify: "--verify", perf.FieldServerLimits: "server limits",
}

func flagName(f perf.Field) string {
	if s, ok := flagOf[f]; ok {
		return s
	}
	return string(f)
}

// perfErr is perf's error as roceperf prints it: a refused setting names
// its flag ("roceperf: -P 20000: must be 1..16384").
func perfErr(err error) error {
	var ce *perf.ConfigError
	if errors.As(err, &ce) && error(ce) == err {
		return errors.New("roceperf: " + ce.Format(flagName))
	}
	return errors.New("roceperf: " + err.Error())
}
