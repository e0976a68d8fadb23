package aqm

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// checkIsqrt fails unless r = floor(sqrt(x)): r² ≤ x < (r+1)², computed
// without overflowing 64 bits.
func checkIsqrt(tb testing.TB, x, r uint64) {
	tb.Helper()
	const maxRoot = 1<<32 - 1 // floor(sqrt(2^64 − 1))
	if r > maxRoot {
		tb.Fatalf("Isqrt(%d) = %d, above %d", x, r, uint64(maxRoot))
	}
	if r*r > x {
		tb.Fatalf("Isqrt(%d) = %d: %d² = %d > x", x, r, r, r*r)
	}
	if r < maxRoot && (r+1)*(r+1) <= x { // (r+1)² = 2^64 > x when r = maxRoot
		tb.Fatalf("Isqrt(%d) = %d: (r+1)² = %d ≤ x", x, r, (r+1)*(r+1))
	}
}

func TestIsqrtSmallExhaustive(t *testing.T) {
	r := uint64(0)
	for x := uint64(0); x < 1<<20; x++ {
		if (r+1)*(r+1) == x {
			r++
		}
		if got := Isqrt(x); got != r {
			t.Fatalf("Isqrt(%d) = %d, want %d", x, got, r)
		}
	}
}

// TestIsqrtNearSquares checks r²−1, r², r²+2r = (r+1)²−1 for every r up to
// 2^17 and for roots spread over the whole range up to 2^32−1, whose
// (r+1)²−1 is 2^64−1.
func TestIsqrtNearSquares(t *testing.T) {
	roots := []uint64{1<<32 - 1, 1<<32 - 2, 1 << 31, 1<<31 + 1, 3037000499, 3037000500, 65535, 65536}
	for r := uint64(1); r <= 1<<17; r++ {
		roots = append(roots, r)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		roots = append(roots, 1+rng.Uint64N(1<<32-1))
	}
	for _, r := range roots {
		sq := r * r
		for _, c := range []struct{ x, want uint64 }{{sq - 1, r - 1}, {sq, r}, {sq + 2*r, r}} {
			if got := Isqrt(c.x); got != c.want {
				t.Fatalf("Isqrt(%d) = %d, want %d (r = %d)", c.x, got, c.want, r)
			}
		}
	}
	if got := Isqrt(math.MaxUint64); got != 1<<32-1 {
		t.Errorf("Isqrt(2^64-1) = %d, want %d", got, uint64(1<<32-1))
	}
	if got := Isqrt(0); got != 0 {
		t.Errorf("Isqrt(0) = %d", got)
	}
}

func TestIsqrtBig(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	xs := []uint64{math.MaxUint64, math.MaxUint64 - 1, 1 << 63, 1<<63 - 1, 1 << 62}
	for range 200000 {
		xs = append(xs, rng.Uint64()>>rng.UintN(64))
	}
	for _, x := range xs {
		want := new(big.Int).Sqrt(new(big.Int).SetUint64(x)).Uint64()
		if got := Isqrt(x); got != want {
			t.Fatalf("Isqrt(%d) = %d, want %d (math/big)", x, got, want)
		}
	}
}

func FuzzIsqrt(f *testing.F) {
	for _, x := range []uint64{0, 1, 2, 3, 4, 15, 16, 17, math.MaxUint64, math.MaxUint64 - 1,
		(1<<32 - 1) * (1<<32 - 1), (1<<32-1)*(1<<32-1) - 1, 1 << 62, 1 << 63} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x uint64) { checkIsqrt(t, x, Isqrt(x)) })
}

// controlLawBig is the documented formula in arbitrary precision.
func controlLawBig(t Time, interval time.Duration, count uint64) Time {
	count = min(max(count, 1), 1<<31)
	num := new(big.Int).Lsh(big.NewInt(int64(max(interval, 0))), 16)
	den := new(big.Int).Sqrt(new(big.Int).Lsh(new(big.Int).SetUint64(count), 32))
	return t + Time(num.Quo(num, den).Uint64())
}

