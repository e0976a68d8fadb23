// Package versiontest checks a binary's --version and its completion
// script for its tests.
package versiontest

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/version"
)

// Check runs the binary's run function with --version, -version and -V:
// each must print the version line on stdout and exit 0.
func Check(t *testing.T, tool string, run func(args []string, stdout, stderr io.Writer) int) {
	t.Helper()
	for _, arg := range []string{"--version", "-version", "-V"} {
		var out, errb bytes.Buffer
		if code := run([]string{arg}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), tool+" "+version.Version+" (fabriclab") {
			t.Errorf("%s %s: exit %d, stdout %q, stderr %q", tool, arg, code, out.String(), errb.String())
		}
	}
}

// Case is a command line being completed (its last word the one under
// the cursor, "" for a new word) and candidates the reply must include.
type Case struct {
	Line []string
	Want []string
}

// CheckCompletion runs tool's `completion`, has bash read the script, and completes
// each case with it.
func CheckCompletion(t *testing.T, tool string, run func(args []string, stdout, stderr io.Writer) int, cases ...Case) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run([]string{"completion"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "complete ") {
		t.Fatalf("%s completion: exit %d, stderr %q", tool, code, errb.String())
	}
	if code := run([]string{"completion", "zsh"}, &bytes.Buffer{}, &errb); code != 2 {
		t.Errorf("%s completion zsh: exit %d, want 2", tool, code)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("no bash to read the script: %v", err)
	}
	script := filepath.Join(t.TempDir(), tool+".bash")
	if err := os.WriteFile(script, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(bash, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v: %s\n%s", err, msg, out.String())
	}
	// The function the script registers: "complete ... -F FN TOOL".
	fields := strings.Fields(out.String()[strings.LastIndex(out.String(), "complete "):])
	fn := ""
	for i, f := range fields {
		if f == "-F" && i+1 < len(fields) {
			fn = fields[i+1]
		}
	}
	if fn == "" {
		t.Fatalf("%s completion: no complete -F line:\n%s", tool, out.String())
	}
	for _, c := range cases {
		words := make([]string, len(c.Line))
		for i, w := range c.Line {
			words[i] = "'" + w + "'"
		}
		prog := "source " + script + "; COMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=" +
			strconv.Itoa(len(c.Line)-1) + "; " + fn + "; printf '%s\\n' \"${COMPREPLY[@]}\""
		cmd := exec.Command(bash, "-c", prog)
		cmd.Dir = t.TempDir()
		got, err := cmd.Output()
		if err != nil {
			t.Errorf("%v: bash: %v", c.Line, err)
			continue
		}
		reply := strings.Fields(string(got))
		for _, w := range c.Want {
			if !slices.Contains(reply, w) {
				t.Errorf("completing %q: %v, want %s among them", strings.Join(c.Line, " "), reply, w)
			}
		}
	}
}
