package engine

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Clock is the engine's time source: monotonic time since an arbitrary
// epoch, the "now" every congestion controller takes.
type Clock interface {
	Now() time.Duration
}

// MonotonicClock reads Go's monotonic clock relative to its creation.
type MonotonicClock struct {
	epoch time.Time
	// mono is CLOCK_MONOTONIC at epoch, which Go's monotonic clock reads
	// underneath: the kernel's timestamps (bpf_ktime_get_ns) are on it.
	mono time.Duration
}

// NewMonotonicClock returns a clock whose zero is now.
func NewMonotonicClock() *MonotonicClock {
	var t1, t2 unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &t1)
	epoch := time.Now()
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &t2)
	return &MonotonicClock{epoch: epoch, mono: time.Duration((t1.Nano() + t2.Nano()) / 2)}
}

// Now implements Clock.
func (c *MonotonicClock) Now() time.Duration { return time.Since(c.epoch) }

// Monotonic converts a time of this clock to CLOCK_MONOTONIC (within a
// microsecond).
func (c *MonotonicClock) Monotonic(d time.Duration) time.Duration { return c.mono + d }

// MonotonicClocks convert their time to CLOCK_MONOTONIC, the kernel's:
// an engine measures host-lost time only on one (Config.Held).
type MonotonicClocks interface {
	Clock
	Monotonic(time.Duration) time.Duration
}

// Waker puts the transmit loop to sleep until a deadline or a kick.
type Waker interface {
	// Sleep blocks for at most d on the waker's clock (d < 0: until a
	// kick). A kick before or during the sleep ends it at once. It returns
	// an error only once the waker is closed.
	Sleep(d time.Duration) error
	// Kick wakes a sleeping loop, or makes its next Sleep return at once.
	Kick()
	// Close ends every Sleep, now and later, with an error.
	Close() error
}

// TimerWaker is the Waker of the real clock, a timerfd. Go's own timers
// wake a sleeping runtime through epoll_wait's millisecond timeout (a
// 100 µs time.Sleep took 1 ms on the development VM), far too coarse to
// pace 1 KB packets at 1 Gbit/s (8 µs apart); a timerfd read through the
// Go netpoller wakes 25–50 µs late (host/lab
// TestDelayTimerLateness). A kick arms the same timerfd to fire at once,
// so one file serves both.
//
// Its system calls (timerfd_settime, and the read that finds the timer
// not yet expired) never block, so they go through RawSyscall: a Syscall
// announces itself to the runtime, which then wakes its sysmon thread if
// the process had gone idle — a futex wake on every sleep of a paced
// loop, 13 % of the client's CPU at 10,000 UET PDCs (issue 28's scale
// rows). The wait itself is the netpoller's.
type TimerWaker struct {
	fd       int
	file     *os.File
	raw      syscall.RawConn
	readFn   func(fd uintptr) bool // read, bound once: no allocation a sleep
	sleeping atomic.Bool
	kicked   atomic.Bool
	buf      [8]byte
	errno    syscall.Errno
}

var _ Waker = (*TimerWaker)(nil)

// NewTimerWaker returns a waker on CLOCK_MONOTONIC.
func NewTimerWaker() (*TimerWaker, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("engine: timerfd: %w", err)
	}
	file := os.NewFile(uintptr(fd), "engine-timer")
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("engine: timerfd: %w", err)
	}
	w := &TimerWaker{fd: fd, file: file, raw: raw}
	w.readFn = w.read
	return w, nil
}

func (w *TimerWaker) arm(d time.Duration) {
	w.settime(unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1))}) // 0 would disarm
}

func (w *TimerWaker) disarm() { w.settime(unix.ItimerSpec{}) }

func (w *TimerWaker) settime(ts unix.ItimerSpec) {
	_, _, _ = unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(w.fd), 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
}

// read is the RawConn's read: false while the timer has not expired,
// which makes the netpoller wait.
func (w *TimerWaker) read(fd uintptr) bool {
	for {
		_, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&w.buf[0])), uintptr(len(w.buf)))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		w.errno = e
		return true
	}
}

// Kick implements Waker. A kick already pending is the loop's to see
// (Sleep's first or second look) or has armed the timer: another arm
// would be a system call per received ACK while the loop sleeps (issue
// 28's scale rows: 18 % of the CPU at 10,000 UET PDCs).
func (w *TimerWaker) Kick() {
	if w.kicked.Swap(true) {
		return
	}
	if w.sleeping.Load() {
		w.arm(1)
	}
}

// Kicked reports whether a kick is pending (tests).
func (w *TimerWaker) Kicked() bool { return w.kicked.Load() }

// Sleep implements Waker.
//
// The kicked/sleeping pair is a Dekker handshake: either the sleeper sees
// the kick before it arms its own deadline, or the kicker sees the sleeper
// and arms the timer at once; the second look at kicked covers a kick
// whose arm(1) the sleeper's own arm overwrote.
func (w *TimerWaker) Sleep(d time.Duration) error {
	w.sleeping.Store(true)
	defer w.sleeping.Store(false)
	if w.kicked.Swap(false) {
		return nil
	}
	if d < 0 {
		w.disarm()
	} else {
		w.arm(d)
	}
	if w.kicked.Load() {
		w.arm(1)
	}
	err := w.raw.Read(w.readFn)
	w.kicked.Store(false)
	if err == nil && w.errno != 0 {
		err = fmt.Errorf("engine: read timerfd: %w", w.errno)
	}
	return err
}

// Close implements Waker.
func (w *TimerWaker) Close() error { return w.file.Close() }