func TestControlLawHand(t *testing.T) {
	const us = time.Microsecond
	for _, c := range []struct {
		t        Time
		interval time.Duration
		count    uint64
		want     Time
	}{
		{1000, 100 * time.Millisecond, 1, 1000 + 100e6}, // isqrt(2^32) = 2^16: exact
		{1000, 100 * time.Millisecond, 0, 1000 + 100e6}, // count clamped to 1
		{0, 200 * us, 4, 100000},                        // isqrt(4·2^32) = 131072
		{0, 200 * us, 2, 141422},                        // 200000·65536/92681 = 141422.7
		{0, 200 * us, 3, 115470},                        // 200000·65536/113511
		{0, 100 * time.Millisecond, 2, 70711364},        // exact 70710678: 686 ns late
		{0, 200 * us, 1 << 31, 200000 * 65536 / 3037000499},
		{0, 200 * us, math.MaxUint64, 200000 * 65536 / 3037000499}, // clamped to 2^31
		{5, -time.Second, 7, 5},                                    // negative interval counts as 0
		{math.MaxUint64, 2, 1, 1},                                  // wraps like the u64 add
	} {
		if got := ControlLaw(c.t, c.interval, c.count); got != c.want {
			t.Errorf("ControlLaw(%d, %v, %d) = %d, want %d", c.t, c.interval, c.count, got, c.want)
		}
	}
}

func TestControlLawMatchesFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 100000 {
		tt := Time(rng.Uint64())
		iv := time.Duration(rng.Int64N(int64(MaxInterval) + 1))
		if i%2 == 0 {
			iv = time.Duration(rng.Int64N(int64(10 * time.Second)))
		}
		if i%100 == 0 {
			iv = time.Duration(rng.Int64()) // beyond MaxInterval: the exact quotient
		}
		n := rng.Uint64() >> rng.UintN(64)
		if got, want := ControlLaw(tt, iv, n), controlLawBig(tt, iv, n); got != want {
			t.Fatalf("ControlLaw(%d, %d, %d) = %d, want %d", tt, iv, n, got, want)
		}
	}
}

// TestControlLawVsFloat bounds the error against interval/sqrt(count) in
// floating point, for intervals up to 10 s and counts up to 10^6. The 16.16
// square root makes it grow with interval/count: below 1 ns only up to
// intervals of count·65.5 µs (every datacenter interval at count 1..10),
// about 69 µs for 10 s at count 2.
func TestControlLawVsFloat(t *testing.T) {
	var counts []uint64
	for n := uint64(1); n <= 1000; n++ {
		counts = append(counts, n)
	}
	for n := uint64(1001); n <= 1e6; n = n*11/10 + 1 {
		counts = append(counts, n)
	}
	counts = append(counts, 1e6)
	intervals := []time.Duration{1, 999, 1000, 65535, 85 * time.Microsecond, 200 * time.Microsecond,
		time.Millisecond, 5 * time.Millisecond, 100 * time.Millisecond, time.Second, 10 * time.Second}
	var worst10s float64
	for _, iv := range intervals {
		for _, n := range counts {
			got := float64(ControlLaw(0, iv, n))
			exact := float64(iv) / math.Sqrt(float64(n))
			bound := float64(iv) / (float64(n)*65536 - math.Sqrt(float64(n)))
			const eps = 1e-6 // float64 rounding at 1e10 ns
			if got < math.Floor(exact)-eps || got-exact > bound+eps {
				t.Fatalf("ControlLaw(0, %v, %d) = %.0f, exact %.3f: outside [floor, +%.3f]", iv, n, got, exact, bound)
			}
			if iv <= 65535*time.Duration(n) && math.Abs(got-exact) >= 1 {
				t.Errorf("ControlLaw(0, %v, %d) = %.0f, exact %.3f: error ≥ 1 ns", iv, n, got, exact)
			}
			if iv == 10*time.Second {
				worst10s = max(worst10s, got-exact)
			}
		}
	}
	if worst10s > 69e3 {
		t.Errorf("worst error at 10 s = %.0f ns, want ≤ 69 µs", worst10s)
	}
	t.Logf("worst error at 10 s: %.0f ns", worst10s)
}

func TestTCNMark(t *testing.T) {
	th := 200 * time.Microsecond
	for _, c := range []struct {
		sojourn time.Duration
		want    bool
	}{{0, false}, {th - 1, false}, {th, false}, {th + 1, true}} {
		if got := TCNMark(c.sojourn, th); got != c.want {
			t.Errorf("TCNMark(%v, %v) = %v, want %v", c.sojourn, th, got, c.want)
		}
	}
}
