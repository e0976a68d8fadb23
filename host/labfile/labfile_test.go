//go:build linux

package labfile

import (
	"errors"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/conf"
)

// base is a valid dumbbell the error cases edit.
const base = `name: t
nodes:
  - {name: h1, kind: host}
  - {name: h2, kind: host}
  - {name: sw1, kind: switch}
  - {name: r1, kind: host}
links:
  - {a: h1, b: sw1, mtu: 9000}
  - {a: h2, b: sw1, mtu: 9000}
  - {a: sw1, b: r1, rate: 200mbit, mtu: 9000}
ports:
  - {port: sw1:r1, tc: ["3:wred:min=100kb,max=400kb,p=0.2"]}
flows:
  - {name: f1, from: h1, to: r1}
  - {name: f2, from: h2, to: r1, transport: uet, size: 4mb}
`

func TestParseBase(t *testing.T) {
	f, err := Parse("t.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	fl := f.Flows[0]
	if fl.Transport != TransportRoCEv2 || fl.CC != CCDCQCN || fl.Profile != dcqcn.DefaultProfile {
		t.Errorf("defaults of flows[0]: %+v", fl)
	}
	p := f.Plan()
	c := p.Flows[0].Client
	if c.MTU != 4096 || c.LineRate != 200e6 || c.Duration != DefaultDuration || c.AckTimeout != RoCEAckTimeout || c.Server != "198.18.2.2:18515" || c.Bind.String() != "198.18.0.1" {
		t.Errorf("flows[0]'s client: %+v", c)
	}
	u := p.Flows[1].Client
	if u.Transport != "uet" || u.Bytes != 4<<20 || u.MTU != 4096 || u.BaseRTT != DefaultUETBaseRTT || u.Server != "198.18.2.2:18516" {
		t.Errorf("flows[1]'s client: %+v", u)
	}
	if len(p.Servers) != 2 || len(p.Ports) != 1 || !p.Ports[0].Watch {
		t.Errorf("servers %+v, ports %+v", p.Servers, p.Ports)
	}
	cc := p.Ports[0].Config.Classes[3]
	if cc.MinThBytes != 100<<10 || cc.MaxThBytes != 400<<10 || cc.MaxP != 0.2 {
		t.Errorf("the port's class 3: %+v", cc)
	}
	if c.PPFCMaxPause != 0 || c.PPFCWatchdog != 0 {
		t.Errorf("flows[0]'s PPFC limits %v, %v: want the agent's defaults (0, 0)", c.PPFCMaxPause, c.PPFCWatchdog)
	}

	// A rocev2 flow's PPFC limits reach its client.
	g, err := Parse("t.yaml", []byte(strings.Replace(base, "{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, ppfc_max_pause: 20ms, ppfc_watchdog: off}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c := g.Plan().Flows[0].Client; c.PPFCMaxPause != 20*time.Millisecond || c.PPFCWatchdog >= 0 {
		t.Errorf("ppfc_max_pause 20ms, ppfc_watchdog off: the client has %v, %v", c.PPFCMaxPause, c.PPFCWatchdog)
	}
}

// TestParseErrors: each bad file's error, word for word: the file and
// line, the field's path, the value and what is allowed.
func TestParseErrors(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(base, old) {
			t.Fatalf("base lacks %q", old)
		}
		return strings.Replace(base, old, new, 1)
	}
	for _, c := range []struct{ src, want string }{
		{"", `t.yaml: the file is empty`},
		{"nodes: []\n", `t.yaml:1: nodes: want at least one node`},
		{edit("{name: h2, kind: host}", "{name: h1, kind: host}"), `t.yaml:4: nodes[1].name: "h1": given twice (also nodes[0])`},
		{edit("{name: h2, kind: host}", "{name: h2, kind: router}"), `t.yaml:4: nodes[1].kind: "router": want host, switch or pe`},
		{edit("{name: h2, kind: host}", "{name: _h2, kind: host}"), `t.yaml:4: nodes[1].name: "_h2": names starting with "_" are the relays the lab adds for delay and loss`},
		{edit("{name: h2, kind: host}", "{name: pe9, kind: pe}"), `t.yaml:4: nodes[1].peer: a pe needs its peer: the other pe of its tunnel`},
		{edit("{name: h2, kind: host}", "{name: pe9, kind: pe, peer: sw1}"), `t.yaml:4: nodes[1].peer: "sw1": is a switch; a pe's peer is a pe`},
		{edit("{name: h2, kind: host}", "{name: h2, kind: host, peer: sw1}"), `t.yaml:4: nodes[1].peer: "sw1": only a pe has a peer; h2 is a host`},
		{edit("{name: sw1, kind: switch}", "{name: sw1, kind: switch, quickack: true}"), `t.yaml:5: nodes[2].quickack: "true": only a host's TCP ACKs; sw1 is a switch`},
		{edit("{name: sw1, kind: switch}", "{name: sw1, kind: switch, tcp_ecn: off}"), `t.yaml:5: nodes[2].tcp_ecn: "off": only a host's TCP connections; sw1 is a switch`},
		{edit("{name: sw1, kind: switch}", "{name: sw1, kind: switch, np: agent}"), `t.yaml:5: nodes[2].np: "agent": only a host receives flows; sw1 is a switch`},
		{edit("{name: r1, kind: host}", "{name: r1, kind: host, np: nic}"), `t.yaml:6: nodes[3].np: "nic": want kernel, agent or off`},
		{edit("{name: sw1, kind: switch}", "{name: sw1, kind: switch, host_queue: 64kb}"), `t.yaml:5: nodes[2].host_queue: "64kb": only a host's senders; sw1 is a switch`},
		{edit("{name: h2, kind: host}", "{name: h2, kind: host, host_queue: 4kb}"), `t.yaml:4: nodes[1].host_queue: "4kb": want 0 (off) or 9kb..64mb`},
		{edit("{name: h2, kind: host}", "{name: h2, kind: host, host_queue: 1gb}"), `t.yaml:4: nodes[1].host_queue: "1024mb": want 0 (off) or 9kb..64mb`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, rp: nic}"), `t.yaml:14: flows[0].rp: "nic": want kernel, agent or off`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, cc: none, rp: agent}"), `t.yaml:14: flows[0].rp: `},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, transport: tcp, rp: agent}"), `t.yaml:14: flows[0].rp: not for a tcp flow`},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: sw9, mtu: 9000}"), `t.yaml:9: links[1].b: "sw9": no such node; nodes are h1, h2, sw1, r1`},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: h2, mtu: 9000}"), `t.yaml:9: links[1].b: "h2": a link joins two different nodes (a is h2 too)`},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: \"sw1:averyverylongdevice\"}"), `t.yaml:9: links[1].b: "sw1:averyverylongdevice": device: "averyverylongdevice" longer than 15 bytes (IFNAMSIZ)`},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: sw1, rate: 0mbit}\n  - {a: h1, b: h2, rate: 1gbit}"), `t.yaml:10: links[2].rate: "1gbit": a rate is a switch port's, at the switch end(s); neither h1 nor h2 is a switch`},
		{edit("rate: 200mbit", "rate: 10kbit"), `t.yaml:10: links[2].rate: "10kbit": want at least 640kbit (a port's minimum), or none`},
		{edit("rate: 200mbit", "rate: fast"), `t.yaml:10: links[2].rate: "fast": `},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: sw1, loss: 2}"), `t.yaml:9: links[1].loss: "2": want a fraction 0..1 (0.01 drops 1 %)`},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: sw1, delay: 20s}"), `t.yaml:9: links[1].delay: "20s": want 0..10s`},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: sw1, mtu: 70000}"), `t.yaml:9: links[1].mtu: "70000": want 68..65535 (default 1500)`},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: sw1, subnet: 10.0.0.0/24}"), `t.yaml:9: links[1].subnet: "10.0.0.0/24": want an IPv4 subnet inside 198.18.0.0/15`},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: sw1, subnet: 198.18.7.1/24}"), `t.yaml:9: links[1].subnet: "198.18.7.1/24": host bits set; did you mean 198.18.7.0/24?`},
		{edit("{a: h2, b: sw1, mtu: 9000}", "{a: h2, b: sw1, delay: 1ms, subnet: 198.18.7.0/30}"), `t.yaml:9: links[1].subnet: "198.18.7.0/30": want a /29 or shorter (two addresses per side, two sides with a relay for delay or loss)`},
		{edit("{a: h1, b: sw1, mtu: 9000}\n  - {a: h2, b: sw1, mtu: 9000}", "{a: h1, b: sw1, subnet: 198.18.7.0/24}\n  - {a: h2, b: sw1, subnet: 198.18.7.128/25}"), `t.yaml:9: links[1].subnet: "198.18.7.128/25": overlaps links[0].subnet 198.18.7.0/24`},
		{edit("{a: h1, b: sw1, mtu: 9000}\n  - {a: h2, b: sw1, mtu: 9000}", "{a: h1, b: \"sw1:p1\"}\n  - {a: h2, b: \"sw1:p1\"}"), `t.yaml:9: links[1].b: "sw1:p1": device p1 of sw1 is links[0].b already`},
		{edit("{port: sw1:r1,", "{port: sw1:h1,"), `t.yaml:12: ports[0].port: "sw1:h1": no switch port there; ports are the switch ends of links with a rate: sw1:r1`},
		{edit(`"3:wred:min=100kb,max=400kb,p=0.2"`, `"3:wred:min=100kb,max=400kb,p=0.2", "9:strict"`), `t.yaml:12: ports[0].tc[1]: "9:strict": class 9 out of range 0-7`},
		{edit(`"3:wred:min=100kb,max=400kb,p=0.2"`, `"3:wred:min=400kb,max=100kb,p=0.2"`), `t.yaml:12: ports[0]: "sw1:r1": the port at 200mbit: class 3: wred: max_th (100kb) must be greater than min_th (400kb)`},
		{edit(`tc: [`, `dscp: ["26=9"], tc: [`), `t.yaml:12: ports[0].dscp[0]: "26=9": class 9 out of range 0-7`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h9, to: r1}"), `t.yaml:14: flows[0].from: "h9": no such node; nodes are h1, h2, sw1, r1`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: sw1}"), `t.yaml:14: flows[0].to: "sw1": is a switch; flows run between hosts (hosts are h1, h2, r1)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f2, from: h1, to: r1}"), `t.yaml:15: flows[1].name: "f2": given twice (also flows[0])`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, transport: tcpx}"), `t.yaml:14: flows[0].transport: "tcpx": want rocev2, uet or tcp`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, transport: tcp, cc: Cubic}"), `t.yaml:14: flows[0].cc: "Cubic": a kernel congestion control's name: [a-z0-9_-] (dctcp, cubic, reno, ...)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, transport: tcp, qps: 2}"), `t.yaml:14: flows[0].qps: not for a tcp flow (one kernel connection: the kernel paces it, the links' MTUs set its segments)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, transport: tcp, line_rate: 1mbit}"), `t.yaml:14: flows[0].line_rate: not for a tcp flow`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, transport: tcp, dscp: 64}"), `t.yaml:14: flows[0].dscp: "64": want 0..63`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, transport: tcp, ppfc_max_pause: 1ms}"), `t.yaml:14: flows[0].ppfc_max_pause: not for a tcp flow`},
		{edit("transport: uet, size: 4mb}", "transport: uet, size: 4mb, ppfc_watchdog: off}"), `t.yaml:15: flows[1].ppfc_watchdog: `},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, ppfc_watchdog: soon}"), `t.yaml:14: flows[0].ppfc_watchdog: "soon": want a duration like 200ms, or off`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, ppfc_max_pause: 2s}"), `t.yaml:14: flows[0]: "f1": ppfc_max_pause 2s: must be 0 (the Pause Duration field's longest, 65.535ms) or 1µs..1s`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, dscp: 26}"), `t.yaml:14: flows[0].dscp: "26": tcp only: rocev2 and uet mark their own DSCPs`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, count: 5}"), `t.yaml:14: flows[0].count: "5": a series of instances needs size (each instance's FCT is measured)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, size: 1mb, count: -1}"), `t.yaml:14: flows[0].count: "-1": want 1..100000 (default 1)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, size: 1mb, every: 10ms}"), `t.yaml:14: flows[0].every: "10ms": only with count above 1`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, size: 1mb, count: 3, every: 10ms, pause: 5ms}"), `t.yaml:14: flows[0].pause: "5ms": give every or pause, not both (every 10ms)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, size: 1mb, size_max: 1kb}"), `t.yaml:14: flows[0].size_max: "1kb": must be above size (1mb)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, size_max: 1mb}"), `t.yaml:14: flows[0].size_max: "1mb": needs size: sizes are drawn from size..size_max`},
		{base + "runs: 0\nvariants: [{name: a}, {name: a}]\n", `t.yaml:17: variants[1].name: "a": given twice (also variants[0])`},
		{base + "runs: -2\n", `t.yaml:16: runs: "-2": want 1..1000 (default 1)`},
		{edit("{name: sw1, kind: switch}", "{name: sw1, kind: switch, decap: two-threshold}"), `t.yaml:5: nodes[2].decap: "two-threshold": only a pe decapsulates; sw1 is a switch`},
		{edit("{name: sw1, kind: switch}", "{name: sw1, kind: switch, agent: {mode: rate}}"), `t.yaml:5: nodes[2].agent: only a pe has an agent; sw1 is a switch`},
		{base + "variants:\n  - name: a\n    nodes: [{name: sw1, decap: two-threshold}]\n", `t.yaml:18: variants[0].nodes[0].name: "sw1": is a switch; a variant changes pes (decap, agent)`},
		{base + "variants:\n  - name: a\n    nodes: [{name: pe7}]\n", `t.yaml:18: variants[0].nodes[0].name: "pe7": no such node; nodes are h1, h2, sw1, r1`},
		{base + "variants:\n  - name: a\n    ports: [{port: sw1:h1}]\n", `t.yaml:18: variants[0].ports[0].port: "sw1:h1": no switch port there; ports are the switch ends of links with a rate: sw1:r1`},
		{base + "variants:\n  - name: a\n    ports: [{port: sw1:r1, tc: [\"3:step:min=1kb\"]}]\n", `t.yaml:18: variants[0].ports[0]: "sw1:r1": the port at 200mbit: --tc 3:step:min=1kb: min, max and p set the WRED curve but class 3 is in step mode`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, cc: nscc}"), `t.yaml:14: flows[0].cc: "nscc": want dcqcn or none with transport rocev2`},
		{edit("transport: uet, size: 4mb", "transport: uet, cc: dcqcn"), `t.yaml:15: flows[1].cc: "dcqcn": want nscc, rccc, both or none with transport uet`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, profile: cx7}"), `t.yaml:14: flows[0].profile: "cx7": want lab, mlx5 or paper`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, knobs: {rpg_time_rest: 300}}"), `t.yaml:14: flows[0].knobs.rpg_time_rest: unknown knob (valid: clamp_tgt_rate,`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, knobs: {rpg_time_reset: -5}}"), `t.yaml:14: flows[0].knobs.rpg_time_reset: "-5": invalid time "-5"`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, cc: none, knobs: {rpg_time_reset: 300}}"), `t.yaml:14: flows[0].knobs: dcqcn only; this flow is rocev2/none`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, streams: 2}"), `t.yaml:14: flows[0].streams: "2": a rocev2 flow has qps, not streams`},
		{edit("transport: uet, size: 4mb", "transport: uet, qps: 2"), `t.yaml:15: flows[1].qps: "2": a uet flow has streams, not qps`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, qps: 20000}"), `t.yaml:14: flows[0].qps: "20000": want 1..16384 (default 1)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, size: 1mb, duration: 2s}"), `t.yaml:14: flows[0].duration: "2s": give size or duration, not both (size 1mb)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, start: -1s}"), `t.yaml:14: flows[0].start: "-1s": want a duration like 100us, 5ms, 1.5s`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, mtu: 1500}"), `t.yaml:14: flows[0].mtu: "1500": want 256, 512, 1024, 2048 or 4096 with transport rocev2`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, lb: reps}"), `t.yaml:14: flows[0].lb: uet only; this flow is rocev2/dcqcn`},
		{edit("transport: uet, size: 4mb", "transport: uet, lb: spray"), `t.yaml:15: flows[1].lb: "spray": want none, oblivious, bitmap, reps or mixed`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, rto: 50ms}"), `t.yaml:14: flows[0].rto: uet only; this flow is rocev2/dcqcn`},
		{edit("transport: uet, size: 4mb", "transport: uet, size: 4mb, rto: 20s"), `t.yaml:15: flows[1].rto: "20s": want 100us..10s (default 10ms)`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, transport: tcp, rto: 50ms}"), `t.yaml:14: flows[0].rto: not for a tcp flow`},
		{edit("{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, loss: sleek}"), `t.yaml:14: flows[0].loss: uet only; this flow is rocev2/dcqcn`},
		{edit("transport: uet, size: 4mb", "transport: uet, size: 4mb, knobs: {gamma: 5}"), `t.yaml:15: flows[1].knobs.gamma: "5": nscc: gamma=5: must be in (0, 1]`},
		{edit("transport: uet, size: 4mb", "transport: uet, size: 4mb, knobs: {rpg_time_reset: 300}"), `t.yaml:15: flows[1].knobs.rpg_time_reset: "300": nscc: unknown knob "rpg_time_reset" (valid: target_qdelay,`},
		{edit("transport: uet, size: 4mb", "transport: uet, size: 4mb, cc: rccc, knobs: {gamma: 0.5}"), `t.yaml:15: flows[1].knobs: NSCC's knobs: cc nscc or both, not rccc`},
		{edit("transport: uet, size: 4mb", "transport: uet, size: 4mb, loss: fast"), `t.yaml:15: flows[1].loss: "fast": want rack, sleek or none (default rack)`},
		{edit("transport: uet, size: 4mb", "transport: uet, size: 4mb, cc: rccc, loss: sleek"), `t.yaml:15: flows[1].loss: "sleek": SLEEK's threshold is 1.5 congestion windows: cc nscc or both, not rccc`},
		{strings.Replace(edit("{a: h1, b: sw1, mtu: 9000}", "{a: h1, b: sw1}"), "{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, mtu: 4096}", 1), `t.yaml:14: flows[0].mtu: "4096": the path from h1 to r1 carries IP packets up to 1500 bytes: a RoCEv2 MTU m needs m + 63; raise the links' mtu`},
		{strings.Replace(edit("{a: sw1, b: r1, rate: 200mbit, mtu: 9000}", "{a: sw1, b: r1, rate: 200mbit, mtu: 9000}\n  - {a: h2, b: r2}"), "{name: r1, kind: host}", "{name: r1, kind: host}\n  - {name: r2, kind: host}", 1) + "  - {name: f3, from: h1, to: r2}\n",
			`t.yaml:18: flows[2].to: "r2": no path from h1 to r2 (routes never cross a host)`},
		{base + "report: {interval: 1ms}\n", `t.yaml:16: report.interval: "1ms": want 10ms..60s (default 500ms)`},
		{base + "report: {watch: [sw1:h1]}\n", `t.yaml:16: report.watch[0]: "sw1:h1": no switch port there; ports are sw1:r1`},
		{base + "colour: blue\n", `t.yaml:16: colour: unknown field; the document has duration, fabric, flows, goals, links, name, nodes, ports, report, runs, seed, timescale, tune, variants, workload`},
		{strings.Replace(base, "{name: sw1, kind: switch}", "{name: sw1, kind: switch, speed: 1}", 1), `t.yaml:5: nodes[2].speed: unknown field; nodes[2] has agent, decap, host_queue, kind, name, np, peer, quickack, tcp_ecn`},
	} {
		_, err := Parse("t.yaml", []byte(c.src))
		var ce *conf.Error
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || !errors.As(err, &ce) {
			t.Errorf("got  %v\nwant %s", err, c.want)
		}
	}
}

