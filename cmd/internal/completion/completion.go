// Package completion writes the bash completion script every binary
// prints for `TOOL completion` (source <(portctl completion)): its
// subcommands, each one's flags as its --help lists them, and file names
// for the rest (lab files, captures). The flags come from the help text
// the user reads, so the two cannot drift apart.
package completion

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// Run is a binary's entry point: its arguments, and where it writes.
type Run func(args []string, stdout, stderr io.Writer) int

// Help is what run prints for args (its --help, on stdout or stderr).
func Help(run Run, args ...string) string {
	var b bytes.Buffer
	run(args, &b, &b)
	return b.String()
}

// flagLine finds the flags a help line starts with: "  -j, --json",
// "  -rate speed", "  --dcqcn k=v[,k=v]".
var flagLine = regexp.MustCompile(`^\s{1,10}(-{1,2}[A-Za-z][\w-]*)(?:[ =][^,]*?)?(?:,\s*(-{1,2}[A-Za-z][\w-]*))?(?:\s|=|$)`)

// usageFlag is a flag in a "Usage:" line: "portctl detach --dev DEV [--netns NAME]".
var usageFlag = regexp.MustCompile(`[\s\[|](-{1,2}[A-Za-z][\w-]*)`)

// Flags are the flags a help text lists, each as written there, in order
// and once.
func Flags(help string) []string {
	var out []string
	for _, line := range strings.Split(help, "\n") {
		var m []string
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), "Usage:"); ok {
			for _, w := range usageFlag.FindAllStringSubmatch(u, -1) {
				m = append(m, w[1])
			}
		} else if m = flagLine.FindStringSubmatch(line); m != nil {
			m = m[1:]
		}
		for _, f := range m {
			if f != "" && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// Command is what a binary completes: its own words (flags, and
// subcommands for a tool that has them) and each subcommand's.
type Command struct {
	Tool string
	// Words complete the first argument: subcommands and global flags.
	Words []string
	// Subs are the subcommands' flags (and their own subcommands, as
	// portctl tunnel's), by name.
	Subs map[string][]string
}

// Bash is c's completion script for bash: `source <(TOOL completion)`,
// or put it in /etc/bash_completion.d/TOOL.
func Bash(c Command) string {
	fn := "_fabriclab_" + strings.NewReplacer("-", "_", ".", "_").Replace(c.Tool)
	var b strings.Builder
	fmt.Fprintf(&b, "# bash completion for %s: source <(%s completion)\n", c.Tool, c.Tool)
	fmt.Fprintf(&b, "%s() {\n", fn)
	b.WriteString("    local cur=${COMP_WORDS[COMP_CWORD]} sub= i words\n")
	if len(c.Subs) > 0 {
		b.WriteString("    for ((i = 1; i < COMP_CWORD; i++)); do\n")
		b.WriteString("        case ${COMP_WORDS[i]} in -*) ;; *) sub=${COMP_WORDS[i]}; break ;; esac\n")
		b.WriteString("    done\n")
	}
	b.WriteString("    case $sub in\n")
	fmt.Fprintf(&b, "    '') words=%s ;;\n", quote(c.Words))
	names := make([]string, 0, len(c.Subs))
	for n := range c.Subs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "    %s) words=%s ;;\n", quote([]string{n}), quote(c.Subs[n]))
	}
	b.WriteString("    *) words= ;;\n    esac\n")
	// A dash, or a subcommand still to name, completes from the words;
	// anything else is a file (a lab file, a capture) or a value.
	if len(c.Subs) > 0 {
		b.WriteString("    if [[ $cur == -* || -z $sub ]]; then\n")
	} else {
		b.WriteString("    if [[ $cur == -* ]]; then\n")
	}
	b.WriteString("        COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n")
	b.WriteString("    else\n        COMPREPLY=($(compgen -f -- \"$cur\"))\n    fi\n}\n")
	fmt.Fprintf(&b, "complete -o filenames -o bashdefault -F %s %s\n", fn, c.Tool)
	return b.String()
}

// quote is words as one single-quoted shell word.
func quote(words []string) string {
	return "'" + strings.ReplaceAll(strings.Join(words, " "), "'", `'\''`) + "'"
}

// Usage is the line each binary's help gives the completion.
const Usage = "completion          print a bash completion script: source <(TOOL completion)"

// Write prints c's script for `TOOL completion [bash]`; another shell is
// refused (exit 2).
func Write(c Command, args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 || len(args) == 1 && args[0] != "bash" {
		fmt.Fprintf(stderr, "%s completion: %q: only bash is written (source <(%s completion))\n", c.Tool, strings.Join(args, " "), c.Tool)
		return 2
	}
	fmt.Fprint(stdout, Bash(c))
	return 0
}

// commandLine is a line of a help's "Commands:" list: "  attach   make …".
var commandLine = regexp.MustCompile(`^\s{1,4}([a-z][a-z0-9-]*)(?:\s{2,}|$)`)

// Commands are the subcommands a help's "Commands:" section lists.
func Commands(help string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.TrimSpace(line) == "Commands:":
			in = true
		case in && strings.TrimSpace(line) == "":
			in = false
		case in:
			if m := commandLine.FindStringSubmatch(line); m != nil && !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
	}
	return out
}
