package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestNetUtilization(t *testing.T) {
	for _, tc := range []struct{ util, span, starved, want float64 }{
		{0.9, 10, 1, 1}, {0.5, 4, 0, 0.5}, {0.5, 4, 4, 0}, {0.5, 0, 0, 0},
	} {
		if got := netUtilization(tc.util, tc.span, tc.starved); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("netUtilization(%g, %g, %g) = %g, want %g", tc.util, tc.span, tc.starved, got, tc.want)
		}
	}
}

// meterReport is a real meter's report whose port held packets back for
// the given spans (ms after the start, in the past by Stop); it returns
// the start on the meter's clock.
func meterReport(t *testing.T, spans ...[2]float64) (*hostlost.Report, time.Duration) {
	t.Helper()
	m, err := hostlost.NewMeter(hostlost.MeterConfig{Tick: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p := m.Port("bottleneck")
	m.Held() // a sender that was never held
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	start := hostlost.Now()
	var end float64
	for _, s := range spans {
		p.HeldBack.Add(start+time.Duration(s[0]*1e6), start+time.Duration(s[1]*1e6))
		end = max(end, s[1])
	}
	time.Sleep(time.Duration(end*1e6) + time.Millisecond)
	r := m.Stop()
	return &r, start
}

// The host's part of each traffic's report: the starved time in its span,
// the utilization over the rest, the JSON keys and the summary's lines.
func TestHostLostReports(t *testing.T) {
	h, start := meterReport(t, [2]float64{2, 4}, [2]float64{6, 7})
	var tcp HostLost
	tcp.set(nil, start, 1, 0.5)
	if tcp.Report != nil || tcp.UtilizationNet != 0 {
		t.Errorf("no meter: %+v", tcp)
	}
	tcp.set(h, start, 0.005, 0.6) // the first 5 ms: 2 ms starved
	if tcp.Report != h || math.Abs(tcp.StarvedS-0.002) > 1e-9 || math.Abs(tcp.UtilizationNet-1) > 1e-9 {
		t.Errorf("tcp: starved %g s, net %g; want 0.002 s, 1", tcp.StarvedS, tcp.UtilizationNet)
	}

	roce := &RoCEReport{TrafficS: 0.008, AllJoinedS: 0.005, Utilization: 0.9, UtilizationWindow: 0.6}
	roce.hostLost(h, start, start+5*time.Millisecond)
	if math.Abs(roce.StarvedS-0.003) > 1e-9 || math.Abs(roce.UtilizationNet-0.9*8/5) > 1e-9 ||
		math.Abs(roce.StarvedWindowS-0.001) > 1e-9 || math.Abs(roce.UtilizationWindowNet-0.9) > 1e-9 {
		t.Errorf("roce: starved %g s (window %g), net %g (window %g)", roce.StarvedS, roce.StarvedWindowS, roce.UtilizationNet, roce.UtilizationWindowNet)
	}
	var b bytes.Buffer
	renderRoCESummary(&b, roce)
	if out := b.String(); !strings.Contains(out, "Host: the port lost 3.00ms of the traffic to the host: utilization 144.0% net of it") ||
		!strings.Contains(out, "while all competed: 1.00ms of it, utilization 90.0% net of it") || !strings.Contains(out, "the ports lost 3.0 ms to the host") {
		t.Errorf("RoCE summary:\n%s", out)
	}

	uet := &UETReport{TrafficS: 0.008, IdealS: 0.004, Utilization: 0.5}
	uet.hostLost(h, start)
	if math.Abs(uet.TailOverIdealNet-8.0/7) > 1e-9 {
		t.Errorf("uet: tail / (ideal + starved) %g, want %g", uet.TailOverIdealNet, 8.0/7)
	}
	b.Reset()
	renderUETSummary(&b, uet)
	if !strings.Contains(b.String(), "tail FCT 1.143 x (the ideal + the host's 3.00ms)") {
		t.Errorf("UET summary:\n%s", b.String())
	}
	js, err := json.Marshal(uet)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"host_lost":{`, `"host_starved_s":0.003`, `"utilization_net":`, `"tail_fct_over_ideal_net":`} {
		if !strings.Contains(string(js), k) {
			t.Errorf("UET -json lacks %s", k)
		}
	}
	js, _ = json.Marshal(roce)
	if !strings.Contains(string(js), `"all_active_utilization_net":0.9`) && !strings.Contains(string(js), `"all_active_utilization_net":0.899`) {
		t.Errorf("RoCE -json lacks the window's net utilization: %s", js)
	}
}

// -timescale slows the fabric: the options on the wire, the bounds on
// the wire, the factor refused by name.
func TestParseFlagsTimescale(t *testing.T) {
	var out, errs bytes.Buffer
	o, code := parseFlags([]string{"-rate", "500mbit", "-timescale", "4", "-duration", "10s", "-stagger", "2s", "-sample", "5ms"}, &out, &errs)
	if o == nil {
		t.Fatalf("refused (%d): %s", code, errs.String())
	}
	w := o.onWire()
	if w.rate != 125*units.Mbit || w.duration != 40*time.Second || w.stagger != 8*time.Second || w.sample != 20*time.Millisecond {
		t.Errorf("on the wire: %s, %s, %s, %s", w.rate, w.duration, w.stagger, w.sample)
	}
	if w.params.RPGTimeReset != 4*o.params.RPGTimeReset || w.params.RPGAIRate != o.params.RPGAIRate/4 || o.rate != 500*units.Mbit {
		t.Errorf("DCQCN on the wire: T %v (fabric %v), R_AI %s (fabric %s)", w.params.RPGTimeReset, o.params.RPGTimeReset, w.params.RPGAIRate, o.params.RPGAIRate)
	}
	if w := (&options{rate: units.Gbit}).onWire(); w.rate != units.Gbit {
		t.Errorf("no time scale: %s on the wire", w.rate)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-timescale", "0.5"}, "timescale 0.5: must be 1..1000"},
		{[]string{"-timescale", "slow"}, "want a factor"},
		{[]string{"-rate", "2mbit", "-timescale", "4", "-traffic", "tcp"}, "-rate 2mbit (500kbit on the wire at -timescale 4): want at least 1mbit on the wire"},
	} {
		errs.Reset()
		if o, _ := parseFlags(tc.args, &out, &errs); o != nil || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v: %q, want %q", tc.args, errs.String(), tc.want)
		}
	}
	out.Reset()
	parseFlags([]string{"-help"}, &out, &errs)
	if !strings.Contains(out.String(), "-timescale k slows the whole fabric") || !strings.Contains(out.String(), "host-starved: X % of the run") {
		t.Error("-help does not document -timescale and the host-lost line")
	}
}