func TestPEErrors(t *testing.T) {
	wan, err := os.ReadFile("examples/wan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ old, new, want string }{
		{"{name: pe2, kind: pe, peer: pe1}", "{name: pe2, kind: pe, peer: pe3}", `wan.yaml:12: nodes[3].peer: "pe2": pe2's peer is "pe3"; the two pes of a tunnel name each other`},
		{"{name: pe1, kind: pe, peer: pe2}", "{name: pe1, kind: pe, peer: pe1}", `nodes[3].peer: "pe1": a pe's peer is another pe, not itself`},
		{"{a: pe2, b: sw2, mtu: 9000}", "{a: pe2, b: sw2, mtu: 9000}\n  - {a: pe2, b: core, mtu: 9000}", `nodes[3].kind: "pe": pe1 has 1 WAN links and pe2 2; the k-th WAN links of the two pes make tunnel path k: give them as many, at most 2`},
		{"{a: pe2, b: sw2, mtu: 9000}\n  - {a: sw2, b: r1, mtu: 9000}", "{a: core, b: sw2, mtu: 9000}\n  - {a: sw2, b: r1, mtu: 9000}", `nodes[5].kind: "pe": pe2 has no data centre behind it`},
		{"{name: pe1, kind: pe, peer: pe2}", "{name: pe1, kind: pe, peer: pe2, decap: 6040}", `nodes[3].decap: "6040": want rfc6040 or two-threshold (default rfc6040)`},
		{"{name: pe1, kind: pe, peer: pe2}", "{name: pe1, kind: pe, peer: pe2, agent: {mode: rate}}", `nodes[3].agent.line_rate: required with mode rate: the limiter's rate, where the agent starts`},
		{"{name: pe1, kind: pe, peer: pe2}", "{name: pe1, kind: pe, peer: pe2, agent: {mode: rate, line_rate: 100mbit, min_rate: 200mbit}}", `nodes[3].agent.min_rate: "200mbit": want 640kbit..100mbit, below line_rate (default line_rate / 10)`},
		{"{name: pe1, kind: pe, peer: pe2}", "{name: pe1, kind: pe, peer: pe2, agent: {mode: observe, line_rate: 100mbit}}", `nodes[3].agent.line_rate: only with mode rate (the limiter's)`},
		{"{name: pe1, kind: pe, peer: pe2}", "{name: pe1, kind: pe, peer: pe2, agent: {mode: reroute}}", `nodes[3].agent.mode: "reroute": reroute spreads the tunnel over a second WAN path: link pe1 and pe2 into the WAN twice`},
		{"{name: pe1, kind: pe, peer: pe2}", "{name: pe1, kind: pe, peer: pe2, agent: {mode: fast}}", `nodes[3].agent.mode: "fast": want none, observe, rate or reroute`},
		{"{name: pe1, kind: pe, peer: pe2}", "{name: pe1, kind: pe, peer: pe2, agent: {mode: rate, line_rate: 100mbit, rtt: 200ms}}", `nodes[3].agent: rtt 200ms (default: twice the delay between the pes) gives the reaction point`},
		{"{name: pe1, kind: pe, peer: pe2}", "{name: pe1, kind: pe, peer: pe2, agent: {mode: rate, line_rate: 5mbit}}", `nodes[3].agent: min_rate 500kbit (default line_rate / 10): want at least 640kbit`},
	} {
		src := strings.Replace(string(wan), c.old, c.new, 1)
		if src == string(wan) {
			t.Fatalf("wan.yaml lacks %q", c.old)
		}
		_, err := Parse("wan.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got  %v\nwant %s", err, c.want)
		}
	}
}

