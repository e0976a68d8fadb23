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
	var out, errb bytes.Buffer
	o, code := parseFlags([]string{"--version"}, &out, &errb)
	if o != nil || code != exitOK || !strings.HasPrefix(out.String(), "fabricdemo "+version.Version+" (fabriclab") {
		t.Errorf("fabricdemo --version: options %v, exit %d, stdout %q, stderr %q", o, code, out.String(), errb.String())
	}
}
