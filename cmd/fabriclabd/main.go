// Command fabriclabd is the fabriclab agent of a lab server: it serves
// RoCEv2 and UET sessions to roceperf clients exactly as `roceperf -s`
// does, attaches switch egress ports to the server's NICs, runs the flows
// its config lists, and exports the counters for Prometheus.
//
//	fabriclabd [-config /etc/fabriclab/fabriclabd.yaml]
//	fabriclabd -check -config FILE     validate a config and exit
//
// SIGHUP reloads the config (a bad one is refused, the running one kept;
// what did not change keeps running), SIGTERM and SIGINT drain and exit.
// Logs are slog JSON on stderr (the journal under systemd).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/cmd/internal/completion"
	"github.com/fabriclab/fabriclab/host/daemon"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/version"
)

const usage = `usage: fabriclabd [-config FILE] [-check] [-version]

  -config FILE   the configuration (default %s)
  -check         validate FILE, print "ok" or the first error, and exit
  -version, -V   print the version and exit

fabriclabd completion prints a bash completion script:
source <(fabriclabd completion).

A RoCEv2 flow without a profiles.dcqcn profile runs DCQCN's %s profile
(millisecond timers for a lab's round trips), as roceperf and fabriclab do.

Signals: SIGHUP reloads FILE; SIGTERM or SIGINT drains (no new sessions,
those in progress end, at most drain_timeout) and exits.
HTTP (metrics.listen, default %s): /metrics, /healthz.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "completion" {
		c := completion.Command{Tool: "fabriclabd", Words: completion.Flags(completion.Help(run, "-h"))}
		return completion.Write(c, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("fabriclabd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", daemon.DefaultConfigPath, "")
	check := fs.Bool("check", false, "")
	showVersion := fs.Bool("version", false, "")
	fs.BoolVar(showVersion, "V", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, usage, daemon.DefaultConfigPath, dcqcn.DefaultProfile, daemon.DefaultMetricsListen)
			return 0
		}
		fmt.Fprintf(stderr, "fabriclabd: %v (fabriclabd -h for help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fabriclabd: unexpected argument %q (fabriclabd -h for help)\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Line("fabriclabd"))
		return 0
	}
	cfg, err := daemon.Load(*path)
	if *check {
		if err != nil {
			fmt.Fprintf(stderr, "fabriclabd: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, "ok")
		return 0
	}
	level := new(slog.LevelVar)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err != nil {
		log.Error("config", "path", *path, "err", err.Error())
		return 1
	}
	// Signals first: a SIGTERM during start-up still drains.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	d := daemon.New(daemon.Options{Logger: log, Level: level})
	log.Info("starting", "config", *path, "servers", len(cfg.Servers), "ports", len(cfg.Ports), "flows", len(cfg.Flows))
	t0 := time.Now()
	d.SweepStale()
	if err := d.Apply(cfg); err != nil {
		log.Error("start", "path", *path, "err", err.Error())
		_ = d.Drain(0)
		return 1
	}
	running := cfg.WithDefaults()
	web, err := serveHTTP(running.Metrics.Listen, d, log)
	if err != nil {
		log.Error("metrics", "listen", running.Metrics.Listen, "err", err.Error())
		_ = d.Drain(0)
		return 1
	}
	log.Info("fabriclabd started", "config", *path, "pid", os.Getpid(), "metrics", running.Metrics.Listen, "start_seconds", time.Since(t0).Seconds())
	notifySystemd("READY=1")

	for sig := range sigs {
		if sig != syscall.SIGHUP {
			log.Info("stopping", "signal", sig.String())
			notifySystemd("STOPPING=1")
			shutdownHTTP(web)
			if err := d.Drain(running.DrainTimeout); err != nil {
				log.Error("drain", "err", err.Error())
				return 1
			}
			return 0
		}
		log.Info("reloading", "config", *path)
		notifySystemd("RELOADING=1\nMONOTONIC_USEC=" + monotonicUsec())
		next, err := daemon.Load(*path)
		if err != nil {
			d.Refuse(err)
		} else {
			err = d.Apply(next)
		}
		if err != nil {
			log.Error("reload refused: the running configuration is kept", "config", *path, "err", err.Error())
			notifySystemd("READY=1")
			continue
		}
		n := next.WithDefaults()
		if n.Metrics.Listen != running.Metrics.Listen {
			shutdownHTTP(web)
			if web, err = serveHTTP(n.Metrics.Listen, d, log); err != nil {
				log.Error("metrics", "listen", n.Metrics.Listen, "err", err.Error())
			}
		}
		running = n
		notifySystemd("READY=1")
	}
	return 0
}

// serveHTTP listens at once (so a taken port fails the start) and serves
// in the background; "off" serves nothing.
func serveHTTP(addr string, d *daemon.Daemon, log *slog.Logger) (*http.Server, error) {
	if addr == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics", "err", err.Error())
		}
	}()
	return srv, nil
}

func shutdownHTTP(srv *http.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

// notifySystemd tells systemd (Type=notify) where the daemon is:
// READY, RELOADING, STOPPING. Without NOTIFY_SOCKET it does nothing.
func notifySystemd(state string) {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return
	}
	if sock[0] == '@' {
		sock = "\x00" + sock[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte(state))
}

func monotonicUsec() string {
	var ts unix.Timespec
	// CLOCK_MONOTONIC, as systemd wants for RELOADING's timestamp.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprint(ts.Nano() / 1e3)
}
