package qdisc

import (
	"math"
	"testing"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

func fabricatedCurve() MarkingCurve {
	c := MarkingCurve{BinBytes: 2 << 20 / CurveBins} // 64 KiB
	c.Arrivals[0], c.Marks[0] = 700_000, 100
	c.Arrivals[1], c.Marks[1] = 240_000, 900
	c.Arrivals[2], c.Marks[2] = 33_000, 320
	c.Arrivals[15], c.Marks[15] = 1000, 300 // straddles max_th: 9.6% .. 100%
	c.Arrivals[31], c.Marks[31] = 50, 2     // at the 2 MB limit: trimmed or dropped, unmarked
	return c
}

// TestCurveCompare checks the rows against seed 000's WRED curve
// (min_th 50 KB, max_th 1000 KB, max_p 0.1, limit 2 MB).
func TestCurveCompare(t *testing.T) {
	cc := DefaultConfig(units.Gbit).Classes[ClassRoCE]
	c := fabricatedCurve()
	rows := c.Compare(&cc)
	if len(rows) != 5 {
		t.Fatalf("%d rows, want the 5 bins with arrivals", len(rows))
	}
	if last := rows[4]; !last.AtLimit || last.Match || rows[3].AtLimit {
		t.Errorf("the last bin %+v: want at the limit, not judged; bin 15 judged", last)
	}
	rows = rows[:4]
	r := rows[1]
	if r.LoBytes != 65536 || r.HiBytes != 131072 || r.Arrivals != 240_000 || r.Marks != 900 {
		t.Errorf("row 1 %+v", r)
	}
	if math.Abs(r.ConfLo-0.1*(65536-51200)/(1024000-51200)) > 1e-9 || math.Abs(r.Observed-900.0/240_000) > 1e-12 {
		t.Errorf("row 1 fractions %+v", r)
	}
	if rows[0].ConfLo != 0 || rows[3].ConfHi != 1 {
		t.Errorf("edges: bin 0 from %v, bin 15 to %v", rows[0].ConfLo, rows[3].ConfHi)
	}
	for _, r := range rows {
		if !r.Match {
			t.Errorf("bin %d-%d should match: %+v", r.LoBytes, r.HiBytes, r)
		}
	}
	// Marking below min_th at a rate WRED cannot produce is a mismatch;
	// so is a bin that marks far too little.
	c.Marks[0] = 70_000
	c.Marks[2] = 0
	rows = c.Compare(&cc)
	if rows[0].Match || rows[2].Match || !rows[1].Match {
		t.Errorf("mismatch detection: %v %v %v", rows[0].Match, rows[1].Match, rows[2].Match)
	}
	// A mode whose curve is in time has no rows.
	cc.ECN = ECNCoDel
	if rows := c.Compare(&cc); rows != nil {
		t.Errorf("codel: %d rows, want none", len(rows))
	}
}
