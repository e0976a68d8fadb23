//go:build linux

// Package labtest holds the helpers the module's tests share to run as root
// in network namespaces: RequireRoot, RequireKernel and EnterNetns; and
// RetryStarved, the one policy for checks a starving host can break. It
// imports testing, so only _test.go files may import it; it imports nothing
// of the module but host/lab/kernel and host/hostlost, so the internal
// tests of any package (qdisc, host/lab itself) can use it without an
// import cycle.
//
// Under CI=true (as strconv.ParseBool reads it) every skip these helpers
// would make is a failure instead: a skip there would silently hide a test
// CI is meant to run.
package labtest

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/host/lab/kernel"
)

// LoopbackAddrs are the addresses EnterNetns puts on lo, from the
// benchmarking range 198.18.0.0/15 (RFC 2544).
var LoopbackAddrs = []string{"198.18.0.1/32", "198.18.0.2/32"}

// skip skips tb, or fails it under CI=true.
func skip(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		tb.Fatalf(format+" (CI=true forbids skipping)", args...)
		return
	}
	tb.Skipf(format, args...)
}

// RequireRoot skips tb unless it runs as root, which creating network
// namespaces and loading BPF programs need.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		skip(tb, "needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF) to create network namespaces and load BPF programs")
	}
}

// RequireKernel skips tb unless the running kernel is at least minKernel
// ("major.minor", e.g. "6.6" for TCX). A minKernel or kernel release that
// does not parse fails tb.
func RequireKernel(tb testing.TB, minKernel string) {
	tb.Helper()
	ok, release, err := kernel.AtLeast(minKernel)
	if err != nil {
		tb.Fatalf("labtest.RequireKernel(%q): %v", minKernel, err)
	}
	if !ok {
		skip(tb, "needs kernel >= %s, running %s", minKernel, release)
	}
}

// EnterNetns requires root, locks the test's goroutine to its OS thread and
// moves the thread into a fresh network namespace with lo up and
// LoopbackAddrs on it. Sockets the test opens and commands it starts from
// its own goroutine live there; goroutines it starts do not. The thread is
// never unlocked: when the test's goroutine ends, the runtime retires it
// rather than reuse a thread whose namespace it cannot vouch for. Cleanup
// switches back to the original namespace (best effort) and closes both
// handles.
func EnterNetns(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatalf("get netns: %v", err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		tb.Fatalf("new netns: %v", err)
	}
	tb.Cleanup(func() {
		_ = netns.Set(orig)
		orig.Close()
		ns.Close()
	})
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		tb.Fatalf("lo: %v", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		tb.Fatalf("lo up: %v", err)
	}
	for _, a := range LoopbackAddrs {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			tb.Fatalf("parse %s: %v", a, err)
		}
		if err := netlink.AddrAdd(lo, addr); err != nil {
			tb.Fatalf("add %s to lo: %v", a, err)
		}
	}
}
