package hostlost

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// Kernel is the kernel's accounting of what it did not give a lab, read
// from /proc at one instant (ReadKernel) or between two (Sub).
type Kernel struct {
	// RunDelay is the time the lab's threads spent runnable but not
	// running (/proc/PID/task/TID/schedstat, its second field), summed
	// over threads; RunTime their time on a CPU; Threads how many were
	// read.
	RunDelay time.Duration `json:"run_delay_ns"`
	RunTime  time.Duration `json:"run_time_ns"`
	Threads  int           `json:"threads"`
	// SoftirqDelay and SoftirqTime are the same for the ksoftirqd
	// threads: softirq work (the switch ports' forwarding, the hosts'
	// receive) the kernel deferred to a thread and the wait it had there.
	SoftirqDelay time.Duration `json:"softirq_delay_ns"`
	SoftirqTime  time.Duration `json:"softirq_time_ns"`
	// Steal is the time the hypervisor ran something else on this
	// machine's CPUs, all CPUs together (/proc/stat).
	Steal time.Duration `json:"steal_ns"`
	// Squeezed counts net_rx_action runs cut short with work left
	// (softnet_stat time_squeeze); BacklogDrops packets dropped at a full
	// per-CPU input backlog (softnet_stat dropped).
	Squeezed     uint64 `json:"time_squeeze"`
	BacklogDrops uint64 `json:"backlog_drops"`
	// GoSchedWait is this process's goroutines' time runnable before they
	// ran (runtime/metrics /sched/latencies:seconds, each bucket at its
	// middle): the Go scheduler's queue, which the threads' run delay
	// does not see.
	GoSchedWait time.Duration `json:"go_sched_wait_ns"`

	// threads are the readings of each thread (by TID), so that Sub
	// counts a thread that exited between two readings as nothing rather
	// than subtracting its whole life (a negative run delay).
	threads map[int]threadStat
}

type threadStat struct{ delay, run time.Duration }

// Sub is k − o, field by field (the counters between two readings). The
// threads' run delay and run time are summed thread by thread: a thread
// of both readings counts its difference, one new since o all of its
// own, one that exited since o nothing (its last part is lost, never
// subtracted).
func (k Kernel) Sub(o Kernel) Kernel {
	d := Kernel{
		RunDelay: k.RunDelay - o.RunDelay, RunTime: k.RunTime - o.RunTime, Threads: k.Threads,
		SoftirqDelay: k.SoftirqDelay - o.SoftirqDelay, SoftirqTime: k.SoftirqTime - o.SoftirqTime,
		Steal: k.Steal - o.Steal, Squeezed: k.Squeezed - o.Squeezed, BacklogDrops: k.BacklogDrops - o.BacklogDrops,
		GoSchedWait: k.GoSchedWait - o.GoSchedWait,
	}
	if k.threads != nil && o.threads != nil {
		d.RunDelay, d.RunTime = 0, 0
		for tid, now := range k.threads {
			was := o.threads[tid]
			d.RunDelay += now.delay - was.delay
			d.RunTime += now.run - was.run
		}
	}
	return d
}

// procRoot is /proc (tests point it elsewhere).
var procRoot = "/proc"

// userHZ is the unit of /proc/stat: USER_HZ, 100 on every architecture
// Linux exports to user space.
const userHZ = 100

// ReadKernel reads the accounting of the threads of pids (none: this
// process) and of the machine. A thread that exits between the listing and
// the read is skipped.
func ReadKernel(pids ...int) (Kernel, error) {
	var k Kernel
	if len(pids) == 0 {
		pids = []int{os.Getpid()}
	}
	var errs []error
	k.threads = map[int]threadStat{}
	for _, pid := range pids {
		if err := threadsSchedstat(pid, k.threads); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ts := range k.threads {
		k.RunDelay += ts.delay
		k.RunTime += ts.run
	}
	k.Threads = len(k.threads)
	for _, pid := range Ksoftirqds() {
		if d, r, err := schedstat(filepath.Join(procRoot, strconv.Itoa(pid), "schedstat")); err == nil {
			k.SoftirqDelay += d
			k.SoftirqTime += r
		}
	}
	steal, err := readSteal()
	if err != nil {
		errs = append(errs, err)
	}
	k.Steal = steal
	k.Squeezed, k.BacklogDrops, err = readSoftnet()
	if err != nil {
		errs = append(errs, err)
	}
	k.GoSchedWait = goSchedWait()
	return k, errors.Join(errs...)
}

// threadsSchedstat reads the schedstat of every thread of pid into out.
func threadsSchedstat(pid int, out map[int]threadStat) error {
	dir := filepath.Join(procRoot, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("hostlost: threads of %d: %w", pid, err)
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		d, r, err := schedstat(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // exited meanwhile
		}
		out[tid] = threadStat{delay: d, run: r}
	}
	return nil
}

// schedstat reads "run_ns delay_ns timeslices".
func schedstat(path string) (delay, run time.Duration, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("hostlost: %s: %q: want 3 fields", path, b)
	}
	r, err1 := strconv.ParseInt(f[0], 10, 64)
	d, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("hostlost: %s: %w", path, err)
	}
	return time.Duration(d), time.Duration(r), nil
}

// ksoftirqdPIDs caches the softirq threads: they live as long as the
// machine.
var ksoftirqdPIDs []int

// Ksoftirqds are the pids of the softirq threads (ksoftirqd/N).
func Ksoftirqds() []int {
	if ksoftirqdPIDs != nil {
		return ksoftirqdPIDs
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil
	}
	pids := []int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm"))
		if err == nil && bytes.HasPrefix(comm, []byte("ksoftirqd/")) {
			pids = append(pids, pid)
		}
	}
	ksoftirqdPIDs = pids
	return pids
}

// readSteal sums the steal column of /proc/stat's "cpu" line.
func readSteal() (time.Duration, error) {
	f, err := os.Open(filepath.Join(procRoot, "stat"))
	if err != nil {
		return 0, fmt.Errorf("hostlost: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 9 || fs[0] != "cpu" {
			continue
		}
		// user nice system idle iowait irq softirq steal
		v, err := strconv.ParseUint(fs[8], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("hostlost: /proc/stat steal %q: %w", fs[8], err)
		}
		return time.Duration(v) * time.Second / userHZ, nil
	}
	return 0, errors.New("hostlost: /proc/stat has no cpu line")
}

// readSoftnet sums softnet_stat's dropped and time_squeeze over CPUs.
func readSoftnet() (squeezed, dropped uint64, err error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "net", "softnet_stat"))
	if err != nil {
		return 0, 0, fmt.Errorf("hostlost: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 3 {
			continue
		}
		d, err1 := strconv.ParseUint(fs[1], 16, 64)
		s, err2 := strconv.ParseUint(fs[2], 16, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("hostlost: softnet_stat %q: %w", line, err)
		}
		dropped += d
		squeezed += s
	}
	return squeezed, dropped, nil
}

// goSchedWait estimates the goroutines' total wait from the runtime's
// histogram of it.
func goSchedWait() time.Duration {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := s[0].Value.Float64Histogram()
	var sum float64
	for i, c := range h.Counts {
		if c == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		switch {
		case math.IsInf(lo, -1):
			lo = hi
		case math.IsInf(hi, 1):
			hi = lo
		}
		sum += float64(c) * (lo + hi) / 2
	}
	return time.Duration(sum * 1e9)
}
