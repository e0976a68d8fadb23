package main

import (
	"fmt"
	"io"

	"github.com/fabriclab/fabriclab/qdisc/dispatch"
)

const dispatcherHelp = `Usage: portctl dispatcher [-j]

Print the machine's xmit dispatcher: the one tracing program that hands
every port's and every kernel NP's transmissions to their own programs
(a port's departures, an NP's CNP stamps), whatever the number of ports.
It exists while some port or NP uses it. Shown: its program ID (for
bpftool prog show id ID), the slots ports and NPs hold, those a process
that died left (portctl sweep frees them, as the next attach or detach
does), and the transmissions and drops that found a slot emptied by a
port leaving (a port's last packets while it detached).

Options:
  -j   print as JSON

Example:
  portctl dispatcher
`

func cmdDispatcher(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dispatcher")
	var js bool
	jsonFlag(fs, &js)
	err := func() error {
		if done, err := parseCommand(fs, dispatcherHelp, args, stdout, "dispatcher takes only -j"); done || err != nil {
			return err
		}
		st, err := dispatch.Read()
		if err != nil {
			return err
		}
		if js {
			return printJSON(stdout, st)
		}
		renderDispatcher(stdout, st)
		return nil
	}()
	return report(stderr, "dispatcher", err)
}

// renderDispatcher prints the dispatcher's status for people.
func renderDispatcher(w io.Writer, st dispatch.Status) {
	if !st.Attached {
		fmt.Fprintln(w, "xmit dispatcher: none (no port or kernel NP on this machine uses it)")
		return
	}
	fmt.Fprintf(w, "xmit dispatcher: program %d\n", st.ProgramID)
	fmt.Fprintf(w, "  slots: %d ports, %d kernel NPs", st.Ports, st.NPs)
	if st.Stale > 0 {
		fmt.Fprintf(w, ", %d stale (their process died: portctl sweep frees them)", st.Stale)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  found a leaving port's slot empty: %d transmissions, %d drops; an NP's: %d\n", st.EmptySlot, st.DropEmptySlot, st.NPEmptySlot)
}
