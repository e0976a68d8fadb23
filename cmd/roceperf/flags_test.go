package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/version/versiontest"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestParseClient(t *testing.T) {
	o, err := parseArgs(strings.Fields("-c 198.18.0.1 -t 2.5 -P 4 -l 1M --mtu 4096 -b 25g --cc none --dscp 24 --cnp-dscp 46 -i 0.5 -O 1 -J --perftest --verify --op send --window 64 --ack-every 8 --burst 2 --timeout 5 --retry 3 --udp-port 5000 -B 198.18.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	c := o.client
	if o.server != nil || o.action != actionRun {
		t.Fatalf("not a client run: %+v", o)
	}
	want := perf.ClientConfig{
		Server: "198.18.0.1:18515", QPs: 4, Duration: 2500 * time.Millisecond, MessageBytes: 1 << 20, MTU: 4096,
		LineRate: 25 * units.Gbit, CC: agent.CCNone, Profile: "lab", DSCP: 24, CNPDSCP: 46,
		Interval: 500 * time.Millisecond, Omit: time.Second, JSON: true, Perftest: true, Verify: true, Op: agent.OpSend,
		Window: 64, AckReqEvery: 8, MaxBurst: 2, AckTimeout: 5 * time.Millisecond, RetryCount: 3, UDPPort: 5000,
	}
	want.Bind = c.Bind
	if c.Bind.String() != "198.18.0.2" {
		t.Errorf("bind %v", c.Bind)
	}
	c.Knobs = nil
	if c.Server != want.Server || c.QPs != want.QPs || c.Duration != want.Duration || c.MessageBytes != want.MessageBytes ||
		c.MTU != want.MTU || c.LineRate != want.LineRate || c.CC != want.CC || c.Profile != want.Profile ||
		c.DSCP != want.DSCP || c.CNPDSCP != want.CNPDSCP || c.Interval != want.Interval || c.Omit != want.Omit ||
		c.JSON != want.JSON || c.Perftest != want.Perftest || c.Verify != want.Verify || c.Op != want.Op ||
		c.Window != want.Window || c.AckReqEvery != want.AckReqEvery || c.MaxBurst != want.MaxBurst ||
		c.AckTimeout != want.AckTimeout || c.RetryCount != want.RetryCount || c.UDPPort != want.UDPPort {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}

	// Long spellings, defaults, -n, repeated --dcqcn.
	o, err = parseArgs(strings.Fields("--client h:9000 --parallel 2 --bytes 10M --dcqcn rpg_ai_rate=1 --dcqcn rpg_hai_rate=10 --dcqcn-profile paper"))
	if err != nil {
		t.Fatal(err)
	}
	c = o.client
	def := agent.DefaultQPConfig()
	if c.Server != "h:9000" || c.QPs != 2 || c.Bytes != 10<<20 || c.Profile != "paper" ||
		fmt.Sprint(c.Knobs) != "[rpg_ai_rate=1 rpg_hai_rate=10]" ||
		c.Duration != 10*time.Second || c.MessageBytes != 64<<10 || c.MTU != 1024 || c.Interval != time.Second ||
		c.CC != agent.CCDCQCN || c.LineRate != 0 || c.DSCP != 26 || c.CNPDSCP != 48 ||
		c.Window != def.Window || c.AckTimeout != def.AckTimeout || c.SendPath != pktio.SendAuto {
		t.Errorf("defaults: %+v", c)
	}
	// --send raw on either end.
	if o, err = parseArgs(strings.Fields("-c h --send raw")); err != nil || o.client.SendPath != pktio.SendRaw {
		t.Errorf("-c h --send raw: %v, %+v", err, o)
	}
	if o, err = parseArgs(strings.Fields("-s --send raw")); err != nil || o.server.SendPath != pktio.SendRaw {
		t.Errorf("-s --send raw: %v, %+v", err, o)
	}
	for _, tc := range []struct{ args, server string }{
		{"-c ::1", "[::1]:18515"},
		{"-c 198.18.0.1 -p 9", "198.18.0.1:9"},
		{"-c host -p 9", "host:9"},
		{"-c host:7 -p 9", "host:9"},
		{"-c host:7", "host:7"},
		{"-c host", "host:18515"},
	} {
		o, err := parseArgs(strings.Fields(tc.args))
		if err != nil || o.client.Server != tc.server {
			t.Errorf("%s: server %q, %v; want %q", tc.args, o.client.Server, err, tc.server)
		}
	}
}

func TestParseServer(t *testing.T) {
	o, err := parseArgs(strings.Fields("-s -B 198.18.0.1 -p 9000 --udp-port 4792 -1 -J -i 0"))
	if err != nil {
		t.Fatal(err)
	}
	s := o.server
	if s == nil || s.Bind.String() != "198.18.0.1" || s.Port != 9000 || s.UDPPort != 4792 || !s.OneOff || !s.JSON || s.Interval >= 0 {
		t.Errorf("server %+v", s)
	}
	o, err = parseArgs([]string{"--server"})
	if err != nil || o.server == nil || o.server.Port != 0 || o.server.Interval != time.Second || o.server.PPFCSources != nil {
		t.Errorf("defaults: %+v %v", o, err)
	}
}

// --ppfc-sources takes prefixes and addresses (an address is its own
// host prefix), on a server and a client alike.
func TestParsePPFCSources(t *testing.T) {
	want := []netip.Prefix{netip.MustParsePrefix("198.18.1.1/32"), netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("2001:db8::/64")}
	o, err := parseArgs(strings.Fields("-s --ppfc-sources 198.18.1.1,198.19.0.7/24,2001:db8::1/64"))
	if err != nil || !slices.Equal(o.server.PPFCSources, want) {
		t.Errorf("server: %v, %v; want %v", o.server.PPFCSources, err, want)
	}
	o, err = parseArgs(strings.Fields("-c h --ppfc-sources 198.18.1.1,198.19.0.7/24,2001:db8::1/64"))
	if err != nil || !slices.Equal(o.client.PPFCSources, want) {
		t.Errorf("client: %v, %v; want %v", o.client.PPFCSources, err, want)
	}
}

// --ppfc-max-pause and --ppfc-watchdog (a bare number is ms; the
// watchdog "off") reach the server's and the client's config.
func TestParsePPFCLimits(t *testing.T) {
	o, err := parseArgs(strings.Fields("-s --ppfc-max-pause 20 --ppfc-watchdog 1s"))
	if err != nil || o.server.PPFCMaxPause != 20*time.Millisecond || o.server.PPFCWatchdog != time.Second {
		t.Errorf("server: %+v, %v; want 20ms, 1s", o.server, err)
	}
	o, err = parseArgs(strings.Fields("-c h --ppfc-max-pause 500us --ppfc-watchdog off"))
	if err != nil || o.client.PPFCMaxPause != 500*time.Microsecond || o.client.PPFCWatchdog >= 0 {
		t.Errorf("client: %v, %v, %v; want 500µs, off (negative)", o.client.PPFCMaxPause, o.client.PPFCWatchdog, err)
	}
	o, err = parseArgs(strings.Fields("-c h"))
	if err != nil || o.client.PPFCMaxPause != 0 || o.client.PPFCWatchdog != 0 {
		t.Errorf("defaults: %v, %v, %v; want 0, 0 (the agent's)", o.client.PPFCMaxPause, o.client.PPFCWatchdog, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"", "roceperf: give -s to run a server or -c HOST to run a client (roceperf -h for help)"},
		{"-s -c h", "roceperf: -s and -c: run either a server (-s) or a client (-c HOST), not both"},
		{"-c h -P 0", "roceperf: -P 0: must be 1..16384"},
		{"-c h --parallel 20000", "roceperf: --parallel 20000: must be 1..16384"},
		{"-c h -P two", "roceperf: -P two: must be 1..16384"},
		{"-c h -t 0", "roceperf: -t 0: must be 0.001..86400 seconds"},
		{"-c h -t soon", "roceperf: -t soon: must be 0.001..86400 seconds"},
		{"-c h -n 0", "roceperf: -n 0: must be a byte count > 0"},
		{"-c h -n 5Q", "roceperf: -n 5Q: must be a byte count > 0"},
		{"-c h -l 0", "roceperf: -l 0: must be 1..16M bytes"},
		{"-c h -l 32M", "roceperf: -l 32M: must be 1..16M bytes"},
		{"-c h --mtu 1500", "roceperf: --mtu 1500: must be 256, 512, 1024, 2048 or 4096"},
		{"-c h --mtu 9000", "roceperf: --mtu 9000: must be 256..4096"},
		{"-c h -b fast", "roceperf: -b fast: must be 1k..1t bits/s"},
		{"-c h -b 2t", "roceperf: -b 2t: must be 1k..1t bits/s"},
		{"-c h -b 10gbps", `roceperf: -b 10gbps: invalid rate "10gbps": unit "gbps" is ambiguous: tc reads it as bytes per second (80gbit), people write Gbps for bits; write 10gbit`},
		{"-c h --transport uet --bitrate 1Gbps", `roceperf: --bitrate 1Gbps: invalid rate "1Gbps": unit "Gbps" is ambiguous`},
		{"-c h --cc reno", "roceperf: --cc reno: must be dcqcn or none"},
		{"-c h --cc=", "roceperf: --cc : must be dcqcn or none"},
		{"-c h --cc rccc", "roceperf: --cc rccc: must be dcqcn or none (rccc is --transport uet's)"},
		{"-c h --transport rocev2 --cc nscc", "roceperf: --cc nscc: must be dcqcn or none (nscc is --transport uet's)"},
		{"-c h --op read", "roceperf: --op read: must be write or send"},
		{"-c h --send gso", "roceperf: --send gso: must be auto or raw"},
		{"-c h --dscp 64", "roceperf: --dscp 64: must be 1..63"},
		{"-c h --dscp 0", "roceperf: --dscp 0: must be 1..63"},
		{"-c h --cnp-dscp 99", "roceperf: --cnp-dscp 99: must be 1..63"},
		{"-c h -i 0.001", "roceperf: -i 0.001: must be 0 (no interval reports) or 0.01..60 seconds"},
		{"-c h -O 61", "roceperf: -O 61: must be 0..60 seconds"},
		{"-c h --window 0", "roceperf: --window 0: must be 1..1048576"},
		{"-c h --window 8 --ack-every 16", "roceperf: --ack-every 16: must be 1..8"},
		{"-c h --burst 0", "roceperf: --burst 0: must be 1..256"},
		{"-c h --timeout 0", "roceperf: --timeout 0: must be 10us..1m"},
		{"-c h --retry -1", "roceperf: --retry -1: must be 0..1000"},
		{"-c h -p 0", "roceperf: -p 0: must be 1..65535"},
		{"-c h --udp-port 70000", "roceperf: --udp-port 70000: must be 0..65535"},
		{"-s --udp-port 0", "roceperf: --udp-port 0: must be 1..65535"},
		{"-c h -B nowhere", "roceperf: -B nowhere: must be an IP address of this host"},
		{"-c h --dcqcn-profile hpcc", "roceperf: --dcqcn-profile hpcc: must be lab or mlx5 or paper"},
		{"-c h --dcqcn rpg_ai_rate", `roceperf: --dcqcn rpg_ai_rate: must be name=value`},
		{"-c h --dcqcn nope=1", `roceperf: --dcqcn: unknown knob "nope"`},
		{"-c h --dcqcn rpg_threshold=0", "roceperf: --dcqcn: rpg_threshold=0: must be 1..255"},
		{"-c h -n 1000 -P 2", "roceperf: -n 1000 with -l 65536 -P 2: 1 message(s) cannot keep every QP busy"},
		{"-s -P 2", "roceperf: -P is a client option"},
		{"-s --verify", "roceperf: --verify is a client option"},
		{"-c h -1", "roceperf: -1 is a server option"},
		{"-c h extra", `roceperf: unexpected argument "extra"`},
		{"-c h --ppfc-sources 198.18.1.x", "roceperf: --ppfc-sources 198.18.1.x: must be comma-separated IP prefixes or addresses"},
		{"-s --ppfc-sources ::ffff:198.18.1.1", "roceperf: --ppfc-sources ::ffff:198.18.1.1: must be written as IPv4, not IPv4-mapped (198.18.1.1)"},
		{"-c h --transport uet --ppfc-sources 198.18.1.1", "roceperf: --ppfc-sources 198.18.1.1: a RoCEv2 option"},
		{"-c h --ppfc-max-pause 2s", "roceperf: --ppfc-max-pause 2s: must be 0 (the Pause Duration field's longest, 65.535ms) or 1µs..1s"},
		{"-s --ppfc-max-pause -1", "roceperf: --ppfc-max-pause -1: must be a time such as 10ms (a bare number is ms)"},
		{"-c h --ppfc-max-pause 100ms --ppfc-watchdog 50ms", "roceperf: --ppfc-watchdog 50ms: must be 0 (max(200ms, 2 × the max pause)), off, or the max pause (100ms)..10s"},
		{"-c h --ppfc-watchdog never", "roceperf: --ppfc-watchdog never: must be a time such as 200ms (a bare number is ms), or off"},
		{"-c h --transport uet --ppfc-watchdog off", "roceperf: --ppfc-watchdog off: a RoCEv2 option"},
		{"-c h --bogus", "roceperf: flag provided but not defined: -bogus (roceperf -h for help)"},
		{"-c", "roceperf: flag needs an argument: -c (roceperf -h for help)"},
	} {
		_, err := parseArgs(strings.Fields(tc.args))
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.args, tc.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q:\ngot  %q\nwant %q…", tc.args, err, tc.want)
		}
	}
}

