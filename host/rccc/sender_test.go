package rccc_test

import (
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

const us = time.Microsecond

// labParams are the lab's ports: 1 Gbit/s, MTU 4096, base RTT 80 µs:
// BDP 10 000 B, MaxWnd 15 000 B, grant 16 384 B.
func labParams(tb testing.TB) rccc.Params {
	tb.Helper()
	p := rccc.DefaultParams(units.Gbit, 80*us, 4096)
	if err := p.Validate(); err != nil {
		tb.Fatal(err)
	}
	return p
}

func wantCredit(tb testing.TB, s *rccc.Sender, credit int, speculating bool) {
	tb.Helper()
	if s.Credit() != credit || s.Speculating() != speculating || s.CanSend() != (credit > 0) {
		tb.Fatalf("credit %d speculating %v can send %v; want %d %v %v",
			s.Credit(), s.Speculating(), s.CanSend(), credit, speculating, credit > 0)
	}
}

// A sender starts with MaxWnd of speculative credit, sends while any is
// left (the last packet overdraws), and drops what is left on the first
// ACK, NACK or credit; a debt is kept.
func TestSenderSpeculation(t *testing.T) {
	p := labParams(t)
	t.Run("overdraw, then ACK keeps the debt", func(t *testing.T) {
		s := rccc.NewSender(p, 0)
		wantCredit(t, s, 15000, true)
		for i, want := range []int{10904, 6808, 2712, -1384} {
			s.OnTransmit(time.Duration(i)*us, 4096)
			wantCredit(t, s, want, true)
		}
		s.OnAck(100 * us)
		wantCredit(t, s, -1384, false)
		st := s.Stats()
		if st.SpeculativeBytes != 16384 || st.UnusedSpeculative != 0 || st.SentBytes != 16384 || st.Overdrawn != 0 {
			t.Errorf("stats %+v", st)
		}
		s.OnTransmit(101*us, 4096) // a caller that did not ask CanSend
		if st := s.Stats(); st.Overdrawn != 1 || st.SpeculativeBytes != 16384 {
			t.Errorf("stats %+v", st)
		}
	})
	for _, tc := range []struct {
		name  string
		event func(s *rccc.Sender)
	}{
		{"ACK", func(s *rccc.Sender) { s.OnAck(90 * us) }},
		{"NACK", func(s *rccc.Sender) { s.OnNack(90 * us) }},
		{"stale credit", func(s *rccc.Sender) { s.OnCredit(90*us, 0) }},
	} {
		t.Run("unused dropped on "+tc.name, func(t *testing.T) {
			s := rccc.NewSender(p, 0)
			s.OnTransmit(0, 4096)
			tc.event(s)
			wantCredit(t, s, 0, false)
			if st := s.Stats(); st.UnusedSpeculative != 10904 {
				t.Errorf("unused speculative %d, want 10904", st.UnusedSpeculative)
			}
			// Only the first response ends speculation: credit from now on
			// is granted credit.
			s.OnCredit(91*us, 16)
			s.OnAck(92 * us)
			wantCredit(t, s, 4096, false)
		})
	}
	t.Run("first credit: dropped, then added", func(t *testing.T) {
		s := rccc.NewSender(p, 0)
		s.OnTransmit(0, 4096)
		s.OnCredit(90*us, 16) // 16 units = 4096 B
		wantCredit(t, s, 4096, false)
	})
	t.Run("no speculative credit", func(t *testing.T) {
		q := p
		q.SpeculativeBytes = 0
		s := rccc.NewSender(q, 0)
		wantCredit(t, s, 0, true)
		s.OnCredit(10*us, 64)
		wantCredit(t, s, 15000, false) // 16 384 granted, MaxWnd held
	})
}

// Cumulative credit: each value ahead of the last adds the difference;
// duplicates and reordered (older) values add nothing; the credit never
// exceeds MaxWnd; the 24-bit count wraps.
func TestSenderCredit(t *testing.T) {
	p := labParams(t)
	p.SpeculativeBytes = 0
	s := rccc.NewSender(p, 0)
	type want struct {
		credit              int
		dup, stale, clamped uint64
		received            uet.Credit
	}
	check := func(name string, w want) {
		t.Helper()
		st := s.Stats()
		if s.Credit() != w.credit || st.DuplicateCredits != w.dup || st.StaleCredits != w.stale ||
			st.ClampedBytes != w.clamped || s.Received() != w.received {
			t.Fatalf("%s: credit %d dup %d stale %d clamped %d received %d; want %+v",
				name, s.Credit(), st.DuplicateCredits, st.StaleCredits, st.ClampedBytes, s.Received(), w)
		}
	}
	s.OnCredit(1*us, 16)
	check("first 16 units", want{4096, 0, 0, 0, 16})
	s.OnTransmit(2*us, 4096)
	s.OnCredit(3*us, 32)
	check("+16", want{4096, 0, 0, 0, 32})
	s.OnTransmit(4*us, 4096)
	s.OnCredit(5*us, 32)
	check("duplicate", want{0, 1, 0, 0, 32})
	s.OnCredit(6*us, 16)
	check("reordered older value", want{0, 1, 1, 0, 32})
	s.OnCredit(7*us, 96)
	check("+64 clamped to MaxWnd", want{15000, 1, 1, 1384, 96})
	s.OnCredit(8*us, 80)
	check("older after a clamp", want{15000, 1, 2, 1384, 96})
	s.OnCredit(9*us, 0xFF000060) // 96 with bits above the 24
	check("high bits ignored", want{15000, 2, 2, 1384, 96})
	s.OnCredit(10*us, 0xFFFFFF) // 97 units behind 96 mod 2^24
	check("2^24 − 1 is older", want{15000, 2, 3, 1384, 96})
	s.OnCredit(11*us, 96+1<<23)
	check("half the circle is older", want{15000, 2, 4, 1384, 96})
	s.OnTransmit(12*us, 15000)
	s.OnCredit(13*us, 96+1<<23-1)
	if st := s.Stats(); s.Credit() != 15000 || st.CreditBytes != 24576+(1<<23-1)*256 || s.Received() != 96+1<<23-1 {
		t.Fatalf("2^23 − 1 ahead: credit %d, credit bytes %d, received %d", s.Credit(), st.CreditBytes, s.Received())
	}
}

// The 24-bit count wraps: a sender whose received count passes 2^24 units
// takes the small values after the wrap as new credit, and the ones just
// before it as old.
func TestSenderCreditWrap(t *testing.T) {
	p := labParams(t)
	p.SpeculativeBytes = 0
	s := rccc.NewSender(p, 0)
	// Walk the count to 2^24 − 8 in steps below half the circle,
	// spending all credit each time.
	for _, c := range []uint32{1 << 22, 2 << 22, 3 << 22, 1<<24 - 8} {
		s.OnCredit(0, c)
		s.OnTransmit(0, s.Credit())
	}
	s.OnCredit(1*us, 8) // 16 units ahead across the wrap
	if s.Credit() != 4096 || s.Received() != 8 {
		t.Fatalf("across the wrap: credit %d received %d, want 4096 and 8", s.Credit(), s.Received())
	}
	s.OnCredit(2*us, 1<<24-4) // before the wrap: older
	s.OnCredit(3*us, 8)       // duplicate
	if st := s.Stats(); s.Credit() != 4096 || st.StaleCredits != 1 || st.DuplicateCredits != 1 {
		t.Fatalf("after the wrap: credit %d stats %+v", s.Credit(), st)
	}
	// The target counts from the received count and wraps with it.
	if got := s.Target(cc.CreditDemand{Backlog: 1 << 20}); got != 8+ceilDiv(15000-4096, 256) {
		t.Fatalf("target %d, want %d", got, 8+ceilDiv(15000-4096, 256))
	}
}

func ceilDiv(a, b int) uint32 { return uint32((a + b - 1) / b) }

// Target = received + ⌈(min(backlog + retx, cwnd + MTU, MaxWnd) − credit,
// at least an MTU while speculating with new data, / active sources) /
// 256⌉ (htsim computePullTarget).
func TestSenderTarget(t *testing.T) {
	p := labParams(t) // MTU 4096, MaxWnd 15 000
	const mask = 1<<24 - 1
	tests := []struct {
		name  string
		setup func(s *rccc.Sender)
		d     cc.CreditDemand
		want  int64 // units; mod 2^24
	}{
		{"speculating, full credit, long backlog: nothing lacks but an MTU", nil,
			cc.CreditDemand{Backlog: 1 << 20}, 16},
		{"speculating, no backlog: MaxWnd held, asks for less than nothing", nil,
			cc.CreditDemand{}, -(15000 / 256)}, // ⌈−58.6⌉
		{"speculating, retransmissions only: no MTU floor", nil,
			cc.CreditDemand{RetxBacklog: 8192}, -((15000 - 8192) / 256)},
		{"after one packet: its bytes back", func(s *rccc.Sender) { s.OnTransmit(0, 4096) },
			cc.CreditDemand{Backlog: 1 << 20}, 16},
		{"after overdrawing: MaxWnd plus the debt", func(s *rccc.Sender) {
			for range 4 {
				s.OnTransmit(0, 4096)
			}
		}, cc.CreditDemand{Backlog: 1 << 20}, 64},
		{"backlog below MaxWnd", func(s *rccc.Sender) { s.OnAck(0) },
			cc.CreditDemand{Backlog: 5000, RetxBacklog: 1000}, 24}, // ⌈6000/256⌉
		{"cwnd + MTU below MaxWnd", func(s *rccc.Sender) { s.OnAck(0) },
			cc.CreditDemand{Backlog: 1 << 20, Window: 4096}, 32},
		{"cwnd + MTU above MaxWnd", func(s *rccc.Sender) { s.OnAck(0) },
			cc.CreditDemand{Backlog: 1 << 20, Window: 15000}, 59}, // ⌈15000/256⌉
		{"divided among 3 active sources", func(s *rccc.Sender) { s.OnAck(0) },
			cc.CreditDemand{Backlog: 1 << 20, ActiveSources: 3}, 20}, // ⌈5000/256⌉
		{"speculating MTU floor, divided", nil,
			cc.CreditDemand{Backlog: 1 << 20, ActiveSources: 2}, 8},
		{"from the credit received, less what is held", func(s *rccc.Sender) {
			s.OnCredit(0, 1000) // 256 000 B granted, 15 000 held
			s.OnTransmit(0, 4096)
		}, cc.CreditDemand{Backlog: 1 << 20}, 1016},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := rccc.NewSender(p, 0)
			if tc.setup != nil {
				tc.setup(s)
			}
			want := uint32(tc.want) & mask
			if got := s.Target(tc.d); got != want {
				t.Errorf("target %d (%d signed), want %d (%d)", got, signed24(got), want, tc.want)
			}
		})
	}
}

func signed24(v uint32) int32 { return int32(v<<8) >> 8 }
