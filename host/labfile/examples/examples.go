// Package examples holds the example lab files (host/labfile), built
// into the binaries that run them: fabriclab demo runs demo*.yaml.
package examples

import "embed"

// Files are the example lab files, by their names (demo.yaml, ...).
//
//go:embed *.yaml
var Files embed.FS
