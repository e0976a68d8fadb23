package lab

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// CPUShare spins one thread per CPU for d and returns the share of the
// CPUs' time they got: about 1 on an idle machine, 2/3 on 2 cores beside
// one other busy thread. A lab's senders, receiver and port softirqs need
// every core; labs size their rates by it.
func CPUShare(d time.Duration) float64 {
	n := runtime.NumCPU()
	got := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			t0 := threadCPU()
			for time.Since(start) < d {
			}
			got[i] = threadCPU() - t0
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	var sum time.Duration
	for _, g := range got {
		sum += g
	}
	return min(1, float64(sum)/float64(wall)/float64(n))
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
