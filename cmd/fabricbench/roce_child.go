//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// roceperf runs in child processes of the bench, one per side, started
// inside each namespace with `ip netns exec` as iperf3 is: the bench
// re-executes itself with childArg first. Each child is then a process of
// its own whose CPU time getrusage measures alone, like iperf3's, and
// runs host/perf, the library cmd/roceperf is a thin shell over.
const childArg = "roce-child"

// childResult is what the client child prints (one JSON object).
type childResult struct {
	GoodputBps  float64 `json:"goodput_bps"`  // end.sum_sent: acknowledged payload
	ReceivedBps float64 `json:"received_bps"` // end.sum_received: placed at the server
	Seconds     float64 `json:"seconds"`
	TxPackets   uint64  `json:"tx_packets"`
	Retransmits uint64  `json:"retransmits"`
	// The sender's conn: what it sent, and of that in UDP GSO sends.
	ConnDatagrams uint64 `json:"conn_datagrams"`
	GSODatagrams  uint64 `json:"gso_datagrams"`
	GSOSends      uint64 `json:"gso_sends"`
	// ConnReceived is what the conn received: ACKs, NAKs, CNPs.
	ConnReceived uint64 `json:"conn_received"`
	// SteadyCPUSeconds and SteadyTxPackets: from every flow set up to the
	// flows' time up (steadyWindow), when the child measured it.
	SteadyCPUSeconds float64 `json:"steady_cpu_seconds,omitempty"`
	SteadyTxPackets  uint64  `json:"steady_tx_packets,omitempty"`
	// The Go runtime's garbage collection in that window.
	SteadyGCCycles     uint64  `json:"steady_gc_cycles"`
	SteadyAllocBytes   uint64  `json:"steady_alloc_bytes"`
	SteadyGCCPUSeconds float64 `json:"steady_gc_cpu_seconds"`
	// CPU of this process over RunClient (getrusage RUSAGE_SELF deltas).
	UserSeconds float64 `json:"user_seconds"`
	SysSeconds  float64 `json:"sys_seconds"`
	WallSeconds float64 `json:"wall_seconds"`
	// ToolCPUPct is the report's own cpu_utilization_percent.host_total.
	ToolCPUPct float64 `json:"tool_cpu_pct"`
	// SetupSeconds: from RunClient's start until the agent held every QP;
	// PeakRSSBytes: this process's VmHWM at the end (the scale rows).
	SetupSeconds float64 `json:"setup_seconds"`
	PeakRSSBytes uint64  `json:"peak_rss_bytes"`
	Error        string  `json:"error,omitempty"`
}

// serverResult is what the server child prints when its session is over.
type serverResult struct {
	PeakRSSBytes uint64 `json:"peak_rss_bytes"`
}

