//go:build linux

// Command fabricbench (make bench) measures the port programs beside their references and
// prints one table of ratios (or -json):
//
//  1. the per-packet cost of port_enqueue and port_dequeue in named states,
//     including each dequeue AQM (tcn, codel, ecnsharp) in its pass and
//     marking states, timed by the kernel with BPF_PROG_RUN, against a
//     100 ns goal;
//  2. iperf3 TCP throughput over a veth pair between two namespaces, bare
//     and with the port attached (TCX and legacy clsact, no shaping),
//     interleaved in one run, against port/bare >= 0.97;
//  3. the RoCEv2 host (roce*.go): roceperf's single-flow goodput against
//     iperf3 -u at the same datagram size on a bare veth pair, interleaved,
//     against roceperf/iperf3 >= 1.5 (stretch 2); packets per second per
//     core of both senders; the DCQCN CNP reaction time (CE at the NP ->
//     rate cut at the RP) as percentiles;
//  4. the kernel NP (np.go): CE in -> CNP out on the receiver's device,
//     IPv4 and IPv6, against a 20 µs p99 goal, and the agent's NP measured
//     the same way;
//  5. the delay link's capacity (delay.go);
//  6. the UET incasts of netns-tests as lab files beside htsim in the same
//     setting (incast.go): tail FCT / ideal net of host-lost time against
//     htsim's + 0.03.
//
// It reports and never judges: the exit status is non-zero only when a
// measurement could not be made. Run as root: sudo make bench, or
// fabricbench built from cmd/fabricbench (-no-throughput, -no-roce skip
// parts; -only picks sections; -smoke runs every section once, short, in
// about a minute: make bench-smoke; -help).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/cmd/internal/completion"
	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/version"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// maxRepeat keeps repeat*benchFrameLen (the backlog growth of one enqueue
// trial, retries included) inside the headroom the cases leave below their
// thresholds.
const maxRepeat = 1_000_000

// Report is the whole output of a run; -json prints it as is.
type Report struct {
	Header     Header          `json:"header"`
	Programs   []ProgRow       `json:"programs"`
	Throughput []ThroughputRow `json:"throughput"`
	Roce       *RoceReport     `json:"roce,omitempty"`
	NP         *NPReport       `json:"np_bpf,omitempty"`
	Delay      *DelayReport    `json:"delay,omitempty"`
	Incast     *IncastReport   `json:"incast,omitempty"`
	Scale      *ScaleReport    `json:"scale,omitempty"`
	Ports      *PortsReport    `json:"ports,omitempty"`
	Soak       *SoakReport     `json:"soak,omitempty"`
	// Host is what the kernel accounted the machine took from each
	// section (host/hostlost.Kernel: run delay of this process's threads,
	// the softirq threads', steal, time_squeeze, backlog drops): the
	// figures run on a shared VM, and this says how shared.
	Host   []SectionHost `json:"host,omitempty"`
	Errors []string      `json:"errors,omitempty"`
	// ElapsedSeconds is the wall time of the whole run.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
}

