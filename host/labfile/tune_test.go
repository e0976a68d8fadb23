//go:build linux

package labfile

import (
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
)

// tuned is a file whose port's thresholds come from its senders' RTTs:
// h1 0.2 ms and h2 1 ms away (both ways), at 100 Mbit/s.
const tuned = `name: t
nodes:
  - {name: h1, kind: host}
  - {name: h2, kind: host}
  - {name: sw1, kind: switch}
  - {name: r1, kind: host}
links:
  - {a: h1, b: sw1, delay: 100us}
  - {a: h2, b: sw1, delay: 500us}
  - {a: sw1, b: r1, rate: 100mbit}
tune: {port: sw1:r1, lambda: 1, pst_lambda: 0.17}
ports:
  - {port: sw1:r1, tc: ["0:step:k=$k_tail,limit=$limit"]}
flows:
  - {name: f1, from: h1, to: r1, transport: tcp}
  - {name: f2, from: h2, to: r1, transport: tcp}
variants:
  - name: tail
  - name: sharp
    ports: [{port: sw1:r1, tc: ["0:ecnsharp:ins=$ins_target,pst=$pst_target,interval=$pst_interval"]}]
`

// TestTuneNominal: without a run, the $names take aqm.Tune's values at
// the nominal RTTs (each path's delays both ways + NominalHostRTT),
// pooled over the senders, in the file's port and its variants'.
func TestTuneNominal(t *testing.T) {
	f, err := Parse("t.yaml", []byte(tuned))
	if err != nil {
		t.Fatal(err)
	}
	tv := f.Tuned()
	if tv == nil || tv.Source != TuneNominal || len(tv.RTTs) != 2 {
		t.Fatalf("tuned %+v", tv)
	}
	if tv.RTTs[0].From != "h1" || tv.RTTs[0].NominalUS != 300 || tv.RTTs[1].From != "h2" || tv.RTTs[1].NominalUS != 1100 {
		t.Errorf("nominal RTTs %+v: want h1 300 µs, h2 1100 µs", tv.RTTs)
	}
	// Pooled, nearest rank: p50 300 µs, p90 1100 µs, mean 700 µs.
	want, err := aqm.Tune(aqm.TuneInput{Rate: 100e6, RTTp50: 300 * time.Microsecond, RTTp90: 1100 * time.Microsecond,
		RTTAvg: 700 * time.Microsecond, Lambda: 1, PstLambda: 0.17})
	if err != nil {
		t.Fatal(err)
	}
	if tv.Out.KTailBytes != want.KTailBytes || tv.Out.PstTarget != want.PstTarget || tv.Out.InsTarget != want.InsTarget {
		t.Errorf("tune %+v, want %+v", tv.Out, want)
	}
	c := f.Plan().Ports[0].Config.Classes[0]
	if c.ECN != qdisc.ECNStep || c.MinThBytes != want.KTailBytes || c.LimitBytes != max(4*want.KTailBytes, TuneMinLimit) {
		t.Errorf("class 0 %+v: want step at K %d, limit %d", c, want.KTailBytes, max(4*want.KTailBytes, TuneMinLimit))
	}
	s := f.Plan().Variants[1].Plan.Ports[0].Config.Classes[0]
	if s.ECN != qdisc.ECNSharp || s.InsTarget != want.InsTarget || s.PstTarget != want.PstTarget || s.PstInterval != want.PstInterval {
		t.Errorf("variant sharp's class 0 %+v: want ECN♯ at %v/%v/%v", s, want.InsTarget, want.PstTarget, want.PstInterval)
	}
	if txt := tv.TuneText(); !strings.Contains(txt, "$k_tail 13.8 KB") || !strings.Contains(txt, "h1 300, h2 1100") {
		t.Errorf("TuneText:\n%s", txt)
	}
}

// TestTunePlanMeasured: a run's values (measured RTTs) replan the ports
// of the variant it runs, and leave the file's own plan as it was.
func TestTunePlanMeasured(t *testing.T) {
	f, err := Parse("t.yaml", []byte(tuned))
	if err != nil {
		t.Fatal(err)
	}
	probes, port, err := f.tuneProbes(f.Plan())
	if err != nil || port != 0 || len(probes) != 2 || probes[1].addr.String() != "198.18.2.2" {
		t.Fatalf("probes %+v, port %d: %v", probes, port, err)
	}
	samples := [][]time.Duration{{2 * time.Millisecond, 2 * time.Millisecond}, {4 * time.Millisecond, 4 * time.Millisecond}}
	tv, err := f.tuneValues(TuneMeasured, 100e6, probes, samples, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if tv.Pooled.P90 != 4000 || tv.Values["k_tail"] != "50000b" || tv.Values["ins_target"] != "4000000ns" || tv.RTTs[1].Lost != 1 {
		t.Errorf("values %+v", tv)
	}
	p, err := f.planTuned(1, tv)
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Ports[0].Config.Classes[0]; c.ECN != qdisc.ECNSharp || c.InsTarget != 4*time.Millisecond {
		t.Errorf("variant sharp, tuned: class 0 %+v", c)
	}
	if c := f.Plan().Variants[1].Plan.Ports[0].Config.Classes[0]; c.InsTarget == 4*time.Millisecond || f.Tuned().Source != TuneNominal {
		t.Errorf("the file's plan changed: %+v", c)
	}
	if _, err := f.tuneValues(TuneMeasured, 100e6, probes, [][]time.Duration{{time.Millisecond}, nil}, []int{0, 50}); err == nil ||
		!strings.Contains(err.Error(), "every one of h2's 50 probes to r1 was lost") {
		t.Errorf("all lost: %v", err)
	}
}

// TestTuneErrors: each mistake's message names the field, the value and
// what is allowed.
func TestTuneErrors(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(tuned, old) {
			t.Fatalf("tuned lacks %q", old)
		}
		return strings.Replace(tuned, old, new, 1)
	}
	for _, c := range []struct{ src, want string }{
		{edit("lambda: 1,", "lambda: 20,"), `t.yaml:11: tune.lambda: "20": want 0.01..10 (default 1)`},
		{edit("pst_lambda: 0.17", "pst_lambda: -1"), `t.yaml:11: tune.pst_lambda: "-1": want 0.01..10 (default lambda)`},
		{edit("lambda: 1,", "rtt: guessed,"), `t.yaml:11: tune.rtt: "guessed": want measured or nominal (default measured)`},
		{edit("lambda: 1,", "probes: 20000,"), `t.yaml:11: tune.probes: "20000": want 1..10000 (default 50)`},
		{edit("port: sw1:r1,", "port: sw1:h1,"), `t.yaml:11: tune.port: "sw1:h1": no switch port there; ports are sw1:r1`},
		{edit("$k_tail,", "$k_tial,"), `t.yaml:13: ports[0].tc[0]: "0:step:k=$k_tial,limit=$limit": unknown tuned value "$k_tial"; tune gives $k_tail, $k_avg, $limit`},
		{edit("tune: {port: sw1:r1, lambda: 1, pst_lambda: 0.17}\n", ""), `t.yaml:12: ports[0].tc[0]: "0:step:k=$k_tail,limit=$limit": $k_tail is a tuned value: the file needs a tune block`},
		{edit("$pst_target,", "$ins_target,"), `t.yaml:20: variants[1].ports[0]: "sw1:r1": the port at 100mbit: class 0: ecnsharp: pst_target (1.1ms) must be below ins_target (1.1ms)`},
	} {
		_, err := Parse("t.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v\nwant %s", err, c.want)
		}
	}
}
