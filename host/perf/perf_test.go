package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/sidechan"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestFormatUnits(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{FormatBytes(0), "0.00 Bytes"},
		{FormatBytes(1000), "1000 Bytes"},
		{FormatBytes(1024), "1.00 KBytes"},
		{FormatBytes(112 << 20), " 112 MBytes"},
		{FormatBytes(1.09 * (1 << 30)), "1.09 GBytes"},
		{FormatBytes(27.2 * (1 << 20)), "27.2 MBytes"},
		{FormatBitrate(0), "0.00 bits/sec"},
		{FormatBitrate(941e6), " 941 Mbits/sec"},
		{FormatBitrate(1.41e9), "1.41 Gbits/sec"},
		{FormatBitrate(10e9), "10.0 Gbits/sec"},
		{FormatBitrate(999.6e6), "1000 Mbits/sec"}, // iperf3 picks the unit before rounding
		{FormatBitrate(1e12), "1.00 Tbits/sec"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// An interval's streams take its span, omitted and sender, and their
// bytes and rates add up in the sum.
func TestIntervalAdd(t *testing.T) {
	iv := newInterval(time.Second, 3*time.Second)
	iv.Sum.Omitted, iv.Sum.Sender = true, true
	iv.add(IntervalStream{ID: 1, Bytes: 1000})
	iv.add(IntervalStream{ID: 2, Bytes: 3000})
	want := IntervalStream{ID: 2, Start: 1, End: 3, Seconds: 2, Bytes: 3000, BitsPerSecond: 12000, Omitted: true, Sender: true}
	if got := iv.Streams[1]; got != want {
		t.Errorf("stream %+v, want %+v", got, want)
	}
	if s := iv.Sum; s.Start != 1 || s.End != 3 || s.Seconds != 2 || s.Bytes != 4000 || s.BitsPerSecond != 16000 {
		t.Errorf("sum %+v, want 1..3 s, 4000 bytes, 16000 bit/s", s)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want uint64
	}{
		{"10M", 10 << 20}, {"10m", 10 << 20}, {"64K", 64 << 10}, {"1.5K", 1536}, {"1G", 1 << 30},
		{"64kb", 64 << 10}, {"100", 100}, {"1e3", 1000}, {"2T", 2 << 40},
	} {
		if got, err := ParseBytes(tc.s); err != nil || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tc.s, got, err, tc.want)
		}
	}
	for _, s := range []string{"", "x", "-1", "10Q", "1.2.3", "K"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) succeeded", s)
		}
	}
	for _, tc := range []struct {
		s    string
		want units.Rate
	}{
		{"10G", 10 * units.Gbit}, {"10g", 10 * units.Gbit}, {"1.5m", 1500 * units.Kbit}, {"100k", 100 * units.Kbit},
		{"10gbit", 10 * units.Gbit}, {"100mbit", 100 * units.Mbit}, {"1000", 1000}, {"0", 0},
	} {
		if got, err := ParseBitrate(tc.s); err != nil || got != tc.want {
			t.Errorf("ParseBitrate(%q) = %v, %v; want %v", tc.s, got, err, tc.want)
		}
	}
	for _, s := range []string{"fast", "-1g", "10x"} {
		if _, err := ParseBitrate(s); err == nil {
			t.Errorf("ParseBitrate(%q) succeeded", s)
		}
	}
	// iperf3 users write 10Gbps for bits, tc reads bytes: refused, with both.
	if _, err := ParseBitrate("10Gbps"); err == nil || !strings.Contains(err.Error(), "write 10gbit for bits per second, or 80gbit for tc's meaning") {
		t.Errorf("ParseBitrate(10Gbps) = %v; want the ambiguity named", err)
	}
	for _, tc := range []struct {
		s    string
		want time.Duration
	}{
		{"10", 10 * time.Second}, {"0.5", 500 * time.Millisecond}, {"500ms", 500 * time.Millisecond},
		{"2s", 2 * time.Second}, {"100us", 100 * time.Microsecond}, {"0", 0},
	} {
		if got, err := ParseSeconds(tc.s); err != nil || got != tc.want {
			t.Errorf("ParseSeconds(%q) = %v, %v; want %v", tc.s, got, err, tc.want)
		}
	}
	for _, s := range []string{"soon", "-1", "5 parsecs"} {
		if _, err := ParseSeconds(s); err == nil {
			t.Errorf("ParseSeconds(%q) succeeded", s)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := DefaultClientConfig("198.18.0.1")
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := (ClientConfig{Server: "198.18.0.1"}).Validate(); err != nil {
		t.Fatalf("zero values mean the defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*ClientConfig)
		want string
	}{
		{"no server", func(c *ClientConfig) { c.Server = "" }, "server: required: no server given"},
		{"qps", func(c *ClientConfig) { c.QPs = 20000 }, "qps 20000: must be 1..16384"},
		{"negative qps", func(c *ClientConfig) { c.QPs = -1 }, "qps -1: must be 1..16384"},
		{"mtu", func(c *ClientConfig) { c.MTU = 1500 }, "mtu 1500: must be 256, 512, 1024, 2048 or 4096"},
		{"length", func(c *ClientConfig) { c.MessageBytes = 32 << 20 }, "message_size 33554432: must be 1..16777216 bytes (16M)"},
		{"time", func(c *ClientConfig) { c.Duration = 25 * time.Hour }, "duration 90000: must be 0.001..86400 seconds"},
		{"interval", func(c *ClientConfig) { c.Interval = time.Millisecond }, "interval 0.001: must be 0 (no interval reports) or 0.01..60 seconds"},
		{"omit", func(c *ClientConfig) { c.Omit = -time.Second }, "omit -1: must be 0..60 seconds"},
		{"dscp", func(c *ClientConfig) { c.DSCP = 64 }, "dscp 64: must be 1..63"},
		{"cnp dscp", func(c *ClientConfig) { c.CNPDSCP = 99 }, "cnp_dscp 99: must be 1..63"},
		{"cc", func(c *ClientConfig) { c.CC = "reno" }, "cc reno: must be dcqcn or none"},
		{"op", func(c *ClientConfig) { c.Op = 7 }, "op 7: must be write or send"},
		{"rate", func(c *ClientConfig) { c.LineRate = 2 * units.Tbit }, "line_rate 2tbit: must be 1kbit..1tbit"},
		{"profile", func(c *ClientConfig) { c.Profile = "hpcc" }, "profile hpcc: must be lab or mlx5 or paper"},
		{"window", func(c *ClientConfig) { c.Window = 1 << 21 }, "window 2097152: must be 1..1048576 packets"},
		{"ack every", func(c *ClientConfig) { c.Window, c.AckReqEvery = 8, 16 }, "ack_every 16: must be 1..8 packets (the window)"},
		{"burst", func(c *ClientConfig) { c.MaxBurst = 300 }, "burst 300: must be 1..256 packets"},
		{"timeout", func(c *ClientConfig) { c.AckTimeout = time.Microsecond }, "timeout 1µs: must be 10us..1m"},
		{"retry", func(c *ClientConfig) { c.RetryCount = 1001 }, "retry 1001: must be 0..1000"},
		{"timescale", func(c *ClientConfig) { c.Timescale = 0.5 }, "timescale 0.5: must be 1..1000"},
		{"udp port", func(c *ClientConfig) { c.UDPPort = 70000 }, "udp_port 70000: must be 0..65535"},
		{"server port", func(c *ClientConfig) { c.Server = "198.18.0.1:0" }, "port 0: must be 1..65535"},
		{"knob empty", func(c *ClientConfig) { c.Knobs = []cc.Knob{{Name: "rpg_ai_rate"}} }, `knobs: rpg_ai_rate="": invalid rate`},
		{"knob name", func(c *ClientConfig) { c.Knobs = []cc.Knob{{Name: "rpg_bogus", Value: "1"}} }, `knobs: unknown knob "rpg_bogus"`},
		{"knob value", func(c *ClientConfig) { c.Knobs = []cc.Knob{{Name: "rpg_ai_rate", Value: "20000"}} }, "knobs: rpg_ai_rate=20000: must be 0..10000"},
		{"knobs together", func(c *ClientConfig) {
			c.Profile = "paper"
			c.Knobs = []cc.Knob{{Name: "dce_tcp_rtt", Value: "10"}, {Name: "min_time_between_cnps", Value: "50"}}
		}, "knobs: dce_tcp_rtt=10: must be greater than min_time_between_cnps (50 µs)"},
		{"bytes per qp", func(c *ClientConfig) { c.Bytes, c.QPs = 1000, 2 }, "size 1000 with message_size 65536 qps 2: 1 message(s) cannot keep every QP busy"},
		{"server memory", func(c *ClientConfig) { c.QPs, c.MessageBytes = 4096, 16<<20 }, "qps 4096 with message_size 16777216: the server would register"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultClientConfig("198.18.0.1")
			tc.mod(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("got  %q\nwant %q…", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error has several lines: %q", err)
			}
		})
	}
}

func TestDCQCNParams(t *testing.T) {
	c := DefaultClientConfig("h").withDefaults()
	c.LineRate = units.Gbit
	c.CNPDSCP = 46
	c.Knobs = []cc.Knob{{Name: "rpg_ai_rate", Value: "1"}, {Name: "min_time_between_cnps", Value: "50us"}}
	p, err := c.dcqcnParams()
	if err != nil {
		t.Fatal(err)
	}
	if p.LineRate != units.Gbit || p.RPGAIRate != units.Mbit || p.MinTimeBetweenCNPs != 50*time.Microsecond || p.CNPDSCP != 46 {
		t.Errorf("params %+v", p)
	}
	// A cnp_dscp knob overrides --cnp-dscp.
	c.Knobs = append(c.Knobs, cc.Knob{Name: "cnp_dscp", Value: "40"})
	if p, _ = c.dcqcnParams(); p.CNPDSCP != 40 {
		t.Errorf("cnp_dscp knob: %d", p.CNPDSCP)
	}
	// With no line rate DCQCN runs at 10 Gbit/s.
	c.LineRate, c.Knobs = 0, nil
	if p, _ = c.dcqcnParams(); p.LineRate != DefaultLineRate {
		t.Errorf("default line rate %v", p.LineRate)
	}
	h, err := KnobHelp("paper", units.Gbit)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(dcqcn.KnobNames(), dcqcn.VariantNames()...) {
		if !strings.Contains(h, "  "+n+" ") {
			t.Errorf("knob help lacks %s:\n%s", n, h)
		}
	}
	if !strings.Contains(h, "rpg_ai_rate                    1\n") { // 40 Mbit/s at 40G, scaled to 1G
		t.Errorf("knob help does not show the paper profile's rpg_ai_rate at 1 Gbit/s:\n%s", h)
	}
}

func TestSplitServer(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port int
	}{
		{"198.18.0.1", "198.18.0.1", 18515},
		{"198.18.0.1:9000", "198.18.0.1", 9000},
		{"::1", "::1", 18515},
		{"[::1]:9000", "::1", 9000},
		{"host", "host", 18515},
		{"host:1", "host", 1},
	} {
		h, p, err := splitServer(tc.in)
		if err != nil || h != tc.host || p != tc.port {
			t.Errorf("splitServer(%q) = %q %d %v", tc.in, h, p, err)
		}
	}
}

// fakeReport is a finished 2-QP run as RunClient builds it, without the
// network.
func fakeReport(t *testing.T) *Report {
	t.Helper()
	c := DefaultClientConfig("198.18.0.1").withDefaults()
	c.QPs = 2
	c.Perftest = true
	p, err := c.dcqcnParams()
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{}
	r.Start = Start{
		Version:      "roceperf " + Version,
		Timestamp:    Timestamp{Time: "Mon, 02 Jan 2006 15:04:05 UTC", TimeSecs: 1136214245},
		ConnectingTo: ConnectingTo{Host: "198.18.0.1", Port: DefaultPort},
		TestStart:    c.testStart(p),
	}
	for i := range 2 {
		r.Start.Connected = append(r.Start.Connected, Connected{
			LocalHost: "198.18.0.2", LocalPort: 4791, SourcePort: agent.SourcePort(uint32(17 + i)), RemoteHost: "198.18.0.1", RemotePort: 4791,
			QPN: uint32(17 + i), RemoteQPN: uint32(17 + i), PSN: 0x123456, RemotePSN: 0xabcdef,
			RKey: 0x1234, RemoteRKey: 0x5678, VAddr: 0x7f0000001000, RemoteVAddr: 0x7f0000002000,
		})
	}
	iv := Interval{Sum: IntervalSum{Start: 0, End: 1, Seconds: 1, Sender: true}}
	for i := range 2 {
		s := IntervalStream{ID: uint32(17 + i), Start: 0, End: 1, Seconds: 1, Bytes: 112 << 20, Sender: true,
			RcBps: 10e9, RtBps: 10e9, Alpha: 0.999, CNPHandled: 3, CNPIgnored: 1, Retransmits: 2, TxPackets: 120000}
		s.BitsPerSecond = rate(s.Bytes, 1)
		iv.Streams = append(iv.Streams, s)
		iv.Sum.Bytes += s.Bytes
		iv.Sum.RcBps += s.RcBps
		iv.Sum.CNPHandled += 3
		iv.Sum.CNPIgnored++
		iv.Sum.Retransmits += 2
	}
	iv.Sum.BitsPerSecond = rate(iv.Sum.Bytes, 1)
	r.Intervals = []Interval{iv}
	e := &r.End
	e.SumSent = Sum{End: 1, Seconds: 1, Bytes: 224 << 20, Messages: 3584, Retransmits: 4, Sender: true}
	e.SumReceived = Sum{End: 1, Seconds: 1, Bytes: 224 << 20, Messages: 3584}
	for i := range 2 {
		snd := StreamSummary{ID: uint32(17 + i), QPN: uint32(17 + i), Sum: Sum{End: 1, Seconds: 1, Bytes: 112 << 20, Messages: 1792, Retransmits: 2, Sender: true},
			Counters: agent.Counters{RPCNPHandled: 3, RPCNPIgnored: 1, AckedBytes: 112 << 20, RetransmitPackets: 2}}
		rcv := StreamSummary{ID: uint32(17 + i), QPN: uint32(17 + i), Sum: Sum{End: 1, Seconds: 1, Bytes: 112 << 20, Messages: 1792},
			Counters: agent.Counters{NPCNPSent: 4, NPECNMarkedRoCEPackets: 9, RecvBytes: 112 << 20, DuplicateRequest: 2}}
		snd.BitsPerSecond, rcv.BitsPerSecond = rate(snd.Bytes, 1), rate(rcv.Bytes, 1)
		e.Streams = append(e.Streams, EndStream{Sender: snd, Receiver: rcv})
		e.Counters.Server = append(e.Counters.Server, agent.QPReport{QPN: uint32(17 + i), Counters: rcv.Counters})
	}
	e.SumSent.BitsPerSecond = rate(e.SumSent.Bytes, 1)
	e.SumReceived.BitsPerSecond = rate(e.SumReceived.Bytes, 1)
	e.CPU = CPU{HostTotal: 50, HostUser: 10, HostSystem: 40}
	e.Perftest = &Perftest{Bytes: 65536, Iterations: 3584, BWPeakMBps: 224, BWAvgMBps: 224, MsgRateMpps: 0.003584}
	return r
}

// checkReportJSON decodes a report into a generic map and checks that
// iperf3's keys and the RoCE ones are there.
func checkReportJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, b)
	}
	obj := func(v any, path string) map[string]any {
		o, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s is %T, want an object", path, v)
		}
		return o
	}
	arr := func(v any, path string) []any {
		a, ok := v.([]any)
		if !ok || len(a) == 0 {
			t.Fatalf("%s is %T (%v), want a non-empty array", path, v, v)
		}
		return a
	}
	has := func(o map[string]any, path string, keys ...string) {
		for _, k := range keys {
			if _, ok := o[k]; !ok {
				t.Errorf("%s lacks %q", path, k)
			}
		}
	}
	has(m, "report", "start", "intervals", "end")
	start := obj(m["start"], "start")
	has(start, "start", "connected", "version", "timestamp", "test_start")
	has(obj(arr(start["connected"], "start.connected")[0], "start.connected[0]"), "start.connected[0]",
		"local_host", "local_port", "remote_host", "remote_port", "qpn", "remote_qpn")
	ts := obj(start["test_start"], "start.test_start")
	has(ts, "start.test_start", "protocol", "num_streams", "blksize", "omit", "duration", "bytes", "tos",
		"mtu", "op", "cc", "dcqcn_profile", "dcqcn", "line_rate_bps")
	if ts["protocol"] != "RoCEv2" {
		t.Errorf("protocol %v", ts["protocol"])
	}
	has(obj(ts["dcqcn"], "start.test_start.dcqcn"), "start.test_start.dcqcn", dcqcn.KnobNames()...)
	for i, iv := range arr(m["intervals"], "intervals") {
		o := obj(iv, "intervals[i]")
		has(o, "intervals[i]", "streams", "sum")
		has(obj(o["sum"], "intervals[i].sum"), "intervals[i].sum", "start", "end", "seconds", "bytes", "bits_per_second")
		for _, s := range arr(o["streams"], "intervals[i].streams") {
			has(obj(s, "intervals[i].streams[j]"), "intervals[i].streams[j]", "id", "start", "end", "seconds", "bytes",
				"bits_per_second", "rc_bps", "rt_bps", "alpha", "cnp_handled", "cnp_ignored", "retransmits", "tx_packets")
		}
		_ = i
	}
	end := obj(m["end"], "end")
	has(end, "end", "streams", "sum_sent", "sum_received", "counters", "cpu_utilization_percent")
	mlx5 := []string{"np_cnp_sent", "np_ecn_marked_roce_packets", "rp_cnp_handled", "rp_cnp_ignored",
		"out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "duplicate_request"}
	for _, s := range arr(end["streams"], "end.streams") {
		so := obj(s, "end.streams[i]")
		for _, side := range []string{"sender", "receiver"} {
			has(obj(so[side], "end.streams[i]."+side), "end.streams[i]."+side,
				append([]string{"id", "start", "end", "seconds", "bytes", "bits_per_second"}, mlx5...)...)
		}
	}
	for _, k := range []string{"sum_sent", "sum_received"} {
		has(obj(end[k], "end."+k), "end."+k, "start", "end", "seconds", "bytes", "bits_per_second")
	}
	ctr := obj(end["counters"], "end.counters")
	has(ctr, "end.counters", "client", "server")
	has(obj(ctr["client"], "end.counters.client"), "end.counters.client", mlx5...)
	has(obj(arr(ctr["server"], "end.counters.server")[0], "end.counters.server[0]"), "end.counters.server[0]", "qpn", "counters")
	has(obj(end["cpu_utilization_percent"], "end.cpu_utilization_percent"), "end.cpu_utilization_percent",
		"host_total", "host_user", "host_system")
	return m
}

