package nsexec

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// newNetns makes an unnamed namespace on a throwaway locked thread (the
// thread stays in it and ends with its goroutine) and returns a handle.
func newNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	labtest.RequireRoot(t)
	ch := make(chan netns.NsHandle, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is in the new namespace
		h, err := netns.New()
		if err != nil {
			errc <- err
			return
		}
		ch <- h
	}()
	select {
	case h := <-ch:
		t.Cleanup(func() { h.Close() })
		return h
	case err := <-errc:
		t.Fatalf("new netns: %v", err)
	}
	return netns.None()
}

// callerIno is the namespace of the calling goroutine's (locked) thread.
func callerIno(t *testing.T) uint32 {
	t.Helper()
	ino, err := Ino(netns.None())
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// inoIn is the namespace a function Do runs in ns finds itself in.
func inoIn(t *testing.T, ns netns.NsHandle) uint32 {
	t.Helper()
	var inside uint32
	if err := DoNamed(ns, "x", func() (err error) {
		inside, err = Ino(netns.None())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return inside
}

func TestDoRunsInNamespace(t *testing.T) {
	ns := newNetns(t)
	want, err := Ino(ns)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := callerIno(t)
	if before == want {
		t.Fatal("the new namespace is the caller's")
	}
	if inside := inoIn(t, ns); inside != want {
		t.Errorf("fn ran in netns %d, want %d", inside, want)
	}
	if after := callerIno(t); after != before {
		t.Errorf("the caller's thread is in netns %d after Do, was %d", after, before)
	}
}

// A closed handle is the caller's namespace: fn runs where the caller's
// thread is, even a locked thread that entered a namespace of its own.
func TestDoClosedHandleIsCaller(t *testing.T) {
	ns := newNetns(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
	}()
	want := callerIno(t)
	if inside := inoIn(t, netns.None()); inside != want {
		t.Errorf("fn ran in netns %d, want the caller's %d", inside, want)
	}
}

func TestDoPanicAndGoexit(t *testing.T) {
	ns := newNetns(t)

	// Goexit (what t.FailNow does) in fn ends the caller's goroutine too.
	done, reached := make(chan struct{}), false
	go func() {
		defer close(done)
		_ = Do(ns, func() error { runtime.Goexit(); return nil })
		reached = true
	}()
	<-done
	if reached {
		t.Error("Do returned normally after fn called runtime.Goexit")
	}

	func() {
		defer func() {
			p, ok := recover().(*Panic)
			if !ok || p.Value != "boom" || p.Netns != "x" || len(p.Stack) == 0 {
				t.Errorf("recovered %v, want the *Panic for boom in x", p)
			}
			if !strings.Contains(p.String(), "boom [recovered in netns x;") {
				t.Errorf("Panic.String() = %q", p.String())
			}
		}()
		_ = DoNamed(ns, "x", func() error { panic("boom") })
		t.Error("Do returned after fn panicked")
	}()
}

// A handle that is not a namespace is refused before fn runs, and the
// error names the namespace.
func TestDoNotANamespace(t *testing.T) {
	labtest.RequireRoot(t)
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ran := false
	err = DoNamed(netns.NsHandle(f.Fd()), "bogus", func() error { ran = true; return nil })
	if err == nil || !strings.Contains(err.Error(), "enter netns bogus") || ran {
		t.Errorf("Do on /dev/null: err %v, fn ran %v; want an enter error and no run", err, ran)
	}
}
