// Package nsexec runs a function inside a network namespace, on a locked
// OS thread: the one home of that dance for the port (qdisc) and the
// kernel NP (host/npbpf).
package nsexec

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn on a locked OS thread inside ns; a closed handle means the
// caller's namespace. A thread that cannot return to its namespace stays
// locked, so the Go runtime retires it instead of reusing it.
func Do(ns netns.NsHandle, fn func() error) error {
	if !ns.IsOpen() {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("return from netns (thread retired): %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}
