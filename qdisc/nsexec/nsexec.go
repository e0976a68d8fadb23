// Package nsexec runs a function inside a network namespace, on a locked
// OS thread, and opens namespaces and netlink handles in them: the one home
// of that for the port (qdisc), the tunnel PE (qdisc/tunnel), the lab's
// nodes (host/lab), the kernel NP and RP (host/npbpf, host/rpbpf) and the
// UDP GSO sockets (host/pktio). It sits below both qdisc and host/lab,
// which imports qdisc, so that each can use it.
package nsexec

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Do runs fn inside ns and returns its error; a closed handle means the
// caller's namespace, and fn runs on the caller's goroutine. Otherwise it
// follows CNI's ns.Do: fn runs on a fresh goroutine whose locked OS thread
// enters ns, never the caller's thread, and a thread that cannot return to
// its namespace stays locked, so the Go runtime retires it instead of
// reusing it. A panic in fn is raised again in the caller's goroutine as a
// *Panic, and a runtime.Goexit (t.FailNow) ends the caller's goroutine too.
// Sockets fn creates stay in ns; goroutines fn starts do not run in it.
func Do(ns netns.NsHandle, fn func() error) error { return DoNamed(ns, "", fn) }

// DoNamed is Do with the namespace's name in Do's own errors and panics.
func DoNamed(ns netns.NsHandle, name string, fn func() error) error {
	if !ns.IsOpen() {
		return fn()
	}
	where := "netns"
	if name != "" {
		where = "netns " + name
	}
	type result struct {
		err    error
		p      *Panic
		goexit bool // fn called runtime.Goexit
	}
	ch := make(chan result, 1)
	go func() {
		var res result
		defer func() { ch <- res }()
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			res.err = fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			res.err = fmt.Errorf("enter %s: %w", where, err)
			return
		}
		defer func() {
			if err := netns.Set(orig); err != nil {
				// The thread stays locked and ends with this goroutine.
				res.err = errors.Join(res.err, fmt.Errorf("return from %s (thread retired): %w", where, err))
				return
			}
			runtime.UnlockOSThread()
		}()
		res.goexit = true
		defer func() {
			if v := recover(); v != nil {
				res.goexit = false
				res.p = &Panic{Value: v, Netns: name, Stack: debug.Stack()}
			}
		}()
		res.err = fn()
		res.goexit = false
	}()
	res := <-ch
	switch {
	case res.p != nil:
		panic(res.p)
	case res.goexit:
		runtime.Goexit()
	}
	return res.err
}

// Panic is a panic raised by the function Do ran in a namespace, carried
// to Do's caller with the stack it was raised on.
type Panic struct {
	Value any
	Netns string // the name given to DoNamed, if any
	Stack []byte
}

func (p *Panic) String() string {
	where := "a netns"
	if p.Netns != "" {
		where = "netns " + p.Netns
	}
	return fmt.Sprintf("%v [recovered in %s; original stack:]\n%s", p.Value, where, p.Stack)
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
