package lab_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestBinariesDoNotLinkTesting: no command of the module (cmd/*: the
// tools, the lab runner, the benchmark) links package testing, which would put its
// flags in every binary and mean a test helper leaked into a library such
// as this one. Test helpers belong in host/lab/labtest.
func TestBinariesDoNotLinkTesting(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to list the module's packages")
	}
	out, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}} {{join .Deps " "}}{{end}}`, "github.com/fabriclab/fabriclab/...").Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	var commands []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		commands = append(commands, fields[0])
		if slices.Contains(fields[1:], "testing") {
			t.Errorf("%s links package testing", fields[0])
		}
	}
	for _, want := range []string{"cmd/fabriclab", "cmd/fabricbench", "cmd/fabriclabd"} {
		if !slices.Contains(commands, "github.com/fabriclab/fabriclab/"+want) {
			t.Errorf("go list found no command %s among %v", want, commands)
		}
	}
}
