//go:build linux

package labfile

import (
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestHtsimScenario: the incast examples map onto htsim's scenario at
// the fabric's own rate whatever their timescale, with the port's limit,
// thresholds and trimming, each variant's congestion control, the file's
// seed and the Scaled mapping: reference/htsim.md's rows.
func TestHtsimScenario(t *testing.T) {
	for _, c := range []struct {
		file          string
		senders       int
		limit, lo, hi units.ByteSize
		trim          bool
	}{
		{file: "uet-incast-deep.yaml", senders: 8, limit: 4 << 20, lo: 62500, hi: 125000},
		{file: "uet-incast-trim.yaml", senders: 8, limit: 62500, lo: 12500, hi: 50000, trim: true},
		{file: "uet-incast-trim-16.yaml", senders: 16, limit: 62500, lo: 12500, hi: 50000, trim: true},
	} {
		f, err := Load("examples/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range f.VariantNames() {
			s, err := f.HtsimScenario(v)
			if err != nil {
				t.Fatalf("%s %s: %v", c.file, v, err)
			}
			cc, _ := pds.ParseCCMode(v)
			want := htsim.Scenario{Senders: c.senders, FlowBytes: 2 << 20, Rate: 500 * units.Mbit, MTUBytes: 4096, BaseRTT: time.Millisecond,
				PortQueue: htsim.PortQueue{LimitBytes: c.limit, MinThBytes: c.lo, MaxThBytes: c.hi}, Trim: c.trim, CC: cc, Seed: 1, Mapping: htsim.Scaled}
			if c.trim {
				want.TrimBytes = 128
			}
			if s != want {
				t.Errorf("%s %s:\n got %+v\nwant %+v", c.file, v, s, want)
			}
			// htsim's plan of it: the queue in its packets (htsim.md's
			// 1020 and 15), the ECN thresholds to the nearest.
			p, err := htsim.NewPlan(s)
			if err != nil {
				t.Fatal(err)
			}
			if q := map[bool]int64{false: 1020, true: 15}[c.trim]; p.QueuePackets != q {
				t.Errorf("%s: htsim's queue %d packets, want %d", c.file, p.QueuePackets, q)
			}
		}
	}
}

// TestHtsimScenarioRefuses: a lab htsim cannot express says why in one
// line.
func TestHtsimScenarioRefuses(t *testing.T) {
	src := `nodes:
  - {name: s1, kind: host}
  - {name: s2, kind: host}
  - {name: sw, kind: switch}
  - {name: r, kind: host}
links:
  - {a: s1, b: sw, mtu: 9000}
  - {a: s2, b: sw, mtu: 9000}
  - {a: sw, b: r, rate: 500mbit, mtu: 9000}
ports: [{port: sw:r, tc: ["3:wred:min=62500b,max=125000b,p=1,limit=4mb"]}]
flows:
  - {name: f1, from: s1, to: r, transport: uet, size: 2mb}
  - {name: f2, from: s2, to: r, transport: uet, size: 2mb}
`
	if _, err := mustParse(t, src).HtsimScenario(""); err != nil {
		t.Fatalf("the base maps: %v", err)
	}
	// A wire round trip every flow shares, within base_rtt, maps: htsim's
	// round trip is base_rtt, its wire included.
	delayed := strings.Replace(src, "{a: sw, b: r, rate: 500mbit, mtu: 9000}", "{a: sw, b: r, rate: 500mbit, mtu: 9000, delay: 400us}", 1)
	if s, err := mustParse(t, delayed).HtsimScenario(""); err != nil || s.BaseRTT != time.Millisecond {
		t.Errorf("400us of delay on the receiver's link: %+v, %v; want base RTT 1ms", s, err)
	}
	// The flows' target_qdelay is htsim's -target_q_delay.
	tq := strings.ReplaceAll(src, "transport: uet, size: 2mb}", "transport: uet, size: 2mb, knobs: {target_qdelay: 3ms}}")
	if s, err := mustParse(t, tq).HtsimScenario(""); err != nil || s.TargetQDelay != 3*time.Millisecond {
		t.Errorf("target_qdelay 3ms on both flows: %+v, %v", s, err)
	}
	for _, c := range []struct{ old, new, want string }{
		{"{name: f2, from: s2, to: r, transport: uet, size: 2mb}", "{name: f2, from: s2, to: r, size: 2mb}", "flow f2 is rocev2; htsim runs UET"},
		{"{name: f2, from: s2, to: r, transport: uet, size: 2mb}", "{name: f2, from: s2, to: r, transport: uet, size: 2mb, knobs: {gamma: 0.5}}", "flows f1 and f2 differ in NSCC's knobs"},
		{"transport: uet, size: 2mb}\n  - {name: f2, from: s2, to: r, transport: uet, size: 2mb}", "transport: uet, size: 2mb, knobs: {gamma: 0.5}}\n  - {name: f2, from: s2, to: r, transport: uet, size: 2mb, knobs: {gamma: 0.5}}", "flow f1 sets NSCC's gamma=0.5; htsim takes a flag for target_qdelay alone"},
		{"{name: f2, from: s2, to: r, transport: uet, size: 2mb}", "{name: f2, from: s2, to: r, transport: uet}", "flow f2 is timed; htsim's flows are sized"},
		{"{name: f2, from: s2, to: r, transport: uet, size: 2mb}", "{name: f2, from: s2, to: r, transport: uet, size: 1mb}", "flows f1 and f2 differ in size (2mb, 1mb)"},
		{"{name: f2, from: s2, to: r, transport: uet, size: 2mb}", "{name: f2, from: s2, to: r, transport: uet, size: 2mb, start: 1ms}", "flows f1 and f2 start at different times"},
		{"{name: f2, from: s2, to: r, transport: uet, size: 2mb}", "{name: f2, from: s2, to: r, transport: uet, size: 2mb, cc: rccc}", "flows f1 and f2 run nscc and rccc"},
		{"{name: f2, from: s2, to: r, transport: uet, size: 2mb}", "{name: f2, from: s2, to: r, transport: uet, size: 2mb, streams: 2}", "flow f2 has 2 streams"},
		{"{name: f2, from: s2, to: r, transport: uet, size: 2mb}", "{name: f2, from: s2, to: r, transport: uet, size: 2mb, line_rate: 1gbit}", "the senders' line rate"},
		{"{a: s2, b: sw, mtu: 9000}", "{a: s2, b: sw, mtu: 9000, delay: 1ms}", "flows f1 and f2's paths have 0s and 2ms of link delay"},
		{"{a: sw, b: r, rate: 500mbit, mtu: 9000}", "{a: sw, b: r, rate: 500mbit, mtu: 9000, delay: 600us}", "flow f1's path has 1.2ms of link delay, over its base_rtt 1ms"},
		{"{a: s2, b: sw, mtu: 9000}", "{a: s2, b: sw, mtu: 9000, loss: 0.01}", "links[1] drops 0.01 of the packets"},
		{"p=1,limit=4mb", "p=0.1,limit=4mb", "port sw:r's class 3 marks with WRED up to p 0.1 at max_th"},
		{"3:wred:min=62500b,max=125000b,p=1,limit=4mb", "3:codel:target=1ms,interval=10ms", "port sw:r's class 3 marks with codel"},
	} {
		if !strings.Contains(src, c.old) {
			t.Fatalf("the base lacks %q", c.old)
		}
		_, err := mustParse(t, strings.Replace(src, c.old, c.new, 1)).HtsimScenario("")
		if err == nil || !strings.HasPrefix(err.Error(), "htsim cannot run this lab: ") || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want one line with %q", c.new, err, c.want)
		}
	}
}

// twoHops' flow crosses two ports: htsim's mapping has one.
func TestHtsimScenarioTwoPorts(t *testing.T) {
	_, err := mustParse(t, twoHops).HtsimScenario("")
	if want := "htsim cannot run this lab: flow f crosses 2 ports"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("%v; want %s…", err, want)
	}
}

func mustParse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return f
}
