package labfile

import "testing"

// TestPDCIDs: a host's endpoints start their PDC IDs in a NIC flow queue
// of their own (SPDCID modulo nicFlowQueues) for nicFlowQueues in a row,
// pdcIDStride apart, in 1..65535.
func TestPDCIDs(t *testing.T) {
	if pdcIDSpan%nicFlowQueues != 0 || pdcIDSpan > 1<<16-1 || pdcIDStride%nicFlowQueues != 1 {
		t.Fatalf("span %d, stride %d: want a span that is a multiple of %d up to 65535 and a stride one more than a multiple", pdcIDSpan, pdcIDStride, nicFlowQueues)
	}
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
			if q := id % nicFlowQueues; k < nicFlowQueues {
				if queues[q] {
					t.Errorf("%s endpoint %d: ID %d shares queue %d with an earlier one", host, k, id, q)
				}
				queues[q] = true
			}
		}
	}
}
