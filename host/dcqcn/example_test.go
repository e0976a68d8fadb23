package dcqcn_test

import (
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// One CNP at 40 Gbit/s with the paper profile (dcqcn.md vector 1): the
// caller wakes the RP at NextEvent.
func ExampleRP() {
	p, err := dcqcn.Profile("paper", 40*units.Gbit)
	if err != nil {
		panic(err)
	}
	rp := dcqcn.NewRP(p, 0)
	rp.OnCNP(0)
	fmt.Println(0, rp.Rc(), rp.Rt())
	for range 6 {
		now := rp.NextEvent()
		rp.Advance(now)
		fmt.Println(now, rp.Rc(), rp.Rt())
	}
	// Output:
	// 0 20gbit 40gbit
	// 55µs 30gbit 40gbit
	// 110µs 35gbit 40gbit
	// 165µs 37500mbit 40gbit
	// 220µs 38750mbit 40gbit
	// 275µs 39375mbit 40gbit
	// 330µs 39707500kbit 40040mbit
}

// The receiver coalesces CE marks into at most one CNP per
// min_time_between_cnps.
func ExampleNP() {
	np := dcqcn.NewNP(50 * time.Microsecond)
	for _, ce := range []time.Duration{0, 10 * time.Microsecond, 20 * time.Microsecond} {
		fmt.Println(ce, np.OnCE(ce))
	}
	due, pending := np.Next()
	fmt.Println("pending", pending, "due", due, "sent", np.Poll(due))
	// Output:
	// 0s true
	// 10µs false
	// 20µs false
	// pending true due 50µs sent true
}

func ExampleParams_Set() {
	p := dcqcn.MLX5Params(25 * units.Gbit)
	fmt.Println(p.Set("rpg_time_reset", "55us"), p.Set("rpg_ai_rate", "40"))
	v, _ := p.Get("rpg_ai_rate")
	fmt.Println(v, p.RPGAIRate)
	fmt.Println(p.Set("rpg_min_dec_fac", "150"))
	// Output:
	// <nil> <nil>
	// 40 40mbit
	// dcqcn: rpg_min_dec_fac=150: must be 0..100 (percent)
}
