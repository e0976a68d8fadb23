package labfile

import "testing"

// TestPDCIDs: a host's endpoints start their PDC IDs in a flow queue of
// their own (SPDCID mod 64) for 64 in a row, 256 IDs apart, in 1..65535,
// each host from its own base.
func TestPDCIDs(t *testing.T) {
	var p pdcIDs
	for _, host := range []string{"h0", "h1"} {
		queues := map[uint16]bool{}
		prev := uint16(0)
		for k := range 200 {
			id := p.next(host)
			if id == 0 || int(id) > pdcIDSpan {
				t.Fatalf("%s endpoint %d: ID %d, want 1..%d", host, k, id, pdcIDSpan)
			}
			if want := uint16(1 + (uint32(prev)-1+pdcIDStride)%pdcIDSpan); k > 0 && id != want {
				t.Errorf("%s endpoint %d: ID %d after %d, want %d", host, k, id, prev, want)
			}
			prev = id
			if k < 64 {
				if queues[id%64] {
					t.Errorf("%s endpoint %d: ID %d shares queue %d with an earlier one", host, k, id, id%64)
				}
				queues[id%64] = true
			}
		}
	}
	if p.base["h0"] == p.base["h1"] && p.base["h0"] != 0 {
		t.Logf("both hosts drew base %d (one in %d)", p.base["h0"], pdcIDSpan)
	}
}
