package perf

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

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

// TestPPFCLimitsRefused: a max pause or a watchdog agent.New would refuse
// is refused first with the field, the value and the range, on a client
// as on a server.
func TestPPFCLimitsRefused(t *testing.T) {
	for _, tc := range []struct {
		maxPause, watchdog time.Duration
		field              Field
	}{
		{2 * time.Second, 0, FieldPPFCMaxPause},
		{time.Nanosecond, 0, FieldPPFCMaxPause},
		{0, 10 * time.Millisecond, FieldPPFCWatchdog}, // below the field's 65.535 ms
		{100 * time.Millisecond, 50 * time.Millisecond, FieldPPFCWatchdog},
		{0, 11 * time.Second, FieldPPFCWatchdog},
	} {
		c := DefaultClientConfig("198.18.0.1")
		c.PPFCMaxPause, c.PPFCWatchdog = tc.maxPause, tc.watchdog
		var ce *ConfigError
		if err := c.Validate(); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("client %v/%v: %v, want a %s error", tc.maxPause, tc.watchdog, err, tc.field)
		}
		_, err := Listen(ServerConfig{PPFCMaxPause: tc.maxPause, PPFCWatchdog: tc.watchdog})
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("server %v/%v: %v, want a %s error", tc.maxPause, tc.watchdog, err, tc.field)
		}
	}
	for _, ok := range [][2]time.Duration{{0, 0}, {0, -1}, {time.Microsecond, 0}, {time.Second, 10 * time.Second}, {20 * time.Millisecond, 20 * time.Millisecond}} {
		c := DefaultClientConfig("198.18.0.1")
		c.PPFCMaxPause, c.PPFCWatchdog = ok[0], ok[1]
		if err := c.Validate(); err != nil {
			t.Errorf("%v/%v refused: %v", ok[0], ok[1], err)
		}
	}
}

// TestRolesOff: off is a place for the NP and the RP, beside kernel and
// agent; anything else is refused with the three.
func TestRolesOff(t *testing.T) {
	c := DefaultClientConfig("198.18.0.1")
	c.RP = RPOff
	if err := c.Validate(); err != nil {
		t.Errorf("rp off: %v", err)
	}
	c.RP = "nic"
	var ce *ConfigError
	if err := c.Validate(); !errors.As(err, &ce) || ce.Field != FieldRP || !strings.Contains(ce.Must, "kernel, agent or off") {
		t.Errorf("rp nic: %v", err)
	}
	_, err := Listen(ServerConfig{NP: "nic"})
	if !errors.As(err, &ce) || ce.Field != FieldNP || !strings.Contains(ce.Must, "kernel, agent or off") {
		t.Errorf("np nic: %v", err)
	}
	// The DSCPs a flow's packets carry: its own and its CNPs', a knob's
	// cnp_dscp first.
	c = DefaultClientConfig("198.18.0.1")
	c.Knobs = []cc.Knob{{Name: "cnp_dscp", Value: "46"}}
	if d, cnp := c.DSCPs(); d != 26 || cnp != 46 {
		t.Errorf("DSCPs() = %d, %d; want 26, 46", d, cnp)
	}
	c.Transport = TransportUET
	if d, cnp := c.DSCPs(); d != 26 || cnp != 0 {
		t.Errorf("uet: DSCPs() = %d, %d; want 26, 0", d, cnp)
	}
}