func TestReportJSON(t *testing.T) {
	r := fakeReport(t)
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	m := checkReportJSON(t, b.Bytes())
	ts := m["start"].(map[string]any)["test_start"].(map[string]any)
	dc := ts["dcqcn"].(map[string]any)
	if dc["rpg_ai_rate"] != 10.0 || dc["min_time_between_cnps"] != 1000.0 { // lab at 10G: 40 Mbit/s × 10/40, N 1 ms
		t.Errorf("dcqcn knobs: rpg_ai_rate %v, min_time_between_cnps %v", dc["rpg_ai_rate"], dc["min_time_between_cnps"])
	}
	if ts["line_rate_bps"] != 1e10 || ts["tos"] != 104.0 || ts["cc"] != "dcqcn" || ts["dcqcn_profile"] != "lab" {
		t.Errorf("test_start %v", ts)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	var b2 bytes.Buffer
	_ = back.WriteJSON(&b2)
	if !bytes.Equal(b.Bytes(), b2.Bytes()) {
		t.Errorf("JSON does not round-trip:\n%s\n---\n%s", b.Bytes(), b2.Bytes())
	}
}

func TestReportText(t *testing.T) {
	r := fakeReport(t)
	var b bytes.Buffer
	r.WriteText(&b)
	out := b.String()
	lines := strings.Split(out, "\n")
	for _, want := range []string{
		"Connecting to host 198.18.0.1, port 18515",
		"[ 17] local 198.18.0.2 port 4791 qpn 0x11 (source port 57236) connected to 198.18.0.1 port 4791 qpn 0x11",
		"Starting Test: protocol: RoCEv2, 2 QPs, 65536 byte messages, omitting 0 seconds, 10 second test, op write, mtu 1024, dscp 26, cc dcqcn (profile lab, line rate 10.0 Gbits/sec)",
		clientHeader,
		"[ 17]   0.00-1.00   sec   112 MBytes   940 Mbits/sec  10.0 Gbits/sec   0.999     4      2",
		"[SUM]   0.00-1.00   sec   224 MBytes  1.88 Gbits/sec  20.0 Gbits/sec             8      4",
		sepLine,
		"[ 17]   0.00-1.00   sec   112 MBytes   940 Mbits/sec                             4      2  sender",
		"[ 17]   0.00-1.00   sec   112 MBytes   940 Mbits/sec                                       receiver",
		"[SUM]   0.00-1.00   sec   224 MBytes  1.88 Gbits/sec                             8      4  sender",
		"counters: np_cnp_sent=8 np_ecn_marked_roce_packets=18 rp_cnp_handled=6 rp_cnp_ignored=2 out_of_sequence=0 packet_seq_err=0 local_ack_timeout_err=0 duplicate_request=4",
		" local address: LID 0000 QPN 0x000011 PSN 0x123456 RKey 0x00001234 VAddr 0x00007f0000001000",
		" remote address: LID 0000 QPN 0x000011 PSN 0xabcdef RKey 0x00005678 VAddr 0x00007f0000002000",
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:198:18:00:02",
		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
		" 65536      3584           224.00             224.00               0.003584",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q in\n%s", want, out)
		}
	}
	// The header's columns sit over the values.
	hdr := strings.Index(clientHeader, "Rc")
	if line := lines[slices.Index(lines, clientHeader)+1]; !strings.HasPrefix(line[hdr:], "10.0 Gbits/sec") {
		t.Errorf("Rc is not under its header:\n%s\n%s", clientHeader, line)
	}
	// --cc none shows the cap or "unpaced" and no α.
	r.Start.TestStart.CC = "none"
	r.Intervals[0].Streams[0].RcBps = 0
	b.Reset()
	writeIntervalText(&b, &r.Intervals[0], "none")
	if !strings.Contains(b.String(), "unpaced              -") {
		t.Errorf("--cc none interval:\n%s", b.String())
	}
	// Without the server's counters there is no receiver line.
	r.End.Counters.Server = nil
	b.Reset()
	writeSummaryText(&b, r)
	if strings.Contains(b.String(), "receiver\n") || !strings.Contains(b.String(), "no receiver lines") {
		t.Errorf("summary without server counters:\n%s", b.String())
	}
}

