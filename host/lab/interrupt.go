//go:build linux

package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Interrupt is a command's own handling of SIGINT/SIGTERM, for programs
// (the demo, the experiment) that must stop their traffic and tear their lab
// down themselves rather than let the harness exit: the first signal cancels
// the context, a second one exits at once without cleanup.
type Interrupt struct {
	ch     chan os.Signal
	mu     sync.Mutex
	caught os.Signal
}

// CatchInterrupts takes over SIGINT and SIGTERM from the harness's handler
// and ignores SIGPIPE (output piped into a pager that exits must not kill
// the process before its cleanup). prog and what name the program and its
// cleanup in the messages written to stderr. Call Stop when done.
func CatchInterrupts(parent context.Context, prog, what string, stderr io.Writer) (context.Context, context.CancelFunc, *Interrupt) {
	DisableSignalHandler()
	ctx, cancel := context.WithCancel(parent)
	in := &Interrupt{ch: make(chan os.Signal, 2)}
	signal.Notify(in.ch, syscall.SIGINT, syscall.SIGTERM)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go func() {
		sig, ok := <-in.ch
		if !ok {
			return
		}
		in.mu.Lock()
		in.caught = sig
		in.mu.Unlock()
		fmt.Fprintf(stderr, "\n%s: %v: stopping the traffic and %s (again to quit at once)\n", prog, sig, what)
		cancel()
		if _, ok := <-in.ch; ok {
			fmt.Fprintf(stderr, "%s: quitting without cleanup; the next run removes the leftover namespaces\n", prog)
			os.Exit(SignalExitCode(sig))
		}
	}()
	return ctx, cancel, in
}

// Signal is the signal caught, or nil.
func (in *Interrupt) Signal() os.Signal {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.caught
}

// Stop restores the default signal handling.
func (in *Interrupt) Stop() { signal.Stop(in.ch) }

// SignalExitCode is the shell's exit status for death by sig: 128 + number.
func SignalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}
