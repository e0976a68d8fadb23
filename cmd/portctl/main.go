// Command portctl turns a Linux device into a switch egress port and
// inspects it: DSCP to 8 traffic classes, per-class buffers with WRED or
// step ECN marking, and a queue draining at the port speed.
//
// It is a thin front end to package qdisc; run "portctl help" for usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabriclab/fabriclab/cmd/internal/completion"
	"github.com/fabriclab/fabriclab/host/version"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

const mainHelp = `portctl - make a Linux device behave like a switch egress port

Traffic leaving the device is sorted by DSCP into 8 traffic classes (tc0-tc7),
each with its own buffer and ECN marking (WRED or step), and drains at the
port rate. Counters read like tc -s.

Usage: portctl COMMAND [options]

Commands:
  attach     make DEV a switch port (stays attached after portctl exits)
  configure  change rate, classes or DSCP map live; queues and counters kept
  show       print the effective configuration (-j for JSON, --as sonic,
             eos, nxos or junos for a switch's own language)
  stats      per-class counters like tc -s; --watch for per-second rates
  detach     remove the port: programs, HTB queues, pins
  tune       derive marking thresholds from rate and RTTs (no --dev needed)
  tunnel     an IP-in-IP tunnel PE with RFC 6040 ECN ("portctl tunnel help")
  sweep      remove the pins of ports and PEs whose device is gone
  dispatcher  the machine's xmit dispatcher: its slots and counters
  help       this text; "portctl help COMMAND" or "portctl COMMAND --help"
  version    the version (also -V, --version)
  completion  a bash completion script: source <(portctl completion)

Every command but tune, sweep and dispatcher takes --dev DEV and --netns
NAME (a name under /var/run/netns; default: the current namespace); show
without --dev prints a configuration no port holds. Options go after the
command.

Examples:
  portctl attach --netns sw --dev swp0 --rate 10gbit
  portctl attach --netns sw --dev swp0 --rate 10gbit \
      --tc 3:wred:min=100kb,max=2mb,p=0.2
  portctl configure --netns sw --dev swp0 --tc 3:step:k=100kb
  portctl show --netns sw --dev swp0
  portctl show --netns sw --dev swp0 --as sonic
  portctl stats --netns sw --dev swp0 --watch 1s
  portctl detach --netns sw --dev swp0

Exit status: 0 ok, 1 runtime error, 2 usage error.
`

// classHelp lists the class options; the marking modes' entries come from
// their homes in qdisc.
var classHelp = `
Class options (repeatable, applied in order):
  --tc CLASS:ITEM[,ITEM]...   set up traffic class CLASS (0-7 or tc0-tc7);
                              ':' and ',' both separate items:
` + qdisc.TCModesHelp() + `      limit=SIZE                  class buffer: tail drop above it
      strict | no-strict          serve before all non-strict classes (CNPs)
      wred-drop | no-wred-drop    drop Not-ECT packets on the marking curve
                                  (Linux RED); default: they pass until the
                                  limit, as on RoCE switches
      name=NAME                   label shown in tables
      rate=RATE                   drain rate of the class (--mode virtual only;
                                  default: port rate)
      xoff=SIZE,xon=SIZE          PPFC (seed 003): a packet that takes the
                                  backlog to xoff stops its source; resumed
                                  at xon by the next packet toward it, or at
                                  the stop's pause (drain time to xon/2);
                                  a source whose pause ends while the
                                  backlog is still above xon gets a hold
                                  (paused again)
      alarm=SIZE                  PPFC alarm, xon < alarm < xoff: a packet
                                  that takes the backlog to alarm warns its
                                  source once per episode (above xon until
                                  back at xon): no rate increase for the
                                  drain time to xon; 0: off (the default)
      no-ppfc                     PPFC off (the default)
      trim[=SIZE]                 packet trimming (UET): a packet the limit
                                  would drop leaves instead as its first
                                  SIZE bytes of IP packet (default 128)
                                  through the trim class, served in strict
                                  priority; only UDP longer than SIZE is
                                  trimmed (IPv4, or IPv6 without extension
                                  headers and SIZE >= 48), other packets
                                  are dropped
      trim-dscp=DSCP              DSCP of trimmed packets, ECN kept (default
                                  9); map it to the trim class of the next
                                  port (--dscp 9=7)
      trim-class=CLASS            where trimmed packets go (default 7)
      no-trim                     trimming off (the default)
  --dscp LIST=CLASS           map DSCPs to a class: 26=3, 24-31=3, 10,12,14=2
  --default-class CLASS       class for non-IP frames (ARP, LLDP)

Units as in tc: rates 100mbit, 10gbit; sizes 1500b, 64kb, 1mb (k = 1024);
probabilities 0.1 or 10%.
`

