package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/version"
)

// TestVersion: --version (and -V) prints the version line and exits 0,
// as every fabriclab binary does.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "-V"} {
		var out, errb bytes.Buffer
		if code := run([]string{arg}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "fabriclabd "+version.Version+" (fabriclab") {
			t.Errorf("fabriclabd %s: exit %d, stdout %q, stderr %q", arg, code, out.String(), errb.String())
		}
	}
}
