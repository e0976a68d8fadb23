//go:build linux

package lab

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Require skips tb unless it runs as root on a kernel at least minKernel
// ("major.minor", empty for any). Under CI=true it fails instead: a skip there
// would silently hide a test CI is meant to run.
func Require(tb TB, minKernel string) {
	tb.Helper()
	skip := tb.Skipf
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		skip = tb.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("lab: needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to create network namespaces")
		return
	}
	if minKernel == "" {
		return
	}
	want, err := parseKernel(minKernel)
	if err != nil {
		tb.Fatalf("lab.Require: bad minKernel %q: %v", minKernel, err)
		return
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		tb.Fatalf("lab.Require: uname: %v", err)
		return
	}
	release := unix.ByteSliceToString(uts.Release[:])
	have, err := parseKernel(release)
	if err != nil {
		tb.Fatalf("lab.Require: cannot parse kernel release %q: %v", release, err)
		return
	}
	if have[0] < want[0] || have[0] == want[0] && have[1] < want[1] {
		skip("lab: needs kernel >= %s, running %s", minKernel, release)
	}
}

// parseKernel reads "major.minor" from the start of a release string such as
// "6.18.44-fc-v595".
func parseKernel(s string) ([2]int, error) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return [2]int{}, fmt.Errorf("want major.minor")
	}
	var v [2]int
	for i := range 2 {
		digits := parts[i]
		if end := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); end >= 0 {
			digits = digits[:end]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return [2]int{}, fmt.Errorf("want major.minor: %w", err)
		}
		v[i] = n
	}
	return v, nil
}
