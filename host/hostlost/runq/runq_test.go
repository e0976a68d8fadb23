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
	attached := hostlost.Now()
	tr, err := Start(Config{PIDs: []int{os.Getpid()}, Softirq: true, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// Schedstat is read while the tracer is attached: the waits of its
	// loading and closing (long on a loaded machine) are in neither.
	start := hostlost.Now()
	k0, err := hostlost.ReadKernel()
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
	k1, err := hostlost.ReadKernel()
	if err != nil {
		t.Fatal(err)
	}
	end := hostlost.Now()
	st, err := tr.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	closed := hostlost.Now()
	ivs := sink.Drain(nil)
	n, total, lost := sink.Totals()
	if n == 0 || lost != 0 || st.RingLost != 0 {
		t.Fatalf("%d waits logged, %d lost in the log, %d in the ring: want some, none lost", n, lost, st.RingLost)
	}
	// Schedstat adds a wait to the run delay when it ends: the waits
	// that ended between the two readings are the same ones.
	var inWindow time.Duration
	for _, iv := range ivs {
		if iv.From < attached || iv.To > closed || iv.To < iv.From {
			t.Fatalf("wait %v..%v outside the tracer's life %v..%v", iv.From, iv.To, attached, closed)
		}
		if iv.To >= start && iv.To <= end {
			inWindow += iv.Len()
		}
	}
	delay := k1.Sub(k0).RunDelay
	t.Logf("%d waits (%+v), %v in all, %v ending between the schedstat readings; their run delay %v",
		n, st, total, inWindow, delay)
	// Schedstat counts the same waits of this process (and no softirq
	// thread's): within a tenth of each other (1–2 % apart, quiet or
	// beside stress-ng --cpu 2 --cpu-load 50).
	if inWindow < delay*9/10 || inWindow > delay*11/10 {
		t.Errorf("waits %v, run delay %v: want them within 10 %% of each other", inWindow, delay)
	}
}