type command struct {
	run  func(args []string, stdout, stderr io.Writer) int
	help string
}

// commands is filled in init: the commands refer back to it for --help.
var commands map[string]command

func init() {
	commands = map[string]command{
		"attach":     {cmdAttach, attachHelp},
		"configure":  {cmdConfigure, configureHelp},
		"show":       {cmdShow, showHelp},
		"stats":      {cmdStats, statsHelp},
		"detach":     {cmdDetach, detachHelp},
		"tune":       {cmdTune, tuneHelp},
		"tunnel":     {cmdTunnel, tunnelHelp},
		"sweep":      {cmdSweep, sweepHelp},
		"dispatcher": {cmdDispatcher, dispatcherHelp},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one portctl command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainHelp)
		return exitUsage
	}
	switch args[0] {
	case "version", "-V", "-version", "--version":
		fmt.Fprintln(stdout, version.Line("portctl"))
		return exitOK
	case "completion":
		return completion.Write(bashCompletion(), args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			c, ok := commands[args[1]]
			if !ok {
				fmt.Fprintf(stderr, "portctl: unknown command %q (commands: attach, configure, show, stats, detach, tune, tunnel, sweep, dispatcher)\n", args[1])
				return exitUsage
			}
			fmt.Fprint(stdout, c.help)
			return exitOK
		}
		fmt.Fprint(stdout, mainHelp)
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "portctl: unknown command %q (commands: attach, configure, show, stats, detach, tune, tunnel, sweep, dispatcher; see portctl help)\n", args[0])
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

// bashCompletion is portctl's: the commands mainHelp lists, each with
// the flags of its help (tunnel with its own commands).
func bashCompletion() completion.Command {
	c := completion.Command{Tool: "portctl", Subs: map[string][]string{}}
	c.Words = append(completion.Commands(mainHelp), "--help", "--version")
	for name, cmd := range commands {
		c.Subs[name] = append(completion.Commands(cmd.help), completion.Flags(cmd.help)...)
	}
	return c
}

// usageError is a bad command line: exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// report prints err as "portctl: ..." lines and returns its exit code.
func report(stderr io.Writer, cmd string, err error) int {
	if err == nil {
		return exitOK
	}
	msg := strings.ReplaceAll(err.Error(), "\n", "\nportctl: ")
	fmt.Fprintf(stderr, "portctl: %s\n", msg)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "Run 'portctl %s --help' for usage.\n", cmd)
		return exitUsage
	}
	return exitRuntime
}

// multi collects a repeatable string option.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, " ") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

// common are the options every command takes.
type common struct {
	netns string
	dev   string
}

func newFlags(name string, c *common) *flag.FlagSet {
	fs := newFlagSet(name)
	fs.StringVar(&c.netns, "netns", "", "")
	fs.StringVar(&c.netns, "n", "", "")
	fs.StringVar(&c.dev, "dev", "", "")
	return fs
}

// newFlagSet is the options of command name, without the flag package's
// usage text: each command prints its own help.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("portctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// printJSON writes v as -j prints everything: indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonFlag registers -j and --json, which every command that can print
// JSON takes.
func jsonFlag(fs *flag.FlagSet, js *bool) {
	fs.BoolVar(js, "j", false, "")
	fs.BoolVar(js, "json", false, "")
}

// parseFlags parses args; done is set when --help was asked for.
func parseFlags(fs *flag.FlagSet, name string, c *common, args []string, stdout io.Writer) (done bool, err error) {
	if done, err := parseOptions(fs, name, args, stdout); done || err != nil {
		return done, err
	}
	if c.dev == "" {
		return false, usagef("--dev is required (the port device, e.g. --dev swp0)")
	}
	return false, nil
}

