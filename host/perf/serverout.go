package perf

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// serverOut is a server's output (ServerConfig.Out), RoCEv2's and UET's
// alike: text lines, or a JSON report per session; one writer at a time,
// since sessions run side by side.
type serverOut struct {
	w    io.Writer // nil: no output
	json bool
	log  *slog.Logger
	mu   sync.Mutex
}

// text runs f on the writer when the output is text.
func (o *serverOut) text(f func(w io.Writer)) {
	if o.w == nil || o.json {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o.w)
}

func (o *serverOut) printf(format string, args ...any) {
	o.text(func(w io.Writer) { fmt.Fprintf(w, format, args...) })
}

// report writes r as JSON, or its text with f.
func (o *serverOut) report(r *Report, f func(w io.Writer)) {
	if o.w == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.json {
		f(o.w)
		return
	}
	if err := r.WriteJSON(o.w); err != nil {
		o.log.Warn("writing the report", "err", err)
	}
}

// refused reports a connection the side channel turned away: a line of
// text, or a JSON report with its error, which fill completes with the
// server's counters.
func (o *serverOut) refused(remote net.Addr, msg string, fill func(*Report)) {
	if o.w == nil {
		return
	}
	ap := addrPort(remote)
	text := fmt.Sprintf("refused a session from %s port %d: %s", ap.Addr(), ap.Port(), msg)
	now := time.Now()
	r := newServerReport(now, nil, TestStart{})
	r.Error = text
	if o.json {
		fill(r)
	}
	o.report(r, func(w io.Writer) { fmt.Fprintf(w, "roceperf: %s\n%s\n", text, dashLine) })
}
