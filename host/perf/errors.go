package perf

import (
	"fmt"
	"strings"
)

// Field names a setting of ClientConfig or ServerConfig in a ConfigError,
// by the key a lab file or the daemon's configuration gives it. A command
// spells it its own way (cmd/roceperf: a flag) with ConfigError.Format.
type Field string

// The settings, as errors name them.
const (
	FieldServer       Field = "server"
	FieldPort         Field = "port"
	FieldBind         Field = "bind"
	FieldTransport    Field = "transport"
	FieldQPs          Field = "qps"
	FieldDuration     Field = "duration"
	FieldSize         Field = "size"
	FieldMessageSize  Field = "message_size"
	FieldMTU          Field = "mtu"
	FieldOp           Field = "op"
	FieldLineRate     Field = "line_rate"
	FieldCC           Field = "cc"
	FieldDSCP         Field = "dscp"
	FieldCNPDSCP      Field = "cnp_dscp"
	FieldPKey         Field = "pkey"
	FieldPPFCSources  Field = "ppfc_sources"
	FieldPPFCMaxPause Field = "ppfc_max_pause"
	FieldPPFCWatchdog Field = "ppfc_watchdog"
	FieldTrimDSCP     Field = "trim_dscp"
	FieldTrimLastHop  Field = "trim_lasthop_dscp"
	FieldProfile      Field = "profile"
	FieldKnobs        Field = "knobs"
	FieldNSCCKnobs    Field = "nscc_knobs"
	FieldBaseRTT      Field = "base_rtt"
	FieldRTO          Field = "rto"
	FieldLoss         Field = "loss"
	FieldLB           Field = "lb"
	FieldRP           Field = "rp"
	FieldNP           Field = "np"
	FieldUDPPort      Field = "udp_port"
	FieldInterval     Field = "interval"
	FieldOmit         Field = "omit"
	FieldWindow       Field = "window"
	FieldInflight     Field = "inflight"
	FieldAckEvery     Field = "ack_every"
	FieldBurst        Field = "burst"
	FieldTimeout      Field = "timeout"
	FieldRetry        Field = "retry"
	FieldTimescale    Field = "timescale"
	FieldVerify       Field = "verify"
	FieldServerLimits Field = "server_limits"
	FieldWires        Field = "wires"
)

// Setting is a field and its value, as a ConfigError shows it.
type Setting struct {
	Field Field
	Value string
}

// ConfigError is a setting perf refuses: Field's Value and what it must
// be. With are the other settings of a rule across several; Cause is the
// refusal of the package whose rule it is (dcqcn, nscc, pds), if any.
type ConfigError struct {
	Field Field
	Value string // "" for none
	With  []Setting
	Must  string // "" when Cause says it
	Cause error
}

func (e *ConfigError) Error() string { return e.Format(nil) }

func (e *ConfigError) Unwrap() error { return e.Cause }

// Format is the error with each field spelled by name (nil: its Field):
// "qps 5000 with message_size 65536: must be ...".
func (e *ConfigError) Format(name func(Field) string) string {
	spell := func(f Field) string {
		if name == nil {
			return string(f)
		}
		return name(f)
	}
	var b strings.Builder
	b.WriteString(spell(e.Field))
	if e.Value != "" {
		b.WriteString(" " + e.Value)
	}
	for i, s := range e.With {
		if i == 0 {
			b.WriteString(" with")
		}
		fmt.Fprintf(&b, " %s %s", spell(s.Field), s.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason())
	return b.String()
}

// Reason is why the setting is refused, without the settings: Must, then
// the cause's refusal.
func (e *ConfigError) Reason() string {
	switch {
	case e.Must != "" && e.Cause != nil:
		return e.Must + ": " + causeText(e.Cause)
	case e.Cause != nil:
		return causeText(e.Cause)
	}
	return e.Must
}

// causeText is a cause's refusal; without its package's name where it
// has a Detail (dcqcn.KnobError), whose field the ConfigError names.
// Several joined (errors.Join) are one line, separated by "; ".
func causeText(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts := make([]string, 0, len(j.Unwrap()))
		for _, e := range j.Unwrap() {
			parts = append(parts, causeText(e))
		}
		return strings.Join(parts, "; ")
	}
	if d, ok := err.(interface{ Detail() string }); ok {
		return d.Detail()
	}
	return err.Error()
}

// configErr is the ConfigError of field's value: it must be must.
func configErr(field Field, value any, must string, args ...any) error {
	return &ConfigError{Field: field, Value: fmt.Sprint(value), Must: "must be " + fmt.Sprintf(must, args...)}
}
