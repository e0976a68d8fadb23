// Command roceperf is an iperf3-style RoCEv2 traffic tool: a server (-s)
// terminates queue pairs on UDP 4791, a client (-c HOST) runs RDMA WRITE or
// SEND streams on -P queue pairs with DCQCN and reports goodput, the
// reaction point's rate and the NIC counters like iperf3 (text or -J).
// With --transport uet both ends run Ultra Ethernet Transport (host/pds,
// NSCC) on UDP 4793 instead, -P PDCs sharing one CCC.
//
// It is a thin front end to package host/perf; run "roceperf -h" for usage.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/fabriclab/fabriclab/cmd/internal/completion"
	"github.com/fabriclab/fabriclab/host/perf"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command, for tests: errors are one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "completion" {
		c := completion.Command{Tool: "roceperf", Words: completion.Flags(usage)}
		return completion.Write(c, args[1:], stdout, stderr)
	}
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	switch o.action {
	case actionHelp:
		fmt.Fprint(stdout, usage)
		return exitOK
	case actionVersion:
		fmt.Fprintln(stdout, versionLine())
		return exitOK
	case actionKnobHelp:
		s, err := perf.KnobHelp(o.client.Profile, o.client.LineRate)
		if err != nil {
			fmt.Fprintln(stderr, perfErr(err))
			return exitUsage
		}
		fmt.Fprint(stdout, s)
		return exitOK
	case actionShowNIC:
		if err := showNIC(stdout, o); err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		return exitOK
	}
	out := stdout
	logw := stderr
	if o.logfile != "" {
		f, err := os.OpenFile(o.logfile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "roceperf: --logfile %s: %v\n", o.logfile, err)
			return exitRuntime
		}
		defer f.Close()
		out, logw = f, f
	}
	// The agent logs a failing QP before RunClient reports it: errors stay
	// one line unless -d asks for the agent's log.
	level := slog.LevelError + 1
	if o.debug {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: level}))

	if o.server != nil {
		cfg := *o.server
		cfg.Out, cfg.Logger = out, logger
		if err := perf.Serve(ctx, cfg); err != nil {
			fmt.Fprintln(stderr, perfErr(err))
			return exitRuntime
		}
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "roceperf: interrupt - the server has terminated")
			return exitRuntime
		}
		return exitOK
	}
	cfg := o.client
	cfg.Out, cfg.Logger = out, logger
	r, err := perf.RunClient(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, perfErr(err))
		return exitRuntime
	}
	if r.Interrupted {
		fmt.Fprintln(stderr, "roceperf: interrupt - the client has terminated")
		return exitRuntime
	}
	return exitOK
}
