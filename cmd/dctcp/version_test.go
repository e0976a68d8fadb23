package main

import (
	"testing"

	"github.com/fabriclab/fabriclab/host/version/versiontest"
)

// TestVersion: --version, -version and -V print the version and exit 0,
// as on every fabriclab binary.
func TestVersion(t *testing.T) { versiontest.Check(t, "dctcp", run) }

// TestCompletion: `dctcp completion` is a bash script that completes what
// the help lists.
func TestCompletion(t *testing.T) {
	versiontest.CheckCompletion(t, "dctcp", run,
		versiontest.Case{Line: []string{"dctcp", "-int"}, Want: []string{"-interval"}})
}
