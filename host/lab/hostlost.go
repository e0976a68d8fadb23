package lab

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/qdisc"
)

// MeterPort feeds the idle periods of a port's classes (all of them when
// none are named), and the time it held their packets back, into m as the
// port name, until the returned stop is
// called: before m.Stop, so that the meter has them all, and before the
// port closes. A class's idle periods are its link's only if the other
// classes are idle too: name the class the lab's data goes through.
func MeterPort(m *hostlost.Meter, name string, p *qdisc.Port, classes ...qdisc.ClassID) (stop func() error, err error) {
	l, err := p.OpenIdleLog()
	if err != nil {
		return nil, fmt.Errorf("meter port %s: %w", name, err)
	}
	sink := m.Port(name)
	var wg sync.WaitGroup
	var rerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ip, err := l.Read()
			if err != nil {
				// stop's flush: the ring is drained.
				if !errors.Is(err, qdisc.ErrIdleLogFlushed) && !errors.Is(err, qdisc.ErrIdleLogClosed) {
					rerr = err
				}
				return
			}
			if len(classes) > 0 && !slices.Contains(classes, ip.Class) {
				continue
			}
			if ip.Held {
				sink.HeldBack.Add(ip.From, ip.To)
			} else {
				sink.Idle.Add(ip.From, ip.To)
			}
		}
	}()
	var once sync.Once
	var cerr error
	return func() error {
		once.Do(func() {
			ferr := l.Flush() // what the ring holds, then out
			if ferr != nil {
				_ = l.Close()
			}
			wg.Wait()
			cerr = errors.Join(ferr, l.Close(), rerr)
		})
		return cerr
	}, nil
}
