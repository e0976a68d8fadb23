package perf

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// streamSet is a run's streams as the timing loop sees them, whatever the
// transport: RoCEv2 QPs (runState) or UET PDCs (uetState).
type streamSet interface {
	// Len is the number of streams.
	Len() int
	// Done is closed when stream i has ended (finished or failed).
	Done(i int) <-chan struct{}
	// Err is why stream i failed, as the tool's one-line error; nil if it
	// finished.
	Err(i int) error
	// Stop starts no new message on any stream; the ones started drain.
	Stop()
	// take builds the interval since the last one and moves the mark.
	take(now time.Duration, omitted bool) Interval
	// peek returns the bytes acknowledged since the last interval.
	peek() uint64
	// snapshotBase marks the end of the warm-up (-O).
	snapshotBase(now time.Duration)
	// notDrained is the error of streams still unacknowledged after the
	// stop.
	notDrained(waited time.Duration) error
}

// runStreams is the part of a run's state every transport shares: its
// streams (RoCEv2 QPs, UET Senders), with streamSet's Len, Done and Stop,
// and the run's marks in time.
type runStreams[S interface {
	Done() <-chan struct{}
	Stop()
}] struct {
	streams []S
	prevT   time.Duration // at the last interval report
	baseT   time.Duration // at the end of the warm-up
	endT    time.Duration
	rusage0 unix.Rusage
	wall0   time.Time
}

// Len implements streamSet.
func (rs *runStreams[S]) Len() int { return len(rs.streams) }

// Done implements streamSet.
func (rs *runStreams[S]) Done(i int) <-chan struct{} { return rs.streams[i].Done() }

// Stop implements streamSet.
func (rs *runStreams[S]) Stop() {
	for _, s := range rs.streams {
		s.Stop()
	}
}

// start marks the run's start, for its CPU share, and returns it.
func (rs *runStreams[S]) start() time.Time {
	_ = unix.Getrusage(unix.RUSAGE_SELF, &rs.rusage0)
	rs.wall0 = time.Now()
	return rs.wall0
}

// span is the summary's: from the end of the warm-up to the run's.
func (rs *runStreams[S]) span() Sum {
	start, end := rs.baseT.Seconds(), rs.endT.Seconds()
	return Sum{Start: start, End: end, Seconds: end - start}
}

// cpu is this process's CPU share since start.
func (rs *runStreams[S]) cpu() CPU { return cpuSince(&rs.rusage0, rs.wall0) }

// timedLoop runs a run's timing, the same for every transport: interval
// reports every c.Interval, the warm-up's end at c.Omit, the deadline at
// Omit + Duration (timed runs) or the streams' end (-n), a cancelled ctx;
// then the stop, and the drain for at most drainWait. Each interval goes
// to r.Intervals, to show (text output, may be nil) and to c.OnInterval.
// It returns the run's end since t0 and the first stream error.
func timedLoop(ctx context.Context, c *ClientConfig, r *Report, st streamSet, t0 time.Time, drainWait time.Duration, show func(*Interval)) (time.Duration, error) {
	n := st.Len()
	doneCh := make(chan int, n)
	for i := range n {
		go func() {
			<-st.Done(i) // closes at the latest when the transport tears the stream down
			doneCh <- i
		}()
	}

	timed := c.Bytes == 0
	omitAt, deadline := c.Omit, c.Omit+c.Duration
	omitted := c.Omit > 0
	nextTick := c.Interval
	ndone := 0
	var runErr error
	var prevT time.Duration
	interval := func(now time.Duration) {
		iv := st.take(now, omitted)
		prevT = now
		r.Intervals = append(r.Intervals, iv)
		if show != nil {
			show(&iv)
		}
		if c.OnInterval != nil {
			c.OnInterval(iv)
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
loop:
	for {
		next := time.Duration(1<<63 - 1)
		if omitted {
			next = min(next, omitAt)
		}
		if c.Interval > 0 {
			next = min(next, nextTick)
		}
		if timed {
			next = min(next, deadline)
		}
		timer.Reset(next - time.Since(t0))
		select {
		case <-ctx.Done():
			r.Interrupted = true
			break loop
		case i := <-doneCh:
			ndone++
			if err := st.Err(i); err != nil {
				runErr = err
				break loop
			}
			if ndone == n {
				break loop
			}
		case <-timer.C:
			now := time.Since(t0)
			if timed && now >= deadline {
				break loop
			}
			if omitted && now >= omitAt {
				// The warm-up ends: its last interval, then the baseline;
				// intervals restart from here.
				if c.Interval > 0 && now > prevT {
					interval(now)
				}
				omitted = false
				st.snapshotBase(now)
				nextTick = now + c.Interval
				continue
			}
			if c.Interval > 0 && now >= nextTick {
				interval(now)
				nextTick += c.Interval
				for nextTick <= now {
					nextTick += c.Interval // a late wake-up skips ticks rather than bunching them
				}
			}
		}
	}
	// Stopped during the warm-up: the summary covers it all.
	omitted = false

	// Stop, then wait for the last ACKs.
	st.Stop()
	drain := time.NewTimer(drainWait)
	defer drain.Stop()
drainLoop:
	for ndone < n {
		select {
		case i := <-doneCh:
			ndone++
			if err := st.Err(i); err != nil && runErr == nil {
				runErr = err
			}
		case <-drain.C:
			if runErr == nil {
				runErr = st.notDrained(drainWait)
			}
			break drainLoop
		}
	}
	now := time.Since(t0)
	if c.Interval > 0 && now > prevT {
		if st.peek() > 0 || now-prevT >= c.Interval/10 {
			interval(now)
		}
	}
	return now, runErr
}
