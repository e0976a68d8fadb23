// Package version is the project's version, one for every binary, and the
// line each prints for --version.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is fabriclab's release; the tools report it (roceperf also in
// its JSON, as iperf3 reports its own).
const Version = "0.1.0"

// Line is what tool prints for --version: the release, the commit it was
// built from when the build recorded one, and the Go toolchain.
func Line(tool string) string {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" && modified {
			rev += "+dirty"
		}
	}
	if rev != "" {
		rev = ", commit " + rev
	}
	return fmt.Sprintf("%s %s (fabriclab%s; %s %s/%s)", tool, Version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
