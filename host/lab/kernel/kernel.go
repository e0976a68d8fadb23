//go:build linux

// Package kernel reads the running kernel's release and compares kernel
// versions by major.minor, the granularity at which the features the labs
// need (TCX in 6.6, struct_ops) arrive. It imports neither the lab nor
// testing, so commands and test helpers at every level of the module can
// share it without import cycles.
package kernel

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Version is a kernel's major.minor.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// AtLeast reports whether v is want or newer.
func (v Version) AtLeast(want Version) bool {
	return v.Major > want.Major || v.Major == want.Major && v.Minor >= want.Minor
}

// ParseVersion reads major.minor from the start of a release string such as
// "6.18.44-fc-v595" or "6.10-rc1"; the rest is ignored.
func ParseVersion(s string) (Version, error) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("kernel version %q: want major.minor", s)
	}
	var v [2]int
	for i := range 2 {
		digits := parts[i]
		if end := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); end >= 0 {
			digits = digits[:end]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return Version{}, fmt.Errorf("kernel version %q: want major.minor", s)
		}
		v[i] = n
	}
	return Version{Major: v[0], Minor: v[1]}, nil
}

// Release is the running kernel's release, as `uname -r` prints it.
func Release() (string, error) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(uts.Release[:]), nil
}

// AtLeast reports whether the running kernel is want ("major.minor") or
// newer, and returns its release for messages. An error means want or the
// release could not be read; the caller decides what that counts as.
func AtLeast(want string) (ok bool, release string, err error) {
	w, err := ParseVersion(want)
	if err != nil {
		return false, "", err
	}
	if release, err = Release(); err != nil {
		return false, "", err
	}
	have, err := ParseVersion(release)
	if err != nil {
		return false, release, err
	}
	return have.AtLeast(w), release, nil
}
