package uet

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestServiceTime(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want ServiceTime
	}{
		{-time.Second, 0},
		{0, 0},
		{127 * time.Nanosecond, 0},
		{128 * time.Nanosecond, 1},
		{80 * time.Microsecond, 625},
		{time.Duration(0xffff) * 128, 0xffff},
		{10 * time.Millisecond, MaxServiceTime},
	} {
		if got := ServiceTimeOf(c.d); got != c.want {
			t.Errorf("ServiceTimeOf(%v) = %d, want %d", c.d, got, c.want)
		}
	}
	if d := MaxServiceTime.Duration(); d != 8388480*time.Nanosecond {
		t.Errorf("MaxServiceTime = %v", d)
	}
}

func TestUnits24(t *testing.T) {
	for _, c := range []struct {
		total uint64
		want  uint32
	}{
		{0, 0}, {255, 0}, {256, 1}, {4096, 16},
		{1<<32 - 1, 1<<24 - 1}, {1 << 32, 0}, {1<<32 + 512, 2},
	} {
		if got := RcvdBytesOf(c.total); uint32(got) != c.want {
			t.Errorf("RcvdBytesOf(%d) = %d, want %d", c.total, got, c.want)
		}
		if got := CreditOf(c.total); uint32(got) != c.want {
			t.Errorf("CreditOf(%d) = %d, want %d", c.total, got, c.want)
		}
	}
	// Since across the 2^24 wrap.
	if got := RcvdBytes(2).Since(0xfffffe); got != 4*256 {
		t.Errorf("Since across the wrap = %d, want 1024", got)
	}
	if got := Credit(5).Since(5); got != 0 {
		t.Errorf("Since(self) = %d", got)
	}
	// A receiver counting every packet and a sender summing Since never
	// drift apart by a unit or more, over several wraps of 2^24 units.
	r := rand.New(rand.NewPCG(5, 6))
	var total, seen uint64
	prev := RcvdBytesOf(0)
	for range 40000 {
		total += uint64(r.IntN(1 << 20)) // up to 1 MiB between ACKs
		cur := RcvdBytesOf(total)
		seen += cur.Since(prev)
		prev = cur
		if total-seen >= ByteUnit {
			t.Fatalf("after %d bytes the sender counts %d", total, seen)
		}
	}
	if total < 3<<32 {
		t.Fatalf("test covers %d bytes, want several 4 GiB wraps", total)
	}
}
