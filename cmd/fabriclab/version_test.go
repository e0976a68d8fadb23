package main

import (
	"testing"

	"github.com/fabriclab/fabriclab/host/version/versiontest"
)

// TestVersion: --version, -version and -V print the version and exit 0,
// as on every fabriclab binary.
func TestVersion(t *testing.T) { versiontest.Check(t, "fabriclab", run) }

// TestCompletion: `fabriclab completion` is a bash script that completes what
// the help lists.
func TestCompletion(t *testing.T) {
	versiontest.CheckCompletion(t, "fabriclab", run,
		versiontest.Case{Line: []string{"fabriclab", "va"}, Want: []string{"validate"}},
		versiontest.Case{Line: []string{"fabriclab", "run", "-var"}, Want: []string{"-variants"}},
		versiontest.Case{Line: []string{"fabriclab", "de"}, Want: []string{"demo"}},
		versiontest.Case{Line: []string{"fabriclab", "demo", "-pr"}, Want: []string{"-print"}})
}