// childStart is a child's common start: its -send path, a context that
// ends on SIGINT or SIGTERM, and its CPU profile (none if cpuprofile is
// empty); done ends the last two. A non-zero code is the child's exit
// status.
func childStart(sendPath, cpuprofile string) (send pktio.SendPath, ctx context.Context, done func(), code int) {
	send, err := pktio.ParseSendPath(sendPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return send, nil, nil, 2
	}
	stopProfile, err := startProfile(cpuprofile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return send, nil, nil, 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return send, ctx, func() { stop(); stopProfile() }, 0
}

// childFlags are the flags both children (roceChild, uetChild) take.
type childFlags struct {
	mode, server, cpuprofile, sendPath *string
	seconds, msg                       *int
}

// newChildFlags is child name's flag set, with the flags both take.
func newChildFlags(name string) (*flag.FlagSet, *childFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return fs, &childFlags{
		mode:       fs.String("mode", "", "server or client"),
		server:     fs.String("server", "", "client: the server's address"),
		seconds:    fs.Int("seconds", 5, "client: test length"),
		msg:        fs.Int("msg", roceMessageBytes, "client: message bytes"),
		cpuprofile: fs.String("cpuprofile", "", "write a CPU profile of this process here"),
		sendPath:   fs.String("send", "auto", "how the conn sends (--send): auto or raw"),
	}
}

// roceChild is main for a child; args follow childArg.
func roceChild(args []string) int {
	fs, cf := newChildFlags(childArg)
	bind := fs.String("bind", "", "server: address to listen on")
	mtu := fs.Int("mtu", 1024, "client: path MTU")
	burst := fs.Int("burst", 0, "client: --burst (0: the tool's default)")
	qps := fs.Int("qps", 1, "client: -P, QPs")
	rate := fs.Float64("rate", 0, "client: -b, the line rate the QPs share, bits/s (0: unpaced)")
	maxQPs := fs.Int("max-qps", 0, "server: the QPs one session may hold (0: the server's default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	send, ctx, done, code := childStart(*cf.sendPath, *cf.cpuprofile)
	if code != 0 {
		return code
	}
	defer done()
	switch *cf.mode {
	case "server":
		addr, err := netip.ParseAddr(*bind)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bind:", err)
			return 2
		}
		cfg := perf.ServerConfig{Bind: addr, OneOff: true, Interval: -1, SendPath: send}
		if *maxQPs > 0 {
			cfg.Limits.MaxQPs, cfg.Limits.MaxTotalQPs = *maxQPs, *maxQPs
			cfg.Limits.MaxBufferBytes = 4 << 30
		}
		if err := perf.Serve(ctx, cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// Its own peak: the parent's ru_maxrss of a child counts the
		// bench's memory at the fork (Linux keeps it across exec).
		_ = json.NewEncoder(os.Stdout).Encode(serverResult{PeakRSSBytes: peakRSS()})
		return 0
	case "client":
		cfg := perf.DefaultClientConfig(*cf.server)
		cfg.CC = agent.CCNone // unpaced: LineRate 0
		cfg.MTU = *mtu
		cfg.MessageBytes = *cf.msg
		cfg.Duration = time.Duration(*cf.seconds) * time.Second
		cfg.Interval = 0
		cfg.SendPath = send
		if *burst > 0 {
			cfg.MaxBurst = *burst
		}
		cfg.QPs = *qps
		cfg.LineRate = units.Rate(*rate)
		var ru0, ru1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		t0 := time.Now()
		setup := make(chan time.Duration, 1)
		var ag *agent.Agent
		cfg.OnAgent = func(a *agent.Agent) { ag = a; go watchSetup(ctx, a, *qps, t0, setup) }
		// A gate open from the start: its OnReady comes once every QP is
		// connected, as the data starts.
		var steady steadyWindow
		gate := make(chan struct{})
		close(gate)
		cfg.StartGate = gate
		cfg.OnReady = func() { steady.start(ag.Counters().TxPackets) }
		cfg.OnFinished = func() { steady.end(ag.Counters().TxPackets) }
		rep, err := perf.RunClient(ctx, cfg)
		wall := time.Since(t0)
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		var res childResult
		select {
		case d := <-setup:
			res.SetupSeconds = d.Seconds()
		default:
		}
		res.PeakRSSBytes = peakRSS()
		if rep != nil {
			e := &rep.End
			res.GoodputBps = e.SumSent.BitsPerSecond
			res.ReceivedBps = e.SumReceived.BitsPerSecond
			res.Seconds = e.SumSent.Seconds
			res.TxPackets = e.Counters.Client.TxPackets
			res.Retransmits = e.Counters.Client.RetransmitPackets
			res.ToolCPUPct = e.CPU.HostTotal
			u := e.Counters.ClientUDP
			res.ConnDatagrams, res.GSODatagrams, res.GSOSends = u.DatagramsSent, u.GSODatagrams, u.GSOSends
			res.ConnReceived = u.DatagramsReceived
		}
		steady.fill(&res)
		if err != nil {
			res.Error = err.Error()
		} else if rep == nil {
			res.Error = "no report"
		}
		return res.emit(&ru0, &ru1, wall)
	}
	fmt.Fprintf(os.Stderr, "%s: -mode %q: want server or client\n", childArg, *cf.mode)
	return 2
}

// watchSetup sends on done how long after t0 the agent held all n QPs
// (created; the session connects them at once).
func watchSetup(ctx context.Context, a *agent.Agent, n int, t0 time.Time, done chan<- time.Duration) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if len(a.QPs()) >= n {
			done <- time.Since(t0)
			return
		}
	}
}

