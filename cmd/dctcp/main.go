// Command dctcp registers DCTCP (RFC 8257, written in BPF: bpf/dctcp.c,
// host/dctcp) as a TCP congestion control for as long as it runs, on
// kernels that have no DCTCP module, so that iperf3 -C, ss and any socket's
// TCP_CONGESTION can use it in every network namespace. With a command
// after "--" it runs that command and exits with its status; without one
// it prints the connections DCTCP runs, with their α, every -interval until
// Ctrl-C. Either way DCTCP is unregistered when it exits, even on SIGKILL
// (the kernel drops it with the process's file descriptors).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fabriclab/fabriclab/cmd/internal/completion"
	"github.com/fabriclab/fabriclab/host/dctcp"
	"github.com/fabriclab/fabriclab/host/version"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

const usage = `dctcp - DCTCP (RFC 8257) as a BPF TCP congestion control, while this runs

Usage:
  dctcp [options]                 register, print the flows every -interval, until Ctrl-C
  dctcp [options] -- COMMAND ...  register, run COMMAND, unregister; exit with its status
  dctcp completion                a bash completion script: source <(dctcp completion)

Sockets pick it by name, on both ends (the receiver's ACKs carry DCTCP's
ECE): iperf3 -C NAME, or setsockopt(TCP_CONGESTION). ECN is negotiated
whatever net.ipv4.tcp_ecn says; a connection without it falls back to Reno.

Examples:
  sudo dctcp -- ip netns exec h1 iperf3 -c 198.18.0.2 -C bpf_dctcp
  sudo dctcp -interval 1s          (then in another shell: iperf3 -s, iperf3 -c ... -C bpf_dctcp)

Options:
`

type options struct {
	name      string
	interval  time.Duration
	shiftG    uint
	alphaInit uint
	version   bool
	command   []string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("dctcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.name, "name", dctcp.DefaultName, "the congestion control's `name` (at most 15 bytes)")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "how often to print the flows without a command; 0 = never")
	p := dctcp.DefaultParams()
	fs.UintVar(&o.shiftG, "g", uint(p.ShiftG), "dctcp_shift_g: the gain g = 1/2^`shift` (0-10)")
	fs.UintVar(&o.alphaInit, "alpha-init", uint(p.AlphaOnInit), "dctcp_alpha_on_init: α when a connection starts, in 1/1024 (0-1024)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.BoolVar(&o.version, "V", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.command = fs.Args()
	if o.interval < 0 {
		return nil, fmt.Errorf("-interval (%v) must be 0 or more", o.interval)
	}
	return o, nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "completion" {
		c := completion.Command{Tool: "dctcp", Words: completion.Flags(completion.Help(run, "-h"))}
		return completion.Write(c, args[1:], stdout, stderr)
	}
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "dctcp: %v\n", err)
		return exitUsage
	}
	if o.version {
		fmt.Fprintln(stdout, version.Line("dctcp"))
		return exitOK
	}
	params := dctcp.Params{ShiftG: uint32(o.shiftG), AlphaOnInit: dctcp.Alpha(o.alphaInit)}
	if err := params.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "dctcp: needs root (CAP_BPF, CAP_NET_ADMIN) to load and register a congestion control")
		return exitRuntime
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reg, err := dctcp.Register(dctcp.Options{Name: o.name, Params: &params})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitRuntime
	}
	code := exitOK
	defer func() {
		if err := reg.Close(); err != nil {
			fmt.Fprintf(stderr, "dctcp: unregister %s: %v\n", reg.Name(), err)
		}
	}()
	fmt.Fprintf(stderr, "dctcp: registered %q (g = 1/%d, α starts at %v); unregistered on exit\n", reg.Name(), 1<<params.ShiftG, params.AlphaOnInit)
	if len(o.command) > 0 {
		code = runCommand(ctx, o.command, stdout, stderr)
	} else {
		watch(ctx, reg, o.interval, stdout)
	}
	if c, err := reg.Counters(); err == nil {
		fmt.Fprintf(stderr, "dctcp: %d connections (%d fell back to Reno), %d windows, %d cuts, %d loss reactions, %d receiver CE transitions, %d state repairs, %d state resyncs\n",
			c.Inits, c.Fallbacks, c.Windows, c.Cuts, c.LossReactions, c.CETransitions, c.StateRepairs, c.StateResyncs)
	}
	return code
}

// runCommand runs argv with the standard streams, passing Ctrl-C and
// SIGTERM on to it, and returns its exit status.
func runCommand(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "dctcp: %v\n", err)
		return exitRuntime
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return exitOK
			case errors.As(err, &ee):
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return ee.ExitCode()
			}
			fmt.Fprintf(stderr, "dctcp: %v\n", err)
			return exitRuntime
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			ctx = context.Background() // wait for it now
		}
	}
}

// watch prints the flows every interval until ctx ends.
func watch(ctx context.Context, reg *dctcp.Registration, interval time.Duration, w io.Writer) {
	if interval == 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fs, err := reg.Flows()
		if err != nil {
			fmt.Fprintln(w, err)
			continue
		}
		renderFlows(w, fs)
	}
}

// renderFlows prints one line per connection: a sender's α and cuts, a
// receiver's CE transitions.
func renderFlows(w io.Writer, fs []dctcp.Flow) {
	fmt.Fprintf(w, "%s  %d connections\n", time.Now().Format("15:04:05"), len(fs))
	if len(fs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "local\tremote\tα\tmean α\tmarked\tdelivered\twindows\tcuts\tlosses\tcwnd\tssthresh\tCE changes (rx)\t")
	for _, f := range fs {
		note := ""
		if f.Fallback {
			note = " reno (no ECN)"
		}
		fmt.Fprintf(tw, "%v\t%v\t%.3f\t%.3f\t%.4f\t%d\t%d\t%d\t%d\t%d\t%s\t%d%s\t\n", f.Key.Local, f.Key.Remote, f.Alpha.Float(), f.MeanAlpha(),
			f.MarkedFraction(), f.Delivered, f.Windows, f.Cuts, f.LossReactions, f.Cwnd, ssthreshText(f.SSThresh), f.CETransitions, note)
	}
	tw.Flush()
}

func ssthreshText(v uint32) string {
	if v >= 0x7fffffff {
		return "inf"
	}
	return fmt.Sprint(v)
}
