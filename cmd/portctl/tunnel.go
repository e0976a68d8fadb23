package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

const tunnelHelp = `Usage: portctl tunnel COMMAND --dev DEV [options]

An IP-in-IP tunnel PE on DEV, in eBPF (no ipip module needed): packets
leaving DEV toward a tunnelled prefix get an outer IPv4 header to that
prefix's egress PE (RFC 6040 normal or compatibility mode for the outer ECN,
DSCP and DF copied); IPv4-in-IPv4 packets from a peer PE arriving on DEV are
decapsulated with RFC 6040's ECN table, each cell counted. The inner MTU is
DEV's less 20 bytes: a DF packet past it is answered with ICMP Fragmentation
Needed. DEV must have GRO, LRO, TSO, GSO and UDP GSO off:
  ethtool -K DEV gro off lro off tso off gso off tx-udp-segmentation off

Commands:
  attach     attach a PE (stays attached after portctl exits)
  configure  change routes, peers or settings live; counters kept
  show       print the configuration (-j for JSON)
  stats      counters, with the decapsulation table by cell (-j for JSON)
  log        print RFC 6040's currently-unused cells as they occur
             (rate-limited per cell) until Ctrl-C
  detach     remove the PE

Options (attach, configure):
  --local ADDR            this PE's address: outer source, decap address
  --route PREFIX=REMOTE   tunnel PREFIX to the egress PE REMOTE (repeatable;
                          configure replaces the list when given)
  --peer ADDR             also decapsulate from ADDR (repeatable; every
                          route's REMOTE is a peer already)
  --ecn normal|compat     outer ECN at encapsulation (default normal)
  --two-threshold[=false] decapsulation keeps an outer ECT(1) (seed 001's
                          light congestion) out of the inner header
  --ttl N                 outer TTL, 1-255 (default 64)
  --mtu N                 DEV's MTU as the tunnel sees it (default: DEV's)
  --log-interval DUR      least time between reports of one unused cell
                          (default 1s)
Every command takes --dev DEV and --netns NAME.

Examples:
  portctl tunnel attach --netns pe1 --dev wan --local 198.18.101.1 \
      --route 198.19.2.0/24=198.18.102.1
  portctl tunnel stats --netns pe1 --dev wan
  portctl tunnel configure --netns pe1 --dev wan --two-threshold
  portctl tunnel detach --netns pe1 --dev wan
`

func cmdTunnel(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fmt.Fprint(stdout, tunnelHelp)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	sub, args := args[0], args[1:]
	var err error
	switch sub {
	case "attach", "configure":
		err = tunnelSet(sub, args, stdout)
	case "show", "stats", "detach", "log":
		err = tunnelRead(sub, args, stdout, stderr)
	default:
		err = usagef("tunnel: unknown command %q (attach, configure, show, stats, log, detach)", sub)
	}
	return report(stderr, "tunnel", err)
}

// tunnelFlags are attach's and configure's options.
type tunnelFlags struct {
	c            common
	local        string
	routes       multi
	peers        multi
	ecn          string
	twoThreshold bool
	ttl          int
	mtu          int
	logInterval  time.Duration
	json         bool
	set          map[string]bool // the options given
}

func parseTunnelFlags(sub string, args []string, stdout io.Writer) (*tunnelFlags, bool, error) {
	tf := &tunnelFlags{}
	fs := newFlags("tunnel "+sub, &tf.c)
	fs.StringVar(&tf.local, "local", "", "")
	fs.Var(&tf.routes, "route", "")
	fs.Var(&tf.peers, "peer", "")
	fs.StringVar(&tf.ecn, "ecn", "normal", "")
	fs.BoolVar(&tf.twoThreshold, "two-threshold", false, "")
	fs.IntVar(&tf.ttl, "ttl", tunnel.DefaultTTL, "")
	fs.IntVar(&tf.mtu, "mtu", 0, "")
	fs.DurationVar(&tf.logInterval, "log-interval", tunnel.DefaultLogInterval, "")
	jsonFlag(fs, &tf.json)
	if done, err := parseCommand(fs, tunnelHelp, args, stdout, "options are --name value, e.g. --dev wan"); done || err != nil {
		return nil, done, err
	}
	if tf.c.dev == "" {
		return nil, false, usagef("--dev is required (the PE's WAN device, e.g. --dev wan)")
	}
	tf.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { tf.set[f.Name] = true })
	return tf, false, nil
}

