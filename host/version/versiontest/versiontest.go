// Package versiontest checks a binary's --version for its tests.
package versiontest

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/version"
)

// Check runs the binary's run function with --version, -version and -V:
// each must print the version line on stdout and exit 0.
func Check(t *testing.T, tool string, run func(args []string, stdout, stderr io.Writer) int) {
	t.Helper()
	for _, arg := range []string{"--version", "-version", "-V"} {
		var out, errb bytes.Buffer
		if code := run([]string{arg}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), tool+" "+version.Version+" (fabriclab") {
			t.Errorf("%s %s: exit %d, stdout %q, stderr %q", tool, arg, code, out.String(), errb.String())
		}
	}
}
