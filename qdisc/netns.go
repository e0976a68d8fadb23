package qdisc

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// inNetns runs fn on a locked OS thread inside ns. An invalid handle means
// the caller's namespace. If the thread cannot return to its namespace it
// stays locked, so the Go runtime retires it instead of reusing it.
func inNetns(ns netns.NsHandle, fn func() error) error {
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
		return fmt.Errorf("return from netns (thread retired): %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// openNetns opens a namespace by name (under /var/run/netns) or path; ""
// means the caller's namespace and yields a closed handle.
func openNetns(nameOrPath string) (netns.NsHandle, error) {
	if nameOrPath == "" {
		return netns.None(), nil
	}
	var h netns.NsHandle
	var err error
	if nameOrPath[0] == '/' {
		h, err = netns.GetFromPath(nameOrPath)
	} else {
		h, err = netns.GetFromName(nameOrPath)
	}
	if err != nil {
		return netns.None(), fmt.Errorf("netns %q: %w", nameOrPath, err)
	}
	return h, nil
}

// dupNetns gives the port its own handle, so the caller may close theirs.
func dupNetns(h netns.NsHandle) (netns.NsHandle, error) {
	if !h.IsOpen() {
		return netns.None(), nil
	}
	return netns.GetFromPath(fmt.Sprintf("/proc/self/fd/%d", int(h)))
}