// apply puts the options given onto cfg.
func (tf *tunnelFlags) apply(cfg *tunnel.Config) error {
	if tf.set["local"] {
		a, err := netip.ParseAddr(tf.local)
		if err != nil {
			return usagef("--local %s: want an IPv4 address", tf.local)
		}
		cfg.Local = a
	}
	if tf.set["route"] {
		cfg.Routes = nil
		for _, r := range tf.routes {
			p, remote, ok := strings.Cut(r, "=")
			if !ok {
				return usagef("--route %s: want PREFIX=REMOTE, e.g. 198.19.2.0/24=198.18.102.1", r)
			}
			prefix, err := netip.ParsePrefix(p)
			if err != nil {
				return usagef("--route %s: prefix %q: %v", r, p, err)
			}
			addr, err := netip.ParseAddr(remote)
			if err != nil {
				return usagef("--route %s: remote %q: want the egress PE's IPv4 address", r, remote)
			}
			cfg.Routes = append(cfg.Routes, tunnel.Route{Prefix: prefix, Remote: addr})
		}
	}
	if tf.set["peer"] {
		cfg.Peers = nil
		for _, p := range tf.peers {
			a, err := netip.ParseAddr(p)
			if err != nil {
				return usagef("--peer %s: want an IPv4 address", p)
			}
			cfg.Peers = append(cfg.Peers, a)
		}
	}
	if tf.set["ecn"] {
		m, err := tunnel.ParseEncapMode(tf.ecn)
		if err != nil {
			return usagef("--ecn %s: want normal or compat", tf.ecn)
		}
		cfg.ECN = m
	}
	if tf.set["two-threshold"] {
		cfg.TwoThreshold = tf.twoThreshold
	}
	if tf.set["ttl"] {
		if tf.ttl < 1 || tf.ttl > 255 {
			return usagef("--ttl %d: want 1 to 255", tf.ttl)
		}
		cfg.TTL = uint8(tf.ttl)
	}
	if tf.set["mtu"] {
		cfg.MTU = tf.mtu
	}
	if tf.set["log-interval"] {
		cfg.LogInterval = tf.logInterval
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

func tunnelSet(sub string, args []string, stdout io.Writer) error {
	tf, done, err := parseTunnelFlags(sub, args, stdout)
	if done || err != nil {
		return err
	}
	var pe *tunnel.PE
	if sub == "attach" {
		if !tf.set["local"] || !tf.set["route"] {
			return usagef("attach needs --local and at least one --route")
		}
		var cfg tunnel.Config
		if err := tf.apply(&cfg); err != nil {
			return err
		}
		if pe, err = tunnel.Attach(tf.c.netns, tf.c.dev, cfg, tunnel.AttachOptions{Pin: true}); err != nil {
			return err
		}
	} else {
		if pe, err = tunnel.Open(tf.c.netns, tf.c.dev); err != nil {
			return err
		}
		cfg := pe.Config()
		if err := tf.apply(&cfg); err != nil {
			pe.Release()
			return err
		}
		if err := pe.Configure(cfg); err != nil {
			pe.Release()
			return err
		}
	}
	defer pe.Release()
	return printTunnelConfig(stdout, tf.c, pe.Config(), tf.json)
}

func tunnelRead(sub string, args []string, stdout, stderr io.Writer) error {
	var c common
	var js bool
	fs := newFlags("tunnel "+sub, &c)
	jsonFlag(fs, &js)
	if done, err := parseCommand(fs, tunnelHelp, args, stdout, "options are --name value, e.g. --dev wan"); done || err != nil {
		return err
	}
	if c.dev == "" {
		return usagef("--dev is required (the PE's WAN device, e.g. --dev wan)")
	}
	pe, err := tunnel.Open(c.netns, c.dev)
	if err != nil {
		return err
	}
	switch sub {
	case "detach":
		if err := pe.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "tunnel PE on %s detached\n", describe(c))
		return nil
	case "show":
		defer pe.Release()
		return printTunnelConfig(stdout, c, pe.Config(), js)
	case "log":
		defer pe.Release()
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		var h slog.Handler = slog.NewTextHandler(stdout, nil)
		if js {
			h = slog.NewJSONHandler(stdout, nil)
		}
		log := slog.New(h).With("dev", c.dev, "netns", c.netns)
		return pe.Events(ctx, func(ev tunnel.Event) { tunnel.LogEvent(log, ev) })
	}
	defer pe.Release()
	s, err := pe.Stats()
	if err != nil {
		return err
	}
	if js {
		return printJSON(stdout, s)
	}
	printTunnelStats(stdout, c, pe.Config(), s)
	return nil
}

func describe(c common) string {
	if c.netns == "" {
		return c.dev
	}
	return c.dev + " (netns " + c.netns + ")"
}

func printTunnelConfig(w io.Writer, c common, cfg tunnel.Config, js bool) error {
	if js {
		return printJSON(w, cfg)
	}
	fmt.Fprintf(w, "tunnel PE on %s: local %v, ecn %v, two-threshold %s, ttl %d, mtu %d (inner %d), log interval %v\n",
		describe(c), cfg.Local, cfg.ECN, onOff(cfg.TwoThreshold), cfg.TTL, cfg.MTU, cfg.MTU-tunnel.OuterHeaderBytes, cfg.LogInterval)
	for _, r := range cfg.Routes {
		fmt.Fprintf(w, "  route %v via PE %v\n", r.Prefix, r.Remote)
	}
	for _, p := range cfg.Peers {
		fmt.Fprintf(w, "  peer %v\n", p)
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// figureColumns is RFC 6040 Figure 4's column (and row) order.
var figureColumns = []tunnel.ECN{tunnel.NotECT, tunnel.ECT0, tunnel.ECT1, tunnel.CE}

func printTunnelStats(w io.Writer, c common, cfg tunnel.Config, s tunnel.Stats) {
	e, d := s.Encap, s.Decap
	fmt.Fprintf(w, "tunnel PE on %s, local %v\n", describe(c), cfg.Local)
	fmt.Fprintf(w, "encap: %d packets, %d bytes; passed %d; too big %d (ICMP sent %d, failed %d); malformed %d; errors %d; GSO kept %d\n",
		e.Packets, e.Bytes, e.Passed, e.TooBig, e.ICMPSent, e.ICMPFailed, e.Malformed, e.Errors, e.GSOFixed)
	fmt.Fprintf(w, "  outer ECN written: Not-ECT %d, ECT(0) %d, ECT(1) %d, CE %d\n",
		e.OuterECN[tunnel.NotECT], e.OuterECN[tunnel.ECT0], e.OuterECN[tunnel.ECT1], e.OuterECN[tunnel.CE])
	fmt.Fprintf(w, "decap: %d packets, %d bytes; passed %d; spoofed %d; malformed %d; GSO %d; errors %d\n",
		d.Packets, d.Bytes, d.Passed, d.Spoofed, d.Malformed, d.GSO, d.Errors)
	fmt.Fprintf(w, "  dropped (inner Not-ECT, outer CE) %d; (!) %d; (!!!) %d; light congestion kept from the inner %d; events lost %d\n",
		d.Dropped, d.Warn, d.Alarm, d.Light, d.EventsLost)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "  inner \\ outer\t")
	for _, o := range figureColumns {
		fmt.Fprintf(tw, "%v\t", o)
	}
	fmt.Fprintln(tw)
	for _, in := range figureColumns {
		fmt.Fprintf(tw, "  %v\t", in)
		for _, out := range figureColumns {
			result, drop, cell := tunnel.Decapsulate(in, out, cfg.TwoThreshold)
			r := result.String()
			if drop {
				r = "drop"
			}
			if cell != tunnel.CellOK {
				r += cell.String()
			}
			fmt.Fprintf(tw, "%s -> %s\t", strconv.FormatUint(d.Cells[in][out], 10), r)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
