package pds

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/pktio"
)

// TestBalancer: a PDC sprays its packets over 128 EVs (host/lb); the pipe
// maps an EV to one of 4 "paths" by a hash, as ECMP would, and marks CE on
// every data packet of path 0. With the ACKs' M flag as feedback, Bitmap
// and REPS send less on the congested path than the oblivious spray, which
// sends its EV share; every message arrives intact.
func TestBalancer(t *testing.T) {
	path := func(ev uint16) int { return int(uint32(ev)*2654435761>>16) % 4 }
	share := map[lb.Kind]float64{}
	// Every packet an ACK covers is fed back, the ACK's trigger with its M
	// flag and the others as clean: the target ACKs at once on CE.
	for _, k := range []lb.Kind{lb.KindOblivious, lb.KindBitmap, lb.KindREPS} {
		var mu sync.Mutex
		var perPath [4]int
		evs := map[uint16]bool{}
		filter := func(from netip.AddrPort, m *pktio.Message) bool {
			if from.Addr() != addrA.Addr() || m.N < 1000 {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			pa := path(from.Port())
			perPath[pa]++
			evs[from.Port()] = true
			if pa == 0 {
				m.TOS |= ecnCE
			}
			return false
		}
		p := newPair(t, filter, func(a, _ *Config) {
			a.NewBalancer = func(pdc uint16) lb.Balancer {
				b, err := lb.New(k, lb.DefaultParams(), rand.New(rand.NewPCG(uint64(pdc), 1)))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		})
		s, err := p.a.Start(addrB.Addr(), Stream{JobID: 5, MessageBytes: 64 << 10, Messages: 300, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		p.wait(t, 5*time.Second, s)
		cb := p.b.Counters()
		if cb.MessagesReceived != 300 || cb.VerifyErrors != 0 {
			t.Fatalf("%v: b received %d messages, %d verify errors: want 300, 0", k, cb.MessagesReceived, cb.VerifyErrors)
		}
		mu.Lock()
		total := perPath[0] + perPath[1] + perPath[2] + perPath[3]
		share[k] = float64(perPath[0]) / float64(total)
		t.Logf("%v: %d EVs used, packets per path %v, congested path's share %.1f%%", k, len(evs), perPath, 100*share[k])
		if k != lb.KindREPS && len(evs) < 64 {
			// (REPS keeps to the few EVs that come back clean.)
			t.Errorf("%v: %d EVs used, want the balancer's 128 spread", k, len(evs))
		}
		mu.Unlock()
	}
	if share[lb.KindBitmap] > 0.75*share[lb.KindOblivious] || share[lb.KindREPS] > 0.5*share[lb.KindOblivious] {
		t.Errorf("congested path's share: oblivious %.3f, bitmap %.3f, reps %.3f: want bitmap ≤ 0.75×, reps ≤ 0.5× oblivious's",
			share[lb.KindOblivious], share[lb.KindBitmap], share[lb.KindREPS])
	}
}
