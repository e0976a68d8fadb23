// Command fabriclab runs a lab described in one file (host/labfile):
//
//	fabriclab run LAB.yaml [-t DUR] [-timescale K] [-htsim DIR] [-o DIR] [-runs N] [-variants A,B] [-json] [-v] [-cpuprofile FILE] [-memprofile FILE]
//	fabriclab demo [roce|uet|tcp] [-print] [run's flags]
//	fabriclab check LAB.yaml [-variant V] [run's flags] | -result DIR/result.json | LAB.yaml -daemons NODE=ADDR,...
//	fabriclab validate LAB.yaml
//	fabriclab plan LAB.yaml -node NAME [-apply]
//	fabriclab help
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/cmd/internal/completion"
	"github.com/fabriclab/fabriclab/host/daemon"
	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/labfile"
	peagent "github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/host/version"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

const usage = `usage:
  fabriclab run LAB.yaml [-cm FILE.cm] [-t DUR] [-timescale K] [-htsim DIR] [-o DIR] [-runs N] [-variants A,B] [-json] [-v] [-cpuprofile FILE] [-memprofile FILE]
      build the lab in network namespaces, run its flows, print a live view
      every report interval and a summary, write result.json and plots to
      DIR, and tear everything down (also on error and Ctrl-C). A file with
      variants (or runs above 1) is a comparison: every run builds the lab
      afresh and runs each variant in turn, and the summary gives each
      variant's mean and 95% confidence interval over its runs; each run's
      own result.json and plots go to DIR/VARIANT/runN.
      -cm FILE.cm
               run htsim's connection matrix FILE.cm as the file's
               workload: its flows on the file's hosts (its workload's
               hosts, else every host in order) with its workload's flow
               settings, started at their times and on their triggers;
               the summary gives each collective's completion time
      -t DUR   cap each run: flows' starts, every, pause and timed durations
               are scaled to fit in DUR when they reach past it (sized flows
               keep their sizes)
      -timescale K
               run the fabric K times slower, 1..1000 (default: the file's
               timescale): rates over K, every fabric time times K, bytes
               the same; -t caps the slowed run
      -htsim DIR
               also run the lab's UET incast in htsim (UEC's reference
               simulator), built in DIR (default $HTSIM), one seed per
               variant, and print its row beside the lab's; a lab htsim
               cannot express says why in one line. A workload matrix
               on a leaf-spine fabric runs in htsim_uec as it ran here:
               the summary gives each collective's completion over its
               ideal in both, side by side, and what does not map one
               to one; htsim's topology, .cm and command go to the
               output directory's htsim/ (without htsim_uec in DIR,
               run-htsim.sh there runs them later)
      -o DIR   output directory (default: the file's report.output, else
               fabriclab-out/NAME); "-" writes nothing
      -runs N  runs per variant (default: the file's runs)
      -variants A,B
               run only these variants
      -json    print the result as JSON instead of the tables
      -v       log the run's steps and the agents' warnings to stderr
      -cpuprofile FILE
               write a CPU profile of the run (go tool pprof): the lab's
               hosts run in this process, so it shows where the host-lost
               time goes
      -memprofile FILE
               write a heap profile once the run is over (go tool pprof;
               -sample_index=alloc_space: what the run allocated)
  fabriclab demo [roce|uet|tcp] [-print] [-t DUR] [-timescale K] [-o DIR] [-json] [-v]
      the demo: run one of the lab files built into fabriclab, as run runs
      a file. roce (the default, demo.yaml): three RoCEv2 senders join one
      after the other, every 3 s, into one 500 Mbit/s switch port with
      seed 000's WRED on the lossless class (and PPFC), and share it under
      DCQCN (the lab profile) until t = 20 s; the live view shows each
      flow's goodput, Rc and α, and the port's rate, queue, CE marks and
      drops every second; the summary, the demo's checks (utilization,
      fairness while all competed, no drop, no loss, the CNP loop, the
      queue against min_th and max_th), the marking curve against WRED's
      and the plots follow (dcqcn.png: each flow's goodput and Rc, α, the
      queue, and a 500 ms zoom on the cuts and climbs). uet
      (demo-uet.yaml): three UET senders at once under NSCC and RCCC into
      a port that holds one BDP and trims. tcp (demo-tcp.yaml): the roce
      lab with kernel TCP, cubic and classic ECN.
      The CPU check: when this process gets less than 0.85 of the CPUs
      (other load holds them) the fabric runs 2× slower than its file says
      (roce, tcp: the port at 250 Mbit/s, every fabric time ×2) and says
      so; -timescale sets it. -print writes the file to stdout, to copy
      and edit: fabriclab demo -print uet > my.yaml; fabriclab run my.yaml
  fabriclab check LAB.yaml [-variant V] [-t DUR] [-timescale K] [-o DIR] [-json] [-v]
  fabriclab check -result DIR/result.json [-json]
  fabriclab check LAB.yaml [-variant V] -daemons NODE=HOST:PORT,... [-window DUR] [-json]
      seed 000's three layers: run the lab once (its variant V), or read a
      run's result.json, and say per rocev2 flow which layer of the DCQCN
      loop is silent, in the seed's words, with the counters behind it:
      the switch ports on its path (CP: marks, the queue against the
      marking threshold, PPFC stops and drops), the path (DSCP and ECN as
      each hop saw them), the receiver (NP: CE arrivals, CNPs sent) and
      the sender (RP: CNPs handled and ignored). A flow whose path saw no
      congestion is idle: nothing to judge. -daemons judges the file as
      it runs on lab servers (fabriclab plan, a fabriclabd per node): the
      counters come from each node's fabriclabd metrics at HOST:PORT
      (/metrics), two scrapes -window apart (default 2s; 0: everything
      since each daemon started), so that every counter covers the same
      time. -json prints check.json's report. Exit status 0 when
      no layer is silent, 3 when one is.
      Examples: host/labfile/examples/three-layers/*.yaml
  fabriclab validate LAB.yaml
      check the file (every error names file:line, the field, the value and
      what is allowed) and print the addresses and routes it would build
  fabriclab plan LAB.yaml -node NAME [-variant V] [-apply]
      one node of the lab on a machine of its own (a lab server, a Vagrant
      VM): print its addresses, routes, netem (a link's delay and loss),
      ports, PEs and their agents, servers and flows, of the file or of
      its variant V; with -apply, configure this machine's network (the
      namespace it runs in) so: its NICs must be the file's devices.
      fabriclabd runs the rest (its config's lab: {file, node, variant}).
  fabriclab version
      print the version (also -V, --version)
  fabriclab completion
      print a bash completion script: source <(fabriclab completion)
  fabriclab help
      this text

Examples: host/labfile/examples/*.yaml. The schema: docs/labfiles.md.
Exit status: 0 when every flow delivered, 1 when one failed or the lab could
not be built, 2 on bad usage or a bad file, 3 when check finds a layer
silent, 130 on Ctrl-C.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "-V", "-version", "--version":
		fmt.Fprintln(stdout, version.Line("fabriclab"))
		return 0
	case "completion":
		c := completion.Command{Tool: "fabriclab", Words: []string{"run", "demo", "check", "validate", "plan", "help", "version", "completion", "--help", "--version"},
			Subs: map[string][]string{}}
		for _, sub := range []string{"run", "demo", "check", "validate", "plan"} {
			c.Subs[sub] = completion.Flags(completion.Help(run, sub, "-h"))
		}
		return completion.Write(c, args[1:], stdout, stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "run":
		return runLab(args[1:], stdout, stderr)
	case "demo":
		return demo(args[1:], stdout, stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "plan":
		return plan(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "fabriclab: unknown command %q: want run, demo, check, validate, plan or help\n", args[0])
	return 2
}

// parseArgs takes LAB.yaml before or after the flags.
func parseArgs(fs *flag.FlagSet, args []string) (string, error) {
	file, err := parseOptional(fs, args, "lab file")
	if err == nil && file == "" {
		err = errors.New("no lab file given")
	}
	return file, err
}

// parseOptional takes at most one argument (a what) before or after the
// flags; "" when there is none.
func parseOptional(fs *flag.FlagSet, args []string, what string) (string, error) {
	var arg string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return "", err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if arg != "" {
			return "", fmt.Errorf("one %s at a time (got %s and %s)", what, arg, args[0])
		}
		arg, args = args[0], args[1:]
	}
	return arg, nil
}

// loadLab reads and validates the lab file at path; nil when it cannot,
// said on stderr (exit status 2).
func loadLab(path string, stderr io.Writer) *labfile.File {
	f, err := labfile.Load(path)
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab: %v\n", err)
		return nil
	}
	return f
}

func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path, err := parseArgs(fs, args)
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab validate: %v\n", err)
		return 2
	}
	f := loadLab(path, stderr)
	if f == nil {
		return 2
	}
	p := f.Plan()
	fmt.Fprintf(stdout, "%s: %d nodes, %d links, %d ports, %d PEs, %d flows\n", path, len(f.Nodes), len(f.Links), len(p.Ports), len(p.PEs), len(f.Flows))
	if k := p.Timescale; k.K() != 1 {
		fmt.Fprintf(stdout, "  timescale %s: rates below are the slowed fabric's (÷%s), times ×%s, bytes as written\n", k, k, k)
	}
	for _, l := range p.Links {
		relay := ""
		if l.Relay != "" {
			relay = " (through relay " + l.Relay + ")"
		}
		fmt.Fprintf(stdout, "  link %-16s %-18s ⇄ %-16s %-18s%s\n", l.A.Node+":"+l.A.Dev, l.A.Addr, l.B.Node+":"+l.B.Dev, l.B.Addr, relay)
	}
	for _, r := range p.Spec.Routes {
		via := r.Via.String()
		for _, v := range r.Vias {
			via += ", " + v.String()
		}
		fmt.Fprintf(stdout, "  route %-8s %-18s via %s%s\n", r.Node, r.Dst, via, quickAck(r))
	}
	for _, po := range p.Ports {
		fmt.Fprintf(stdout, "  port %s at %s\n", po.Name, po.Config.Rate)
	}
	if hq := f.HostQueues(); len(hq) > 0 {
		parts := make([]string, len(hq))
		for i, h := range hq {
			parts[i] = fmt.Sprintf("%s %s", h.Host, h.Limit)
		}
		fmt.Fprintf(stdout, "  host queues (senders wait at): %s\n", strings.Join(parts, ", "))
	}
	if tv := f.Tuned(); tv != nil {
		fmt.Fprintf(stdout, "  tune %s, %s before each run; nominal values: %s\n", f.Tune.Port, f.Tune.RTT, strings.ReplaceAll(tv.TuneText(), "\n", "\n  "))
	}
	for _, pe := range p.PEs {
		fmt.Fprintf(stdout, "  pe %s:%s local %s, %d prefixes to %s\n", pe.Node, pe.Dev, pe.Config.Local, len(pe.Config.Routes), pe.Config.Routes[0].Remote)
	}
	for _, fp := range p.Flows {
		fmt.Fprintf(stdout, "  flow %s: %s → %s, %s/%s", fp.Flow.Name, fp.Flow.From, p.Servers[fp.Server].Addr, fp.Flow.Transport, fp.Flow.CC)
		if fp.TCP == nil {
			fmt.Fprintf(stdout, ", mtu %d, line rate %s", fp.Client.MTU, fp.Client.Timescale.Rate(fp.Client.LineRate))
		} else if fp.TCP.DSCP != 0 {
			fmt.Fprintf(stdout, ", dscp %d", fp.TCP.DSCP)
		}
		fmt.Fprintf(stdout, ", bottleneck %s, base RTT %v", fp.Bottleneck, fp.BaseRTT)
		if fp.Flow.Transport == labfile.TransportUET {
			fmt.Fprintf(stdout, " (NSCC's %v)", fp.Client.Timescale.Time(fp.Client.BaseRTT))
		}
		if n := fp.Flow.Count; n > 1 {
			fmt.Fprintf(stdout, ", %d instances", n)
		}
		fmt.Fprintln(stdout)
	}
	for _, sp := range p.Servers {
		if sp.Transport == labfile.TransportUET {
			fmt.Fprintf(stdout, "  server %s uet: line rate %s, base RTT %v", sp.Node, sp.Timescale.Rate(sp.LineRate), sp.Timescale.Time(sp.BaseRTT))
			if sp.TrimDSCP != 0 || sp.TrimLastHopDSCP != 0 {
				fmt.Fprintf(stdout, ", trimmed DSCP %d (last hop %d)", sp.TrimDSCP, sp.TrimLastHopDSCP)
			}
			fmt.Fprintln(stdout)
		}
	}
	for _, v := range f.Variants {
		fmt.Fprintf(stdout, "  variant %s: %d port edit(s)", v.Name, len(v.Ports))
		if len(v.Flows) > 0 {
			fmt.Fprintf(stdout, ", %d flow edit(s)", len(v.Flows))
		}
		fmt.Fprintln(stdout)
	}
	if len(f.Variants) > 0 || f.Runs > 1 {
		fmt.Fprintf(stdout, "  %d run(s) per variant, seed %d\n", f.Runs, f.Seed)
	}
	for _, g := range f.Goals {
		fmt.Fprintf(stdout, "  goal %s\n", &g)
	}
	return 0
}

func plan(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := fs.String("node", "", "")
	variant := fs.String("variant", "", "")
	apply := fs.Bool("apply", false, "")
	path, err := parseArgs(fs, args)
	if err == nil && *node == "" {
		err = errors.New("-node NAME is required")
	}
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab plan: %v\n", err)
		return 2
	}
	f := loadLab(path, stderr)
	if f == nil {
		return 2
	}
	d, err := f.DeployVariant(*node, *variant)
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab plan: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "%s: node %s (%s)", path, d.Node.Name, d.Node.Kind)
	if d.Variant != "" {
		fmt.Fprintf(stdout, ", variant %s", d.Variant)
	}
	fmt.Fprintln(stdout)
	for _, l := range d.Plan.Spec.Links {
		for _, ep := range []lab.Endpoint{l.A, l.B} {
			if ep.Node == d.Node.Name {
				mtu := l.MTU
				if mtu == 0 {
					mtu = labfile.DefaultLinkMTU
				}
				fmt.Fprintf(stdout, "  dev %-8s %-18s mtu %d, offloads off\n", ep.Dev, ep.Addr, mtu)
			}
		}
	}
	for _, r := range d.Plan.Spec.Routes {
		if r.Node != d.Node.Name {
			continue
		}
		via := r.Via.String()
		for _, v := range r.Vias {
			via += ", " + v.String()
		}
		fmt.Fprintf(stdout, "  route %-18s via %s%s\n", r.Dst, via, quickAck(r))
	}
	for _, n := range d.Netem {
		fmt.Fprintf(stdout, "  netem %s delay %v loss %g\n", n.Dev, n.Delay, n.Loss)
	}
	for _, po := range d.Ports {
		if po.Limiter {
			fmt.Fprintf(stdout, "  port %s at %s (fabriclabd: virtual queue, shaped: the pe agent's limiter)\n", po.Dev, po.Config.Rate)
			continue
		}
		fmt.Fprintf(stdout, "  port %s at %s (fabriclabd: virtual queue)\n", po.Dev, po.Config.Rate)
	}
	for _, pe := range d.PEs {
		fmt.Fprintf(stdout, "  pe %s local %s, %d prefixes to %s", pe.Dev, pe.Config.Local, len(pe.Config.Routes), pe.Config.Routes[0].Remote)
		if pe.Config.TwoThreshold {
			fmt.Fprintf(stdout, ", two-threshold decap")
		}
		if a := pe.Agent; a != nil {
			fmt.Fprintf(stdout, "; agent %s", a.Mode)
			switch a.Mode {
			case peagent.RateLimit:
				fmt.Fprintf(stdout, " from %s, rtt %v", a.LineRate, a.RTT)
			case peagent.Reroute:
				fmt.Fprintf(stdout, " over %d routes of this node", len(labfile.OwnRoutes(pe.Spill, d.Node.Name)))
			}
		}
		fmt.Fprintln(stdout)
	}
	for _, s := range d.Servers {
		fmt.Fprintf(stdout, "  server %s %s", s.Transport, s.Addr)
		if s.CC != "" {
			fmt.Fprintf(stdout, " (%s)", s.CC)
		}
		fmt.Fprintln(stdout)
	}
	for _, fp := range d.Flows {
		fmt.Fprintf(stdout, "  flow %s → %s (%s), %s/%s", fp.Flow.Name, fp.Flow.To, d.Plan.Servers[fp.Server].Addr, fp.Flow.Transport, fp.Flow.CC)
		if fl := fp.Flow; fl.Count > 1 {
			fmt.Fprintf(stdout, ", series of %d (seed %d)", fl.Count, d.Seed)
		}
		fmt.Fprintln(stdout)
	}
	if *apply {
		if err := d.Apply(); err != nil {
			fmt.Fprintf(stderr, "fabriclab plan -apply: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "applied to this machine's network\n")
	}
	return 0
}

// runFlags are run's and demo's flags.
type runFlags struct {
	dur       *time.Duration
	out       *string
	asJSON    *bool
	runs      *int
	variants  *string
	verbose   *bool
	timescale *float64
	htsimDir  *string
	cpuProf   *string
	memProf   *string
}

func addRunFlags(fs *flag.FlagSet) *runFlags {
	return &runFlags{
		dur:       fs.Duration("t", 0, "cap the run's timeline at `DUR`"),
		out:       fs.String("o", "", "output `DIR`"),
		asJSON:    fs.Bool("json", false, "print the result as JSON"),
		runs:      fs.Int("runs", 0, "runs per variant"),
		variants:  fs.String("variants", "", "run only these `A,B` variants"),
		verbose:   fs.Bool("v", false, "log the steps to stderr"),
		timescale: fs.Float64("timescale", 0, "run the fabric `K` times slower"),
		htsimDir:  fs.String("htsim", os.Getenv(htsim.EnvDir), "htsim's build `DIR`"),
		cpuProf:   fs.String("cpuprofile", "", "write a CPU profile of the run to `FILE`"),
		memProf:   fs.String("memprofile", "", "write a heap profile at the run's end to `FILE`"),
	}
}

func runLab(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRunFlags(fs)
	cmPath := fs.String("cm", "", "run htsim's connection matrix `FILE.cm` as the workload")
	path, err := parseArgs(fs, args)
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab run: %v\n", err)
		return 2
	}
	if code := rf.check("run", stderr); code != 0 {
		return code
	}
	var f *labfile.File
	if *cmPath != "" {
		f, err = labfile.LoadCM(path, *cmPath)
	} else {
		f, err = labfile.Load(path)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab: %v\n", err)
		return 2
	}
	return rf.run("run", f, stdout, stderr)
}

// check refuses flag values out of range.
func (rf *runFlags) check(cmd string, stderr io.Writer) int {
	if *rf.dur < 0 {
		fmt.Fprintf(stderr, "fabriclab %s: -t %v: want a positive duration\n", cmd, *rf.dur)
		return 2
	}
	if *rf.runs < 0 || *rf.runs > labfile.MaxRuns {
		fmt.Fprintf(stderr, "fabriclab %s: -runs %d: want 1..%d (default: the file's runs)\n", cmd, *rf.runs, labfile.MaxRuns)
		return 2
	}
	return 0
}

// run runs the loaded file f as the flags say: one run with its live
// view and summary, or a comparison.
func (rf *runFlags) run(cmd string, f *labfile.File, stdout, stderr io.Writer) int {
	if *rf.timescale != 0 {
		if err := f.SetTimescale(units.Timescale(*rf.timescale)); err != nil {
			fmt.Fprintf(stderr, "fabriclab %s: -timescale %g: %v\n", cmd, *rf.timescale, err)
			return 2
		}
	}
	var only []string
	if *rf.variants != "" {
		only = strings.Split(*rf.variants, ",")
		for _, v := range only {
			if !slices.Contains(f.VariantNames(), v) {
				fmt.Fprintf(stderr, "fabriclab %s: -variants %s: %s has no variant %q (its variants: %s)\n", cmd, *rf.variants, f.RunName(), v, strings.Join(f.VariantNames(), ", "))
				return 2
			}
		}
	}
	if os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "fabriclab %s: needs root (network namespaces, BPF programs)\n", cmd)
		return 1
	}
	level := slog.LevelWarn
	if *rf.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *rf.cpuProf != "" {
		// The lab's hosts are this process: where its CPU goes is where
		// the host-lost time comes from.
		pf, err := os.Create(*rf.cpuProf)
		if err != nil {
			fmt.Fprintf(stderr, "fabriclab %s: -cpuprofile: %v\n", cmd, err)
			return 2
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			fmt.Fprintf(stderr, "fabriclab %s: -cpuprofile: %v\n", cmd, err)
			return 2
		}
		defer pf.Close()
		defer pprof.StopCPUProfile()
	}
	if *rf.memProf != "" {
		// Written once the run is over, its lab torn down: what the
		// run's flows left behind, and (alloc_space) what they took.
		mf, err := os.Create(*rf.memProf)
		if err != nil {
			fmt.Fprintf(stderr, "fabriclab %s: -memprofile: %v\n", cmd, err)
			return 2
		}
		defer func() {
			runtime.GC()
			if err := pprof.WriteHeapProfile(mf); err != nil {
				fmt.Fprintf(stderr, "fabriclab %s: -memprofile: %v\n", cmd, err)
			}
			mf.Close()
		}()
	}
	ctx, cancel, interrupt := lab.CatchInterrupts(context.Background(), "fabriclab", "tearing the lab down", stderr)
	defer interrupt.Stop()
	defer cancel()
	opts := labfile.RunOptions{Duration: *rf.dur, OutDir: *rf.out, Logger: log}
	if *rf.htsimDir != "" {
		opts.Htsim = &htsim.Runner{Dir: *rf.htsimDir}
	}
	if len(f.Variants) > 0 || f.Runs > 1 || *rf.runs > 1 {
		return compare(ctx, f, labfile.CompareOptions{RunOptions: opts, Runs: *rf.runs, Variants: only}, *rf.asJSON, interrupt, stdout, stderr)
	}
	if !*rf.asJSON {
		fmt.Fprintf(stdout, "fabriclab: %s: %d flows over %d nodes; report every %v\n", f.RunName(), len(f.Flows), len(f.Nodes), interval(f))
		opts.OnSample = func(s *labfile.Sample) { labfile.WriteSample(stdout, s) }
	}
	res, err := labfile.Run(ctx, f, opts)
	return report(res, res != nil, *rf.asJSON, err, interrupt, stdout, stderr)
}

// report prints a run's or a comparison's result, as JSON or its tables,
// and returns the exit status.
func report(res interface{ WriteSummary(io.Writer) }, ok, asJSON bool, err error, interrupt *lab.Interrupt, stdout, stderr io.Writer) int {
	if ok {
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(res)
		} else {
			res.WriteSummary(stdout)
		}
	}
	if sig := interrupt.Signal(); sig != nil {
		return lab.SignalExitCode(sig)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab: %v\n", err)
		return 1
	}
	return 0
}

// compare runs a comparison: the live view per run, then the table.
func compare(ctx context.Context, f *labfile.File, opts labfile.CompareOptions, asJSON bool, interrupt *lab.Interrupt, stdout, stderr io.Writer) int {
	if !asJSON {
		n, runs := max(len(f.Variants), 1), f.Runs
		if len(opts.Variants) > 0 {
			n = len(opts.Variants)
		}
		if opts.Runs != 0 {
			runs = opts.Runs
		}
		fmt.Fprintf(stdout, "fabriclab: %s: %d variant(s) × %d run(s), a fresh lab each\n", f.RunName(), n, runs)
		opts.OnRun = func(v string, run int, res *labfile.Result, err error) {
			fmt.Fprintf(stdout, "run %d %-14s", run, v)
			if res != nil {
				for _, p := range res.Ports {
					if p.Watched && p.Error == "" {
						fmt.Fprintf(stdout, "  %s: util %.1f%%, mean wait %.0fus, %.2f%% marked, %d dropped", p.Name, 100*p.Utilization, p.MeanSojournUS, 100*p.MarkedFraction, p.DroppedPackets)
					}
				}
			}
			if res != nil && res.HostLost != nil && res.HostLost.Wall > 0 {
				h := res.HostLost
				fmt.Fprintf(stdout, "  host-lost %.2f%%", 100*h.Share)
				if h.HostStarved {
					fmt.Fprint(stdout, " (host-starved)")
				}
			}
			if err != nil {
				fmt.Fprintf(stdout, "  FAILED: %v", err)
			}
			fmt.Fprintln(stdout)
			if res != nil && res.Tune != nil && res.Tune.Source == labfile.TuneMeasured {
				fmt.Fprintf(stdout, "    %s\n", strings.ReplaceAll(res.Tune.TuneText(), "\n", "\n    "))
			}
		}
	}
	c, err := labfile.Compare(ctx, f, opts)
	return report(c, c != nil, asJSON, err, interrupt, stdout, stderr)
}

// quickAck marks a route with delayed ACKs off.
func quickAck(r lab.RouteSpec) string {
	if r.QuickAck {
		return " quickack"
	}
	return ""
}

func interval(f *labfile.File) time.Duration {
	if f.Report.Interval == 0 {
		return labfile.DefaultInterval
	}
	return f.Report.Interval
}

// exitSilent is check's status when a layer is silent.
const exitSilent = 3

// check runs a lab once (or reads a run's result.json) and prints seed
// 000's three-layer verdicts.
func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRunFlags(fs)
	variant := fs.String("variant", "", "run the file's variant `V`")
	resultPath := fs.String("result", "", "judge a run's `result.json` instead of running the lab")
	daemons := fs.String("daemons", "", "judge the lab running on lab servers: their fabriclabd metrics, `NODE=HOST:PORT,...`")
	window := fs.Duration("window", 2*time.Second, "with -daemons: judge the counters of this `DUR` (0: since each started)")
	path, err := parseOptional(fs, args, "lab file")
	switch {
	case err != nil:
	case path == "" && *resultPath == "":
		err = errors.New("no lab file given (or -result DIR/result.json)")
	case path != "" && *resultPath != "":
		err = fmt.Errorf("a lab file (%s) or -result (%s), not both", path, *resultPath)
	case *rf.runs > 1 || *rf.variants != "":
		err = errors.New("check judges one run: -variant V, not -runs or -variants")
	case *daemons != "" && path == "":
		err = errors.New("-daemons needs the lab file the servers run")
	case *window < 0 || *window > time.Minute:
		err = fmt.Errorf("-window %v: want 0 (since each daemon started) to 1m", *window)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fabriclab check: %v\n", err)
		return 2
	}
	var res *labfile.Result
	code := 0
	if *daemons != "" {
		if res, err = checkDaemons(path, *variant, *daemons, *window); err != nil {
			fmt.Fprintf(stderr, "fabriclab check: %v\n", err)
			return 1
		}
	} else if *resultPath != "" {
		res, err = labfile.ReadResult(*resultPath)
		if err != nil {
			fmt.Fprintf(stderr, "fabriclab check: %v\n", err)
			return 2
		}
	} else {
		if code := rf.check("check", stderr); code != 0 {
			return code
		}
		f := loadLab(path, stderr)
		if f == nil {
			return 2
		}
		if *variant != "" && !slices.Contains(f.VariantNames(), *variant) {
			fmt.Fprintf(stderr, "fabriclab check: -variant %s: %s has no such variant (its variants: %s)\n", *variant, f.RunName(), strings.Join(f.VariantNames(), ", "))
			return 2
		}
		if *rf.timescale != 0 {
			if err := f.SetTimescale(units.Timescale(*rf.timescale)); err != nil {
				fmt.Fprintf(stderr, "fabriclab check: -timescale %g: %v\n", *rf.timescale, err)
				return 2
			}
		}
		if os.Geteuid() != 0 {
			fmt.Fprintln(stderr, "fabriclab check: needs root (network namespaces, BPF programs)")
			return 1
		}
		level := slog.LevelWarn
		if *rf.verbose {
			level = slog.LevelInfo
		}
		ctx, cancel, interrupt := lab.CatchInterrupts(context.Background(), "fabriclab", "tearing the lab down", stderr)
		defer interrupt.Stop()
		defer cancel()
		if !*rf.asJSON {
			fmt.Fprintf(stdout, "fabriclab check: running %s once (%d flows)\n", f.RunName(), len(f.Flows))
		}
		res, err = labfile.Run(ctx, f, labfile.RunOptions{Duration: *rf.dur, OutDir: *rf.out, Variant: *variant,
			Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))})
		if sig := interrupt.Signal(); sig != nil {
			return lab.SignalExitCode(sig)
		}
		if res == nil {
			fmt.Fprintf(stderr, "fabriclab: %v\n", err)
			return 1
		}
		if err != nil {
			// The verdicts still read what the run counted.
			fmt.Fprintf(stderr, "fabriclab: %v\n", err)
			code = 1
		}
	}
	// Judged anew from the counters: a result.json's own verdicts are
	// those of the fabriclab that wrote it.
	c := labfile.Check(res)
	if *rf.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(c)
	} else {
		labfile.WriteCheck(stdout, c)
	}
	if len(c.Silent()) > 0 {
		return exitSilent
	}
	return code
}

// scrapeTimeout bounds each fabriclabd's /metrics.
const scrapeTimeout = 10 * time.Second

// checkDaemons reads the counters of a lab file running on lab servers
// from their fabriclabd metrics (NODE=HOST:PORT,...), over window (0:
// since each daemon started).
func checkDaemons(path, variant, list string, window time.Duration) (*labfile.Result, error) {
	f, err := labfile.Load(path)
	if err != nil {
		return nil, err
	}
	addrs := map[string]string{}
	for _, item := range strings.Split(list, ",") {
		node, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || node == "" || addr == "" {
			return nil, fmt.Errorf("-daemons %q: want NODE=HOST:PORT", item)
		}
		addrs[node] = addr
	}
	client := &http.Client{Timeout: scrapeTimeout}
	scrapeAll := func() (map[string]daemon.Metrics, error) {
		byNode := map[string]daemon.Metrics{}
		for node, addr := range addrs {
			m, err := daemon.Scrape(context.Background(), client, addr)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w (is its fabriclabd's metrics listen %s?)", node, err, addr)
			}
			byNode[node] = m
		}
		return byNode, nil
	}
	before, err := scrapeAll()
	if err != nil {
		return nil, err
	}
	if window == 0 {
		return daemon.JudgeDeployed(f, variant, nil, before)
	}
	time.Sleep(window)
	after, err := scrapeAll()
	if err != nil {
		return nil, err
	}
	return daemon.JudgeDeployed(f, variant, before, after)
}