// Header says where and how the numbers were taken.
type Header struct {
	Time     time.Time `json:"time"`
	Kernel   string    `json:"kernel"`
	CPUs     int       `json:"cpus"`
	CPUModel string    `json:"cpu_model,omitempty"`
	// Clocksource decides what bpf_ktime_get_ns costs.
	Clocksource string `json:"clocksource,omitempty"`
	GoVersion   string `json:"go_version"`
	Iperf3      string `json:"iperf3,omitempty"`
	Repeat      int    `json:"repeat"`
	Trials      int    `json:"trials"`
	Rounds      int    `json:"rounds"`
	Seconds     int    `json:"seconds"`
	// IperfCPU is the CPU iperf3 client and server were pinned to, -1 none.
	IperfCPU int `json:"iperf_cpu"`
	// LoadAvg is the 1-minute load average when the run started: other
	// work on the machine shows up as throughput noise.
	LoadAvg string `json:"loadavg,omitempty"`
	// PortConfig is the configuration of the attached port.
	PortConfig string `json:"port_config"`
	Packet     string `json:"packet"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		os.Exit(roceChild(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == uetChildArg {
		os.Exit(uetChild(os.Args[2:]))
	}
	os.Exit(run())
}

func run() int {
	rounds := flag.Int("rounds", 3, "rounds per configuration of the iperf3 TCP rows and per tool of the UDP goodput rows (interleaved)")
	seconds := flag.Int("seconds", 5, "length of each iperf3 / roceperf run, in seconds")
	repeat := flag.Int("repeat", 200_000, fmt.Sprintf("BPF_PROG_RUN repetitions per trial (at most %d)", maxRepeat))
	trials := flag.Int("trials", 5, "BPF_PROG_RUN trials per program state (the median is reported)")
	asJSON := flag.Bool("json", false, "print the report as JSON instead of a table")
	skipThroughput := flag.Bool("no-throughput", false, "skip the iperf3 TCP part")
	// Without shaping the port's "backlog" is only skbs on their way to the
	// peer, and TCP's are 64 KB GSO skbs: DefaultConfig's 1 MiB limit would
	// drop at random and measure a buffer policy, not the programs' cost.
	portLimit := flag.Uint64("port-limit", 1<<32, "bytes: every class limit of the attached port (0: DefaultConfig's, 1 MiB for TCP's class 0)")
	cpu := flag.Int("cpu", runtime.NumCPU()-1, "pin iperf3 client and server of the TCP rows to this CPU (-1: no pinning)")
	skipRoce := flag.Bool("no-roce", false, "skip the RoCEv2 host rows (roceperf goodput, pps per core, CNP reaction, kernel NP)")
	only := flag.String("only", "", "run only these sections, comma-separated: "+strings.Join(sectionNames, ", ")+
		" (roce = goodput,reaction); overrides -no-throughput and -no-roce")
	smoke := flag.Bool("smoke", false, "a quick pass through every section (CI): -rounds 1 -seconds 1 -repeat 20000 -trials 1 "+
		"-reaction-seconds 1 -np-count 500 -ports 16 and 1 s in-situ trials; flags given explicitly win")
	incastRuns := flag.Int("incast-runs", 3, "runs per variant of the UET incast lab files")
	incastSeeds := flag.Int("incast-seeds", 5, "htsim seeds per UET incast variant")
	scaleQPs := flag.String("scale-qps", "1,100,1000,10000", "scale rows: the QP counts, comma-separated, 1.."+strconv.Itoa(perf.MaxQPs))
	scaleRate := units.Rate(400 * units.Mbit)
	flag.Var(&scaleRate, "scale-rate", "scale rows: the line rate the QPs share")
	scaleSeconds := flag.Int("scale-seconds", 3, "scale rows: each row's run after setup")
	scaleRuns := flag.Int("scale-runs", 3, "scale rows: runs of every row, interleaved; each row's ratio is the runs' median, with their spread")
	scaleProfile := flag.String("scale-cpuprofile", "", "scale rows: write each client child's CPU profile to PREFIX-{roce,uet}-N.pprof")
	ports := flag.Int("ports", 64, "many-ports rows: the ports on the machine beside one (2.."+strconv.Itoa(portsMax)+")")
	soakFor := flag.Duration("soak", time.Hour, "the soak's length (the demo's lab at 80 % load, flows joining and leaving); 0 skips it")
	htsimDir := flag.String("htsim", os.Getenv(htsim.EnvDir), "htsim's build directory for the incast section (default $"+htsim.EnvDir+"; without one, htsim's recorded tails)")
	rf := roceFlags()
	nf := npFlags()
	var showVersion bool
	flag.BoolVar(&showVersion, "version", false, "print the version and exit")
	flag.BoolVar(&showVersion, "V", false, "print the version and exit")
	if len(os.Args) > 1 && os.Args[1] == "completion" {
		c := completion.Command{Tool: "fabricbench"}
		flag.VisitAll(func(f *flag.Flag) { c.Words = append(c.Words, "-"+f.Name) })
		return completion.Write(c, os.Args[2:], os.Stdout, os.Stderr)
	}
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), `usage: fabricbench [flags]   (as root; make bench, make bench-smoke)

Measures the project beside its references and prints one table of
ratios with their spread (-json for JSON): the port programs' per-packet
cost, TCP through a port against a bare veth, roceperf against iperf3,
the DCQCN reaction and the kernel NP, the delay link, the UET incasts
beside htsim, many ports, the scale rows and an hour's soak. It reports
and never judges: it exits non-zero only when a measurement could not
be made. -only picks sections, -smoke runs each once, short.

flags (-name or --name):
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	wordVersion, err := positionalArgs(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabricbench:", err)
		return 2
	}
	if showVersion || wordVersion {
		fmt.Println(version.Line("fabricbench"))
		return 0
	}
	if *smoke {
		smokeDefaults(map[string]func(){
			"rounds":           func() { *rounds = 1 },
			"seconds":          func() { *seconds = 1 },
			"repeat":           func() { *repeat = 20_000 },
			"trials":           func() { *trials = 1 },
			"reaction-seconds": func() { *rf.rSeconds = 1 },
			"np-count":         func() { *nf.count = 500 },
			"incast-runs":      func() { *incastRuns = 1 },
			"incast-seeds":     func() { *incastSeeds = 1 },
			"scale-qps":        func() { *scaleQPs = "1,100" },
			"scale-seconds":    func() { *scaleSeconds = 1 },
			"scale-runs":       func() { *scaleRuns = 1 },
			"soak":             func() { *soakFor = 20 * time.Second },
			"ports":            func() { *ports = 16 },
		})
		inSituSend = time.Second
	}
	if *rounds < 1 || *seconds < 1 || *trials < 1 || *repeat < 1 || *repeat > maxRepeat || *cpu >= runtime.NumCPU() ||
		*incastRuns < 1 || *incastRuns > labfile.MaxRuns || *incastSeeds < 1 || *incastSeeds > 100 {
		fmt.Fprintf(os.Stderr, "fabricbench: -rounds, -seconds, -trials must be >= 1, -repeat in 1..%d, -cpu below %d, -incast-runs in 1..%d, -incast-seeds in 1..100\n", maxRepeat, runtime.NumCPU(), labfile.MaxRuns)
		return 2
	}
	sec := sections{prog: true, throughput: !*skipThroughput, goodput: !*skipRoce, reaction: !*skipRoce, np: !*skipRoce, delay: true, incast: true, scale: true, ports: true, soak: *soakFor > 0}
	if *only != "" {
		var err error
		if sec, err = parseSections(*only); err != nil {
			fmt.Fprintln(os.Stderr, "fabricbench:", err)
			return 2
		}
	}
	sqps, err := parseQPList(*scaleQPs, perf.MaxQPs)
	if err == nil && *scaleSeconds < 1 {
		err = fmt.Errorf("-scale-seconds %d: must be >= 1", *scaleSeconds)
	}
	if err == nil && (*scaleRuns < 1 || *scaleRuns > 20) {
		err = fmt.Errorf("-scale-runs %d: must be 1..20", *scaleRuns)
	}
	if err == nil && (*ports < 2 || *ports > portsMax) {
		err = fmt.Errorf("-ports %d: must be 2..%d", *ports, portsMax)
	}
	if err == nil && (*soakFor < 0 || sec.soak && (*soakFor < 10*time.Second || *soakFor > 24*time.Hour)) {
		err = fmt.Errorf("-soak %v: must be 10s..24h, or 0 to skip it", *soakFor)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabricbench:", err)
		return 2
	}
	ro, err := rf.opts(*rounds, *seconds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabricbench:", err)
		return 2
	}
	ro.goodput, ro.reaction = sec.goodput, sec.reaction
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "fabricbench: needs root (BPF programs, network namespaces): sudo fabricbench")
		return 1
	}

	// Our own signal handling: cancel the context so every deferred
	// teardown (port.Close, lab.Close, iperf3 kill) runs on the way out.
	lab.DisableSignalHandler()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	started := time.Now()
	rep := Report{Header: header(*repeat, *trials, *rounds, *seconds)}
	rep.Header.IperfCPU = *cpu
	rep.Header.PortConfig = "qdisc.DefaultConfig"
	if *portLimit > 0 {
		rep.Header.PortConfig += fmt.Sprintf(", every class limit %s", units.ByteSize(*portLimit))
	}
	failed := false

	host := hostMeter{rep: &rep}
	// section runs one measurement between the host meter's marks; its
	// error, named what, fails the bench.
	section := func(name, what string, run func() error) {
		host.begin(name)
		err := run()
		host.end()
		if err != nil {
			failed = true
			rep.Errors = append(rep.Errors, what+": "+err.Error())
		}
	}
	if sec.prog {
		progress("per-packet cost: %d trials x %d repetitions per state", *trials, *repeat)
		section("prog", "per-packet cost", func() (err error) {
			rep.Programs, err = runProgBench(*repeat, *trials)
			return err
		})
	}

	if sec.throughput && ctx.Err() == nil {
		section("throughput", "throughput", func() (err error) {
			rep.Throughput, err = runThroughput(ctx, *rounds, *seconds, *cpu, units.ByteSize(*portLimit))
			return err
		})
	}
	if (ro.goodput || ro.reaction) && ctx.Err() == nil {
		section("roce", "roce", func() (err error) {
			rep.Roce, err = runRoce(ctx, ro)
			return err
		})
	}
	if sec.delay && ctx.Err() == nil {
		section("delay", "delay link", func() (err error) {
			rep.Delay, err = runDelay(ctx, *seconds, *cpu)
			return err
		})
	}
	if sec.np && ctx.Err() == nil {
		section("np", "kernel NP", func() (err error) {
			rep.NP, err = runNP(ctx, nf)
			return err
		})
	}
	if sec.incast && ctx.Err() == nil {
		section("incast", "incast", func() (err error) {
			rep.Incast, err = runIncasts(ctx, incastOpts{runs: *incastRuns, seeds: *incastSeeds, smoke: *smoke, examples: examplesDir(), htsimDir: *htsimDir})
			return err
		})
	}
	if sec.scale && ctx.Err() == nil {
		section("scale", "scale", func() (err error) {
			rep.Scale, err = runScale(ctx, scaleOpts{qps: sqps, runs: *scaleRuns, rate: scaleRate, seconds: *scaleSeconds, profile: *scaleProfile})
			return err
		})
	}
	if sec.ports && ctx.Err() == nil {
		section("ports", "ports", func() (err error) {
			rep.Ports, err = runPorts(ctx, *ports, *trials, inSituSend)
			return err
		})
	}
	if sec.soak && ctx.Err() == nil {
		section("soak", "soak", func() (err error) {
			progress("soak: %v, the demo's lab at 80 %% load", *soakFor)
			rep.Soak, err = runSoak(ctx, *soakFor)
			return err
		})
	}
	if ctx.Err() != nil {
		failed = true
		rep.Errors = append(rep.Errors, "interrupted")
	}

	rep.ElapsedSeconds = time.Since(started).Seconds()
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(os.Stderr, "fabricbench:", err)
			return 1
		}
	} else {
		printTable(os.Stdout, &rep)
	}
	if failed {
		for _, e := range rep.Errors {
			fmt.Fprintln(os.Stderr, "fabricbench: measurement failed:", e)
		}
		return 1
	}
	return 0
}