// parseOptions is parseFlags for a command that may go without --dev.
func parseOptions(fs *flag.FlagSet, name string, args []string, stdout io.Writer) (done bool, err error) {
	return parseCommand(fs, commands[name].help, args, stdout, "options are --name value, e.g. --dev swp0")
}

// parseCommand parses args, printing help for --help (done). An argument
// that is not an option is refused with hint: what the command takes.
func parseCommand(fs *flag.FlagSet, help string, args []string, stdout io.Writer, hint string) (done bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
			return true, nil
		}
		return false, usageError{err}
	}
	if fs.NArg() > 0 {
		return false, usagef("unexpected argument %q (%s)", fs.Arg(0), hint)
	}
	return false, nil
}

// classFlags are the options that change a configuration.
type classFlags struct {
	tc, dscp     multi
	defaultClass string
}

func (cf *classFlags) register(fs *flag.FlagSet) {
	fs.Var(&cf.tc, "tc", "")
	fs.Var(&cf.dscp, "dscp", "")
	fs.StringVar(&cf.defaultClass, "default-class", "", "")
}

func (cf *classFlags) edits() (*qdisc.Edits, error) {
	e, err := qdisc.ParseEdits(cf.tc, cf.dscp, cf.defaultClass)
	if err != nil {
		return nil, usageError{err}
	}
	return e, nil
}

func parseRateFlag(s string) (units.Rate, error) {
	r, err := units.ParseRate(s)
	if err != nil {
		return 0, usagef("--rate %s: %v", s, err)
	}
	if r == 0 {
		return 0, usagef("--rate %s: rate must be greater than 0", s)
	}
	return r, nil
}

var attachHelp = `Usage: portctl attach --dev DEV --rate RATE [options] [class options]

Make DEV's egress a switch port. It stays attached after portctl exits;
remove it with portctl detach. Prints the effective configuration.

Starts from the RoCE defaults and applies the class options on top:
  dscp 26 -> tc3 "roce": limit 2mb, ecn wred min 50kb max 1000kb probability 0.1
  dscp 48 -> tc6 "cnp":  limit 256kb, strict
  all other DSCPs and non-IP -> tc0 "default": limit 1mb, ecn off
  tc1, tc2, tc4, tc5, tc7: limit 1mb, ecn off

Options:
  --dev DEV            port device (required)
  --netns NAME         namespace of DEV (default: current)
  --rate RATE          port speed, e.g. 1gbit, 25gbit (required)
  --mode veth|virtual  veth (default): real queue, the veth peer runs the
                       dequeue hook: exact backlog and sojourn. virtual: for
                       tun/physical devices, a modelled queue draining at rate
  --peer-dev DEV       veth peer (default: found from the veth)
  --peer-netns NAME    namespace of the peer (default: found, or --netns)
  --legacy             attach with clsact + cls_bpf instead of TCX links
  --no-shaping         leave the root qdisc alone (no HTB at port rate)
  --shape              virtual mode: install HTB at the port rate too, so
                       DEV really sends at --rate (a port slower than the
                       NIC: a rate limiter); the virtual queue still marks
  --departure xmit|peer-ingress
                       where a packet leaves the queue (veth mode). xmit:
                       where HTB hands it to DEV (tracepoint
                       net_dev_start_xmit); the wait in the kernel's backlog
                       before the peer is counted apart as the host queue.
                       peer-ingress: at the peer's TC ingress, host queue
                       included. Default: xmit where the kernel allows it,
                       else peer-ingress (show says which and why)
  -j                   print the configuration as JSON
` + classHelp + `
The veth peer must have GRO off: ethtool -K PEER gro off.

Examples:
  portctl attach --netns sw --dev swp0 --rate 10gbit
  portctl attach --netns sw --dev swp0 --rate 100gbit \
      --tc 3:wred:min=150kb,max=3mb,p=0.2,limit=4mb --dscp 24-31=3
  portctl attach --dev tun0 --rate 1gbit --mode virtual --tc 0:step:k=64kb
`

