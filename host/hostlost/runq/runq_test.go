//go:build linux

package runq

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// Three busy threads on two CPUs wait for each other: the tracer logs
// their waits, each inside the run, and their total meets schedstat's
// run delay of the same threads.
func TestWaits(t *testing.T) {
	labtest.RequireRoot(t)
	sink := hostlost.NewLog()
	k0, err := hostlost.ReadKernel()
	if err != nil {
		t.Fatal(err)
	}
	start := hostlost.Now()
	tr, err := Start(Config{PIDs: []int{os.Getpid()}, Softirq: true, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range runtime.NumCPU() + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for !stop.Load() {
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	st, err := tr.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	end := hostlost.Now()
	k1, err := hostlost.ReadKernel()
	if err != nil {
		t.Fatal(err)
	}
	ivs := sink.Drain(nil)
	n, total, lost := sink.Totals()
	delay := k1.Sub(k0).RunDelay
	t.Logf("%d waits (%+v), %v in all; schedstat run delay of this process %v", n, st, total, delay)
	if n == 0 || lost != 0 || st.RingLost != 0 {
		t.Fatalf("%d waits logged, %d lost in the log, %d in the ring: want some, none lost", n, lost, st.RingLost)
	}
	for _, iv := range ivs {
		if iv.From < start || iv.To > end || iv.To < iv.From {
			t.Fatalf("wait %v..%v outside the run %v..%v", iv.From, iv.To, start, end)
		}
	}
	// Schedstat counts the same waits of this process (and no softirq
	// thread's): within a fifth of each other.
	if total < delay*4/5 {
		t.Errorf("waits %v, run delay %v: want the waits at least 80 %% of it", total, delay)
	}
}
