// Package hostlost measures what the host took away from a lab run (issue
// 26 §1). On a shared machine the senders, the switch and the receiver
// take turns on the same CPUs, and the VM itself stops a CPU for over a
// millisecond several times a second: a congestion-control result means
// the fabric only where the host did not starve it.
//
// The headline figure is the time a switch port sat idle while a sender
// had data and window it did not send: the port's idle periods come from
// its own programs (qdisc.IdleLog, bpf/idle.h), the senders' held time
// from the transport engines (host/engine: from the moment a flow could
// send — its pacer's deadline, or the kernel arrival time of the ACK or
// credit that opened its window — to the pass of the transmit loop that
// sent). Their intersection is time the fabric lost to the host, not to
// its congestion control: a window the controller held shut is not held
// time. For a transfer bound by the port (an incast) it is the time its
// completion lost; a paced flow below the line catches some of it up.
//
// Beside it, the kernel's own accounting of the run (Kernel): the lab
// threads' time runnable but not running (schedstat run delay), the same
// for the softirq threads, steal time, softirq work cut short
// (time_squeeze) and backlog drops, and the Go scheduler's wait.
package hostlost

import (
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Interval is a stretch of CLOCK_MONOTONIC time, [From, To).
type Interval struct {
	From, To time.Duration
}

// Len is the interval's length, 0 if it is empty.
func (i Interval) Len() time.Duration { return max(i.To-i.From, 0) }

// Now reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns and so of the
// ports' idle periods.
func Now() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// MaxPending bounds the intervals a Log holds between two reads of its
// Meter: a producer nobody reads stops growing there (Log.Lost).
const MaxPending = 1 << 20

// Log collects one producer's intervals (an engine's held time, a port's
// idle periods) for a Meter. Add is safe from any goroutine.
type Log struct {
	mu      sync.Mutex
	pending []Interval
	lost    uint64
	count   uint64
	total   time.Duration
	late    *Log // a held log's feedback waits (Late); nil otherwise
}

// Late is the companion of a sender's held log (Meter.HeldVia): its
// feedback waits, each from the kernel arrival of the oldest datagram of a
// batch its receive loop read (an ACK, CNP or credit) to the handling of
// that batch, when its congestion control saw it. Nil for a log no Meter
// made: there is nothing to log then.
func (l *Log) Late() *Log { return l.late }

// NewLog returns an empty log.
func NewLog() *Log { return &Log{} }

// Add records [from, to); an empty interval is ignored.
func (l *Log) Add(from, to time.Duration) {
	if to <= from {
		return
	}
	l.mu.Lock()
	l.count++
	l.total += to - from
	if len(l.pending) < MaxPending {
		l.pending = append(l.pending, Interval{from, to})
	} else {
		l.lost++
	}
	l.mu.Unlock()
}

// Totals are what the log was ever given: intervals, their summed length
// (overlaps counted twice) and those it had no room for.
func (l *Log) Totals() (count uint64, total time.Duration, lost uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count, l.total, l.lost
}

// Drain appends the pending intervals to dst and forgets them (a Meter
// drains the logs it made itself).
func (l *Log) Drain(dst []Interval) []Interval {
	l.mu.Lock()
	dst = append(dst, l.pending...)
	l.pending = l.pending[:0]
	l.mu.Unlock()
	return dst
}

// Union sorts s in place and merges it into disjoint intervals in time
// order (reusing s).
func Union(s []Interval) []Interval {
	slices.SortFunc(s, func(a, b Interval) int {
		switch {
		case a.From < b.From:
			return -1
		case a.From > b.From:
			return 1
		}
		return 0
	})
	out := s[:0]
	for _, iv := range s {
		if iv.To <= iv.From {
			continue
		}
		if n := len(out); n > 0 && iv.From <= out[n-1].To {
			out[n-1].To = max(out[n-1].To, iv.To)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// Intersect appends to dst the overlaps of two unions (disjoint, in time
// order, as Union returns them).
func Intersect(dst, a, b []Interval) []Interval {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		from, to := max(a[i].From, b[j].From), min(a[i].To, b[j].To)
		if from < to {
			dst = append(dst, Interval{from, to})
		}
		if a[i].To < b[j].To {
			i++
		} else {
			j++
		}
	}
	return dst
}

// Sum is the total length of s.
func Sum(s []Interval) time.Duration {
	var d time.Duration
	for _, iv := range s {
		d += iv.Len()
	}
	return d
}

// Clip cuts s to [from, to): the parts inside are appended to in, the parts
// after to to after; parts before from are dropped.
func Clip(s []Interval, from, to time.Duration, in, after []Interval) ([]Interval, []Interval) {
	for _, iv := range s {
		if iv.To > to {
			after = append(after, Interval{max(iv.From, to), iv.To})
		}
		if f, t := max(iv.From, from), min(iv.To, to); f < t {
			in = append(in, Interval{f, t})
		}
	}
	return in, after
}

// Between is the length of s (a union) inside [from, to).
func Between(s []Interval, from, to time.Duration) time.Duration {
	var d time.Duration
	i, _ := slices.BinarySearchFunc(s, from, func(iv Interval, t time.Duration) int {
		if iv.To <= t {
			return -1
		}
		return 1
	})
	for ; i < len(s) && s[i].From < to; i++ {
		d += max(min(s[i].To, to)-max(s[i].From, from), 0)
	}
	return d
}