func cmdAttach(args []string, stdout, stderr io.Writer) int {
	var (
		c                   common
		cf                  classFlags
		rate, mode          string
		peerDev, peerNetns  string
		departure           string
		legacy, noShape, js bool
		shape               bool
	)
	fs := newFlags("attach", &c)
	cf.register(fs)
	fs.StringVar(&rate, "rate", "", "")
	fs.StringVar(&mode, "mode", "veth", "")
	fs.StringVar(&peerDev, "peer-dev", "", "")
	fs.StringVar(&peerNetns, "peer-netns", "", "")
	fs.BoolVar(&legacy, "legacy", false, "")
	fs.BoolVar(&noShape, "no-shaping", false, "")
	fs.BoolVar(&shape, "shape", false, "")
	fs.StringVar(&departure, "departure", "", "")
	jsonFlag(fs, &js)
	err := func() error {
		if done, err := parseFlags(fs, "attach", &c, args, stdout); done || err != nil {
			return err
		}
		if rate == "" {
			return usagef("--rate is required (the port speed, e.g. --rate 10gbit)")
		}
		r, err := parseRateFlag(rate)
		if err != nil {
			return err
		}
		var qm qdisc.QueueMode
		if err := qm.UnmarshalText([]byte(mode)); err != nil {
			return usagef("--mode %s: want veth or virtual", mode)
		}
		if qm == qdisc.QueueVirtual && (peerDev != "" || peerNetns != "" || departure != "") {
			return usagef("--peer-dev, --peer-netns and --departure only apply to --mode veth")
		}
		if shape && (qm != qdisc.QueueVirtual || noShape) {
			return usagef("--shape applies to --mode virtual, without --no-shaping (a veth port shapes already)")
		}
		var dep qdisc.DepartureHook
		if departure != "" {
			if err := dep.UnmarshalText([]byte(departure)); err != nil {
				return usagef("--departure %s: want xmit or peer-ingress", departure)
			}
		}
		e, err := cf.edits()
		if err != nil {
			return err
		}
		cfg := qdisc.DefaultConfig(r)
		if err := e.Apply(&cfg); err != nil {
			return usageError{fmt.Errorf("invalid configuration: %w", err)}
		}
		// qdisc.Attach must not be called on a device that already has a
		// port: see the note in the package's Attach error path.
		if p, err := qdisc.Open(c.netns, c.dev); err == nil {
			p.Release()
			return fmt.Errorf("a port is already attached to %s; detach it first (portctl detach%s --dev %s)",
				devLabel(c.dev, c.netns), nsFlag(c.netns), c.dev)
		}
		p, err := qdisc.Attach(cfg, qdisc.AttachOptions{
			Dev: c.dev, Netns: c.netns, Mode: qm,
			PeerDev: peerDev, PeerNetns: peerNetns,
			Legacy: legacy, NoShaping: noShape, Shape: shape, Pin: true, Departure: dep,
		})
		if err != nil {
			return err
		}
		defer p.Release()
		return printShow(stdout, p, js)
	}()
	return report(stderr, "attach", err)
}

func nsFlag(ns string) string {
	if ns == "" {
		return ""
	}
	return " --netns " + ns
}

func printShow(w io.Writer, p *qdisc.Port, js bool) error {
	cfg, err := p.Config()
	if err != nil {
		return err
	}
	if js {
		return printJSON(w, showJSON{Port: p.Info(), Config: cfg})
	}
	renderShow(w, p.Info(), &cfg)
	return nil
}