// TestExamplesParse: every shipped example is valid.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, p := range files {
		if _, err := Load(p); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("examples/*.yaml")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(base))
	f.Add([]byte(experimentFile))
	f.Add([]byte("nodes: [{name: a, kind: pe, peer: a}]\nlinks: [{a: a, b: a}]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse("f.yaml", b)
		if err == nil && file.Plan() == nil {
			t.Fatal("valid without a plan")
		}
	})
}

// TestOffloadPlaces: a flow's rp reaches its client, a host's np its
// rocev2 server.
func TestOffloadPlaces(t *testing.T) {
	src := strings.Replace(base, "{name: r1, kind: host}", "{name: r1, kind: host, np: agent}", 1)
	src = strings.Replace(src, "{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, rp: agent}", 1)
	f, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Plan()
	for _, fp := range p.Flows {
		if want := map[string]string{"f1": "agent", "f2": ""}[fp.Flow.Name]; fp.Client.RP != want {
			t.Errorf("%s: rp %q, want %q", fp.Flow.Name, fp.Client.RP, want)
		}
	}
	for _, sp := range p.Servers {
		if want := map[string]string{TransportRoCEv2: "agent", TransportUET: ""}[sp.Transport]; sp.NP != want {
			t.Errorf("%s server: np %q, want %q", sp.Transport, sp.NP, want)
		}
	}
}