// steadyWindow is a client child's CPU and data packets from the moment
// every flow is set up to the moment the flows' time is up: the cost of a
// packet with N flows active, which the scale rows judge. The whole run
// adds the side channel's setup and teardown of N flows (a tenth of a
// 5-s run's CPU at 10,000 QPs), a cost per flow that the setup column
// times.
type steadyWindow struct {
	ru0, ru1       unix.Rusage
	pkts0, pkts1   uint64
	gc0, gc1       []metrics.Sample
	started, ended bool
}

// gcSamples reads the Go runtime's GC work so far: the window's share of
// the garbage collector is the setup's heap scanned late or the packets'
// own allocations.
func gcSamples() []metrics.Sample {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/allocs:bytes"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s
}

func (w *steadyWindow) start(pkts uint64) {
	w.gc0 = gcSamples()
	_ = unix.Getrusage(unix.RUSAGE_SELF, &w.ru0)
	w.pkts0, w.started = pkts, true
}

func (w *steadyWindow) end(pkts uint64) {
	if !w.started || w.ended {
		return
	}
	_ = unix.Getrusage(unix.RUSAGE_SELF, &w.ru1)
	w.gc1 = gcSamples()
	w.pkts1, w.ended = pkts, true
}

// fill puts the window in res, if it was measured.
func (w *steadyWindow) fill(res *childResult) {
	if !w.ended || w.pkts1 <= w.pkts0 {
		return
	}
	res.SteadyCPUSeconds = cpuSeconds(&w.ru1) - cpuSeconds(&w.ru0)
	res.SteadyTxPackets = w.pkts1 - w.pkts0
	res.SteadyGCCycles = w.gc1[0].Value.Uint64() - w.gc0[0].Value.Uint64()
	res.SteadyAllocBytes = w.gc1[1].Value.Uint64() - w.gc0[1].Value.Uint64()
	res.SteadyGCCPUSeconds = w.gc1[2].Value.Float64() - w.gc0[2].Value.Float64()
}

// cpuSeconds is a rusage's user and system time.
func cpuSeconds(ru *unix.Rusage) float64 { return seconds(ru.Utime) + seconds(ru.Stime) }

func seconds(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// peakRSS is this process's VmHWM, 0 if unknown.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// stopChild ends a child that done says has not exited: SIGTERM (so a
// profile is written out), then SIGKILL after 5 s.
func stopChild(p *os.Process, done <-chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.Kill()
		<-done
	}
}

// parseChild reads a client child's one JSON line.
func parseChild(out []byte, runErr error, stderr string) (childResult, error) {
	var res childResult
	if err := json.Unmarshal(out, &res); err != nil {
		if runErr != nil {
			return res, fmt.Errorf("client: %w (stderr: %s)", runErr, strings.TrimSpace(stderr))
		}
		return res, fmt.Errorf("client output: %w", err)
	}
	if res.Error != "" {
		return res, fmt.Errorf("client: %s", res.Error)
	}
	if runErr != nil {
		return res, fmt.Errorf("client: %w (stderr: %s)", runErr, strings.TrimSpace(stderr))
	}
	return res, nil
}

