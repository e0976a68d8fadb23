package pds

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
)

// trimDSCP, trimLastHopDSCP are the code points the tests' "switch" puts on
// the packets it trims.
const (
	trimDSCP        = 9
	trimLastHopDSCP = 10
)

// trimmer is a filter that trims, instead of dropping, a share of the
// data packets from a: it cuts them to their headers (IPv4 would keep
// 128 bytes; the pipe carries UDP payloads, so 100) and sets dscp.
func trimmer(share float64, dscp uint8, trimmed *int) func(netip.AddrPort, *pktio.Message) bool {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(3, 4))
	return func(from netip.AddrPort, m *pktio.Message) bool {
		if from.Addr() != addrA.Addr() || m.N < 1000 {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() < share {
			*trimmed++
			m.N = 100
			m.TOS = dscp<<2 | m.TOS&ecnMask
		}
		return false
	}
}

// TestTrimmed: 2 % of the data packets are trimmed on the way. The target
// answers each with NACK TRIMMED at once, the source resends it, and
// nothing waits for a timeout or a probe: every message arrives intact,
// every trimmed packet is NACKed once and resent once.
func TestTrimmed(t *testing.T) {
	for _, tc := range []struct {
		name string
		dscp uint8
		code uet.NackCode
	}{
		{"trimmed", trimDSCP, uet.NackTrimmed},
		{"lasthop", trimLastHopDSCP, uet.NackTrimmedLastHop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trimmed := 0
			p := newPair(t, trimmer(0.02, tc.dscp, &trimmed), func(a, b *Config) {
				b.TrimDSCP, b.TrimLastHopDSCP = trimDSCP, trimLastHopDSCP
			})
			s, err := p.a.Start(addrB.Addr(), Stream{JobID: 3, MessageBytes: 100_000, Messages: 200, Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			p.wait(t, 5*time.Second, s)
			ca, cb := p.a.Counters(), p.b.Counters()
			t.Logf("%d trimmed; b: %d trimmed received, nacks %v; a: %d retransmits, %d timeouts, %d probes", trimmed, cb.TrimmedReceived, cb.NacksSent, ca.Retransmits, ca.Timeouts, ca.ProbesSent)
			if cb.MessagesReceived != 200 || cb.VerifyErrors != 0 {
				t.Fatalf("b received %d messages, %d verify errors: want 200, 0", cb.MessagesReceived, cb.VerifyErrors)
			}
			if trimmed == 0 || cb.TrimmedReceived != uint64(trimmed) || cb.NacksSent[tc.code.String()] != uint64(trimmed) || ca.NacksReceived[tc.code.String()] != uint64(trimmed) {
				t.Errorf("%d trimmed: b saw %d and sent %d %v NACKs, a received %d", trimmed, cb.TrimmedReceived, cb.NacksSent[tc.code.String()], tc.code, ca.NacksReceived[tc.code.String()])
			}
			if ca.Retransmits != uint64(trimmed) || ca.Timeouts != 0 || cb.Duplicates != 0 {
				t.Errorf("a: %d retransmits for %d trimmed, %d timeouts; b: %d duplicates: want equal, 0, 0", ca.Retransmits, trimmed, ca.Timeouts, cb.Duplicates)
			}
		})
	}
}
