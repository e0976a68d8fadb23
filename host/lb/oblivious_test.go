package lb

import (
	"math/rand/v2"
	"testing"
)

// htsim UecMpOblivious: each round of EVs packets uses every EV once, and
// the order changes between rounds (a new XOR mask); feedback changes
// nothing.
func TestObliviousRounds(t *testing.T) {
	p := DefaultParams()
	p.EVs = 16
	b, err := NewOblivious(p, rand.New(rand.NewPCG(5, 0)))
	if err != nil {
		t.Fatal(err)
	}
	var orders [][]uint16
	for range 8 {
		seen := map[uint16]bool{}
		var order []uint16
		for range p.EVs {
			ev := b.Next(0)
			b.Feedback(0, ev, PathTimeout)
			if seen[ev] {
				t.Fatalf("EV %d twice in a round", ev)
			}
			seen[ev] = true
			order = append(order, ev)
		}
		orders = append(orders, order)
	}
	differ := 0
	for i := 1; i < len(orders); i++ {
		if orders[i][0] != orders[i-1][0] {
			differ++
		}
	}
	if differ == 0 {
		t.Error("every round in the same order")
	}
	if st := b.Stats(); st.Packets != 128 || st.Feedback[PathTimeout] != 128 {
		t.Errorf("stats %+v", st)
	}
}
