package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/host/labfile/examples"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// demos are the demo's lab files (host/labfile/examples), by the
// traffic they run; the first is the default.
var demos = []struct{ traffic, file string }{
	{"roce", "demo.yaml"},
	{"uet", "demo-uet.yaml"},
	{"tcp", "demo-tcp.yaml"},
}

// The CPU check: a demo whose hosts get less than minCPUShare of the
// CPUs (lab.CPUShare) runs busyTimescale times slower unless -timescale
// says otherwise: beside stress-ng on one of two cores (a share of about
// 0.6) the demo's hosts could not hold 500 Mbit/s, and at 250 Mbit/s
// they did.
const (
	minCPUShare   = 0.85
	busyTimescale = 2
)

func demo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRunFlags(fs)
	printFile := fs.Bool("print", false, "print the demo's lab file")
	traffic, err := parseOptional(fs, args, "traffic kind")
	if traffic == "" {
		traffic = demos[0].traffic
	}
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab demo: %v\n", err)
		return 2
	}
	i := slices.IndexFunc(demos, func(d struct{ traffic, file string }) bool { return d.traffic == traffic })
	if i < 0 {
		fmt.Fprintf(stderr, "fabriclab demo: %q: want roce, uet or tcp\n", traffic)
		return 2
	}
	name := demos[i].file
	data, err := examples.Files.ReadFile(name)
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab demo: %v\n", err)
		return 1
	}
	if *printFile {
		_, _ = stdout.Write(data)
		return 0
	}
	if code := rf.check("demo", stderr); code != 0 {
		return code
	}
	f, err := labfile.Parse(name, data)
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab demo: %v\n", err)
		return 1
	}
	// The CPU check's line goes with the live view, or beside the JSON.
	info := stdout
	if *rf.asJSON {
		info = stderr
	}
	if *rf.timescale == 0 {
		share := lab.CPUShare(300 * time.Millisecond)
		if k := demoTimescale(share); k != 1 {
			// On top of the file's own (demo-uet.yaml runs at 4).
			file := max(f.Timescale.K(), 1)
			*rf.timescale = file * float64(k)
			fmt.Fprintf(info, "cpu: this process gets %.2f of the CPUs (under %.2f): the fabric runs %d× slower than the file says (-timescale %g: rates ÷%d, times ×%d, bytes as written; -timescale %g runs it as written)\n",
				share, minCPUShare, busyTimescale, *rf.timescale, busyTimescale, busyTimescale, file)
		} else {
			fmt.Fprintf(info, "cpu: this process gets %.2f of the CPUs (from %.2f the fabric runs as written, else %d× slower)\n", share, minCPUShare, busyTimescale)
		}
	}
	fmt.Fprintf(info, "demo: %s (fabriclab demo -print %s prints it: copy it, edit it, fabriclab run it)\n", name, traffic)
	return rf.run("demo", f, stdout, stderr)
}

// demoTimescale is the fabric's slowdown the CPU check picks for a share.
func demoTimescale(share float64) units.Timescale {
	if share < minCPUShare {
		return busyTimescale
	}
	return 1
}