// positionalArgs refuses the words left after the flags: fabricbench takes
// none, and a stray one would otherwise start the whole, long bench. A lone
// "version" is -version, as portctl and fabriclab take the word.
func positionalArgs(args []string) (version bool, err error) {
	if len(args) == 1 && args[0] == "version" {
		return true, nil
	}
	if len(args) > 0 {
		return false, fmt.Errorf("unexpected argument %q: fabricbench takes only flags (see -help)", args[0])
	}
	return false, nil
}

// smokeDefaults applies each setting whose flag the command line did not
// set, so that -smoke -rounds 3 still runs three rounds.
func smokeDefaults(settings map[string]func()) {
	flag.Visit(func(f *flag.Flag) { delete(settings, f.Name) })
	for _, set := range settings {
		set()
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fabricbench: "+format+"\n", args...)
}

func header(repeat, trials, rounds, seconds int) Header {
	h := Header{
		Time: time.Now().UTC().Truncate(time.Second), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		Repeat: repeat, Trials: trials, Rounds: rounds, Seconds: seconds,
		Packet: fmt.Sprintf("Ethernet + IPv4 (total length %d) + UDP 4791, DSCP %d, ECT(0): skb->len %d", benchIPLen, benchDSCP, benchFrameLen),
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil {
		h.Kernel = unix.ByteSliceToString(uts.Release[:]) + " " + unix.ByteSliceToString(uts.Machine[:])
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			h.LoadAvg = f[0]
		}
	}
	if b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"); err == nil {
		h.Clocksource = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if path, err := exec.LookPath("iperf3"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, path, "--version").Output(); err == nil {
			h.Iperf3 = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	return h
}

// errIperfMissing says how to get iperf3.
var errIperfMissing = errors.New("iperf3 not found in PATH: install it (Debian/Ubuntu: apt-get install -y iperf3; Fedora: dnf install iperf3)")