// roceperfRun runs one roceperf test a -> b in two child processes, both
// sending the send way. prof, if set, is a path prefix for the children's
// CPU profiles.
func roceperfRun(ctx context.Context, exe string, a, b *lab.Node, o roceOpts, prof string, send pktio.SendPath) (UDPRun, error) {
	var run UDPRun
	rctx, cancel := context.WithTimeout(ctx, time.Duration(o.seconds+30)*time.Second)
	defer cancel()

	srvArgs := []string{childArg, "-mode", "server", "-bind", addrB.Addr().String(), "-send", send.String()}
	if prof != "" {
		srvArgs = append(srvArgs, "-cpuprofile", prof+"-server.pprof")
	}
	name, args := pinned(o.cpu, exe, srvArgs...)
	cmd := b.Command(rctx, name, args...)
	// SIGTERM first so a profile is written out.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	t0 := time.Now()
	srv, err := startServer(rctx, b, cmd, perf.DefaultPort, "roceperf server")
	if err != nil {
		return run, err
	}
	defer srv.finish(5 * time.Second)

	cliArgs := []string{childArg, "-mode", "client", "-server", addrB.Addr().String(), "-send", send.String(),
		"-seconds", strconv.Itoa(o.seconds), "-mtu", strconv.Itoa(o.mtu), "-msg", strconv.Itoa(roceMessageBytes)}
	if prof != "" {
		cliArgs = append(cliArgs, "-cpuprofile", prof+"-client.pprof")
	}
	if o.burst > 0 {
		cliArgs = append(cliArgs, "-burst", strconv.Itoa(o.burst))
	}
	name, args = pinned(o.cpu, exe, cliArgs...)
	out, stderr, runErr := runClient(rctx, a, name, args...)
	// A failed client leaves the server's view of it in the server's
	// output: stop the server and say both.
	res, err := parseChild(out, runErr, stderr)
	if err != nil {
		srv.stop()
		if so := srv.output(); so != "" {
			err = fmt.Errorf("%w (server output: %s)", err, so)
		}
		return run, fmt.Errorf("roceperf %w", err)
	}
	// The one-off server exits after the session.
	if !srv.exited(5 * time.Second) {
		return run, errors.New("roceperf server did not exit after its one session")
	}
	if err := srv.failed(); err != nil {
		return run, fmt.Errorf("roceperf server: %w", err)
	}
	if res.GoodputBps <= 0 || res.TxPackets == 0 {
		return run, errors.New("roceperf reported no goodput or no packets sent")
	}
	return res.udpRun(srv.cmd.ProcessState, t0), nil
}

// startProfile writes a CPU profile of this process to path (none if
// empty) until the returned stop.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// emit fills in the CPU seconds between ru0 and ru1 and the wall time,
// prints res as the child's one JSON line and returns its exit status.
func (res *childResult) emit(ru0, ru1 *unix.Rusage, wall time.Duration) int {
	res.UserSeconds = seconds(ru1.Utime) - seconds(ru0.Utime)
	res.SysSeconds = seconds(ru1.Stime) - seconds(ru0.Stime)
	res.WallSeconds = wall.Seconds()
	_ = json.NewEncoder(os.Stdout).Encode(res)
	if res.Error != "" {
		return 1
	}
	return 0
}

// udpRun is a client child's result as a row's run; srv is the server
// child's end state, started at t0.
func (res *childResult) udpRun(srv *os.ProcessState, t0 time.Time) UDPRun {
	run := UDPRun{GoodputGbps: res.GoodputBps / 1e9, SentPackets: res.TxPackets, Seconds: res.Seconds,
		SenderCPUSeconds: res.UserSeconds + res.SysSeconds}
	if run.Seconds <= 0 {
		run.Seconds = res.WallSeconds
	}
	if run.SenderCPUSeconds > 0 {
		run.PPSPerCore = float64(run.SentPackets) / run.SenderCPUSeconds
	}
	if res.TxPackets > 0 {
		run.LossPct = 100 * float64(res.Retransmits) / float64(res.TxPackets)
	}
	if res.ConnDatagrams > 0 {
		run.GSOPct = 100 * float64(res.GSODatagrams) / float64(res.ConnDatagrams)
	}
	if res.GSOSends > 0 {
		run.SegmentsPerSend = float64(res.GSODatagrams) / float64(res.GSOSends)
	}
	if srv != nil {
		if wall := time.Since(t0).Seconds(); wall > 0 {
			run.ReceiverCPUPct = 100 * (srv.UserTime() + srv.SystemTime()).Seconds() / wall
		}
	}
	return run
}
