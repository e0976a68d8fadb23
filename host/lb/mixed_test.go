package lb

import (
	"math/rand/v2"
	"testing"
)

// Mixed: clean EVs first, oldest first, without REPS' buffer limit; with
// none queued, the Bitmap's spray, which skips what was marked.
func TestMixed(t *testing.T) {
	p := DefaultParams()
	p.EVs = 4
	m, err := NewMixed(p, rand.New(rand.NewPCG(3, 0)))
	if err != nil {
		t.Fatal(err)
	}
	o := cursor(t, p, 3) // the Bitmap's cursor order
	e := m.EVs()
	for i := range 12 { // more than REPS' 8
		m.Feedback(0, e.ev(i%4), PathGood)
	}
	m.Feedback(0, o(1), PathECN) // the Bitmap penalises; nothing queued
	if m.Queued() != 12 {
		t.Fatalf("queued %d, want 12", m.Queued())
	}
	for i := range 12 {
		expectNext(t, m, "recycled", 0, e.ev(i%4))
	}
	expectNext(t, m, "bitmap: o0, then o1 skipped", 0, o(0), o(2))
	if pen, _ := m.Bitmap().Penalty(o(1)); pen != 0 {
		t.Errorf("o1 penalty %d after the skip, want 0", pen)
	}
	st := m.Stats()
	if st.Packets != 14 || st.Recycled != 12 || st.Skipped != 1 || st.Decays != 1 || st.Feedback[PathGood] != 12 || st.Feedback[PathECN] != 1 {
		t.Errorf("stats %+v", st)
	}
}

// The queue's limit drops the oldest.
func TestMixedLimit(t *testing.T) {
	p := DefaultParams()
	p.MixedRecycleLimit = 3
	m, err := NewMixed(p, rand.New(rand.NewPCG(4, 0)))
	if err != nil {
		t.Fatal(err)
	}
	e := m.EVs()
	for i := range 5 {
		m.Feedback(0, e.ev(i), PathGood)
	}
	if m.Queued() != 3 || m.Stats().Overflow != 2 {
		t.Fatalf("queued %d, overflow %d; want 3, 2", m.Queued(), m.Stats().Overflow)
	}
	expectNext(t, m, "the newest three", 0, e.ev(2), e.ev(3), e.ev(4))
}