func TestRunWithoutNetwork(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args     string
		code     int
		out, err string
	}{
		{"-h", exitOK, "Usage: roceperf [-s|-c host] [options]", ""},
		{"--help", exitOK, "--dcqcn NAME=VALUE", ""},
		{"-V", exitOK, "roceperf " + perf.Version, ""},
		{"--version", exitOK, "side-channel protocol", ""},
		{"--dcqcn help", exitOK, "DCQCN knobs of profile lab at line rate 10gbit", ""},
		{"--dcqcn help --dcqcn-profile paper -b 1g", exitOK, "rpg_ai_rate                    1\n", ""},
		{"", exitUsage, "", "roceperf: give -s to run a server or -c HOST to run a client (roceperf -h for help)\n"},
		{"-c h -P 0", exitUsage, "", "roceperf: -P 0: must be 1..16384\n"},
	} {
		var out, errb bytes.Buffer
		code := run(ctx, strings.Fields(tc.args), &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.out) || (tc.err != "" && errb.String() != tc.err) {
			t.Errorf("roceperf %s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr %q",
				tc.args, code, out.String(), errb.String(), tc.code, tc.out, tc.err)
		}
	}
}

// TestParseUET: --transport uet takes the shared flags and its own, with
// pds's defaults where RoCEv2's differ, and the server its -B.
func TestParseUET(t *testing.T) {
	o, err := parseArgs(strings.Fields("-c 198.18.0.1 --transport uet -t 2 -P 3 -l 1M --mtu 9000 -b 10g --base-rtt 50us --rto 40ms --loss SLEEK --dscp 24 -i 0.5 -O 1 -J --verify --trace-ccc -B 198.18.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	c := o.client
	if c.Transport != perf.TransportUET || c.Server != "198.18.0.1:18515" || c.QPs != 3 || c.Duration != 2*time.Second ||
		c.MessageBytes != 1<<20 || c.MTU != 9000 || c.LineRate != 10*units.Gbit || c.BaseRTT != 50*time.Microsecond || c.RTO != 40*time.Millisecond || c.Loss != pds.LossSLEEK ||
		c.DSCP != 24 || c.Interval != 500*time.Millisecond || c.Omit != time.Second || !c.JSON || !c.Verify || !c.TraceCCC ||
		c.Bind.String() != "198.18.0.2" {
		t.Errorf("uet client %+v", c)
	}
	// Defaults: pds's MTU, line rate and base RTT, not RoCEv2's.
	o, err = parseArgs(strings.Fields("-c h --transport uet"))
	if err != nil {
		t.Fatal(err)
	}
	c, d := o.client, pds.DefaultConfig()
	if c.MTU != d.MTU || c.LineRate != d.LinkRate || c.BaseRTT != d.BaseRTT || c.TraceCCC || c.QPs != 1 || c.MessageBytes != 64<<10 {
		t.Errorf("uet defaults %+v", c)
	}
	// RoCEv2 stays the default, and its defaults stay.
	o, err = parseArgs(strings.Fields("-c h"))
	if err != nil || o.client.Transport != "" || o.client.MTU != 1024 || o.client.LineRate != 0 {
		t.Errorf("rocev2 defaults %+v %v", o.client, err)
	}
	o, err = parseArgs(strings.Fields("-s --transport uet -B 198.18.0.1 -1 -i 0"))
	if err != nil || o.server == nil || o.server.Transport != perf.TransportUET || o.server.Bind.String() != "198.18.0.1" || !o.server.OneOff {
		t.Errorf("uet server %+v %v", o.server, err)
	}
	// A deaf target, for the three-layers labs.
	if o, err = parseArgs(strings.Fields("-s --transport uet -B 198.18.0.1 --np off")); err != nil || o.server.NP != perf.NPOff {
		t.Errorf("uet server --np off: %+v %v", o.server, err)
	}
	for _, tc := range []struct{ args, want string }{
		{"-c h --transport quic", "roceperf: --transport quic: must be rocev2 or uet"},
		{"-c h --transport uet --op send", "roceperf: --op send: a RoCEv2 option, not for --transport uet"},
		{"-c h --transport uet --perftest", "roceperf: --perftest: a RoCEv2 option, not for --transport uet"},
		{"-c h --transport uet --dcqcn rpg_ai_rate=1", "roceperf: --dcqcn rpg_ai_rate=1: a RoCEv2 option, not for --transport uet"},
		{"-c h --transport uet --dcqcn help", "roceperf: --dcqcn help: a RoCEv2 option, not for --transport uet"},
		{"-c h --transport uet --udp-port 5000", "roceperf: --udp-port 5000: a RoCEv2 option, not for --transport uet"},
		{"-c h --transport uet --timeout 5", "roceperf: --timeout 5: a RoCEv2 option, not for --transport uet"},
		{"-s -B 198.18.0.1 --transport uet --np agent", "roceperf: --np agent: places RoCEv2's NP; --transport uet takes only --np off (the target echoes no CE)"},
		{"-c h --trace-ccc", "roceperf: --trace-ccc: a UET option (--transport uet)"},
		{"-c h --base-rtt 50us", "roceperf: --base-rtt: a UET option (--transport uet)"},
		{"-c h --transport uet --mtu 256", "roceperf: --mtu 256: must be 512..9000"},
		{"-c h --transport uet --mtu 9001", "roceperf: --mtu 9001: must be 512..9000"},
		{"-c h --transport uet -b 0", "roceperf: -b 0: must be 1k..1t bits/s (k, m, g, t 1000-based, or 10gbit) with --transport uet"},
		{"-c h --transport uet --base-rtt 2s", "roceperf: --base-rtt 2s: must be 1us..1s"},
		{"-c h --transport uet --base-rtt soon", "roceperf: --base-rtt soon: must be 1us..1s"},
		{"-c h --rto 50ms", "roceperf: --rto: a UET option (--transport uet)"},
		{"-c h --transport uet --rto 50us", "roceperf: --rto 50us: must be 100µs..10s"},
		{"-c h --loss sleek", "roceperf: --loss: a UET option (--transport uet)"},
		{"-c h --transport uet --loss fast", "roceperf: --loss fast: must be rack, sleek, none"},
		{"-c h --transport uet --cc rccc --loss sleek", "roceperf: --loss sleek: must be rack or none with cc rccc: SLEEK's threshold is 1.5 congestion windows (cc nscc or both)"},
		{"-c h --transport uet -n 1000 -P 2", "roceperf: -n 1000 with -l 65536 -P 2: 1 message(s) cannot keep every stream busy"},
		{"-s --transport uet", "roceperf: -s --transport uet: give -B ADDR, a unicast address of this host"},
		{"-s --transport uet -B 0.0.0.0", "roceperf: -s --transport uet: give -B ADDR"},
		{"-s --transport uet -B 198.18.0.1 --trace-ccc", "roceperf: --trace-ccc is a client option"},
	} {
		_, err := parseArgs(strings.Fields(tc.args))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q:\ngot  %v\nwant %q…", tc.args, err, tc.want)
		}
	}
	// A rate too slow for a packet in MaxWnd names a base RTT that is taken.
	for _, rate := range []string{"100m", "10m", "1g"} {
		args := "-c h --transport uet -b " + rate + " --base-rtt 10us"
		_, err := parseArgs(strings.Fields(args))
		hint, ok := "", false
		if err != nil {
			_, hint, ok = strings.Cut(err.Error(), "a base_rtt of at least ")
			hint, _, _ = strings.Cut(hint, " ")
			hint = strings.Replace(hint, "µs", "us", 1) // as typed
		}
		if !ok {
			t.Errorf("%q: %v: want a base_rtt hint", args, err)
			continue
		}
		if _, err := parseArgs(strings.Fields(args + " --base-rtt " + hint)); err != nil {
			t.Errorf("%q --base-rtt %s, the hint: %v", args, hint, err)
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &out); code != exitOK ||
		!strings.Contains(out.String(), "--transport rocev2|uet") || !strings.Contains(out.String(), "--trace-ccc") {
		t.Errorf("help lacks --transport or --trace-ccc:\n%s", out.String())
	}
}

// TestParseUETLBTrim: --lb (client) picks a host/lb balancer, none by
// default; --trim-dscp and --trim-lasthop-dscp (server) the code points
// of trimmed packets; all three are UET's, each on its side.
func TestParseUETLBTrim(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want lb.Kind
	}{
		{"", 0}, {"--lb none", 0}, {"--lb NONE", 0},
		{"--lb oblivious", lb.KindOblivious}, {"--lb bitmap", lb.KindBitmap},
		{"--lb reps", lb.KindREPS}, {"--lb Mixed", lb.KindMixed},
	} {
		o, err := parseArgs(strings.Fields("-c h --transport uet " + tc.arg))
		if err != nil || o.client.LB != tc.want {
			t.Errorf("%q: lb %v, %v; want %v", tc.arg, o.client.LB, err, tc.want)
		}
	}
	o, err := parseArgs(strings.Fields("-s --transport uet -B 198.18.0.1 --trim-dscp 9 --trim-lasthop-dscp 10"))
	if err != nil || o.server.TrimDSCP != 9 || o.server.TrimLastHopDSCP != 10 {
		t.Errorf("trim server %+v %v", o.server, err)
	}
	o, err = parseArgs(strings.Fields("-s --transport uet -B 198.18.0.1 --trim-dscp 0"))
	if err != nil || o.server.TrimDSCP != 0 || o.server.TrimLastHopDSCP != 0 {
		t.Errorf("trim 0 %+v %v", o.server, err)
	}
	for _, tc := range []struct{ args, want string }{
		{"-c h --transport uet --lb ecmp", "roceperf: --lb ecmp: must be none, oblivious, bitmap, reps or mixed"},
		{"-c h --transport uet --lb=", "roceperf: --lb : must be none, oblivious, bitmap, reps or mixed"},
		{"-c h --lb reps", "roceperf: --lb: a UET option (--transport uet)"},
		{"-c h --transport rocev2 --lb none", "roceperf: --lb: a UET option (--transport uet)"},
		{"-s -B 198.18.0.1 --trim-dscp 9", "roceperf: --trim-dscp: a UET option (--transport uet)"},
		{"-s -B 198.18.0.1 --transport rocev2 --trim-lasthop-dscp 10", "roceperf: --trim-lasthop-dscp: a UET option (--transport uet)"},
		{"-s --transport uet -B 198.18.0.1 --lb reps", "roceperf: --lb is a client option"},
		{"-c h --transport uet --trim-dscp 9", "roceperf: --trim-dscp is a server option"},
		{"-c h --transport uet --trim-lasthop-dscp 10", "roceperf: --trim-lasthop-dscp is a server option"},
		{"-s --transport uet -B 198.18.0.1 --trim-dscp 64", "roceperf: --trim-dscp 64: must be 0..63"},
		{"-s --transport uet -B 198.18.0.1 --trim-dscp -1", "roceperf: --trim-dscp -1: must be 0..63"},
		{"-s --transport uet -B 198.18.0.1 --trim-dscp cs1", "roceperf: --trim-dscp cs1: must be 0..63"},
		{"-s --transport uet -B 198.18.0.1 --trim-lasthop-dscp 99", "roceperf: --trim-lasthop-dscp 99: must be 0..63"},
		{"-s --transport uet -B 198.18.0.1 --trim-dscp 26", "roceperf: --trim-dscp 26: must be 0..63 and not 26 (the data's DSCP)"},
	} {
		_, err := parseArgs(strings.Fields(tc.args))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q:\ngot  %v\nwant %q…", tc.args, err, tc.want)
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &out); code != exitOK ||
		!strings.Contains(out.String(), "--lb oblivious|bitmap|reps|mixed") || !strings.Contains(out.String(), "--trim-lasthop-dscp N") {
		t.Errorf("help lacks --lb or --trim-dscp:\n%s", out.String())
	}
}

// TestParseUETCC: --cc is the transport's: nscc (default), rccc, both or
// none with --transport uet (pds.ParseCCMode), dcqcn (default) or none
// with RoCEv2, each erring with its own values; a server takes none, as
// it takes no other sender setting (--lb).
func TestParseUETCC(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want pds.CCMode
	}{
		{"", pds.CCNSCC}, {"--cc nscc", pds.CCNSCC}, {"--cc rccc", pds.CCRCCC},
		{"--cc both", pds.CCBoth}, {"--cc none", pds.CCNone}, {"--cc RCCC", pds.CCRCCC}, {"--cc=both", pds.CCBoth},
	} {
		o, err := parseArgs(strings.Fields("-c h --transport uet " + tc.arg))
		if err != nil || o.client.UETCC != tc.want {
			t.Errorf("%q: uet cc %v, %v; want %v", tc.arg, o.client.UETCC, err, tc.want)
		}
	}
	for _, tc := range []struct {
		arg  string
		want agent.CCMode
	}{{"", agent.CCDCQCN}, {"--cc dcqcn", agent.CCDCQCN}, {"--cc none", agent.CCNone}} {
		o, err := parseArgs(strings.Fields("-c h " + tc.arg))
		if err != nil || o.client.CC != tc.want || o.client.UETCC != 0 {
			t.Errorf("%q: rocev2 cc %v (uet cc %v), %v; want %v", tc.arg, o.client.CC, o.client.UETCC, err, tc.want)
		}
	}
	for _, tc := range []struct{ args, want string }{
		{"-c h --transport uet --cc reno", "roceperf: --cc reno: must be nscc, rccc, both or none with --transport uet"},
		{"-c h --transport uet --cc=", "roceperf: --cc : must be nscc, rccc, both or none with --transport uet"},
		{"-c h --transport uet --cc dcqcn", "roceperf: --cc dcqcn: must be nscc, rccc, both or none with --transport uet (dcqcn is RoCEv2's)"},
		{"-c h --cc both", "roceperf: --cc both: must be dcqcn or none (both is --transport uet's)"},
		{"-s --transport uet -B 198.18.0.1 --cc rccc", "roceperf: --cc is a client option"},
		{"-s -B 198.18.0.1 --cc dcqcn", "roceperf: --cc is a client option"},
	} {
		_, err := parseArgs(strings.Fields(tc.args))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q:\ngot  %v\nwant %q…", tc.args, err, tc.want)
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &out); code != exitOK ||
		!strings.Contains(out.String(), "--cc nscc|rccc|both|none") || !strings.Contains(out.String(), "--cc dcqcn|none") {
		t.Errorf("help lacks --cc for each transport:\n%s", out.String())
	}
}

