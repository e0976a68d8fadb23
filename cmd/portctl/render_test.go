package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestRenderShow(t *testing.T) {
	cfg := qdisc.DefaultConfig(units.Gbit)
	e, err := qdisc.ParseEdits([]string{"3:wred-drop", "5:name=bulk:step:k=100kb", "1:rate=200mbit"}, []string{"24-25,27=3", "46=5"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	info := qdisc.Info{Dev: "swp0", Netns: "sw", PeerDev: "eth0", PeerNetns: "r",
		Mode: qdisc.QueueVeth, Attach: qdisc.AttachTCX, HTB: true, Pinned: true, Hooks: qdisc.Hooks{Departure: qdisc.DepartXmit}}
	var b bytes.Buffer
	renderShow(&b, info, &cfg)
	got := b.String()
	want := `port swp0 (netns sw)  rate 1gbit  queue veth  attach tcx  shaping htb
  peer eth0 (netns r) (dequeue hook)
  departure xmit (its own program on the tracepoint): counted as HTB hands packets to swp0; the host queue to the peer is counted apart
  dscp 24-27 -> tc3 (roce)
  dscp 46 -> tc5 (bulk)
  dscp 48 -> tc6 (cnp)
  dscp other -> tc0 (default)
  non-ip -> tc0 (default)
class tc0 (default)  limit 1mb    ecn off
class tc1            limit 1mb    ecn off                                       rate 200mbit
class tc2            limit 1mb    ecn off
class tc3 (roce)     limit 2mb    ecn wred min 50kb max 1000kb probability 0.1  wred-drop
class tc4            limit 1mb    ecn off
class tc5 (bulk)     limit 1mb    ecn step K 100kb
class tc6 (cnp)      limit 256kb  ecn off                                       strict
class tc7            limit 1mb    ecn off
`
	if got != want {
		t.Errorf("show:\n%s\nwant:\n%s", got, want)
	}
}

func TestDepartureText(t *testing.T) {
	for _, tc := range []struct {
		info qdisc.Info
		want string
	}{
		{qdisc.Info{Dev: "swp0", Hooks: qdisc.Hooks{Departure: qdisc.DepartXmit}}, "departure xmit (its own program on the tracepoint): counted as HTB hands packets to swp0; the host queue to the peer is counted apart"},
		{qdisc.Info{Dev: "swp0", Hooks: qdisc.Hooks{Departure: qdisc.DepartXmit, XmitDispatchNote: "not on a bpf filesystem"}}, "departure xmit (its own program on the tracepoint; the dispatcher: not on a bpf filesystem): counted as HTB hands packets to swp0; the host queue to the peer is counted apart"},
		{qdisc.Info{Dev: "swp0", Hooks: qdisc.Hooks{Departure: qdisc.DepartXmit, XmitDispatched: true}}, "departure xmit (the machine's xmit dispatcher): counted as HTB hands packets to swp0; the host queue to the peer is counted apart"},
		{qdisc.Info{Dev: "swp0", Hooks: qdisc.Hooks{Departure: qdisc.DepartPeerIngress, DepartureNote: "fallback: load xmit hook: no BTF"}},
			"departure peer-ingress (fallback: load xmit hook: no BTF): backlog and sojourn include the host queue between HTB and the peer"},
		{qdisc.Info{Dev: "tun0", Mode: qdisc.QueueVirtual}, ""},
	} {
		if got := departureText(tc.info); got != tc.want {
			t.Errorf("departureText(%+v) = %q, want %q", tc.info, got, tc.want)
		}
	}
}

func TestDSCPLinesMostCommonClassIsOther(t *testing.T) {
	var cfg qdisc.Config
	for d := range cfg.DSCPClass {
		cfg.DSCPClass[d] = 2
	}
	cfg.DSCPClass[0] = 0
	cfg.DefaultClass = 0
	got := strings.Join(dscpLines(&cfg), "\n")
	want := "dscp 0 -> tc0\ndscp other -> tc2\nnon-ip -> tc0"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestECNText(t *testing.T) {
	for _, tc := range []struct {
		cc   qdisc.ClassConfig
		want string
	}{
		{qdisc.ClassConfig{ECN: qdisc.ECNWRED, MinThBytes: 51200, MaxThBytes: units.MiB, MaxP: 0.1}, "wred min 50kb max 1mb probability 0.1"},
		{qdisc.ClassConfig{ECN: qdisc.ECNWRED, MinThBytes: 1500, MaxThBytes: 3000, MaxP: 1}, "wred min 1500b max 3000b probability 1"},
		{qdisc.ClassConfig{ECN: qdisc.ECNStep, MinThBytes: 100 * units.KiB}, "step K 100kb"},
		{qdisc.ClassConfig{ECN: qdisc.ECNOff}, "off"},
		{qdisc.ClassConfig{ECN: qdisc.ECNTwoThreshold, TwoThreshold: qdisc.TwoThreshold{T1Bytes: 50 * units.KiB, T2Bytes: 200 * units.KiB,
			T2MaxBytes: 400 * units.KiB, LightMaxP: 1, HeavyMaxP: 0.2}},
			"two-threshold t1 50kb t2 200kb light_probability 1 t2_max 400kb heavy_probability 0.2"},
	} {
		if got := tc.cc.ECNText(); got != tc.want {
			t.Errorf("ecnText(%+v) = %q, want %q", tc.cc, got, tc.want)
		}
	}
}

// fakeStats is a port that saw RoCE traffic with marks and drops.
func fakeStats(at time.Time, scale uint64) qdisc.Stats {
	s := qdisc.Stats{Time: at, Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
	for i := range s.Classes {
		s.Classes[i].Class = qdisc.ClassID(i)
	}
	s.Classes[0].Name = "default"
	s.Classes[6].Name = "cnp"
	c := &s.Classes[3]
	c.Name = "roce"
	c.EnqueuedPackets, c.EnqueuedBytes = 1000*scale, 1_000_000*scale
	c.DequeuedPackets, c.DequeuedBytes = 990*scale, 990_000*scale
	c.DroppedLimitPackets, c.DroppedLimitBytes = 6*scale, 6000*scale
	c.DroppedWREDPackets, c.DroppedWREDBytes = 2*scale, 2000*scale
	c.BacklogPackets, c.BacklogBytes = 2, 2000
	c.MaxBacklogPackets, c.MaxBacklogBytes = 150, 150_000
	c.ArrivedNotECT, c.ArrivedECT0, c.ArrivedECT1 = 10*scale, 980*scale, 10*scale
	c.CEMarkedECT0, c.CEMarkedECT1 = 40*scale, 1*scale
	c.DequeuedCEPackets = 39 * scale
	c.Sojourn[13] = 500 * scale // [8.192us, 16.384us)
	c.Sojourn[15] = 490 * scale // [32.768us, 65.536us)
	c.SojournSamples = 990 * scale
	c.SojournSum = time.Duration(990*scale) * 20_004 * time.Nanosecond // 20us to 3 digits
	s.Port = qdisc.PortCounters{IPv4Packets: 1000 * scale, NonIPPackets: 3, UnaccountedPackets: 3, UnaccountedBytes: 126}
	h := &c.Host
	h.EnteredPackets, h.EnteredBytes = 990*scale, 990_000*scale
	h.DeliveredPackets, h.DeliveredBytes = 989*scale, 989_000*scale
	h.BacklogPackets, h.BacklogBytes = scale, 1000*scale
	h.MaxBacklogPackets, h.MaxBacklogBytes = 40, 40_000
	h.Wait[12] = 989 * scale // [4.096us, 8.192us)
	h.WaitSum = time.Duration(989*scale) * 5_002 * time.Nanosecond
	h.WaitMax = 900_123 * time.Nanosecond
	return s
}

func TestRenderStats(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	st := fakeStats(at, 1)
	q := &qdisc.QdiscCounters{Kind: "htb", SentBytes: 990_126, SentPackets: 993, Drops: 0, BacklogBytes: 2000, BacklogPackets: 2}
	info := qdisc.Info{Dev: "swp0", Netns: "sw", Mode: qdisc.QueueVeth, Hooks: qdisc.Hooks{Departure: qdisc.DepartXmit}}
	var b bytes.Buffer
	renderStats(&b, info, &st, q, false)
	want := `port swp0 (netns sw)  queue veth  departure xmit  at 03:04:05.006
class tc3 (roce)
 Sent 990000 bytes 990 pkt (dropped 8: limit 6, wred 2, aqm 0)  marked CE 41 (ect0 40, ect1 1)  sent CE 39
 backlog 2000b 2p  max backlog 150000b 150p
 sojourn mean 20us p50 <16.4us p99 <65.6us (990 samples)
 arrived 1000000 bytes 1000 pkt: not-ect 10, ect0 980, ect1 10, ce 0
 host queue (after the port, not in its backlog): entered 990 pkt, delivered 989, dropped 0, in flight 1000b 1p (max 40000b 40p)
 host wait mean 5us p50 <8.2us p99 <8.2us max 900us
port counters: ipv4 1000 ipv6 0 vlan 0 non-ip 3 malformed 0 pkt
 unaccounted 126 bytes 3 pkt (marked CE 0, dropped 0)  dequeue-unstamped 0 pkt
 late departures 0 pkt (counted at the peer; handoff slot busy 0), stale handoffs 0
qdisc htb root: Sent 990126 bytes 993 pkt (dropped 0, overlimits 0) backlog 2000b 2p
`
	if got := b.String(); got != want {
		t.Errorf("stats:\n%s\nwant:\n%s", got, want)
	}

	// -a lists idle classes too, without a sojourn line.
	b.Reset()
	renderStats(&b, info, &st, nil, true)
	if n := strings.Count(b.String(), "\nclass "); n != qdisc.NumClasses {
		t.Errorf("-a shows %d classes, want %d:\n%s", n, qdisc.NumClasses, b.String())
	}
	if !strings.Contains(b.String(), "class tc6 (cnp)\n Sent 0 bytes 0 pkt") || strings.Count(b.String(), "sojourn") != 1 {
		t.Errorf("-a output:\n%s", b.String())
	}
	if strings.Contains(b.String(), "qdisc ") {
		t.Errorf("qdisc line without qdisc counters:\n%s", b.String())
	}

	// Two-threshold marks (seed 001) get their line.
	b.Reset()
	st.Classes[3].LightMarked, st.Classes[3].HeavyMarked = 120, 41
	renderStats(&b, info, &st, nil, false)
	if !strings.Contains(b.String(), "\n two-threshold: light marks (ect0 -> ect1) 120, heavy marks (ce) 41\n") {
		t.Errorf("two-threshold counters missing:\n%s", b.String())
	}

	// Nothing seen yet.
	b.Reset()
	idle := qdisc.Stats{Time: at, Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
	renderStats(&b, info, &idle, nil, false)
	if !strings.Contains(b.String(), "no class has seen traffic yet") {
		t.Errorf("idle output:\n%s", b.String())
	}
}

func TestRenderRates(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	prev, cur := fakeStats(t0, 1), fakeStats(t0.Add(500*time.Millisecond), 3)
	var b bytes.Buffer
	renderRates(&b, &prev, &cur)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a tc3 row and a total row, got:\n%s", b.String())
	}
	// 1980000 bytes in 0.5 s = 31.68 Mbit/s; 1980 pkt -> 3960 pps;
	// 82 marks -> 164/s; 16 drops -> 32/s; sojourn mean 20us; host wait
	// mean 5us.
	for _, l := range lines {
		f := strings.Fields(l)
		if f[0] != "03:04:05.500" {
			t.Errorf("time %q", f[0])
		}
		for _, want := range []string{"31.7", "3960", "164", "32", "2000b", "2p", "20us", "5us"} {
			if !strings.Contains(" "+strings.Join(f, " ")+" ", " "+want+" ") {
				t.Errorf("row %q lacks %q", l, want)
			}
		}
	}
	if !strings.Contains(lines[0], "tc3 (roce)") || !strings.Contains(lines[1], "total") {
		t.Errorf("rows:\n%s", b.String())
	}
	// The header's columns line up with the rows.
	if i, j := strings.Index(rateHeader, "backlog"), strings.Index(lines[0], "2000b"); i != j {
		t.Errorf("backlog column at %d in header, %d in row:\n%s\n%s", i, j, rateHeader, lines[0])
	}
	if i, j := strings.Index(rateHeader, "host wait"), strings.Index(lines[0], "5us"); i != j {
		t.Errorf("host wait column at %d in header, %d in row:\n%s\n%s", i, j, rateHeader, lines[0])
	}
}

// fakePort serves canned snapshots to statsLoop.
type fakePort struct {
	snaps []qdisc.Stats
	n     int
}

func (f *fakePort) Info() qdisc.Info { return qdisc.Info{Dev: "swp0", Mode: qdisc.QueueVeth} }
func (f *fakePort) Stats() (qdisc.Stats, error) {
	if f.n >= len(f.snaps) {
		return qdisc.Stats{}, errors.New("no more snapshots")
	}
	f.n++
	return f.snaps[f.n-1], nil
}
func (f *fakePort) Qdisc() (qdisc.QdiscCounters, error) { return qdisc.QdiscCounters{Kind: "htb"}, nil }

func TestStatsLoop(t *testing.T) {
	t0 := time.Now()
	snaps := []qdisc.Stats{fakeStats(t0, 1), fakeStats(t0.Add(time.Second), 2), fakeStats(t0.Add(2*time.Second), 3)}

	var out, errb bytes.Buffer
	if err := statsLoop(context.Background(), &out, &errb, &fakePort{snaps: snaps}, false, false, 10*time.Millisecond, 2); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "total"); n != 2 {
		t.Errorf("--count 2 printed %d reports:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), rateHeader) || !strings.HasPrefix(out.String(), "port swp0") {
		t.Errorf("watch output:\n%s", out.String())
	}

	// -j --watch: one JSON object per line, qdisc counters included.
	out.Reset()
	if err := statsLoop(context.Background(), &out, &errb, &fakePort{snaps: snaps}, true, false, 10*time.Millisecond, 2); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 JSON lines, got %d:\n%s", len(lines), out.String())
	}
	var j statsJSON
	if err := json.Unmarshal([]byte(lines[2]), &j); err != nil {
		t.Fatal(err)
	}
	if j.Dev != "swp0" || j.Qdisc == nil || j.Qdisc.Kind != "htb" || j.Classes[3].CEMarkedECT0 != 120 {
		t.Errorf("decoded %+v", j)
	}

	// Ctrl-C ends an unbounded watch cleanly.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out.Reset()
	if err := statsLoop(ctx, &out, &errb, &fakePort{snaps: snaps}, false, false, time.Hour, 0); err != nil {
		t.Fatal(err)
	}
}
