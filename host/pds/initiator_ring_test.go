package pds

import "testing"

// TestRingGrows keeps every record of [base, nxt) across the ring's growth
// from initialRing to maxPDCWindow, with base moving on the way.
func TestRingGrows(t *testing.T) {
	p := &initiator{ring: make([]txRec, initialRing), base: 1000, nxt: 1000}
	for step := range 3 * maxPDCWindow {
		if p.nxt-p.base >= maxPDCWindow-1 || step%7 == 6 {
			p.base++ // an acknowledgement
		} else {
			p.makeRoom()
			*p.rec(p.nxt) = txRec{off: uint32(p.nxt)}
			p.nxt++
		}
		if n := len(p.ring); n&(n-1) != 0 || n > maxPDCWindow || p.nxt-p.base > uint64(n) {
			t.Fatalf("step %d: ring of %d for [%d, %d)", step, n, p.base, p.nxt)
		}
	}
	for idx := p.base; idx < p.nxt; idx++ {
		if got := p.rec(idx).off; got != uint32(idx) {
			t.Fatalf("index %d holds index %d's record", idx, got)
		}
	}
	if len(p.ring) != maxPDCWindow {
		t.Errorf("ring of %d after a full window, want %d", len(p.ring), maxPDCWindow)
	}
}
