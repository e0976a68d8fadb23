package npbpf

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/bpf"
)

// bpfQP is the map value the programs share with Go.
type bpfQP = bpf.NpNpQp

func TestQPContextValidate(t *testing.T) {
	ok := QPContext{QPN: 1, PeerQPN: 2, Local: addrRecv, Peer: addrSender, MinTimeBetweenCNPs: 4 * time.Microsecond}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid context: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*QPContext)
		want string
	}{
		{"qpn 0", func(c *QPContext) { c.QPN = 0 }, "qpn 0x0: must be 1..0xffffff"},
		{"qpn 25 bits", func(c *QPContext) { c.QPN = 1 << 24 }, "qpn 0x1000000"},
		{"peer qpn 0", func(c *QPContext) { c.PeerQPN = 0 }, "peer qpn 0x0"},
		{"no local", func(c *QPContext) { c.Local = netip.Addr{} }, "needs both addresses"},
		{"mixed families", func(c *QPContext) { c.Peer = addrSender6 }, "different IP families"},
		{"dscp 64", func(c *QPContext) { c.CNPDSCP = 64 }, "cnp_dscp 64: must be 0..63"},
		{"negative N", func(c *QPContext) { c.MinTimeBetweenCNPs = -1 }, "min_time_between_cnps -1ns"},
		{"N 2s", func(c *QPContext) { c.MinTimeBetweenCNPs = 2 * time.Second }, "min_time_between_cnps 2s: must be 0..1s"},
	} {
		c := ok
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestQPContextValue(t *testing.T) {
	c := QPContext{QPN: 7, PeerQPN: 9, Local: netip.MustParseAddr("::ffff:198.18.0.2"), Peer: addrSender,
		SrcPort: 0xc123, MinTimeBetweenCNPs: time.Microsecond}
	v := c.value()
	want := bpfQP{PeerQpn: 9, SrcPort: 0xc123, Pkey: 0xffff, Family: familyIPv4, CnpDscp: 48, MinTimeNs: 1000, MinSpacingNs: noSpacing}
	copy(want.LocalIp[:], []byte{198, 18, 0, 2})
	copy(want.PeerIp[:], []byte{198, 18, 0, 1})
	if v != want {
		t.Errorf("value %+v\nwant %+v", v, want)
	}
	c6 := QPContext{QPN: 7, PeerQPN: 9, Local: addrRecv6, Peer: addrSender6, PKey: 0x8001, CNPDSCP: 46}
	v = c6.value()
	if v.Family != familyIPv6 || v.LocalIp != addrRecv6.As16() || v.PeerIp != addrSender6.As16() || v.Pkey != 0x8001 || v.CnpDscp != 46 {
		t.Errorf("IPv6 value %+v", v)
	}
}
