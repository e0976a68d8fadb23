//go:build linux

package pktio

import (
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func (n *testNetns) dumpV6(t *testing.T, when string) {
	n.do(func() error {
		nl, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer nl.Close()
		rs, err := nl.RouteListFiltered(unix.AF_INET6, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		for _, r := range rs {
			t.Logf("DEBUG %s route %s", when, r)
		}
		as, _ := nl.AddrList(nil, unix.AF_INET6)
		for _, a := range as {
			t.Logf("DEBUG %s addr %s flags %#x", when, a, a.Flags)
		}
		return err
	})
}