var configureHelp = `Usage: portctl configure --dev DEV [--rate RATE] [class options]
       portctl configure --dev DEV --from sonic --file FILE [--rate RATE]
                         [class options]

Change an attached port live: the maps and HTB classes are updated in place,
so queues and counters survive. Settings not mentioned keep their value.
Prints the effective configuration.

With --from sonic the port takes a SONiC config_db.json's port whole (rate,
DSCP map, every class; the subset portctl show --as sonic writes: see
portctl show --help), then --rate and the class options on top. The port
keeps its class of non-IP frames, and its class names where FILE has none.

Options:
  --dev DEV          port device (required)
  --netns NAME       namespace of DEV (default: current)
  --rate RATE        new port speed
  --from sonic       take the configuration from --file
  --file FILE        a SONiC config_db.json (- for stdin)
  --sonic-port NAME  the port of FILE to take (default: its only one)
  -j                 print the configuration as JSON
` + classHelp + `
--default-class cannot change live on a shaped (HTB) port: detach and attach.

Examples:
  portctl configure --netns sw --dev swp0 --tc 3:min=100kb
  portctl configure --netns sw --dev swp0 --tc 3:step:k=100kb
  portctl configure --netns sw --dev swp0 --rate 25gbit --dscp 46=6
  portctl configure --netns sw --dev swp0 --from sonic --file leaf1.json
`

func cmdConfigure(args []string, stdout, stderr io.Writer) int {
	var (
		c  common
		cf changeFlags
		js bool
	)
	fs := newFlags("configure", &c)
	cf.register(fs)
	jsonFlag(fs, &js)
	err := func() error {
		if done, err := parseFlags(fs, "configure", &c, args, stdout); done || err != nil {
			return err
		}
		ch, err := cf.read()
		if err != nil {
			return err
		}
		if ch.empty() {
			return usagef("nothing to change: give --rate, class options (--tc, --dscp) or --from sonic --file FILE")
		}
		p, err := qdisc.Open(c.netns, c.dev)
		if err != nil {
			return err
		}
		defer p.Release()
		cfg, err := p.Config()
		if err != nil {
			return err
		}
		old := cfg.DefaultClass
		if ch.from != nil {
			cfg = takeFrom(cfg, *ch.from)
		}
		if ch.rate != 0 {
			cfg.Rate = ch.rate
		}
		if err := ch.edits.Apply(&cfg); err != nil {
			return usageError{fmt.Errorf("invalid configuration: %w", err)}
		}
		if cfg.DefaultClass != old && p.Info().HTB {
			return usagef("--default-class %d: cannot change live on a shaped port (now %d): detach and attach again", cfg.DefaultClass, old)
		}
		if err := p.Configure(cfg); err != nil {
			return err
		}
		return printShow(stdout, p, js)
	}()
	return report(stderr, "configure", err)
}

const showHelp = `Usage: portctl show --dev DEV [--netns NAME] [-j | --as DIALECT]
       portctl show --rate RATE [class options] [-j | --as DIALECT]
       portctl show --from sonic --file FILE [class options]
                    [-j | --as DIALECT]

Print the effective configuration of a port, read back from the kernel:
rate, queue mode (veth/virtual), attach mode (tcx/legacy), veth peer, where
departures are counted (xmit, or peer-ingress and why), the DSCP map (only
DSCPs outside the most common class are listed), and per class its limit,
ECN marking in tc spelling, strict and wred-drop.

Without --dev it prints a configuration no port holds (no root needed):
portctl's defaults at --rate with the class options on top, as attach
would make it, or a SONiC file's port (--from sonic) with them on top.

--as prints the configuration in a switch's own language:
  sonic   SONiC 202305 config_db.json, for config load
  eos     Arista EOS 4.30
  nxos    Cisco NX-OS 10.3, Nexus 9000
  junos   Junos OS 23.4, QFX5000
Each class keeps its number as traffic class and queue; the lossless (PFC
no-drop) class is the one with PPFC (xoff). A setting the switch has no
form for is refused (codel, tcn, ecnsharp, two-threshold, trim, a class
rate); what the dialect keeps elsewhere (the PPFC alarm, buffer details)
is left out and listed in the output's header comment.

Options:
  --dev DEV           port device
  --netns NAME        namespace of DEV (default: current)
  -j                  JSON
  --as DIALECT        sonic, eos, nxos or junos
  --interface NAME    the switch port's name in --as output (default:
                      Ethernet0, Ethernet1, Ethernet1/1, et-0/0/0)
  --port-buffer SIZE  --as junos: the switch port's buffer, which
                      buffer-size percentages are of (default: the sum of
                      the class limits)
  --rate RATE         without --dev: the port speed
  --from sonic        without --dev: take the configuration from --file
  --file FILE         a SONiC config_db.json (- for stdin)
  --sonic-port NAME   the port of FILE to read (default: its only one)
  --tc CLASS:ITEM     without --dev: class options applied on top, as
  --dscp LIST=CLASS   attach takes them (portctl attach --help)
  --default-class CLASS

Examples:
  portctl show --netns sw --dev swp0
  portctl show --netns sw --dev swp0 --as sonic > swp0.json
  portctl show --rate 100gbit --tc 3:xoff=1mb,xon=768kb --as eos
  portctl show --from sonic --file swp0.json --as junos
`

