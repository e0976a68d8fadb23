package daemon

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

const good = `
servers:
  - {transport: rocev2, bind: 198.18.0.1}
  - {transport: uet, bind: 198.18.0.1, port: 18516}
profiles:
  dcqcn:
    gentle: {base: mlx5, knobs: {rpg_time_reset: 300, rate_reduce_monitor_period: 8}}
  nscc:
    wan: {base_rtt: 5ms, knobs: {gamma: 0.5}}
ports:
  - {dev: eth1, rate: 10gbit, tc: ["3:wred:min=50kb,max=1mb,p=0.1"]}
flows:
  - {name: a, server: 198.18.0.2, line_rate: 1gbit, dcqcn: gentle, size: 10MB}
  - {name: b, transport: uet, server: "198.18.0.2:18516", line_rate: 1gbit, nscc: wan, repeat: true}
`

func TestParseGood(t *testing.T) {
	c, err := Parse("x.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	d := c.WithDefaults()
	if d.Metrics.Listen != DefaultMetricsListen || d.Servers[0].Port != 18515 || d.Ports[0].Mode != "virtual" || d.Flows[1].Pause != DefaultFlowPause {
		t.Fatalf("defaults: %+v", d)
	}
	cc, err := d.clientConfig("flows[0]", d.Flows[0])
	if err != nil || len(cc.Knobs) != 2 || cc.Knobs[0].String() != "rate_reduce_monitor_period=8" || cc.Bytes != 10<<20 {
		t.Fatalf("flow a: %+v %v", cc, err)
	}
	cc, err = d.clientConfig("flows[1]", d.Flows[1])
	if err != nil || cc.BaseRTT.Milliseconds() != 5 || len(cc.NSCCKnobs) != 1 {
		t.Fatalf("flow b: %+v %v", cc, err)
	}

	// A uet flow's RTO and loss inference reach perf.
	uet := strings.Replace(good, "nscc: wan, repeat", "nscc: wan, rto: 50ms, loss: sleek, repeat", 1)
	c, err = Parse("x.yaml", []byte(uet))
	if err != nil {
		t.Fatal(err)
	}
	d = c.WithDefaults()
	if cc, err := d.clientConfig("flows[1]", d.Flows[1]); err != nil || cc.RTO != 50*time.Millisecond || cc.Loss.String() != "sleek" {
		t.Errorf("flow b's rto %v and loss %v (%v), want 50ms and sleek", cc.RTO, cc.Loss, err)
	}

	// A rocev2 server's and flow's PPFC settings reach perf.
	ppfc := strings.Replace(good, "{transport: rocev2, bind: 198.18.0.1}", "{transport: rocev2, bind: 198.18.0.1, ppfc_sources: [198.18.9.1], ppfc_max_pause: 20ms, ppfc_watchdog: 1s}", 1)
	ppfc = strings.Replace(ppfc, "size: 10MB}", "size: 10MB, ppfc_sources: [198.18.9.0/24], ppfc_watchdog: off}", 1)
	c, err = Parse("x.yaml", []byte(ppfc))
	if err != nil {
		t.Fatal(err)
	}
	d = c.WithDefaults()
	if s := d.Servers[0].perfConfig(); len(s.PPFCSources) != 1 || s.PPFCSources[0].String() != "198.18.9.1/32" || s.PPFCMaxPause != 20*time.Millisecond || s.PPFCWatchdog != time.Second {
		t.Errorf("server 0's PPFC: %v, %v, %v", s.PPFCSources, s.PPFCMaxPause, s.PPFCWatchdog)
	}
	if cc, err := d.clientConfig("flows[0]", d.Flows[0]); err != nil || len(cc.PPFCSources) != 1 || cc.PPFCWatchdog >= 0 {
		t.Errorf("flow a's PPFC: %v, %v (%v)", cc.PPFCSources, cc.PPFCWatchdog, err)
	}
}

// TestParseErrors: every error names the line, the field, the value and
// what is allowed.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ edit, want string }{
		{"transport: rocev2, bind: 198.18.0.1}|transport: roce, bind: 198.18.0.1}", `x.yaml:3: servers[0].transport: "roce": must be rocev2, uet or tcp`},
		{"port: 18516}|port: 70000}", `x.yaml:4: servers[1].port: "70000": must be 1..65535`},
		{"{transport: uet, bind: 198.18.0.1, port: 18516}|{transport: uet, port: 18516}", `x.yaml:4: servers[1].bind: "invalid IP": required with transport uet`},
		{"port: 18516}|port: 18515}", `servers[1]: "tcp 198.18.0.1:18515": the same address and port as servers[0]`},
		{"rpg_time_reset: 300|rpg_time_rest: 300", `x.yaml:7: profiles.dcqcn.gentle.knobs.rpg_time_rest: unknown knob (valid: clamp_tgt_rate,`},
		{"gamma: 0.5|gamma: 5", `flows[1].nscc: nscc: gamma=5: must be in (0, 1]`},
		{"rate: 10gbit|rate: 10gigs", `x.yaml:11: ports[0].rate: "10gigs": unknown unit "gigs"`},
		{"p=0.1|p=1.5", `x.yaml:11: ports[0]: `},
		{"{dev: eth1,|{dev: eth1, mode: fast,", `x.yaml:11: ports[0].mode: "fast": must be virtual or veth`},
		{"dcqcn: gentle|dcqcn: harsh", `x.yaml:13: flows[0].dcqcn: "harsh": no such profile under profiles.dcqcn (gentle)`},
		{"{name: b,|{name: a,", `x.yaml:14: flows[1].name: "a": already the name of flows[0]`},
		{"size: 10MB|size: 10MB, duration: 5s", `flows[0].duration: "5s": not with size`},
		{"line_rate: 1gbit, dcqcn|line_rate: 10tbit, dcqcn", `x.yaml:13: flows[0].line_rate: "10tbit": must be`},
		{"nscc: wan,|nscc: wan, qps: 2,", `x.yaml:14: flows[1].qps: "2": a uet flow has streams, not qps`},
		{"repeat: true|repeat: sometimes", `x.yaml:14: flows[1].repeat: "sometimes": want true or false`},
		{"servers:|server:", `x.yaml:2: server: unknown field; the document has drain_timeout, flows, lab, log, metrics, ports, profiles, servers`},
		{"{name: a, server: 198.18.0.2,|{name: a,", `x.yaml:13: flows[0].server: required`},
		{"size: 10MB|start: -1s", `x.yaml:13: flows[0].start: "-1s": want a duration like 100us, 5ms, 1.5s`},
		{"{transport: rocev2, bind: 198.18.0.1}|{transport: rocev2, bind: 198.18.0.1, ppfc_max_pause: 2s}", `servers[0].ppfc_max_pause: "2s": must be 0 (the Pause Duration field's longest, 65.535ms) or 1µs..1s`},
		{"{transport: rocev2, bind: 198.18.0.1}|{transport: rocev2, bind: 198.18.0.1, ppfc_sources: [\"::ffff:198.18.1.1/128\"]}", `servers[0].ppfc_sources: "::ffff:198.18.1.1/128": must be IP prefixes or addresses`},
		{"{transport: uet, bind: 198.18.0.1, port: 18516}|{transport: uet, bind: 198.18.0.1, port: 18516, ppfc_watchdog: off}", `servers[1].ppfc_watchdog: "-1ns": rocev2 only`},
		{"size: 10MB|size: 10MB, ppfc_watchdog: 10ms", `flows[0].ppfc_watchdog: "10ms": must be 0 (max(200ms, 2 × the max pause)), off, or the max pause (65.535ms)..10s`},
		{"nscc: wan,|nscc: wan, ppfc_max_pause: 1ms,", `flows[1].ppfc_max_pause: "1ms": rocev2 only`},
		{"nscc: wan,|nscc: wan, loss: quick,", `x.yaml:14: flows[1].loss: "quick": must be one of rack, sleek, none`},
		{"nscc: wan,|nscc: wan, cc: rccc, loss: sleek,", `x.yaml:14: flows[1].loss: "sleek": must be rack or none with cc rccc`},
		{"nscc: wan,|nscc: wan, rto: 20s,", `x.yaml:14: flows[1].rto: "20s": must be 0 (10ms) or 100µs..10s`},
		{"size: 10MB|size: 10MB, rto: 50ms", `x.yaml:13: flows[0].rto: "50ms": uet only`},
		{"size: 10MB|size: 10MB, loss: none", `x.yaml:13: flows[0].loss: "none": uet only`},
		{"{transport: uet, bind: 198.18.0.1, port: 18516}|{transport: uet, bind: 198.18.0.1, port: 18516, np: agent}", `servers[1].np: "agent": kernel and agent place RoCEv2's NP; uet takes off alone (the target echoes no CE)`},
		{"size: 10MB|size: 10MB, ppfc_watchdog: never", `x.yaml:13: flows[0].ppfc_watchdog: "never": want a duration like 200ms, or off`},
	} {
		old, repl, _ := strings.Cut(c.edit, "|")
		src := strings.Replace(good, old, repl, 1)
		if src == good {
			t.Fatalf("edit %q changed nothing", c.edit)
		}
		_, err := Parse("x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("edit %q: got %v\nwant %q", c.edit, err, c.want)
		}
	}
	// A deaf UET target (a lab file's np: off, deployed) is a valid server.
	src := strings.Replace(good, "{transport: uet, bind: 198.18.0.1, port: 18516}", "{transport: uet, bind: 198.18.0.1, port: 18516, np: off}", 1)
	if _, err := Parse("x.yaml", []byte(src)); src == good || err != nil {
		t.Errorf("a uet server with np: off: %v", err)
	}
}

