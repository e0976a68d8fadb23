package lb_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fabriclab/fabriclab/host/lb"
)

// How a PDS sender drives a balancer: it asks for an EV per packet, keeps
// it with the packet's PSN, and on the ACK that packet triggers (M flag:
// CE), on a trim NACK of it or on its timeout reports that EV.
func Example() {
	kind, err := lb.ParseKind("reps") // --lb reps
	if err != nil {
		panic(err)
	}
	b, err := lb.New(kind, lb.DefaultParams(), rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		panic(err)
	}
	evByPSN := map[uint32]uint16{}
	now := time.Duration(0)
	for psn := uint32(100); psn < 104; psn++ {
		evByPSN[psn] = b.Next(now) // the packet's UDP source port
	}
	// ACKs: PSN 100 clean, 101 with M (CE on its path), 103 clean.
	b.Feedback(now, evByPSN[100], lb.AckFeedback(false))
	b.Feedback(now, evByPSN[101], lb.AckFeedback(true))
	b.Feedback(now, evByPSN[103], lb.AckFeedback(false))
	// The next packets reuse the clean EVs, in the order they came back.
	fmt.Println(b.Next(now) == evByPSN[100], b.Next(now) == evByPSN[103])
	st := b.Stats()
	fmt.Println(b.EVs().Contains(evByPSN[102]), st.Explored, st.Recycled, st.Feedback)
	// Output:
	// true true
	// true 4 2 [2 1 0 0]
}
