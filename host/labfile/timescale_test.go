//go:build linux

package labfile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// slowLab has a rate, an AQM time, a delay, a PE agent's rate and RTT,
// every flow timing (start, every, pause, duration) and all three
// transports: everything a timescale slows.
const slowLab = `name: slow
duration: 2s
nodes:
  - {name: h1, kind: host}
  - {name: h2, kind: host}
  - {name: h3, kind: host}
  - {name: leaf1, kind: switch}
  - {name: pe1, kind: pe, peer: pe2, agent: {mode: rate, line_rate: 150mbit, min_rate: 20mbit, rtt: 10ms}}
  - {name: core, kind: switch}
  - {name: pe2, kind: pe, peer: pe1}
  - {name: r, kind: host}
links:
  - {a: h1, b: leaf1, mtu: 9000}
  - {a: h2, b: leaf1, mtu: 9000}
  - {a: h3, b: leaf1, mtu: 9000}
  - {a: leaf1, b: pe1, mtu: 9000}
  - {a: pe1, b: core, delay: 5ms, mtu: 9000}
  - {a: core, b: pe2, rate: 100mbit, mtu: 9000}
  - {a: pe2, b: r, mtu: 9000}
ports:
  - {port: core:pe2, tc: ["3:wred:min=90kb,max=180kb,p=0.2,limit=4mb", "0:codel:target=1ms,interval=20ms"]}
flows:
  - {name: roce, from: h1, to: r, line_rate: 100mbit, inflight: 25ms, size: 1mb, start: 50ms, knobs: {rpg_time_reset: 10ms}}
  - {name: uet, from: h2, to: r, transport: uet, duration: 1s, base_rtt: 2ms, start: 10ms}
  - {name: tcp, from: h3, to: r, transport: tcp, size: 64kb, count: 5, every: 100ms}
  - {name: pause, from: h1, to: r, size: 64kb, count: 3, pause: 30ms}
report: {interval: 250ms}
`

