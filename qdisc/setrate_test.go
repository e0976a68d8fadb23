package qdisc

import (
	"os/exec"
	"testing"

	"github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// htbRates reads the port class's and every leaf's rate and ceil in bit/s.
func htbRates(t *testing.T, p *Port) (port [2]uint64, leaves map[uint32][2]uint64) {
	t.Helper()
	tcnl, err := openTC(p.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer tcnl.Close()
	cls, err := tcnl.Class().Get(&tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(p.meta.Ifindex)})
	if err != nil {
		t.Fatal(err)
	}
	leaves = map[uint32][2]uint64{}
	for _, c := range cls {
		if c.Htb == nil || c.Htb.Parms == nil {
			continue
		}
		r := [2]uint64{uint64(c.Htb.Parms.Rate.Rate) * 8, uint64(c.Htb.Parms.Ceil.Rate) * 8}
		if c.Htb.Rate64 != nil && *c.Htb.Rate64 != 0 {
			r[0] = *c.Htb.Rate64 * 8
		}
		if c.Htb.Ceil64 != nil && *c.Htb.Ceil64 != 0 {
			r[1] = *c.Htb.Ceil64 * 8
		}
		if c.Handle == core.BuildHandle(htbMajor, htbPortMinor) {
			port = r
		} else {
			leaves[c.Handle] = r
		}
	}
	return port, leaves
}

// TestSetRate: a cut changes the port class alone, which bounds the leaves
// (their assured rates are tokens); a rise above the leaves' ceilings takes
// the full configure. The programs' config follows both.
func TestSetRate(t *testing.T) {
	labtest.EnterNetns(t)
	for _, args := range [][]string{
		{"link", "add", "sr0", "type", "veth", "peer", "name", "sr1"},
		{"link", "set", "sr0", "up"}, {"link", "set", "sr1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	exec.Command("ethtool", "-K", "sr1", "gro", "off").Run()
	p, err := Attach(DefaultConfig(200*units.Mbit), AttachOptions{Dev: "sr0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	if err := p.SetRate(50 * units.Mbit); err != nil {
		t.Fatal(err)
	}
	port, leaves := htbRates(t, p)
	if port != [2]uint64{50e6, 50e6} {
		t.Errorf("after a cut to 50 Mbit/s the port class is %v, want rate = ceil = 50e6", port)
	}
	for h, r := range leaves {
		if r[1] != 200e6 {
			t.Errorf("leaf %x ceil %d after a cut, want the 200e6 it was set at (the port class bounds it)", h, r[1])
		}
	}
	if cfg, _ := p.Config(); cfg.Rate != 50*units.Mbit {
		t.Errorf("config rate %v, want 50mbit", cfg.Rate)
	}
	if err := p.SetRate(300 * units.Mbit); err != nil {
		t.Fatal(err)
	}
	port, leaves = htbRates(t, p)
	if port != [2]uint64{300e6, 300e6} {
		t.Errorf("after a rise to 300 Mbit/s the port class is %v", port)
	}
	for h, r := range leaves {
		if r[1] != 300e6 {
			t.Errorf("leaf %x ceil %d after a rise past it, want 300e6 (the full configure)", h, r[1])
		}
	}
}
