package main

import (
	"testing"

	"github.com/fabriclab/fabriclab/host/version/versiontest"
)

// TestVersion: --version, -version and -V print the version and exit 0,
// as on every fabriclab binary.
func TestVersion(t *testing.T) { versiontest.Check(t, "portctl", run) }