func cmdShow(args []string, stdout, stderr io.Writer) int {
	var (
		c  common
		cf changeFlags
		js bool
	)
	fs := newFlags("show", &c)
	cf.register(fs)
	cf.df.registerAs(fs)
	jsonFlag(fs, &js)
	err := func() error {
		if done, err := parseOptions(fs, "show", args, stdout); done || err != nil {
			return err
		}
		d, opt, err := cf.df.dialect()
		if err != nil {
			return err
		}
		if js && d != "" {
			return usagef("-j and --as %s: give one (JSON is the lab's configuration)", d)
		}
		if c.dev == "" {
			return showOffline(stdout, &cf, c.netns, js, d, opt)
		}
		if cf.given() {
			return usagef("show --dev prints the port as it is: --rate, --from and class options are for a configuration without one (drop --dev), and configure changes the port")
		}
		p, err := qdisc.Open(c.netns, c.dev)
		if err != nil {
			return err
		}
		defer p.Release()
		if d == "" {
			return printShow(stdout, p, js)
		}
		cfg, err := p.Config()
		if err != nil {
			return err
		}
		opt.Source = "port " + devLabel(c.dev, c.netns)
		return printDialect(stdout, &cfg, d, opt)
	}()
	return report(stderr, "show", err)
}

const statsHelp = `Usage: portctl stats --dev DEV [--netns NAME] [-a] [-j]
                     [--watch INTERVAL [--count N]]

Per-class counters, like tc -s. For each class that has seen traffic:
  Sent        bytes and packets that left the queue
  dropped     tail drops at the class limit, and WRED drops (wred-drop)
  marked CE   packets this port marked, by the codepoint they arrived with
  sent CE     CE packets that left the queue: what the receiver sees (veth)
  backlog     bytes/packets queued now, and the maximum seen
  sojourn     time in queue: mean, p50, p99 (percentiles are upper edges of
              power-of-two buckets)
  arrived     everything offered to the class, by ECN codepoint
  host queue  (departure xmit) packets that left the port but not yet
              reached the veth peer: they wait in this machine's per-CPU
              backlog, not in the port, and count in neither backlog nor
              sojourn. entered = delivered + dropped + in flight
  host wait   their wait from HTB's exit to the peer: mean, p50, p99, max
then the port counters (frames by type; unaccounted = passed through
outside the class accounting, e.g. non-IP; late departures = counted at the
peer because the xmit hook could not hand them over) and the kernel's root
qdisc line.

Options:
  --dev DEV          port device (required)
  --netns NAME       namespace of DEV (default: current)
  -a                 show all classes, not just those with traffic
  -j                 JSON (the counters, plus "qdisc": the kernel's)
  --watch INTERVAL   after the counters, print one line per active class
                     every INTERVAL (1s, 500ms; a bare number is seconds):
                     Mbit/s and packets/s dequeued, CE marks/s, drops/s,
                     backlog, mean sojourn and mean host-queue wait over
                     the interval. Until Ctrl-C.
                     With -j: one JSON snapshot per line every INTERVAL.
  --count N          stop after N reports

Examples:
  portctl stats --netns sw --dev swp0
  portctl stats --netns sw --dev swp0 --watch 1s --count 10
  portctl stats --netns sw --dev swp0 -j | jq '.classes[3].ce_marked_ect0'
`

// parseInterval reads a --watch interval: tc time units, bare number = s.
func parseInterval(s string) (time.Duration, error) {
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		d = time.Duration(f * float64(time.Second))
	} else if d, err = units.ParseDuration(s); err != nil {
		return 0, usagef("--watch %s: %v", s, err)
	}
	if d < 10*time.Millisecond || d > 24*time.Hour {
		return 0, usagef("--watch %s: interval must be 10ms to 24h", s)
	}
	return d, nil
}

