package aqm

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

const us = time.Microsecond

// TestTuneSeedTestbed uses seed 002's testbed (§5.2): 10 Gbit/s, RTTs 70 to
// 210 µs, classic ECN (λ = 1). The seed set ins_target 200 µs, pst_interval
// 200 µs, pst_target 85 µs, CoDel 85 µs / 200 µs, DCTCP-RED-Tail 250 KB and
// DCTCP-RED-AVG 80 KB. With RTT_p90 = 200 µs and RTT_avg = 85 µs the rule
// of thumb reproduces all of them except K_avg: λ·C·RTT_avg = 1.25 GB/s ×
// 85 µs = 106250 bytes, where the seed used 80 KB (which is 64 µs at
// 10 Gbit/s, below its own pst_target).
func TestTuneSeedTestbed(t *testing.T) {
	out, err := Tune(TuneInput{Rate: 10 * units.Gbit, RTTp50: 80 * us, RTTp90: 200 * us, RTTAvg: 85 * us, Lambda: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := TuneOutput{
		InsTarget: 200 * us, PstTarget: 85 * us, PstInterval: 200 * us,
		KTailBytes: 250000, KAvgBytes: 106250,
		CoDelTarget: 85 * us, CoDelInterval: 200 * us, TCNThreshold: 200 * us,
		RTTAvg: 85 * us, Notes: out.Notes,
	}
	if !equalTune(out, want) {
		t.Errorf("Tune = %+v\nwant   %+v", out, want)
	}
	if len(out.Notes) != 2 || !strings.Contains(out.Notes[0], "lower bound") || !strings.Contains(out.Notes[1], "pst_interval ≈ RTT_p90") {
		t.Errorf("notes: %q", out.Notes)
	}
}

func equalTune(a, b TuneOutput) bool {
	if len(a.Notes) != len(b.Notes) {
		return false
	}
	for i := range a.Notes {
		if a.Notes[i] != b.Notes[i] {
			return false
		}
	}
	a.Notes, b.Notes = nil, nil
	return a.InsTarget == b.InsTarget && a.PstTarget == b.PstTarget && a.PstInterval == b.PstInterval &&
		a.KTailBytes == b.KTailBytes && a.KAvgBytes == b.KAvgBytes && a.CoDelTarget == b.CoDelTarget &&
		a.CoDelInterval == b.CoDelInterval && a.TCNThreshold == b.TCNThreshold && a.RTTAvg == b.RTTAvg
}

func TestTuneCases(t *testing.T) {
	for _, c := range []struct {
		name  string
		in    TuneInput
		want  TuneOutput
		notes []string // substrings, in order, after the two standing notes are dropped
	}{
		{
			name: "DCTCP λ 0.17: 13.6 µs rounds to 14 µs",
			in:   TuneInput{Rate: 10 * units.Gbit, RTTp50: 70 * us, RTTp90: 200 * us, RTTAvg: 80 * us, Lambda: 0.17},
			want: TuneOutput{InsTarget: 34 * us, PstTarget: 14 * us, PstInterval: 200 * us, KTailBytes: 42500, KAvgBytes: 17000,
				CoDelTarget: 14 * us, CoDelInterval: 200 * us, TCNThreshold: 34 * us, RTTAvg: 80 * us},
		},
		{
			name: "DCTCP behind today's thresholds: λ 1, λ_pst 0.17 (the persistent target only)",
			in:   TuneInput{Rate: 10 * units.Gbit, RTTp50: 70 * us, RTTp90: 200 * us, RTTAvg: 80 * us, Lambda: 1, PstLambda: 0.17},
			want: TuneOutput{InsTarget: 200 * us, PstTarget: 14 * us, PstInterval: 200 * us, KTailBytes: 250000, KAvgBytes: 100000,
				CoDelTarget: 14 * us, CoDelInterval: 200 * us, TCNThreshold: 200 * us, RTTAvg: 80 * us},
		},
		{
			name: "no mean: p50 stands in",
			in:   TuneInput{Rate: 10 * units.Gbit, RTTp50: 85 * us, RTTp90: 200 * us, Lambda: 1},
			want: TuneOutput{InsTarget: 200 * us, PstTarget: 85 * us, PstInterval: 200 * us, KTailBytes: 250000, KAvgBytes: 106250,
				CoDelTarget: 85 * us, CoDelInterval: 200 * us, TCNThreshold: 200 * us, RTTAvg: 85 * us},
			notes: []string{"no average RTT given: pst_target, K_avg and the CoDel target use RTT p50 (85us)"},
		},
		{
			name: "below 1 µs: whole ns",
			in:   TuneInput{Rate: 100 * units.Gbit, RTTp50: 2 * us, RTTp90: 2 * us, RTTAvg: 1500, Lambda: 0.17},
			want: TuneOutput{InsTarget: 340, PstTarget: 255, PstInterval: 2 * us, KTailBytes: 4250, KAvgBytes: 3188,
				CoDelTarget: 255, CoDelInterval: 2 * us, TCNThreshold: 340, RTTAvg: 1500},
		},
		{
			name: "µs rounding: 200.5 µs up, 200.4 µs down",
			in:   TuneInput{Rate: units.Gbit, RTTp50: 100 * us, RTTp90: 200500, RTTAvg: 200400, Lambda: 1},
			want: TuneOutput{InsTarget: 201 * us, PstTarget: 200 * us, PstInterval: 201 * us, KTailBytes: 25063, KAvgBytes: 25050,
				CoDelTarget: 200 * us, CoDelInterval: 201 * us, TCNThreshold: 201 * us, RTTAvg: 200400},
		},
		{
			name: "mean at p90: persistent adds nothing; tiny K",
			in:   TuneInput{Rate: units.Gbit, RTTp50: us, RTTp90: 10 * us, RTTAvg: 10 * us, Lambda: 1},
			want: TuneOutput{InsTarget: 10 * us, PstTarget: 10 * us, PstInterval: 10 * us, KTailBytes: 1250, KAvgBytes: 1250,
				CoDelTarget: 10 * us, CoDelInterval: 10 * us, TCNThreshold: 10 * us, RTTAvg: 10 * us},
			notes: []string{"pst_target (10us) is not below ins_target (10us)", "K_tail (1250b) is below one 1500-byte packet", "K_avg (1250b) is below"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := Tune(c.in)
			if err != nil {
				t.Fatal(err)
			}
			got := out
			got.Notes = nil
			if !equalTune(got, c.want) {
				t.Errorf("Tune(%+v) =\n %+v\nwant\n %+v", c.in, got, c.want)
			}
			var extra []string
			for _, n := range out.Notes {
				if !strings.Contains(n, "lower bound") && !strings.Contains(n, "pst_interval ≈ RTT_p90") {
					extra = append(extra, n)
				}
			}
			if len(extra) != len(c.notes) {
				t.Fatalf("notes %q, want %q", extra, c.notes)
			}
			for i := range extra {
				if !strings.Contains(extra[i], c.notes[i]) {
					t.Errorf("note %q lacks %q", extra[i], c.notes[i])
				}
			}
		})
	}
}

func TestTuneErrors(t *testing.T) {
	good := TuneInput{Rate: 10 * units.Gbit, RTTp50: 80 * us, RTTp90: 200 * us, Lambda: 1}
	for _, c := range []struct {
		edit func(*TuneInput)
		want string
	}{
		{func(in *TuneInput) { in.Rate = 0 }, "tune: rate (0bit) must be greater than 0"},
		{func(in *TuneInput) { in.RTTp50 = 0 }, "tune: rtt_p50 (0us) must be greater than 0"},
		{func(in *TuneInput) { in.RTTp90 = -us }, "tune: rtt_p90 (-1us) must be greater than 0"},
		{func(in *TuneInput) { in.RTTp50 = 300 * us }, "tune: rtt_p50 (300us) must not exceed rtt_p90 (200us)"},
		{func(in *TuneInput) { in.RTTAvg = -5 }, "tune: rtt_avg (-5ns) must be greater than 0, or 0 to use rtt_p50"},
		{func(in *TuneInput) { in.Lambda = 0 }, "tune: lambda (0) must be in (0, 10]"},
		{func(in *TuneInput) { in.Lambda = -1 }, "tune: lambda (-1) must be in (0, 10]"},
		{func(in *TuneInput) { in.Lambda = 10.5 }, "tune: lambda (10.5) must be in (0, 10]"},
		{func(in *TuneInput) { in.PstLambda = -0.1 }, "tune: pst_lambda (-0.1) must be in [0, 10] (0: lambda's)"},
		{func(in *TuneInput) { in.Lambda = math.NaN() }, "tune: lambda (NaN) must be in (0, 10]"},
		{func(in *TuneInput) { in.RTTp50, in.RTTp90, in.Lambda = 1, 1, 0.17 }, "tune: ins_target = λ·RTT_p90 (0.17ns) is below 1ns"},
		{func(in *TuneInput) { in.RTTp90, in.Lambda = math.MaxInt64, 10 }, "tune: ins_target = λ·RTT_p90 (9.22e+10s) is too long"},
		{func(in *TuneInput) { in.Rate, in.RTTp90 = math.MaxUint64, 1000*time.Second }, "tune: K_tail = λ·C·RTT_p90 (2.31e+21 bytes) is too large"},
	} {
		in := good
		c.edit(&in)
		_, err := Tune(in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Tune(%+v): error %v, want %q", in, err, c.want)
		}
	}
	in := good
	in.Lambda = 10
	if _, err := Tune(in); err != nil {
		t.Errorf("λ 10 is allowed: %v", err)
	}
}
