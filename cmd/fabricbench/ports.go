//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os/exec"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/dispatch"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The many-ports rows (issue 28, "Many ports"): one machine with 1 and
// with 64 ports, each with its classes and HTB tree, in the two ways a
// port's xmit hook can run: through the machine's xmit dispatcher (one
// tracing program, a hash lookup and a tail call per transmission) and as
// a program of its own on the tracepoint (every port's program runs on
// every transmission of the machine). Per round and way, with no other
// port and with 63 idle ones: what the xmit hook's programs cost a
// transmission (the kernel's run-time statistics, summed over every
// program on the tracepoint: the judged figure), the sender's time per
// packet through one port (end to end, noisier), the time to attach a
// port and to read a port's counters. Last, fabriclabd's side: the
// daemon applying all the ports, its /metrics scrape, its reload down to
// one (ports_daemon.go). Goal: the hook's cost per transmission at 64
// ports within portsGoal of its cost at one.

const (
	portsGoal = 1.05
	// portsMax bounds -ports: the namespace holds two devices a port.
	portsMax = 256
)

// PortsReport is the many-ports section.
type PortsReport struct {
	Ports   int        `json:"ports"`
	Seconds float64    `json:"seconds_per_run"`
	CPU     int        `json:"sender_cpu"`
	Goal    float64    `json:"goal_ratio"`
	Rows    []PortsRow `json:"rows"`
	// Daemon is fabriclabd's side: its Apply, reload and /metrics with
	// the same number of ports.
	Daemon *PortsDaemon `json:"daemon,omitempty"`
}

// PortsRow is one way of running the xmit hook, over the rounds.
type PortsRow struct {
	Way string `json:"way"` // "dispatcher", "own program"
	// HookNsOne and HookNsMany: the xmit hook's programs' run time per
	// transmission of the machine (BPF_ENABLE_STATS), with one port and
	// with Ports, a value per round; HookRatio median(many) / median(one),
	// HookSpread the least and greatest per-round ratio.
	HookNsOne  []float64  `json:"hook_ns_one"`
	HookNsMany []float64  `json:"hook_ns_many"`
	HookRatio  float64    `json:"hook_ratio"`
	HookSpread [2]float64 `json:"hook_ratio_spread"`
	// NsOne and NsMany are the sender's wall time per packet through the
	// measured port (unpaced, pinned; the veth delivers on the same CPU),
	// Ratio and Spread likewise.
	NsOne  []float64  `json:"ns_per_packet_one"`
	NsMany []float64  `json:"ns_per_packet_many"`
	Ratio  float64    `json:"ratio"`
	Spread [2]float64 `json:"ratio_spread"`
	// AttachMs is the median time to attach one of the idle ports,
	// AttachAllS the time all of them took one after the other (median of
	// the rounds); StatsUs the median time to read one port's counters
	// with one port and with Ports attached.
	AttachMs    float64 `json:"attach_ms"`
	AttachAllS  float64 `json:"attach_all_s"`
	StatsUsOne  float64 `json:"stats_us_one"`
	StatsUsMany float64 `json:"stats_us_many"`
	Verdict     string  `json:"verdict"` // ok, above, ref
	// SinkDrops are datagrams the receiver's socket dropped (each runs
	// the kfree_skb programs: the dispatcher's two, or every port's
	// port_host_drop).
	SinkDrops uint64 `json:"sink_drops"`
}