func cmdStats(args []string, stdout, stderr io.Writer) int {
	var (
		c          common
		js, all    bool
		watch      string
		count      int
		countGiven bool
	)
	fs := newFlags("stats", &c)
	jsonFlag(fs, &js)
	fs.BoolVar(&all, "a", false, "")
	fs.BoolVar(&all, "all", false, "")
	fs.StringVar(&watch, "watch", "", "")
	fs.IntVar(&count, "count", 0, "")
	err := func() error {
		if done, err := parseFlags(fs, "stats", &c, args, stdout); done || err != nil {
			return err
		}
		fs.Visit(func(f *flag.Flag) { countGiven = countGiven || f.Name == "count" })
		var interval time.Duration
		if watch != "" {
			var err error
			if interval, err = parseInterval(watch); err != nil {
				return err
			}
		}
		if countGiven && watch == "" {
			return usagef("--count needs --watch")
		}
		if count < 0 || countGiven && count == 0 {
			return usagef("--count %d: must be at least 1", count)
		}
		p, err := qdisc.Open(c.netns, c.dev)
		if err != nil {
			return err
		}
		defer p.Release()
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return statsLoop(ctx, stdout, stderr, p, js, all, interval, count)
	}()
	return report(stderr, "stats", err)
}

// statsSource is what statsLoop needs from a port.
type statsSource interface {
	Info() qdisc.Info
	Stats() (qdisc.Stats, error)
	Qdisc() (qdisc.QdiscCounters, error)
}

func statsLoop(ctx context.Context, stdout, stderr io.Writer, p statsSource, js, all bool, interval time.Duration, count int) error {
	info := p.Info()
	snap := func() (qdisc.Stats, *qdisc.QdiscCounters, error) {
		st, err := p.Stats()
		if err != nil {
			return st, nil, err
		}
		q, err := p.Qdisc()
		if err != nil {
			fmt.Fprintf(stderr, "portctl: warning: root qdisc counters: %v\n", err)
			return st, nil, nil
		}
		return st, &q, nil
	}
	emitJSON := func(st qdisc.Stats, q *qdisc.QdiscCounters, indent bool) error {
		enc := json.NewEncoder(stdout)
		if indent {
			enc.SetIndent("", "  ")
		}
		return enc.Encode(statsJSON{Dev: info.Dev, Netns: info.Netns, Stats: st, Qdisc: q})
	}
	st, q, err := snap()
	if err != nil {
		return err
	}
	if interval == 0 {
		if js {
			return emitJSON(st, q, true)
		}
		renderStats(stdout, info, &st, q, all)
		return nil
	}
	if js {
		if err := emitJSON(st, q, false); err != nil {
			return err
		}
	} else {
		renderStats(stdout, info, &st, q, all)
		fmt.Fprintf(stdout, "\n%s\n", rateHeader)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 0; count == 0 || n < count; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, q, err := snap()
		if err != nil {
			return err
		}
		if js {
			if err := emitJSON(cur, q, false); err != nil {
				return err
			}
		} else {
			renderRates(stdout, &st, &cur)
		}
		st = cur
	}
	return nil
}

const detachHelp = `Usage: portctl detach --dev DEV [--netns NAME]

Remove the port: the programs on DEV and its veth peer, the HTB queues (the
device gets its default qdisc back) and the pins under /sys/fs/bpf/fabriclab.

Example:
  portctl detach --netns sw --dev swp0
`

func cmdDetach(args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlags("detach", &c)
	err := func() error {
		if done, err := parseFlags(fs, "detach", &c, args, stdout); done || err != nil {
			return err
		}
		p, err := qdisc.Open(c.netns, c.dev)
		if err != nil {
			return err
		}
		if err := p.Close(); err != nil {
			return fmt.Errorf("detach %s: %w", devLabel(c.dev, c.netns), err)
		}
		fmt.Fprintf(stdout, "detached %s\n", devLabel(c.dev, c.netns))
		return nil
	}()
	return report(stderr, "detach", err)
}
