package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

const sweepHelp = `Usage: portctl sweep

Remove what is left of ports and tunnel PEs whose device went away while
they were attached (deleted alone or with its namespace) and whose attaching
process is gone: their pins under /sys/fs/bpf/fabriclab and their records
under /run/fabriclab. A port or PE still on a device is never touched;
fabriclabd and every lab build sweep the same way.

Example:
  portctl sweep
`

func cmdSweep(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sweep")
	err := func() error {
		if done, err := parseCommand(fs, sweepHelp, args, stdout, "sweep takes no options"); done || err != nil {
			return err
		}
		ports, perr := qdisc.SweepStale()
		pes, terr := tunnel.SweepStale()
		for _, d := range ports {
			fmt.Fprintf(stdout, "swept port %s\n", d)
		}
		for _, d := range pes {
			fmt.Fprintf(stdout, "swept tunnel PE %s\n", d)
		}
		if len(ports)+len(pes) == 0 && perr == nil && terr == nil {
			fmt.Fprintln(stdout, "nothing to sweep")
		}
		return errors.Join(perr, terr)
	}()
	return report(stderr, "sweep", err)
}
