//go:build linux

package engine

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestTimerWakerNoLostKick: every kick ends a sleep (or the next one) at
// once, however kicks and sleeps interleave, repeated kicks of one
// pending wakeup included (Kick arms the timer once per pending kick).
func TestTimerWakerNoLostKick(t *testing.T) {
	w, err := NewTimerWaker()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var posted, seen atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if err := w.Sleep(-1); err != nil {
				return // closed
			}
			seen.Store(posted.Load())
		}
	}()
	const kicks = 3000
	for i := int64(1); i <= kicks; i++ {
		posted.Store(i)
		// One to three kicks of the same work, at times back to back.
		for range 1 + i%3 {
			w.Kick()
		}
		if i%7 == 0 {
			time.Sleep(time.Duration(i%50) * time.Microsecond)
		}
		deadline := time.Now().Add(2 * time.Second)
		for seen.Load() < i {
			if time.Now().After(deadline) {
				t.Fatalf("kick %d lost: the sleeper saw %d", i, seen.Load())
			}
			time.Sleep(time.Microsecond)
		}
	}
	// A kick while nobody sleeps makes the next Sleep return at once.
	w2, err := NewTimerWaker()
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	w2.Kick()
	w2.Kick()
	t0 := time.Now()
	if err := w2.Sleep(time.Second); err != nil || time.Since(t0) > 100*time.Millisecond {
		t.Errorf("a pending kick: Sleep took %v (%v)", time.Since(t0), err)
	}
	// And is consumed: the next Sleep waits its deadline.
	t0 = time.Now()
	if err := w2.Sleep(20 * time.Millisecond); err != nil || time.Since(t0) < 15*time.Millisecond {
		t.Errorf("after the kick was taken: Sleep took %v (%v), want its 20 ms", time.Since(t0), err)
	}
	w.Close()
	<-done
}