// runPorts runs the section in a two-namespace lab of its own: a -> b is
// the measured port's path; the idle ports are veth pairs in a.
func runPorts(ctx context.Context, many, rounds int, send time.Duration) (*PortsReport, error) {
	rep := &PortsReport{Ports: many, Seconds: send.Seconds(), CPU: runtime.NumCPU() - 1, Goal: portsGoal}
	l, err := pairLab(0)
	if err != nil {
		return rep, err
	}
	defer closeLab(l)
	a, b := l.Node("a"), l.Node("b")
	for i := range many - 1 {
		x, y := idleDevs(i)
		for _, args := range [][]string{{"link", "add", x, "type", "veth", "peer", "name", y}, {"link", "set", x, "up"}, {"link", "set", y, "up"}} {
			if out, err := exec.Command("ip", append([]string{"-n", a.NetnsName}, args...)...).CombinedOutput(); err != nil {
				return rep, fmt.Errorf("ip %v: %v %s", args, err, out)
			}
		}
	}
	sink, err := udpSink(b)
	if err != nil {
		return rep, err
	}
	defer sink.Close()
	dst := sink.LocalAddr().(*net.UDPAddr)

	ways := []struct {
		name string
		own  bool
	}{{"dispatcher", false}, {"own program", true}}
	rows := make([]PortsRow, len(ways))
	var attach, attachAll, statsOne, statsMany [2][]float64
	for round := range rounds {
		for k := range ways {
			// Alternate which way goes first.
			w := (k + round) % len(ways)
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			progress("ports, round %d/%d: %s, 1 and %d ports", round+1, rounds, ways[w].name, many)
			r, err := portsRound(a, b, dst, many, ways[w].own, send, rep.CPU)
			if err != nil {
				return rep, fmt.Errorf("%s: %w", ways[w].name, err)
			}
			row := &rows[w]
			row.SinkDrops += r.one.sinkDrops + r.many.sinkDrops
			row.HookNsOne, row.HookNsMany = append(row.HookNsOne, r.one.hookNs), append(row.HookNsMany, r.many.hookNs)
			row.NsOne, row.NsMany = append(row.NsOne, r.one.nsPerPacket), append(row.NsMany, r.many.nsPerPacket)
			attach[w] = append(attach[w], r.attachMs...)
			var all float64
			for _, ms := range r.attachMs {
				all += ms / 1e3
			}
			attachAll[w] = append(attachAll[w], all)
			statsOne[w] = append(statsOne[w], r.one.statsUs)
			statsMany[w] = append(statsMany[w], r.many.statsUs)
		}
	}
	for w := range ways {
		row := &rows[w]
		row.Way = ways[w].name
		row.HookRatio, row.HookSpread = ratioSpread(row.HookNsOne, row.HookNsMany)
		row.Ratio, row.Spread = ratioSpread(row.NsOne, row.NsMany)
		row.AttachMs, row.AttachAllS = median(attach[w]), median(attachAll[w])
		row.StatsUsOne, row.StatsUsMany = median(statsOne[w]), median(statsMany[w])
		row.Verdict = "ok"
		if ways[w].own {
			row.Verdict = "ref"
		} else if row.HookRatio > portsGoal {
			row.Verdict = "above"
		}
	}
	rep.Rows = rows
	progress("ports: fabriclabd with %d ports", many)
	devs := []string{devA}
	for i := range many - 1 {
		x, _ := idleDevs(i)
		devs = append(devs, x)
	}
	d, err := portsDaemon(a, devs)
	if err != nil {
		return rep, fmt.Errorf("fabriclabd: %w", err)
	}
	rep.Daemon = &d
	return rep, nil
}

// ratioSpread is median(many)/median(one) and the least and greatest
// ratio of a round.
func ratioSpread(one, many []float64) (float64, [2]float64) {
	spread := [2]float64{math.Inf(1), 0}
	for i := range min(len(one), len(many)) {
		r := many[i] / one[i]
		spread[0], spread[1] = min(spread[0], r), max(spread[1], r)
	}
	return median(many) / median(one), spread
}

// idleDevs names the i-th idle veth pair.
func idleDevs(i int) (string, string) { return fmt.Sprintf("idle%da", i), fmt.Sprintf("idle%db", i) }

type portsRoundResult struct {
	one, many portsSample
	attachMs  []float64
}

// portsSample is one measurement: the xmit hook's run time per
// transmission, the sender's ns per packet, one port's counters read in
// µs, the receiver's socket drops.
type portsSample struct {
	hookNs, nsPerPacket, statsUs float64
	sinkDrops                    uint64
}