// TestServerAgentLine: the server's summary names every non-zero drop
// cause and the refused sessions by cause; its JSON has them all.
func TestServerAgentLine(t *testing.T) {
	sa := &ServerAgent{SideChannel: agent.ServerStats{Stats: sidechan.Stats{Refused: map[string]uint64{}, Aborted: map[string]uint64{}}}}
	if got, want := serverAgentLine(sa), "server since start: no drops, no refused sessions"; got != want {
		t.Errorf("clean: %q, want %q", got, want)
	}
	sa.Malformed, sa.ICRCErrors, sa.WrongPeer, sa.Unsupported, sa.PPFCIgnoredSource = 3, 1, 2, 4, 5
	sa.SideChannel.Refused[agent.RefusedQPs] = 1
	sa.SideChannel.Refused[agent.RefusedBufferBytes] = 2
	sa.SideChannel.Refused[agent.RefusedTimeout] = 0
	sa.SideChannel.Aborted[agent.AbortedDuration] = 1
	want := "server since start: malformed=3 icrc_errors=1 wrong_peer=2 unsupported_opcode=4 ppfc_ignored_source=5 " +
		"refused_sessions=3 (buffer_bytes=2 qps=1) aborted_sessions=1 (session_duration=1)"
	if got := serverAgentLine(sa); got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
	r := fakeReport(t)
	r.End.Counters.ServerAgent = sa
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	srv := m["end"].(map[string]any)["counters"].(map[string]any)["server_agent"].(map[string]any)
	for _, k := range []string{"malformed", "icrc_errors", "unknown_qp", "wrong_peer", "unsupported_opcode", "send_errors",
		"ppfc_received_stop", "ppfc_received_resume", "ppfc_received_alarm", "ppfc_received_hold", "ppfc_ignored_source", "ppfc_ignored_destination",
		"np_cnp_sent", "udp", "side_channel"} {
		if _, ok := srv[k]; !ok {
			t.Errorf("end.counters.server_agent lacks %q: %v", k, srv)
		}
	}
	if got := srv["side_channel"].(map[string]any)["refused"].(map[string]any)["qps"]; got != 1.0 {
		t.Errorf("side_channel.refused.qps %v", got)
	}
	// A client's report has no server_agent.
	r.End.Counters.ServerAgent = nil
	b.Reset()
	_ = r.WriteJSON(&b)
	if bytes.Contains(b.Bytes(), []byte("server_agent")) {
		t.Errorf("a client's report with server_agent")
	}
}

