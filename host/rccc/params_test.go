package rccc

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

const us = time.Microsecond

// htsim's derivation at the lab's ports and at htsim's reference network.
func TestDefaultParams(t *testing.T) {
	tests := []struct {
		rate                units.Rate
		rtt                 time.Duration
		mtu                 int
		bdp                 float64
		maxWnd, grant, slow int // slow: the slow-pull ceiling
		grantTime           time.Duration
	}{
		{units.Gbit, 80 * us, 4096, 10000, 15000, 16384, 14848, 132396 * time.Nanosecond},
		{units.Gbit, 50 * us, 4096, 6250, 9375, 16384, 9216, 132396 * time.Nanosecond},
		{units.Gbit, 100 * us, 4096, 12500, 18750, 16384, 18688, 132396 * time.Nanosecond},
		{units.Gbit, 100 * us, 1500, 12500, 18750, 5888, 18688, 47580 * time.Nanosecond}, // 4·1500 rounded down to 256
		{100 * units.Gbit, 12 * us, 4096, 150000, 225000, 16384, 224768, 1324 * time.Nanosecond},
	}
	for _, tc := range tests {
		p := DefaultParams(tc.rate, tc.rtt, tc.mtu)
		if err := p.Validate(); err != nil {
			t.Errorf("%v %v: %v", tc.rate, tc.rtt, err)
		}
		if p.BDPBytes() != tc.bdp || p.MaxWndBytes() != tc.maxWnd || p.GrantBytes != tc.grant ||
			p.SpeculativeBytes != tc.maxWnd || p.SlowPullBytes != tc.grant || p.SlowPullMaxBytes != tc.slow {
			t.Errorf("%v %v mtu %d: %+v; want BDP %v MaxWnd = speculative %d, grant = slow pull %d, slow-pull max %d",
				tc.rate, tc.rtt, tc.mtu, p, tc.bdp, tc.maxWnd, tc.grant, tc.slow)
		}
		if p.PacerRateFactor != 0.99 || p.MaxWndBDPs != 1.5 || p.CatchUp != 0 || p.MTUBytes != tc.mtu ||
			p.PacerRate() != units.Rate(0.99*float64(tc.rate)) {
			t.Errorf("%v %v: constants %+v", tc.rate, tc.rtt, p)
		}
		pc := NewPacer[int](p, 0)
		pc.OnTarget(0, 0, 1<<20)
		pc.Advance(0, nil)
		if pc.NextEvent() != tc.grantTime {
			t.Errorf("%v %v: one grant takes %v, want %v", tc.rate, tc.rtt, pc.NextEvent(), tc.grantTime)
		}
		if s := NewSender(p, 0); s.Credit() != tc.maxWnd || !s.Speculating() || s.MaxWnd() != tc.maxWnd {
			t.Errorf("%v %v: NewSender: credit %d, want %d", tc.rate, tc.rtt, s.Credit(), tc.maxWnd)
		}
		l := LabParams(tc.rate, tc.rtt, tc.mtu)
		if l.CatchUp != tc.rtt {
			t.Errorf("LabParams: catch-up %v, want %v", l.CatchUp, tc.rtt)
		}
		if l.CatchUp = 0; l != p {
			t.Errorf("LabParams: %+v, want DefaultParams and CatchUp", l)
		}
	}
}

func TestValidate(t *testing.T) {
	lab := func() Params { return DefaultParams(units.Gbit, 80*us, 4096) }
	tests := []struct {
		name string
		edit func(*Params)
		want string
	}{
		{"link rate", func(p *Params) { p.LinkRate = 0 }, "rccc: link_rate=0bit: must be > 0"},
		{"rate factor", func(p *Params) { p.PacerRateFactor = 0 }, "rccc: pacer_rate_factor=0: must be in (0, 2] (share of link_rate; htsim 0.99)"},
		{"rate factor NaN", func(p *Params) { p.PacerRateFactor = math.NaN() }, "rccc: pacer_rate_factor=NaN: must be in (0, 2] (share of link_rate; htsim 0.99)"},
		{"base rtt", func(p *Params) { p.ConfigBaseRTT = 0 }, "rccc: config_base_rtt=0s: must be 1ns..1s"},
		{"mtu", func(p *Params) { p.MTUBytes = 70000 }, "rccc: mtu=70000: must be 64..65535 (bytes)"},
		{"grant", func(p *Params) { p.GrantBytes = 16000 }, "rccc: grant=16000: must be a multiple of 256 in 256..1048576 (bytes)"},
		{"grant 0", func(p *Params) { p.GrantBytes = 0 }, "rccc: grant=0: must be a multiple of 256 in 256..1048576 (bytes)"},
		{"slow pull", func(p *Params) { p.SlowPullBytes = 1 << 21 }, "rccc: slow_pull=2097152: must be a multiple of 256 in 256..1048576 (bytes)"},
		{"max wnd", func(p *Params) { p.MaxWndBDPs = -1 }, "rccc: max_wnd=-1: must be in (0, 1000] (BDPs)"},
		{"max wnd below mtu", func(p *Params) { p.MaxWndBDPs = 0.4 },
			"rccc: max_wnd (0.4 BDP = 4000 B at 1gbit and 80µs) must be at least mtu (4096 B): a base_rtt of at least 82µs at this link rate makes it one"},
		{"speculative", func(p *Params) { p.SpeculativeBytes = 15001 }, "rccc: speculative=15001: must be 0..max_wnd (0..15000 bytes)"},
		{"slow pull max", func(p *Params) { p.SlowPullMaxBytes = -1 }, "rccc: slow_pull_max=-1: must be 0..max_wnd (0..15000 bytes)"},
		{"catch up", func(p *Params) { p.CatchUp = -us }, "rccc: catch_up=-1µs: must be 0..1s"},
	}
	for _, tc := range tests {
		p := lab()
		tc.edit(&p)
		err := p.Validate()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: Validate() = %v\nwant %s", tc.name, err, tc.want)
		}
	}
	// Every problem is reported, one line each.
	var zero Params
	err := zero.Validate()
	if err == nil {
		t.Fatal("zero Params validated")
	}
	for _, name := range []string{"link_rate", "pacer_rate_factor", "config_base_rtt", "mtu", "grant", "slow_pull", "max_wnd"} {
		if !strings.Contains(err.Error(), "rccc: "+name+"=") {
			t.Errorf("zero Params: no %s line in\n%v", name, err)
		}
	}
	for name, f := range map[string]func(){
		"NewSender": func() { NewSender(zero, 0) },
		"NewPacer":  func() { NewPacer[int](zero, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with invalid Params did not panic", name)
				}
			}()
			f()
		}()
	}
}