// portsRound attaches the measured port, measures, attaches the idle
// ports, measures again, and detaches them all.
func portsRound(a, b *lab.Node, dst *net.UDPAddr, many int, own bool, send time.Duration, cpu int) (res portsRoundResult, err error) {
	var ports []*qdisc.Port
	defer func() {
		for _, p := range ports {
			if cerr := p.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}
	}()
	// The measured port: fast enough that the sender's CPU is the limit.
	main, err := qdisc.Attach(qdisc.DefaultConfig(10*units.Gbit), qdisc.AttachOptions{Dev: devA, Netns: a.NetnsName, PeerDev: devB, PeerNetns: b.NetnsName, Departure: qdisc.DepartXmit, XmitOwnProgram: own})
	if err != nil {
		return res, err
	}
	ports = append(ports, main)
	if main.Info().XmitDispatched == own {
		return res, fmt.Errorf("the port is dispatched %v with its own program %v", main.Info().XmitDispatched, own)
	}
	// The programs on the tracepoint: the dispatcher's (it runs the
	// ports' port_xmit inside its own run), or every port's own.
	var hook []*ebpf.Program
	defer func() {
		for _, p := range hook {
			p.Close()
		}
	}()
	hookStat := func() (progStat, error) {
		var sum progStat
		for _, p := range hook {
			s, err := statOf(p)
			if err != nil {
				return sum, err
			}
			sum.runs, sum.ns = max(sum.runs, s.runs), sum.ns+s.ns
		}
		return sum, nil
	}
	addHook := func(p *qdisc.Port) error {
		var prog *ebpf.Program
		var err error
		if own {
			prog, err = p.Programs().PortXmit.Clone()
		} else if len(hook) == 0 {
			var st dispatch.Status
			if st, err = dispatch.Read(); err == nil {
				prog, err = ebpf.NewProgramFromID(st.ProgramID)
			}
		}
		if prog != nil {
			hook = append(hook, prog)
		}
		return err
	}
	// counters are the main port's and the sink's receive-buffer drops.
	counters := func() (qdisc.Stats, uint64, error) {
		st, err := main.Stats()
		if err != nil {
			return st, 0, err
		}
		drops, err := b.UDPCounter("RcvbufErrors")
		return st, drops, err
	}
	measure := func() (s portsSample, err error) {
		st0, d0, err := counters()
		if err != nil {
			return s, err
		}
		// The sender's time per packet without statistics (they cost
		// each program's run), then the hook's run time with them.
		n, err := udpBlast(a, dst, 0, send, cpu)
		if err != nil {
			return s, err
		}
		if n == 0 {
			return s, errors.New("no packet sent")
		}
		stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			return s, fmt.Errorf("enable BPF run-time statistics: %w", err)
		}
		h0, err := hookStat()
		if err == nil {
			_, err = udpBlast(a, dst, 0, send/2, cpu)
		}
		var h1 progStat
		if err == nil {
			h1, err = hookStat()
		}
		stats.Close()
		if err != nil {
			return s, err
		}
		time.Sleep(50 * time.Millisecond)
		st1, d1, err := counters()
		if err != nil {
			return s, err
		}
		s.sinkDrops = d1 - d0
		// Every departure at the xmit hook, none counted late.
		t0, t1 := st0.Total(), st1.Total()
		if late := st1.Port.LateDeparturePackets - st0.Port.LateDeparturePackets; late > uint64(n)/100 {
			return s, fmt.Errorf("%d of %d departures counted late: the xmit hook missed them", late, n)
		}
		if t1.Host.EnteredPackets == t0.Host.EnteredPackets {
			return s, errors.New("no departure at the xmit hook")
		}
		s.hookNs = h1.sub(h0).perRun()
		// Reading every port's counters.
		t := time.Now()
		for _, p := range ports {
			if _, err := p.Stats(); err != nil {
				return s, err
			}
		}
		s.statsUs = float64(time.Since(t).Microseconds()) / float64(len(ports))
		s.nsPerPacket = 1e9 * send.Seconds() / float64(n)
		return s, nil
	}
	if err := addHook(main); err != nil {
		return res, err
	}
	if res.one, err = measure(); err != nil {
		return res, err
	}
	cfg := qdisc.DefaultConfig(units.Gbit)
	for i := range many - 1 {
		x, y := idleDevs(i)
		t := time.Now()
		p, err := qdisc.Attach(cfg, qdisc.AttachOptions{Dev: x, Netns: a.NetnsName, PeerDev: y, PeerNetns: a.NetnsName, Departure: qdisc.DepartXmit, XmitOwnProgram: own})
		if err != nil {
			return res, fmt.Errorf("idle port %d: %w", i, err)
		}
		res.attachMs = append(res.attachMs, float64(time.Since(t).Microseconds())/1e3)
		ports = append(ports, p)
		if err := addHook(p); err != nil {
			return res, err
		}
	}
	if !own {
		st, err := dispatch.Read()
		if err != nil {
			return res, err
		}
		if st.Ports < many {
			return res, fmt.Errorf("the dispatcher holds %d ports, want %d", st.Ports, many)
		}
	}
	if res.many, err = measure(); err != nil {
		return res, err
	}
	// One port again, so that the baseline is the mean of one before and
	// one after: the machine drifts over the half minute in between.
	for _, p := range ports[1:] {
		if err := p.Close(); err != nil {
			return res, err
		}
	}
	ports = ports[:1]
	for _, p := range hook[1:] {
		p.Close()
	}
	hook = hook[:1]
	again, err := measure()
	if err != nil {
		return res, err
	}
	res.one.hookNs = (res.one.hookNs + again.hookNs) / 2
	res.one.nsPerPacket = (res.one.nsPerPacket + again.nsPerPacket) / 2
	res.one.sinkDrops += again.sinkDrops
	return res, nil
}

