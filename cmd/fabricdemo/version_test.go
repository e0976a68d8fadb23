package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/version"
)

// TestVersion: --version prints the version line and exits 0, as every
// fabriclab binary does.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "-V"} {
		var out, errb bytes.Buffer
		o, code := parseFlags([]string{arg}, &out, &errb)
		if o != nil || code != exitOK || !strings.HasPrefix(out.String(), "fabricdemo "+version.Version+" (fabriclab") {
			t.Errorf("fabricdemo %s: options %v, exit %d, stdout %q, stderr %q", arg, o, code, out.String(), errb.String())
		}
	}
}