// TestSideChannelErr: a side channel that never answers, closes or answers
// something else says what the peer likely is not.
func TestSideChannelErr(t *testing.T) {
	server := netip.MustParseAddrPort("198.18.0.2:18515")
	var syn error
	if err := json.Unmarshal([]byte("SSH-2.0-OpenSSH_9.2\r"), new(struct{})); err != nil {
		syn = fmt.Errorf("agent: side channel to %s: bad side-channel message: %w", server, err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// A budget that ran out is not an interruption: the silence is named.
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{context.Background(), &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, "no answer on the side channel within 10s: not a roceperf server"},
		{context.Background(), fmt.Errorf("agent: side channel to %s: %w", server, io.EOF), "closed the side channel without an answer: not a roceperf server"},
		{context.Background(), syn, "answered something else than roceperf's side channel: not a roceperf server"},
		{cancelled, io.EOF, "interrupted"},
		{expired, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, "no answer on the side channel"},
	} {
		if err := sideChannelErr(tc.ctx, server, tc.err); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sideChannelErr(%v) = %v; want %q", tc.err, err, tc.want)
		}
	}
	if err := sideChannelErr(context.Background(), server, errors.New("refused the session: version 3")); err != nil {
		t.Errorf("a session refusal is not a side-channel failure: %v", err)
	}
}
