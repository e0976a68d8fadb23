package qdisc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/fabriclab/fabriclab/bpf"
)

// IdlePeriod is a stretch of time a class's link did not send: with Held
// false it sat idle, from the end of the departure that left the class
// empty (its serialization at the class's rate included) to the next
// arrival; with Held true the port held a queued packet back while the
// link was free, from when the link was free (or the packet arrived) to
// its late departure (xmit hook only): HTB on this machine's CPUs ran
// late, which no switch does. Times are CLOCK_MONOTONIC, the clock of
// bpf_ktime_get_ns.
type IdlePeriod struct {
	Class    ClassID
	From, To time.Duration
	Held     bool
}

// IdleLog streams a port's idle periods as the programs see them end
// (bpf/idle.h). While it is open the port's enqueue writes every period
// into a ring buffer; a reader that falls 2^15 periods behind loses the
// rest (ClassStats.IdleLogLost), never the totals (ClassStats.Idle).
type IdleLog struct {
	cfg *ebpf.Map
	// mu serialises the flag's update with the port's own config writes
	// (Port.mu; nil for bare Objects).
	mu  *sync.Mutex
	rd  *ringbuf.Reader
	rec ringbuf.Record
}

// ErrIdleLogClosed is what Read returns once the log is closed, and
// ErrIdleLogFlushed once it has handed out what Flush found.
var (
	ErrIdleLogClosed  = errors.New("idle log closed")
	ErrIdleLogFlushed = errors.New("idle log flushed")
)

// OpenIdleLog starts the port's idle log. One log at a time per port:
// whoever closes it turns the port's writing off.
func (p *Port) OpenIdleLog() (*IdleLog, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil, errors.New("idle log: port is closed")
	}
	l, err := openIdleLog(&p.maps)
	if err != nil {
		return nil, err
	}
	l.mu = &p.mu.Mutex
	return l, nil
}

// OpenIdleLog starts the idle log of loaded objects (BPF_PROG_RUN tests).
func (o *Objects) OpenIdleLog() (*IdleLog, error) { return openIdleLog(&o.PortMaps) }

func openIdleLog(m *bpf.PortMaps) (*IdleLog, error) {
	if m.IdleLog == nil {
		return nil, errors.New("idle log: the port's programs have no idle_log map (pinned by an older version: detach and attach again)")
	}
	rd, err := ringbuf.NewReader(m.IdleLog)
	if err != nil {
		return nil, fmt.Errorf("idle log: %w", err)
	}
	if err := setPortFlag(m.PortCfg, portFlagIdleLog, true); err != nil {
		rd.Close()
		return nil, fmt.Errorf("idle log: %w", err)
	}
	return &IdleLog{cfg: m.PortCfg, rd: rd}, nil
}

// IdleLogPoll is how often Read looks at the ring: the programs do not
// wake the reader per event (only when the ring is half full), so that a
// port going idle after every packet does not cost the host a wakeup each.
const IdleLogPoll = 10 * time.Millisecond

// Read blocks for the next idle period; after Close it returns
// ErrIdleLogClosed, after Flush what the ring held and then
// ErrIdleLogFlushed. Periods reach it up to IdleLogPoll after they end.
func (l *IdleLog) Read() (IdlePeriod, error) {
	for {
		l.rd.SetDeadline(time.Now().Add(IdleLogPoll))
		if err := l.rd.ReadInto(&l.rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if errors.Is(err, ringbuf.ErrClosed) {
				return IdlePeriod{}, ErrIdleLogClosed
			}
			if errors.Is(err, ringbuf.ErrFlushed) {
				return IdlePeriod{}, ErrIdleLogFlushed
			}
			return IdlePeriod{}, fmt.Errorf("idle log: %w", err)
		}
		if ev, ok := decodeIdleEvent(l.rec.RawSample); ok {
			return ev, nil
		}
	}
}

// Flush makes a blocked or later Read hand out what the ring holds now,
// then return ErrIdleLogFlushed once.
func (l *IdleLog) Flush() error { return l.rd.Flush() }

// Close turns the port's writing off and ends Read.
func (l *IdleLog) Close() error {
	if l.mu != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
	}
	ferr := setPortFlag(l.cfg, portFlagIdleLog, false)
	return errors.Join(ferr, l.rd.Close())
}

// decodeIdleEvent reads a struct idle_event.
func decodeIdleEvent(b []byte) (IdlePeriod, bool) {
	if len(b) < 24 {
		return IdlePeriod{}, false
	}
	from := binary.NativeEndian.Uint64(b[0:])
	to := binary.NativeEndian.Uint64(b[8:])
	class := binary.NativeEndian.Uint32(b[16:])
	kind := binary.NativeEndian.Uint32(b[20:])
	if class >= NumClasses || to < from || kind > idleKindHeld {
		return IdlePeriod{}, false
	}
	return IdlePeriod{Class: ClassID(class), From: time.Duration(from), To: time.Duration(to), Held: kind == idleKindHeld}, true
}

// enum idle_kind (bpf/port.h).
const (
	idleKindEmpty = 0 // IDLE_EMPTY
	idleKindHeld  = 1 // IDLE_HELD
)

// setPortFlag sets or clears one bit of the port's flags.
func setPortFlag(m *ebpf.Map, flag uint32, on bool) error {
	var pc bpf.PortPortConfig
	if err := m.Lookup(uint32(0), &pc); err != nil {
		return fmt.Errorf("read port config: %w", err)
	}
	if on {
		pc.Flags |= flag
	} else {
		pc.Flags &^= flag
	}
	if err := m.Put(uint32(0), &pc); err != nil {
		return fmt.Errorf("write port config: %w", err)
	}
	return nil
}
