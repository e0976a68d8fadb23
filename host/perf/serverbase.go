package perf

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// serverBase is what a server has whatever its transport (Server's
// RoCE agent, UETServer's pds endpoint): its configuration, the side
// channel's listener on bind, its output, and closing once.
type serverBase struct {
	cfg  ServerConfig
	bind netip.Addr // the side channel's
	ln   *listener
	out  serverOut

	closeOnce sync.Once
	closeErr  error
}

// checkShared fills the defaults every transport's server shares (the
// side channel's port, the interval, the logger) and checks them and the
// timescale.
func (cfg *ServerConfig) checkShared() error {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return configErr(FieldPort, cfg.Port, "1..65535")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Interval > 0 && (cfg.Interval < MinInterval || cfg.Interval > MaxInterval) {
		return configErr(FieldInterval, seconds(cfg.Interval), "0 (no interval reports) or %g..%g seconds", MinInterval.Seconds(), MaxInterval.Seconds())
	}
	if err := cfg.Timescale.Validate(); err != nil {
		return configErr(FieldTimescale, cfg.Timescale, "1..%d", units.MaxTimescale)
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	return nil
}

// listen opens the side channel's listener on bind for cfg (checked by
// checkShared) and sets s up around it.
func (s *serverBase) listen(cfg ServerConfig, bind netip.Addr) error {
	ln, err := listenSide(bind, cfg)
	if err != nil {
		return err
	}
	s.cfg, s.bind, s.ln = cfg, bind, ln
	s.out = serverOut{w: cfg.Out, json: cfg.JSON, log: cfg.Logger}
	return nil
}

// Addr is the side channel's listening address.
func (s *serverBase) Addr() netip.AddrPort {
	return s.ln.Addr().(*net.TCPAddr).AddrPort()
}

// serve prints the banner, with the transport's port (what), and serves
// the side channel's sessions (serve) until ctx is done.
func (s *serverBase) serve(ctx context.Context, what string, serve func(net.Listener) error) error {
	where := "all addresses"
	if !s.bind.IsUnspecified() {
		where = s.bind.String()
	}
	s.out.printf("%s\nServer listening on %s port %d (%s)\n%s\n", dashLine, where, s.Addr().Port(), what, dashLine)
	return s.ln.serveUntil(ctx, serve)
}

// Drain stops accepting sessions and lets those in progress run to their
// end: Serve returns once the last one has. Cancelling Serve's context
// ends them at once.
func (s *serverBase) Drain() { s.ln.drain() }

// close stops listening, which ends the sessions, then closes the
// transport's port (closePort), once.
func (s *serverBase) close(closePort func() error) error {
	s.closeOnce.Do(func() {
		_ = s.ln.Close()
		s.closeErr = closePort()
	})
	return s.closeErr
}

// sessionSampling is a server session's interval reports, whatever its
// transport: taken on a goroutine of their own (sample) until the session
// halts.
type sessionSampling struct {
	t0        time.Time
	stop      chan struct{} // closed by halt
	stopped   chan struct{} // closed when the sampling has ended
	prevT     time.Duration // at the last interval
	intervals []Interval
}

func newSessionSampling() sessionSampling {
	return sessionSampling{stop: make(chan struct{}), stopped: make(chan struct{})}
}

// halt ends the sampling and waits for it.
func (sm *sessionSampling) halt() {
	close(sm.stop)
	<-sm.stopped
}

// sample takes sm's interval reports every b.cfg.Interval until sm
// halts: take is the interval since the last, write prints it. Each
// receive from wake (a transport's own event) runs onWake, which ends the
// sampling by returning false.
func sample[W any](b *serverBase, sm *sessionSampling, take func(now time.Duration) Interval, write func(io.Writer, *Interval), wake <-chan W, onWake func() bool) {
	defer close(sm.stopped)
	tick, stopTick := intervalTicker(b.cfg.Interval)
	defer stopTick()
	for {
		select {
		case <-sm.stop:
			return
		case <-wake:
			if !onWake() {
				return
			}
		case <-tick:
			iv := take(time.Since(sm.t0))
			sm.intervals = append(sm.intervals, iv)
			b.out.text(func(w io.Writer) { write(w, &iv) })
		}
	}
}

// intervalTicker ticks every d, or never when d is 0 (no interval
// reports); stop it when done.
func intervalTicker(d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}
