//go:build linux

package labtest

import (
	"fmt"
	"net"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// recorder is a testing.TB whose Skipf and Fatalf record instead of
// stopping the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                          {}
func (r *recorder) Skipf(format string, args ...any) { r.skipped = fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestSkipFailsUnderCI(t *testing.T) {
	for _, tc := range []struct {
		ci         string
		skip, fail bool
	}{{"", true, false}, {"false", true, false}, {"0", true, false}, {"true", false, true}, {"1", false, true}, {"TRUE", false, true}} {
		t.Setenv("CI", tc.ci)
		r := &recorder{TB: t}
		skip(r, "needs %s", "x")
		if (r.skipped != "") != tc.skip || (r.failed != "") != tc.fail {
			t.Errorf("CI=%q: skipped %q, failed %q", tc.ci, r.skipped, r.failed)
		}
	}
}

func TestRequireKernel(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	RequireKernel(r, "0.0")
	if r.skipped != "" || r.failed != "" {
		t.Errorf("RequireKernel(0.0): skipped %q, failed %q", r.skipped, r.failed)
	}
	r = &recorder{TB: t}
	RequireKernel(r, "999.0")
	if r.skipped == "" || r.failed != "" {
		t.Errorf("RequireKernel(999.0): skipped %q, failed %q", r.skipped, r.failed)
	}
	r = &recorder{TB: t}
	RequireKernel(r, "new")
	if r.failed == "" {
		t.Error("RequireKernel(new) did not fail")
	}
}

func TestEnterNetns(t *testing.T) {
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	// In a subtest: its goroutine ends, and its thread is retired, before
	// the check below that the namespace did not leak to this one's thread.
	t.Run("inside", func(t *testing.T) {
		EnterNetns(t)
		here, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer here.Close()
		if here.Equal(host) {
			t.Fatal("still in the original namespace")
		}
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if lo.Flags&net.FlagUp == 0 {
			t.Error("lo is down")
		}
		addrs, err := lo.Addrs()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, a := range addrs {
			got[a.String()] = true
		}
		for _, want := range LoopbackAddrs {
			if !got[want] {
				t.Errorf("lo lacks %s: %v", want, addrs)
			}
		}
	})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	now, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer now.Close()
	if !now.Equal(host) {
		t.Error("the test's namespace changed after the subtest")
	}
}
