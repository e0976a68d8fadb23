// Package nsexec runs a function inside a network namespace, on a locked
// OS thread, and opens namespaces and netlink handles in them: the one home
// of that for the port (qdisc), the tunnel PE (qdisc/tunnel) and the kernel
// NP (host/npbpf).
package nsexec

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
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

// Open opens a namespace by name (under /var/run/netns) or path; ""
// means the caller's namespace and yields a closed handle.
func Open(nameOrPath string) (netns.NsHandle, error) {
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

// Netlink is a netlink handle bound to ns (a closed handle: the caller's).
func Netlink(ns netns.NsHandle) (*netlink.Handle, error) {
	if ns.IsOpen() {
		return netlink.NewHandleAt(ns)
	}
	return netlink.NewHandle()
}

// Ino is the inode number of a namespace (the caller's for a closed
// handle): the kernel's net->ns.inum.
func Ino(ns netns.NsHandle) (uint32, error) {
	var st unix.Stat_t
	// thread-self: the calling thread's namespace, which a locked thread
	// may have changed; /proc/self is the main thread's.
	path := "/proc/thread-self/ns/net"
	if ns.IsOpen() {
		path = fmt.Sprintf("/proc/self/fd/%d", int(ns))
	}
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("netns inode: %w", err)
	}
	if st.Ino > math.MaxUint32 {
		return 0, fmt.Errorf("netns inode %d does not fit the kernel's 32-bit inum", st.Ino)
	}
	return uint32(st.Ino), nil
}

// Describe names a device for messages: "dev" or "dev in netns NAME".
func Describe(nsName, dev string) string {
	if nsName == "" {
		return dev
	}
	return dev + " in netns " + nsName
}
