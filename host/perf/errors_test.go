package perf

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/dcqcn"
)

// TestConfigErrorFormat: a refusal names its settings by the caller's
// spelling, and a cause with a Detail is shown without its package name.
func TestConfigErrorFormat(t *testing.T) {
	flag := map[Field]string{FieldQPs: "-P", FieldMessageSize: "-l", FieldKnobs: "--dcqcn"}
	name := func(f Field) string { return flag[f] }
	e := &ConfigError{Field: FieldQPs, Value: "4096", With: []Setting{{FieldMessageSize, "16777216"}}, Must: "too much"}
	if got, want := e.Error(), "qps 4096 with message_size 16777216: too much"; got != want {
		t.Errorf("Error %q, want %q", got, want)
	}
	if got, want := e.Format(name), "-P 4096 with -l 16777216: too much"; got != want {
		t.Errorf("Format %q, want %q", got, want)
	}
	c := DefaultClientConfig("198.18.0.1")
	c.Profile = "paper"
	c.Knobs = []cc.Knob{{Name: "dce_tcp_rtt", Value: "10"}, {Name: "min_time_between_cnps", Value: "50"}}
	err := c.Validate()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != FieldKnobs || len(dcqcn.KnobErrors(err)) != 1 {
		t.Fatalf("knobs together: %v", err)
	}
	if got := ce.Format(name); !strings.HasPrefix(got, "--dcqcn: dce_tcp_rtt=10: must be greater") {
		t.Errorf("Format %q", got)
	}
}

// TestPPFCSourcesRefused: a PPFC source the agent would never match is
// refused with the field and the value, on a client as on a server.
func TestPPFCSourcesRefused(t *testing.T) {
	bad := netip.MustParsePrefix("::ffff:198.18.1.1/128")
	c := DefaultClientConfig("198.18.0.1")
	c.PPFCSources = []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24"), bad}
	var ce *ConfigError
	if err := c.Validate(); !errors.As(err, &ce) || ce.Field != FieldPPFCSources || ce.Value != bad.String() {
		t.Errorf("client: %v, want a ppfc_sources error naming %v", err, bad)
	}
	_, err := Listen(ServerConfig{PPFCSources: []netip.Prefix{{}}})
	if !errors.As(err, &ce) || ce.Field != FieldPPFCSources {
		t.Errorf("server: %v, want a ppfc_sources error", err)
	}
}