// TestTimescalePlan: at timescale k every rate the plan derives is over
// k and every time times k, bytes stay, and the perf clients and servers
// carry k for perf to slow what it builds; at 1 the plan is the file's.
func TestTimescalePlan(t *testing.T) {
	plan := func(k string) *Plan {
		t.Helper()
		src := slowLab
		if k != "" {
			src = "timescale: " + k + "\n" + src
		}
		f, err := Parse("slow.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return f.Plan()
	}
	base := plan("")
	for _, k := range []units.Timescale{1, 4, 2.5} {
		p := plan(k.String())
		rate := func(r units.Rate) units.Rate { return k.Rate(r) }
		tm := func(d time.Duration) time.Duration { return k.Time(d) }
		port := func(p *Plan) *PortPlan {
			for i := range p.Ports {
				if p.Ports[i].Name == "core:pe2" {
					return &p.Ports[i]
				}
			}
			t.Fatal("no port core:pe2")
			return nil
		}
		limiter := func(p *Plan) *PortPlan {
			for i := range p.Ports {
				if p.Ports[i].Limiter {
					return &p.Ports[i]
				}
			}
			t.Fatal("no limiter port")
			return nil
		}
		b0, b1 := base.Flows, p.Flows
		for _, c := range []struct {
			what      string
			got, want any
		}{
			{"plan timescale", p.Timescale.K(), k.K()},
			{"report interval", p.Interval, tm(250 * time.Millisecond)},
			{"port rate", port(p).Config.Rate, rate(100 * units.Mbit)},
			{"port class 3 min_th (bytes)", port(p).Config.Classes[3].MinThBytes, port(base).Config.Classes[3].MinThBytes},
			{"port class 3 limit (bytes)", port(p).Config.Classes[3].LimitBytes, port(base).Config.Classes[3].LimitBytes},
			{"port class 0 CoDel target", port(p).Config.Classes[0].Target, tm(time.Millisecond)},
			{"port class 0 CoDel interval", port(p).Config.Classes[0].Interval, tm(20 * time.Millisecond)},
			{"limiter rate", limiter(p).Config.Rate, rate(150 * units.Mbit)},
			{"relay delay", p.Relays[0].Delay, tm(5 * time.Millisecond)},
			{"pe agent line rate", p.PEs[0].Agent.LineRate, rate(150 * units.Mbit)},
			{"pe agent min rate", p.PEs[0].Agent.MinRate, rate(20 * units.Mbit)},
			{"pe agent rtt", p.PEs[0].Agent.RTT, tm(10 * time.Millisecond)},
			{"roce bottleneck", b1[0].Bottleneck, rate(b0[0].Bottleneck)},
			{"roce base RTT", b1[0].BaseRTT, tm(b0[0].BaseRTT)},
			{"roce start", b1[0].Start, tm(50 * time.Millisecond)},
			{"roce ideal FCT", b1[0].IdealFCT(1 << 20), tm(b0[0].IdealFCT(1 << 20))},
			{"roce client timescale", b1[0].Client.Timescale.K(), k.K()},
			// perf slows the fabric settings it builds from: they stay.
			{"roce client line rate", b1[0].Client.LineRate, 100 * units.Mbit},
			{"roce client in-flight time", b1[0].Client.InflightTime, 25 * time.Millisecond},
			{"roce client ACK timeout", b1[0].Client.AckTimeout, RoCEAckTimeout},
			{"roce client knobs", fmt.Sprint(b1[0].Client.Knobs), "[rpg_time_reset=10ms]"},
			{"roce client interval", b1[0].Client.Interval, tm(250 * time.Millisecond)},
			{"roce client bytes", b1[0].Client.Bytes, uint64(1 << 20)},
			{"uet start", b1[1].Start, tm(10 * time.Millisecond)},
			{"uet duration", b1[1].Client.Duration, tm(time.Second)},
			{"uet client base RTT", b1[1].Client.BaseRTT, 2 * time.Millisecond},
			{"uet client timescale", b1[1].Client.Timescale.K(), k.K()},
			{"tcp every", b1[2].Every, tm(100 * time.Millisecond)},
			{"tcp base RTT", b1[2].BaseRTT, tm(b0[2].BaseRTT)},
			{"tcp bottleneck", b1[2].Bottleneck, rate(b0[2].Bottleneck)},
			{"pause", b1[3].Pause, tm(30 * time.Millisecond)},
			{"uet server timescale", p.Servers[b1[1].Server].Timescale.K(), k.K()},
			{"rocev2 server timescale", p.Servers[b1[0].Server].Timescale.K(), k.K()},
			{"timeline scale for a 3s cap", timelineScale(p, 3*time.Second), min(1, 3/(k.K()*1.01))},
		} {
			if c.got != c.want {
				t.Errorf("timescale %s: %s: %v, want %v", k, c.what, c.got, c.want)
			}
		}
	}
}

// TestTimescaleErrors: a timescale out of range, or one that pushes a
// derived value out of its own, names the field, the value and the
// largest timescale that fits; -timescale (SetTimescale) says the same
// and keeps the file's plan.
func TestTimescaleErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"timescale: 0.5\n" + slowLab, `slow.yaml:1: timescale: "0.5": want 1..1000 (the fabric k times slower; default 1)`},
		{"timescale: 1001\n" + slowLab, `slow.yaml:1: timescale: "1001": want 1..1000`},
		{"timescale: 300\n" + slowLab, `slow.yaml:1: timescale: "300": the report interval 250ms becomes 75s, over perf's 60s: want at most 240`},
		{"timescale: 200\n" + slowLab, `slow.yaml:1: timescale: "200": port core:pe2 at 100mbit runs at 500kbit, below a port's minimum 640kbit: want at most 156.25`},
		{"timescale: 20\n" + slowLab, `slow.yaml:1: timescale: "20": pe pe1's agent slowed (rtt 200ms): rtt 200ms (default: twice the delay between the pes) gives the reaction point`},
	} {
		_, err := Parse("slow.yaml", []byte(c.src))
		var ce *conf.Error
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("got  %v\nwant %s…", err, c.want)
		} else if !errors.As(err, &ce) || ce.Path != "timescale" {
			t.Errorf("%v: not a conf.Error at timescale", err)
		}
	}
	f, err := Parse("slow.yaml", []byte(slowLab))
	if err != nil {
		t.Fatal(err)
	}
	err = f.SetTimescale(200)
	if want := `slow.yaml: timescale: "200": port core:pe2 at 100mbit runs at 500kbit`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("SetTimescale(200): %v; want %s…", err, want)
	}
	if f.Timescale != 0 || f.Plan().Timescale.K() != 1 || f.Plan().Ports[0].Config.Rate == 0 {
		t.Errorf("a refused timescale changed the file: %v, plan at %v", f.Timescale, f.Plan().Timescale)
	}
	if err := f.SetTimescale(4); err != nil || f.Plan().Timescale != 4 || f.Plan().Interval != time.Second {
		t.Errorf("SetTimescale(4): %v, plan at %v, interval %v", err, f.Plan().Timescale, f.Plan().Interval)
	}
}

// TestTimescaleDeploy: a deployment runs the file's own fabric on its
// machines, whatever the timescale.
func TestTimescaleDeploy(t *testing.T) {
	src, err := os.ReadFile("../../vagrant/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse("lab.yaml", append([]byte("timescale: 4\n"), src...))
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.Deploy("sw")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Ports) == 0 || d.Ports[0].Config.Rate != units.Gbit || d.Plan.Timescale.K() != 1 {
		t.Errorf("deployed ports %+v at timescale %v: want the file's 1gbit", d.Ports, d.Plan.Timescale)
	}
}