// TestParseTimescale: --timescale K on either end sets the config's
// Timescale; a K outside 1..1000 is refused by name and range.
func TestParseTimescale(t *testing.T) {
	o, err := parseArgs(strings.Fields("-c 198.18.0.1 --transport uet --timescale 4"))
	if err != nil || o.client.Timescale != 4 {
		t.Fatalf("client: %+v, %v", o, err)
	}
	o, err = parseArgs(strings.Fields("-s --transport uet -B 198.18.0.1 --timescale 2.5"))
	if err != nil || o.server == nil || o.server.Timescale != 2.5 {
		t.Fatalf("server: %+v, %v", o, err)
	}
	for _, bad := range []string{"0", "0.5", "1001", "x", "NaN"} {
		_, err := parseArgs(strings.Fields("-c h --timescale " + bad))
		if want := "roceperf: --timescale " + bad + ": must be 1..1000"; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("--timescale %s: %v; want %q…", bad, err, want)
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &out); code != 0 || !strings.Contains(out.String(), "--timescale K") {
		t.Errorf("help: exit %d, lacks --timescale K", code)
	}
}

// TestCompletion: `roceperf completion` completes the flags its help
// lists, long and short.
func TestCompletion(t *testing.T) {
	run := func(args []string, stdout, stderr io.Writer) int {
		return run(context.Background(), args, stdout, stderr)
	}
	versiontest.CheckCompletion(t, "roceperf", run,
		versiontest.Case{Line: []string{"roceperf", "--tra"}, Want: []string{"--transport"}},
		versiontest.Case{Line: []string{"roceperf", "-c", "h", "--dcq"}, Want: []string{"--dcqcn", "--dcqcn-profile"}})
}
