package nscc

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// htsim initNsccParams' derivation at the lab's ports and at the
// reference network (a = b = 1).
func TestDefaultParams(t *testing.T) {
	tests := []struct {
		rate                units.Rate
		rtt                 time.Duration
		a, b, bdp           float64
		maxWnd              int
		alpha, fi, fis, eta float64 // alpha in bytes/s
	}{
		{units.Gbit, 80 * us, 1.0 / 15, 20.0 / 3, 10000, 15000, 4 * 4096 / (15 * 12e-6), 4096 / 3.0, 1.0 / 60, 40.96},
		{units.Gbit, 50 * us, 1.0 / 24, 50.0 / 12, 6250, 9375, 4 * 4096 / (24 * 12e-6), 5 * 4096 / 24.0, 0.25 / 24, 0.15 * 4096 / 24},
		{units.Gbit, 100 * us, 1.0 / 12, 100.0 / 12, 12500, 18750, 4 * 4096 / (12 * 12e-6), 5 * 4096 / 12.0, 0.25 / 12, 51.2},
		{100 * units.Gbit, 12 * us, 1, 1, 150000, 225000, 4 * 4096 / 12e-6, 20480, 0.25, 614.4},
	}
	rel := func(got, want float64) bool { return math.Abs(got-want) <= 1e-12*math.Abs(want) }
	for _, tc := range tests {
		p := DefaultParams(tc.rate, tc.rtt, 4096)
		if err := p.Validate(); err != nil {
			t.Errorf("%v %v: %v", tc.rate, tc.rtt, err)
		}
		a, b := Scaling(tc.rate, tc.rtt, p.TargetQDelay)
		if !rel(a, tc.a) || !rel(b, tc.b) || p.BDPBytes() != tc.bdp || p.MaxWndBytes() != tc.maxWnd {
			t.Errorf("%v %v: a %v b %v BDP %v MaxWnd %d; want %v %v %v %d",
				tc.rate, tc.rtt, a, b, p.BDPBytes(), p.MaxWndBytes(), tc.a, tc.b, tc.bdp, tc.maxWnd)
		}
		if !rel(p.AlphaBytesPerSecond, tc.alpha) || !rel(p.FIBytes, tc.fi) || !rel(p.FIScale, tc.fis) || !rel(p.EtaBytes, tc.eta) {
			t.Errorf("%v %v: alpha %v fi %v fi_scale %v eta %v; want %v %v %v %v",
				tc.rate, tc.rtt, p.AlphaBytesPerSecond, p.FIBytes, p.FIScale, p.EtaBytes, tc.alpha, tc.fi, tc.fis, tc.eta)
		}
		// alpha·tq = 4·MTU·a·b: the proportional increase per window at
		// zero delay.
		if got, want := p.AlphaBytesPerSecond*p.TargetQDelay.Seconds(), 4*4096*tc.a*tc.b; !rel(got, want) {
			t.Errorf("%v %v: alpha·tq = %v, want %v", tc.rate, tc.rtt, got, want)
		}
		if p.TargetQDelay != tc.rtt || p.QAThreshold != 4*tc.rtt || p.AdjustPeriodThreshold != tc.rtt ||
			p.AdjustBytesThreshold != 8*4096 || p.MTUBytes != 4096 || p.MaxWndBDPs != 1.5 ||
			p.Gamma != 0.8 || p.MaxMDJump != 0.5 || p.QAGate != 3 || p.NoDelay != us ||
			p.DelayAlpha != 0.0125 || p.InitialCwndBytes != 0 || p.DisableQuickAdapt || p.RCCC {
			t.Errorf("%v %v: constants %+v", tc.rate, tc.rtt, p)
		}
		if c := New(p, 0); c.Window() != tc.maxWnd || c.BaseRTT() != tc.rtt {
			t.Errorf("%v %v: New: cwnd %d base %v; want MaxWnd %d, %v", tc.rate, tc.rtt, c.Window(), c.BaseRTT(), tc.maxWnd, tc.rtt)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Params)
		want string
	}{
		{"link rate", func(p *Params) { p.LinkRate = 0 }, "nscc: link_rate=0bit: must be > 0"},
		{"base rtt", func(p *Params) { p.ConfigBaseRTT = 0 }, "nscc: config_base_rtt=0s: must be 1ns..1s"},
		{"base rtt long", func(p *Params) { p.ConfigBaseRTT = 2 * time.Second }, "nscc: config_base_rtt=2s: must be 1ns..1s"},
		{"tq", func(p *Params) { p.TargetQDelay = -us }, "nscc: target_qdelay=-1µs: must be 1ns..1s"},
		{"qa threshold", func(p *Params) { p.QAThreshold = -1 }, "nscc: qa_threshold=-1ns: must be 0s..1s"},
		{"adjust period", func(p *Params) { p.AdjustPeriodThreshold = 0 }, "nscc: adjust_period_threshold=0s: must be 1ns..1s"},
		{"no delay", func(p *Params) { p.NoDelay = 100 * us }, "nscc: no_delay=100µs: must be 0..target_qdelay (80µs)"},
		{"mtu", func(p *Params) { p.MTUBytes = 70000 }, "nscc: mtu=70000: must be 64..65535 (bytes)"},
		{"max wnd", func(p *Params) { p.MaxWndBDPs = 0 }, "nscc: max_wnd=0: must be in (0, 1000] (BDPs)"},
		{"max wnd NaN", func(p *Params) { p.MaxWndBDPs = math.NaN() }, "nscc: max_wnd=NaN: must be in (0, 1000] (BDPs)"},
		{"max wnd below mtu", func(p *Params) { p.MaxWndBDPs = 0.4 },
			"nscc: max_wnd (0.4 BDP = 4000 B at 1gbit and 80µs) must be at least mtu (4096 B): a base_rtt of at least 82µs at this link rate makes it one"},
		{"initial cwnd", func(p *Params) { p.InitialCwndBytes = 20000 },
			"nscc: initial_cwnd=20000: must be 0 (MaxWnd) or mtu..MaxWnd (4096..15000 bytes)"},
		{"initial cwnd small", func(p *Params) { p.InitialCwndBytes = 100 },
			"nscc: initial_cwnd=100: must be 0 (MaxWnd) or mtu..MaxWnd (4096..15000 bytes)"},
		{"alpha", func(p *Params) { p.AlphaBytesPerSecond = math.Inf(1) }, "nscc: alpha=+Inf: must be a finite number ≥ 0 (bytes/s)"},
		{"fi", func(p *Params) { p.FIBytes = -1 }, "nscc: fi=-1: must be a finite number ≥ 0 (bytes)"},
		{"fi_scale", func(p *Params) { p.FIScale = math.NaN() }, "nscc: fi_scale=NaN: must be a finite number ≥ 0"},
		{"eta", func(p *Params) { p.EtaBytes = -0.5 }, "nscc: eta=-0.5: must be a finite number ≥ 0 (bytes)"},
		{"gamma", func(p *Params) { p.Gamma = 1.5 }, "nscc: gamma=1.5: must be in (0, 1]"},
		{"gamma 0", func(p *Params) { p.Gamma = 0 }, "nscc: gamma=0: must be in (0, 1]"},
		{"max_md_jump", func(p *Params) { p.MaxMDJump = 1.1 }, "nscc: max_md_jump=1.1: must be in [0, 1]"},
		{"qa_gate", func(p *Params) { p.QAGate = 40 }, "nscc: qa_gate=40: must be 0..31 (log2 divisor of MaxWnd)"},
		{"adjust bytes", func(p *Params) { p.AdjustBytesThreshold = -1 }, "nscc: adjust_bytes_threshold=-1: must be 0..1073741824 (bytes)"},
		{"delay alpha", func(p *Params) { p.DelayAlpha = 0 }, "nscc: delay_alpha=0: must be in (0, 1]"},
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
	for _, name := range []string{"link_rate", "config_base_rtt", "target_qdelay", "adjust_period_threshold",
		"mtu", "max_wnd", "gamma", "delay_alpha"} {
		if !strings.Contains(err.Error(), "nscc: "+name+"=") {
			t.Errorf("zero Params: no %s line in\n%v", name, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("New with invalid Params did not panic")
		}
	}()
	New(zero, 0)
}

// A fabric that trims: tq is three quarters of the base RTT (§3.6.13.3,
// htsim initNsccParams), qa_threshold four tq, alpha as it was.
func TestTrimming(t *testing.T) {
	p := LabParams(500*units.Mbit, time.Millisecond, 4096)
	tr := p.Trimming()
	if tr.TargetQDelay != 750*time.Microsecond || tr.QAThreshold != 3*time.Millisecond {
		t.Errorf("tq %v, qa_threshold %v; want 750µs, 3ms", tr.TargetQDelay, tr.QAThreshold)
	}
	if tr.AlphaBytesPerSecond != p.AlphaBytesPerSecond || tr.FIBytes != p.FIBytes {
		t.Errorf("alpha or fi changed")
	}
	if err := tr.Validate(); err != nil {
		t.Error(err)
	}
}
