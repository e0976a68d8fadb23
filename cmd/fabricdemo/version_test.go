package main

import (
	"io"
	"testing"

	"github.com/fabriclab/fabriclab/host/version/versiontest"
)

// TestVersion: --version, -version and -V print the version and exit 0,
// as on every fabriclab binary.
func TestVersion(t *testing.T) {
	versiontest.Check(t, "fabricdemo", func(args []string, stdout, stderr io.Writer) int {
		o, code := parseFlags(args, stdout, stderr)
		if o != nil {
			return -1 // parsed as a run, not a version request
		}
		return code
	})
}

// TestCompletion: `fabricdemo completion` is a bash script that completes what
// the help lists.
func TestCompletion(t *testing.T) {
	versiontest.CheckCompletion(t, "fabricdemo", run,
		versiontest.Case{Line: []string{"fabricdemo", "-tra"}, Want: []string{"-traffic"}})
}
