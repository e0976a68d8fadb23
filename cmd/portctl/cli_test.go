package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestCLIUsage checks help and command-line errors, which never touch the
// kernel: exit 2 with a "portctl: ..." message naming the problem.
func TestCLIUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"help"}, 0, "Usage: portctl COMMAND", ""},
		{[]string{"--help"}, 0, "Examples:", ""},
		{[]string{"-h"}, 0, "Commands:", ""},
		{[]string{"help", "stats"}, 0, "--watch INTERVAL", ""},
		{[]string{"attach", "--help"}, 0, "--tc CLASS:ITEM", ""},
		{[]string{"configure", "-h"}, 0, "Usage: portctl configure", ""},
		{[]string{"show", "--help"}, 0, "Usage: portctl show", ""},
		{[]string{"detach", "--help"}, 0, "Usage: portctl detach", ""},
		{[]string{"sweep", "--help"}, 0, "Usage: portctl sweep", ""},
		{[]string{"sweep", "now"}, 2, "", `portctl: unexpected argument "now" (sweep takes no options)`},
		{[]string{"sweep", "--dev", "swp0"}, 2, "", "portctl: flag provided but not defined: -dev"},
		{nil, 2, "", "Usage: portctl COMMAND"},
		{[]string{"help", "frob"}, 2, "", `portctl: unknown command "frob"`},
		{[]string{"frob"}, 2, "", `portctl: unknown command "frob"`},
		{[]string{"show"}, 2, "", "portctl: --dev is required"},
		{[]string{"show", "--dev", "swp0", "extra"}, 2, "", `portctl: unexpected argument "extra"`},
		{[]string{"show", "--dev", "swp0", "--bogus"}, 2, "", "portctl: flag provided but not defined: -bogus"},
		{[]string{"attach", "--dev", "swp0"}, 2, "", "portctl: --rate is required"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbt"}, 2, "", `portctl: --rate 1gbt: invalid rate "1gbt"`},
		{[]string{"attach", "--dev", "swp0", "--rate", "0"}, 2, "", "portctl: --rate 0: rate must be greater than 0"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--mode", "tun"}, 2, "", "portctl: --mode tun: want veth or virtual"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--mode", "virtual", "--peer-dev", "eth0"}, 2, "", "only apply to --mode veth"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--tc", "9:off"}, 2, "", "portctl: --tc 9:off: class 9 out of range 0-7\nRun 'portctl attach --help' for usage."},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--dscp", "64=3"}, 2, "", "portctl: --dscp 64=3: dscp 64 out of range 0-63"},
		{[]string{"attach", "--dev", "swp0", "--rate", "1gbit", "--tc", "3:max=8mb"}, 2, "", "portctl: invalid configuration: class 3: wred: max_th (8mb) must not exceed limit (2mb)"},
		{[]string{"configure", "--dev", "swp0"}, 2, "", "portctl: nothing to change"},
		{[]string{"configure", "--dev", "swp0", "--tc", "3:p=2"}, 2, "", `portctl: --tc 3:p=2: p: invalid probability "2"`},
		{[]string{"stats", "--dev", "swp0", "--count", "2"}, 2, "", "portctl: --count needs --watch"},
		{[]string{"stats", "--dev", "swp0", "--watch", "1s", "--count", "0"}, 2, "", "portctl: --count 0: must be at least 1"},
		{[]string{"stats", "--dev", "swp0", "--watch", "1ms"}, 2, "", "portctl: --watch 1ms: interval must be 10ms to 24h"},
		{[]string{"stats", "--dev", "swp0", "--watch", "soon"}, 2, "", `portctl: --watch soon: invalid time "soon"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errb.String())
			}
			if tc.stdout != "" && !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout %q lacks %q", out.String(), tc.stdout)
			}
			if tc.stderr != "" && !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.stderr)
			}
			if tc.code == 0 && errb.Len() != 0 {
				t.Errorf("stderr on success: %q", errb.String())
			}
		})
	}
}

func TestParseInterval(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1": time.Second, "0.5": 500 * time.Millisecond, "1s": time.Second, "250ms": 250 * time.Millisecond,
	} {
		if got, err := parseInterval(in); err != nil || got != want {
			t.Errorf("parseInterval(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestHelpFitsATerminal keeps help lines within 80 columns.
func TestHelpFitsATerminal(t *testing.T) {
	for name, text := range map[string]string{"main": mainHelp, "attach": attachHelp, "configure": configureHelp,
		"show": showHelp, "stats": statsHelp, "detach": detachHelp, "sweep": sweepHelp} {
		for _, l := range strings.Split(text, "\n") {
			if len(l) > 80 {
				t.Errorf("%s help: line of %d columns: %q", name, len(l), l)
			}
		}
	}
}