// TestLabAgents: a pe node of a variant with an agent deploys its tunnel
// PEs with the agent and, for a rate agent, the limiter port on its WAN
// device, shaped; the file as written deploys the observe agent.
func TestLabAgents(t *testing.T) {
	for _, c := range []struct{ variant, want string }{
		{"", "pe core observe; pe core2; ports"},
		{"pe-rate", "pe core rate; pe core2; ports core shaped 150mbit"},
		{"reroute", "pe core reroute; pe core2; ports"},
	} {
		cfg, err := Parse("x.yaml", []byte("lab: {file: ../labfile/examples/wan-experiment.yaml, node: pe1, variant: \""+c.variant+"\"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		d := cfg.WithDefaults()
		var got []string
		for _, pl := range cfg.pes() {
			s := "pe " + pl.Dev
			if pl.Agent != nil {
				s += " " + pl.Agent.Mode.String()
			}
			got = append(got, s)
		}
		ports := "ports"
		for _, p := range d.Ports {
			ports += " " + p.Dev
			if p.Shape {
				ports += " shaped " + p.Rate.String()
			}
		}
		if s := strings.Join(append(got, ports), "; "); s != c.want {
			t.Errorf("variant %q: %s, want %s", c.variant, s, c.want)
		}
	}
}

// TestShippedConfig: the example config the package installs is valid.
func TestShippedConfig(t *testing.T) {
	data, err := os.ReadFile("../../cmd/fabriclabd/fabriclabd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("fabriclabd.yaml", data); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("flows: [{name: a, server: x, qps: 0}]"))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = Parse("f", b) })
}

// TestLabMode: a lab file's node becomes servers, ports and flows.
func TestLabMode(t *testing.T) {
	for _, c := range []struct{ node, want string }{
		{"sw", "ports eth1 eth2"},
		{"h1", "servers uet 198.18.1.1:18516 flows h1-h2"},
		{"h2", "servers rocev2 198.18.2.1:18515 flows h2-h1"},
	} {
		cfg, err := Parse("x.yaml", []byte("lab: {file: ../../vagrant/lab.yaml, node: "+c.node+"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		d := cfg.WithDefaults()
		var got []string
		if len(d.Servers) > 0 {
			got = append(got, "servers")
			for _, s := range d.Servers {
				got = append(got, s.Transport, fmt.Sprintf("%s:%d", s.Bind, s.Port))
			}
		}
		if len(d.Ports) > 0 {
			got = append(got, "ports")
			for _, p := range d.Ports {
				if p.Mode != "virtual" {
					t.Errorf("%s: port %s in mode %s", c.node, p.Dev, p.Mode)
				}
				got = append(got, p.Dev)
			}
		}
		if len(d.Flows) > 0 {
			got = append(got, "flows")
			for _, f := range d.Flows {
				if !f.Repeat {
					t.Errorf("%s: flow %s does not repeat", c.node, f.Name)
				}
				got = append(got, f.Name)
			}
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("node %s: %s, want %s", c.node, s, c.want)
		}
	}
	for _, c := range []struct{ src, want string }{
		{"lab: {file: ../../vagrant/lab.yaml, node: s9}\n", `x.yaml:1: lab.node: "s9": `},
		{"lab: {file: /nonexistent.yaml, node: sw}\n", `x.yaml:1: lab.file: "/nonexistent.yaml": `},
		{"lab: {node: sw}\n", `x.yaml:1: lab.file: required`},
		{"lab: {file: ../../vagrant/lab.yaml, node: sw, variant: fast}\n", `x.yaml:1: lab.variant: "fast": not a variant of ../../vagrant/lab.yaml (variants: none)`},
		{"lab: {file: ../labfile/examples/wan-experiment.yaml, node: pe1, variant: pe-fast}\n", `lab.variant: "pe-fast": not a variant of ../labfile/examples/wan-experiment.yaml (variants: rfc6040, pe-rate, reroute)`},
		{"ports: [{dev: eth1, rate: 1gbit, mode: veth, shape: true}]\n", `x.yaml:1: ports[0].shape: "true": only with mode virtual`},
		// The lab check: every other node, addresses, the window, the flows.
		{"lab: {file: ../labfile/examples/three-layers/np-off.yaml, node: s1, check: {daemons: {sw: 'a:1', r: 'b:2'}}}\n", `lab.check.daemons: "s2": missing: every other node of`},
		{"lab: {file: ../labfile/examples/three-layers/np-off.yaml, node: s1, check: {daemons: {s2: 'c:3', sw: 'a:1', r: 'b:2', x9: 'd:4'}}}\n", `lab.check.daemons.x9: "d:4": not a node of`},
		{"lab: {file: ../labfile/examples/three-layers/np-off.yaml, node: s1, check: {daemons: {s2: 'c', sw: 'a:1', r: 'b:2'}}}\n", `lab.check.daemons.s2: "c": must be HOST:PORT`},
		{"lab: {file: ../labfile/examples/three-layers/np-off.yaml, node: s1, check: {daemons: {s2: 'c:70000', sw: 'a:1', r: 'b:2'}}}\n", `lab.check.daemons.s2: "c:70000": must be HOST:PORT`},
		{"lab: {file: ../labfile/examples/three-layers/np-off.yaml, node: s1, check: {window: 100ms, daemons: {s2: 'c:3', sw: 'a:1', r: 'b:2'}}}\n", `lab.check.window: "100ms": must be 1s..5m0s (default 10s)`},
		{"lab: {file: ../labfile/examples/three-layers/np-off.yaml, node: s1, check: {flows: mine, daemons: {s2: 'c:3', sw: 'a:1', r: 'b:2'}}}\n", `lab.check.flows: "mine": must be own`},
	} {
		_, err := Parse("x.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
}

const goodTCP = `
servers:
  - {transport: tcp, bind: 198.18.0.1}
  - {transport: tcp, port: 18600, cc: cubic}
flows:
  - {name: t, transport: tcp, server: 198.18.0.2, size: 10MB, dscp: 26}
  - {name: u, transport: tcp, server: "198.18.0.2:18600", cc: cubic, repeat: true, message_size: 64kb}
`

// TestTCP: tcp servers and flows (host/tcpflow) with their defaults, and
// every field a tcp server or flow refuses, by name.
func TestTCP(t *testing.T) {
	c, err := Parse("x.yaml", []byte(goodTCP))
	if err != nil {
		t.Fatal(err)
	}
	d := c.WithDefaults()
	if s := d.Servers[0]; s.Port != 18517 || s.CC != "dctcp" || s.UDPPort != 0 || s.name() != "tcp/198.18.0.1:18517" {
		t.Errorf("server 0: %+v", s)
	}
	tc, err := d.tcpConn("flows[0]", d.Flows[0])
	if err != nil || tc.Server.String() != "198.18.0.2:18517" || tc.CC != "dctcp" || tc.Size != 10<<20 || tc.Duration != 0 || tc.DSCP != 26 {
		t.Errorf("flow t: %+v, %v", tc, err)
	}
	tc, err = d.tcpConn("flows[1]", d.Flows[1])
	if err != nil || tc.Server.Port() != 18600 || tc.CC != "cubic" || tc.Duration != 10*time.Second || tc.WriteBytes != 64<<10 {
		t.Errorf("flow u: %+v, %v", tc, err)
	}
	for _, c := range []struct{ edit, want string }{
		{"{transport: tcp, bind: 198.18.0.1}|{transport: tcp, bind: 198.18.0.1, udp_port: 4791}", `x.yaml:3: servers[0].udp_port: "4791": not for a tcp server`},
		{"{transport: tcp, bind: 198.18.0.1}|{transport: tcp, bind: 198.18.0.1, np: agent}", `x.yaml:3: servers[0].np: "agent": not for a tcp server`},
		{"{transport: tcp, bind: 198.18.0.1}|{transport: tcp, bind: 198.18.0.1, max_qps: 4}", `x.yaml:3: servers[0].max_qps: "4": not for a tcp server`},
		{"cc: cubic}|cc: Cubic!}", `x.yaml:4: servers[1].cc: "Cubic!": a kernel congestion control's name`},
		{"{transport: tcp, bind: 198.18.0.1}|{transport: tcp, bind: 2001:db8::1}", `x.yaml:3: servers[0].bind: "2001:db8::1": an IPv4 address`},
		{"{transport: tcp, bind: 198.18.0.1}|{transport: rocev2, bind: 198.18.0.1, cc: dctcp}", `x.yaml:3: servers[0].cc: "dctcp": tcp only`},
		{"size: 10MB, dscp: 26|size: 10MB, dscp: 26, qps: 2", `x.yaml:6: flows[0].qps: "2": not for a tcp flow`},
		{"size: 10MB, dscp: 26|size: 10MB, dscp: 26, line_rate: 1gbit", `x.yaml:6: flows[0].line_rate: "1gbit": not for a tcp flow`},
		{"size: 10MB, dscp: 26|size: 10MB, dscp: 26, dcqcn: gentle", `x.yaml:6: flows[0].dcqcn: "gentle": not for a tcp flow`},
		{"server: 198.18.0.2, size|server: host2, size", `x.yaml:6: flows[0].server: "host2": must be ADDRESS or ADDRESS:PORT (IPv4)`},
		{"size: 10MB, dscp: 26|size: 10MB, duration: 1s, dscp: 26", `x.yaml:6: flows[0].duration: "1s": not with size`},
		{"dscp: 26|dscp: 64", `x.yaml:6: flows[0].dscp: "64": must be 0..63`},
		{"cc: cubic, repeat|cc: no/such, repeat", `x.yaml:7: flows[1].cc: "no/such": a kernel congestion control's name`},
		{"message_size: 64kb|message_size: 64mb", `x.yaml:7: flows[1].message_size: "64mb": must be 1..16777216 bytes`},
		{"repeat: true|pause: 2s", `x.yaml:7: flows[1].pause: "2s": only with repeat`},
	} {
		old, repl, _ := strings.Cut(c.edit, "|")
		src := strings.Replace(goodTCP, old, repl, 1)
		if src == goodTCP {
			t.Fatalf("edit %q changed nothing", c.edit)
		}
		_, err := Parse("x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("edit %q: got %v\nwant %q", c.edit, err, c.want)
		}
	}
}
