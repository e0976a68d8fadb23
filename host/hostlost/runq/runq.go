//go:build linux

// Package runq logs the time a lab's threads waited on a runqueue,
// runnable and not running, as intervals (bpf/runq.c on the scheduler's
// tracepoints) into a hostlost.Log: for senders the lab does not run on
// its own engine (kernel TCP, iperf3), the kernel's account of when the
// host held them. A Meter intersects them with the ports' idle periods
// like an engine's held time. Schedstat's run delay (hostlost.Kernel) is
// the same total without the times, but for one thing: it dates a wait
// that a wakeup's preemption began from the wakeup, the tracer from the
// switch (the time the preempted thread still ran).
//
// A thread of a watched process waits from its wakeup, or from its
// preemption while still runnable, to the switch that puts it on a CPU.
// The softirq threads (ksoftirqd) carry the softirq work the kernel
// deferred: a switch port's forwarding, a TCP sender's ACK processing.
//
// With Config.Blocked, a watched thread's uninterruptible sleeps (D
// state, from its switch out to its wakeup) are reported too, to Each
// only: a kernel lock or I/O the thread waited on, such as rtnl_lock held
// by another namespace's teardown. They are host time a runqueue wait
// does not show; the Sink gets runqueue waits alone.
package runq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/hostlost"
)

// pollEvery is how often the reader looks at the ring.
const pollEvery = 10 * time.Millisecond

// runqBlocked is bpf/runq.c's RUNQ_BLOCKED.
const runqBlocked = 1

// Config says whose waits to log.
type Config struct {
	// PIDs are the processes (thread group ids) whose threads count.
	// Optional: none.
	PIDs []int
	// Softirq adds the ksoftirqd threads.
	Softirq bool
	// Sink gets every wait (CLOCK_MONOTONIC). Required.
	Sink *hostlost.Log
	// Each, optional, also sees every wait with its thread, on the
	// reader's goroutine: which thread the host held, and when.
	Each func(Wait)
	// Blocked also hands Each the threads' uninterruptible sleeps
	// (Wait.Blocked). Needs Each.
	Blocked bool
}

// Wait is one thread's time on a runqueue, or with Blocked, asleep in
// D state.
type Wait struct {
	From, To  time.Duration // CLOCK_MONOTONIC
	TID, TGID int
	Blocked   bool
}

// Stats count what the tracer saw.
type Stats struct {
	// Waits is how many waits it logged, Blocked how many uninterruptible
	// sleeps; RingLost those the ring had no room for, TableFull the
	// threads it could not track (8192 at once).
	Waits, Blocked, RingLost, TableFull uint64
}

// Tracer logs runqueue waits until Close.
type Tracer struct {
	objs  bpf.RunqObjects
	links []link.Link
	rd    *ringbuf.Reader
	sink  *hostlost.Log
	each  func(Wait)
	wg    sync.WaitGroup
	err   error
	once  sync.Once
}

// Start loads and attaches the tracer. It needs root (BPF, tracing).
func Start(cfg Config) (*Tracer, error) {
	if cfg.Sink == nil {
		return nil, errors.New("runq: Config.Sink is required")
	}
	if cfg.Blocked && cfg.Each == nil {
		return nil, errors.New("runq: Config.Blocked needs Config.Each")
	}
	t := &Tracer{sink: cfg.Sink, each: cfg.Each}
	spec, err := bpf.LoadRunq()
	if err != nil {
		return nil, fmt.Errorf("runq: load: %w", err)
	}
	if cfg.Blocked {
		if err := spec.Variables[bpf.RunqVarTrackBlocked].Set(uint8(1)); err != nil {
			return nil, fmt.Errorf("runq: %w", err)
		}
	}
	if err := spec.LoadAndAssign(&t.objs, bpf.LoadOptions()); err != nil {
		return nil, fmt.Errorf("runq: load: %w", err)
	}
	pids := cfg.PIDs
	if cfg.Softirq {
		pids = append(append([]int(nil), pids...), hostlost.Ksoftirqds()...)
	}
	for _, p := range pids {
		if err := t.Watch(p); err != nil {
			t.objs.Close()
			return nil, err
		}
	}
	rd, err := ringbuf.NewReader(t.objs.Waits)
	if err != nil {
		t.objs.Close()
		return nil, fmt.Errorf("runq: %w", err)
	}
	t.rd = rd
	for _, p := range []*ebpf.Program{t.objs.RunqWakeup, t.objs.RunqWakeupNew, t.objs.RunqSwitch} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			t.detach()
			return nil, fmt.Errorf("runq: attach %s: %w", p, err)
		}
		t.links = append(t.links, l)
	}
	t.wg.Add(1)
	go t.read()
	return t, nil
}

// Watch adds a process (or a kernel thread, by its pid).
func (t *Tracer) Watch(pid int) error {
	if pid <= 0 || pid > 1<<22 {
		return fmt.Errorf("runq: pid %d: must be 1..%d", pid, 1<<22)
	}
	if err := t.objs.Watched.Put(uint32(pid), uint8(1)); err != nil {
		return fmt.Errorf("runq: watch %d: %w", pid, err)
	}
	return nil
}

func (t *Tracer) read() {
	defer t.wg.Done()
	var rec ringbuf.Record
	for {
		// The program wakes no reader per wait (only a ring half full):
		// poll.
		t.rd.SetDeadline(time.Now().Add(pollEvery))
		if err := t.rd.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if !errors.Is(err, ringbuf.ErrClosed) && !errors.Is(err, ringbuf.ErrFlushed) {
				t.err = err
			}
			return
		}
		var rw bpf.RunqRunqWait
		if _, err := binary.Decode(rec.RawSample, binary.NativeEndian, &rw); err == nil {
			w := Wait{From: time.Duration(rw.FromNs), To: time.Duration(rw.ToNs), TID: int(rw.Tid), TGID: int(rw.Tgid),
				Blocked: rw.Kind == runqBlocked}
			if !w.Blocked {
				t.sink.Add(w.From, w.To)
			}
			if t.each != nil {
				t.each(w)
			}
		}
	}
}

// Stats reads the counters.
func (t *Tracer) Stats() (Stats, error) {
	var s Stats
	if err := bpf.SumPerCPU[bpf.RunqRunqStats](t.objs.Stats, 0, &s); err != nil {
		return Stats{}, fmt.Errorf("runq: stats: %w", err)
	}
	return s, nil
}

// Close detaches the tracer, hands the sink what the ring still held and
// frees everything. Later calls return the first one's result.
func (t *Tracer) Close() error {
	t.once.Do(func() {
		for _, l := range t.links {
			l.Close()
		}
		t.links = nil
		ferr := t.rd.Flush()
		if ferr != nil {
			t.rd.Close()
		}
		t.wg.Wait()
		t.err = errors.Join(t.err, ferr, t.rd.Close(), t.objs.Close())
	})
	return t.err
}

func (t *Tracer) detach() {
	for _, l := range t.links {
		l.Close()
	}
	t.rd.Close()
	t.objs.Close()
}
