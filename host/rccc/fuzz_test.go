package rccc_test

import (
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
)

// Ahead reads every distance of −2^23..2^23−1 back from any count, across
// the wrap, whatever the bits above the 24.
func FuzzAhead(f *testing.F) {
	f.Add(uint64(0), int32(0), uint8(0))
	f.Add(uint64(1<<24-1), int32(1<<8), uint8(0xFF))    // +1 across the wrap
	f.Add(uint64(5), int32(-(1 << 31)), uint8(1))       // −2^23
	f.Add(uint64(1<<40+3), int32(1<<31-1), uint8(0x80)) // 2^23 − 1
	f.Fuzz(func(t *testing.T, ref uint64, d32 int32, high uint8) {
		d := d32 >> 8 // −2^23..2^23−1
		wire := uet.Credit(uint32(ref+uint64(int64(d)))&uet.Units24Mask | uint32(high)<<24)
		if got := rccc.Ahead(ref, wire); got != d {
			t.Fatalf("Ahead(%#x, %#x) = %d, want %d", ref, uint32(wire), got, d)
		}
	})
}

// A stream of cumulative 24-bit values, rising from any point of the
// circle (start, mod 2^25), with older ones replayed in between (reordering, duplicates):
// the sender's credit grows by exactly the highest value's distance from
// its start, never by a replay, and never holds more than MaxWnd; a pacer
// fed the same values as targets keeps the highest and grants no more.
//
// steps: a byte b < 192 moves the count on by b·1024 units and sends it;
// b ≥ 192 replays one of the last 16 values sent. Replays stay within
// 16·191·1024 < 2^23 units of the newest, as a real receiver's do (it
// moves by at most MaxWnd and a grant between values a sender accepts).
func FuzzCumulative(f *testing.F) {
	f.Add(uint32(0), []byte{1, 2, 200, 3, 255, 0, 16})
	f.Add(uint32(1<<24-100), []byte{1, 1, 192, 1, 193, 194, 1})
	f.Add(uint32(3<<23+5), []byte{191, 191, 207, 191, 191, 200, 191})
	f.Fuzz(func(t *testing.T, start uint32, steps []byte) {
		p := labParams(t)
		p.SpeculativeBytes = 0
		p.SlowPullMaxBytes = 0
		p.GrantBytes = 1 << 20 // the final grants: few
		s := rccc.NewSender(p, 0)
		pc := rccc.NewPacer[int](p, 0)
		var count uint64 // the true cumulative count, units
		var hist []uint64
		deliver := func(v uint64) {
			before := s.Credit()
			beforeBytes := s.Stats().CreditBytes
			s.OnCredit(0, uint32(v))
			pc.OnTarget(0, 0, uet.Credit(v&uet.Units24Mask))
			st := s.Stats()
			if got := st.CreditBytes - beforeBytes; got != 0 && v != count {
				t.Fatalf("replay of %d (count %d) added %d B", v, count, got)
			}
			if s.Credit() > p.MaxWndBytes() || s.Credit() < before {
				t.Fatalf("credit %d after %d (MaxWnd %d)", s.Credit(), before, p.MaxWndBytes())
			}
			hist = append(hist, v)
			if len(hist) > 16 {
				hist = hist[1:]
			}
		}
		// Walk to start (one circle and a bit) in steps below half of it.
		for count+1<<22 <= uint64(start%(1<<25)) {
			count += 1 << 22
			deliver(count)
		}
		if len(hist) > 1 {
			hist = hist[len(hist)-1:] // the walk's steps are too far apart to replay
		}
		for _, b := range steps {
			if b < 192 || len(hist) == 0 {
				count += uint64(b) << 10
				deliver(count)
			} else {
				deliver(hist[len(hist)-1-int(b)%len(hist)])
			}
			s.OnTransmit(0, max(s.Credit(), 0))
		}
		st := s.Stats()
		if st.CreditBytes != count*uet.ByteUnit || s.Received() != uet.Credit(count&uet.Units24Mask) {
			t.Fatalf("count %d: received %d, credit bytes %d", count, s.Received(), st.CreditBytes)
		}
		src, _ := pc.Source(0)
		if count > 0 && src.TargetBytes != count*uet.ByteUnit {
			t.Fatalf("pacer target %d B, want %d", src.TargetBytes, count*uet.ByteUnit)
		}
		for now := time.Duration(0); pc.NextEvent() != rccc.Never; now = pc.NextEvent() {
			pc.Advance(now, nil)
		}
		if src, _ = pc.Source(0); src.GrantedBytes != src.TargetBytes {
			t.Fatalf("pacer granted %d B of a target of %d", src.GrantedBytes, src.TargetBytes)
		}
	})
}
