package tunnel

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// rfc6040 is RFC 6040 §4.2 Figure 4 as printed ("drop" and the (!)/(!!!)
// flags included), rows the inner header, columns the outer:
// Not-ECT, ECT(0), ECT(1), CE.
var rfc6040 = map[ECN][4]string{
	NotECT: {"Not-ECT", "Not-ECT(!!!)", "Not-ECT(!!!)", "drop(!!!)"},
	ECT0:   {"ECT(0)", "ECT(0)", "ECT(1)", "CE"},
	ECT1:   {"ECT(1)", "ECT(1)(!)", "ECT(1)", "CE"},
	CE:     {"CE", "CE", "CE(!!!)", "CE"},
}

var figureColumns = [4]ECN{NotECT, ECT0, ECT1, CE}

func cellText(result ECN, drop bool, cell Cell) string {
	s := result.String()
	if drop {
		s = "drop"
	}
	if cell != CellOK {
		s += cell.String()
	}
	return s
}

func TestDecapsulateIsRFC6040(t *testing.T) {
	for inner, row := range rfc6040 {
		for i, outer := range figureColumns {
			if got := cellText(Decapsulate(inner, outer, false)); got != row[i] {
				t.Errorf("inner %v, outer %v: %s, RFC 6040 says %s", inner, outer, got, row[i])
			}
			// Two-threshold mode differs only where the outer is ECT(1)
			// over an ECN-capable inner header: the inner is kept.
			got := cellText(Decapsulate(inner, outer, true))
			want := row[i]
			if outer == ECT1 && inner != NotECT && inner != CE {
				want = inner.String()
			}
			if got != want {
				t.Errorf("two-threshold, inner %v, outer %v: %s, want %s", inner, outer, got, want)
			}
		}
	}
}

func TestEncapsulate(t *testing.T) {
	for _, e := range []ECN{NotECT, ECT0, ECT1, CE} {
		if got := Encapsulate(e, Normal); got != e {
			t.Errorf("normal mode, inner %v: outer %v, want a copy", e, got)
		}
		if got := Encapsulate(e, Compat); got != NotECT {
			t.Errorf("compatibility mode, inner %v: outer %v, want Not-ECT", e, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := defaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mutate func(*Config)
		want   string // in the error: the field and the value
	}{
		{func(c *Config) { c.Local = netip.Addr{} }, "local (invalid IP)"},
		{func(c *Config) { c.Local = netip.MustParseAddr("2001:db8::1") }, "local (2001:db8::1)"},
		{func(c *Config) { c.Routes = nil }, "routes: want at least one"},
		{func(c *Config) { c.Routes[0].Prefix = netip.MustParsePrefix("198.19.2.1/24") }, "routes[0].prefix (198.19.2.1/24): host bits set"},
		{func(c *Config) { c.Routes = append(c.Routes, c.Routes[0]) }, "routes[1].prefix (198.19.2.0/24): listed twice"},
		{func(c *Config) { c.Routes[0].Remote = c.Local }, "routes[0].remote (198.18.100.1): is local"},
		{func(c *Config) { c.Routes[0].Remote = netip.MustParseAddr("198.19.2.1") }, "inside the prefix"},
		{func(c *Config) { c.MTU = 80 }, "mtu (80): want 88 to 65535"},
		{func(c *Config) { c.ECN = 7 }, "ecn (encap-mode(7))"},
		{func(c *Config) { c.LogInterval = -time.Second }, "log_interval (-1s)"},
		{func(c *Config) { c.Peers = []netip.Addr{netip.MustParseAddr("::1")} }, "peers[0] (::1)"},
	}
	for _, c := range cases {
		cfg := defaultConfig()
		c.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
}
