package completion

import (
	"slices"
	"testing"
)

// TestFlags: the flags of the help styles the binaries print: Go's flag
// package, portctl's and roceperf's own.
func TestFlags(t *testing.T) {
	help := `Usage: portctl attach --netns NS --dev DEV [-x|--extra] [flags]

  --netns NS           the namespace
  -j, --json           print JSON
  --dcqcn k=v[,k=v]    knobs
  -cc congestion control
    	congestion control of every TCP flow
  -V, --version        print the version
Examples:
  portctl attach --netns sw --dev r --rate 1gbit
`
	want := []string{"--netns", "--dev", "-x", "--extra", "-j", "--json", "--dcqcn", "-cc", "-V", "--version"}
	if got := Flags(help); !slices.Equal(got, want) {
		t.Errorf("Flags = %v, want %v", got, want)
	}
}

// TestCommands: a help's "Commands:" list, continuation lines left out.
func TestCommands(t *testing.T) {
	help := `Usage: portctl tunnel COMMAND

Commands:
  attach     attach a PE (stays attached after portctl exits)
  log        print RFC 6040's currently-unused cells as they occur
             (rate-limited per cell) until Ctrl-C
  detach     remove the PE

Options:
  --local ADDR   this PE's address
`
	if got, want := Commands(help), []string{"attach", "log", "detach"}; !slices.Equal(got, want) {
		t.Errorf("Commands = %v, want %v", got, want)
	}
}
