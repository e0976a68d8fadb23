//go:build linux

package main

import "testing"

// TestMergeScaleRuns: each N's row is its median run, its ratio the
// median of the runs' ratios (each over its own run's one-flow row) with
// their spread, and failed runs are counted, not averaged in.
func TestMergeScaleRuns(t *testing.T) {
	run := func(ref, n100 float64, fail bool) []ScaleRow {
		rows := []ScaleRow{{QPs: 1, NsPerPacket: ref}, {QPs: 100, NsPerPacket: n100, GoodputBps: n100}}
		if fail {
			rows[1] = ScaleRow{QPs: 100, Error: "boom", Verdict: "failed"}
		}
		judgeScale(rows)
		return rows
	}
	got := mergeScaleRuns([][]ScaleRow{run(10, 13, false), run(16, 16, false), run(12, 18, false), run(11, 0, true)})
	if len(got) != 2 {
		t.Fatalf("%d rows", len(got))
	}
	ref, row := got[0], got[1]
	if ref.Verdict != "ref" || ref.NsPerPacket != 11 || ref.Ratio != 0 {
		t.Errorf("reference %+v: want the median run's 11 ns, verdict ref", ref)
	}
	// Ratios 1.3, 1.0, 1.5: median 1.3; the median CPU run is 16 (goodput 16).
	if row.Ratio != 1.3 || row.RatioMin != 1.0 || row.RatioMax != 1.5 || row.Failed != 1 || row.GoodputBps != 16 || row.Verdict != "above" {
		t.Errorf("row %+v: want ratio 1.3 (1.0-1.5), 1 failed, the 16-ns run, above", row)
	}
	if one := mergeScaleRuns([][]ScaleRow{run(10, 11, false)}); one[1].Ratio != 1.1 || one[1].Verdict != "ok" {
		t.Errorf("one run: %+v", one[1])
	}
	if all := mergeScaleRuns([][]ScaleRow{run(10, 0, true)}); all[1].Error == "" || all[1].Failed != 1 {
		t.Errorf("every run failed: %+v", all[1])
	}
}
