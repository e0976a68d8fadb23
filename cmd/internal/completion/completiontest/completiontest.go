// Package completiontest checks a binary's `completion` script for its
// tests: bash reads it, and completes what the binary's help lists.
package completiontest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/cmd/internal/completion"
)

// Case is a command line being completed (its last word the one under
// the cursor, "" for a new word) and candidates the reply must include.
type Case struct {
	Line []string
	Want []string
}

// Check runs tool's `completion`, has bash read the script, and completes
// each case with it.
func Check(t *testing.T, tool string, run completion.Run, cases ...Case) {
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
	fn := "_fabriclab_" + strings.NewReplacer("-", "_", ".", "_").Replace(tool)
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