// TestQuickAck: a host's quickack puts it on every route of the host's,
// none of the others'.
func TestQuickAck(t *testing.T) {
	src := strings.Replace(base, "{name: r1, kind: host}", "{name: r1, kind: host, quickack: true}", 1)
	f, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rs := range f.Plan().Spec.Routes {
		if rs.QuickAck != (rs.Node == "r1") {
			t.Errorf("route %s %s: quickack %v", rs.Node, rs.Dst, rs.QuickAck)
		}
		if rs.Node == "r1" {
			n++
		}
	}
	if n == 0 {
		t.Error("r1 has no route")
	}
}

// TestTCPECNOff: the ends of tcp flows negotiate ECN, but a host with
// tcp_ecn: off does not (the three-layers lab of a sender without ECN).
func TestTCPECNOff(t *testing.T) {
	src := strings.Replace(base, "{name: h1, kind: host}", "{name: h1, kind: host, tcp_ecn: off}", 1)
	src = strings.Replace(src, "{name: f1, from: h1, to: r1}", "{name: f1, from: h1, to: r1, transport: tcp}", 1)
	f, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range f.Plan().Spec.Nodes {
		got[n.Name] = n.Sysctls["net.ipv4.tcp_ecn"]
	}
	if got["h1"] != "0" || got["r1"] != "1" || got["h2"] != "" {
		t.Errorf("net.ipv4.tcp_ecn by node: %v; want h1 0, r1 1, h2 unset", got)
	}
}