// write prints the section.
func (r *PortsReport) write(w io.Writer) {
	fmt.Fprintf(w, "\nmany ports: unpaced UDP a->b through one port (10 Gbit/s, HTB), sender pinned to CPU %d, %.0f s a run; 1 port, then %d (the others\n", r.CPU, r.Seconds, r.Ports)
	fmt.Fprintln(w, "idle, each with DefaultConfig's classes and HTB tree); the xmit hook through the machine's dispatcher against a program per port")
	fmt.Fprintf(w, "%-12s  %9s  %9s  %7s  %13s  %9s  %9s  %7s  %13s  %9s  %10s  %9s  %9s  %s\n", "xmit hook", "hook 1", fmt.Sprintf("hook %d", r.Ports), "ratio", "spread",
		"pkt 1", fmt.Sprintf("pkt %d", r.Ports), "ratio", "spread", "attach", fmt.Sprintf("attach %d", r.Ports-1), "stats 1", fmt.Sprintf("stats %d", r.Ports), fmt.Sprintf("verdict (hook ratio <= %.2fx)", r.Goal))
	for _, row := range r.Rows {
		fmt.Fprintf(w, "%-12s  %7.0fns  %7.0fns  %6.2fx  %5.2f..%-6.2f  %7.0fns  %7.0fns  %6.2fx  %5.2f..%-6.2f  %7.0fms  %9.1fs  %7.0fus  %7.0fus  %s\n", row.Way,
			median(row.HookNsOne), median(row.HookNsMany), row.HookRatio, row.HookSpread[0], row.HookSpread[1],
			median(row.NsOne), median(row.NsMany), row.Ratio, row.Spread[0], row.Spread[1],
			row.AttachMs, row.AttachAllS, row.StatsUsOne, row.StatsUsMany, row.Verdict)
	}
	if len(r.Rows) == 2 && len(r.Rows[0].HookNsOne) > 0 && len(r.Rows[1].HookNsMany) > 0 {
		d, o := r.Rows[0], r.Rows[1]
		fmt.Fprintf(w, "dispatcher / own program, the hook per transmission: %.2fx at 1 port, %.2fx at %d; the sender per packet: %.2fx, %.2fx\n",
			median(d.HookNsOne)/median(o.HookNsOne), median(d.HookNsMany)/median(o.HookNsMany), r.Ports,
			median(d.NsOne)/median(o.NsOne), median(d.NsMany)/median(o.NsMany))
	}
	for _, row := range r.Rows {
		if row.SinkDrops > 0 {
			fmt.Fprintf(w, "%s: the receiver's socket dropped %d datagrams (each runs the kfree_skb programs: with a program per port, every port's port_host_drop)\n", row.Way, row.SinkDrops)
		}
	}
	fmt.Fprintln(w, "hook: the run time of the programs on net_dev_start_xmit per transmission of the machine, kernel-timed (BPF_ENABLE_STATS, a run of half the length after the pkt run),")
	fmt.Fprintln(w, "summed over them (the dispatcher's includes the port_xmit it tail-calls; each program also pays the tracepoint's call, ~15-30 ns,")
	fmt.Fprintln(w, "outside the statistics); pkt: the sender's wall time per datagram (the veth delivers on the same CPU; steal and the other")
	fmt.Fprintf(w, "CPU's work show here); each round measures 1 port, %d, and 1 again (the baseline: the mean of the two); median of the\n", r.Ports)
	fmt.Fprintf(w, "rounds; ratio: at %d ports / at 1, spread: per round; attach: one idle port, median; attach %d: all of them, one after\n", r.Ports, r.Ports-1)
	fmt.Fprintln(w, "the other (each loads and verifies its own programs), median of the rounds;")
	fmt.Fprintln(w, "stats: reading one port's counters (Port.Stats).")
	if d := r.Daemon; d != nil {
		fmt.Fprintf(w, "fabriclabd (host/daemon) with the %d ports (veth mode, DefaultConfig): apply %.1f s; /metrics %.1f ms (%d samples, %d of them\n", r.Ports, d.ApplyS, d.Many.Ms, d.Many.Samples, d.Many.PortSamples)
		fmt.Fprintf(w, "fabriclab_port_*, %d KiB); reload to 1 port %.1f s; /metrics then %.1f ms (%d samples, %d port); a scrape's time is the median of %d\n",
			d.Many.Bytes/1024, d.ReloadS, d.One.Ms, d.One.Samples, d.One.PortSamples, scrapeRounds)
	}
}
