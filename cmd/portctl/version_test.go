package main

import (
	"testing"

	"github.com/fabriclab/fabriclab/host/version/versiontest"
)

// TestVersion: --version, -version and -V print the version and exit 0,
// as on every fabriclab binary.
func TestVersion(t *testing.T) { versiontest.Check(t, "portctl", run) }

// TestCompletion: `portctl completion` is a bash script that completes what
// the help lists.
func TestCompletion(t *testing.T) {
	versiontest.CheckCompletion(t, "portctl", run,
		versiontest.Case{Line: []string{"portctl", "att"}, Want: []string{"attach"}},
		versiontest.Case{Line: []string{"portctl", "attach", "--ne"}, Want: []string{"--netns"}})
}
