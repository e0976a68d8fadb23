package main

// The TCP variant of the demo (-traffic tcp): one iperf3 flow per sender,
// cubic with classic ECN, through the same WRED port.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
)

const (
	// tosRoCE is what iperf3 -S puts in the TOS byte: DSCP 26 (class 3).
	// The kernel adds ECT(0) in the low bits on ECN connections.
	tosRoCE  = "0x68"
	basePort = 5201
	// congestion is the senders' TCP congestion control: loss- and
	// ECN-driven: a CE echo cuts cwnd like a loss (RFC 3168).
	congestion = "cubic"
)

func (d *demo) tcpIntro(rps string) {
	o, info, cc := d.w, d.port.Info(), &d.cfg.Classes[qdisc.ClassRoCE]
	b := d.dumbbell.Bottleneck
	names := make([]string, len(d.dumbbell.Senders))
	for i, s := range d.dumbbell.Senders {
		names[i] = s.Name
	}
	d.printf("\nlab    %s -> sw -> r   (namespaces %s-*)\n", strings.Join(names, ","), d.dumbbell.RunID())
	d.printf("port   sw:%s -> r:%s at %s: HTB queue, eBPF ECN marking (attach %s, dequeue hook on r:%s)\n",
		b.Dev, b.PeerDev, o.rate, info.Attach, info.PeerDev)
	d.scaleIntro()
	d.printf("class  3 %q, DSCP %d: %s, buffer %sKB\n", cc.Name, qdisc.DSCPRoCE, wredText(cc), kb(uint64(cc.LimitBytes)))
	if rps != "" {
		d.printf("rx     RPS: %s (keeps each flow in order through the veths)\n", rps)
	}
	d.printf("flows  iperf3 TCP, cubic + classic ECN, TOS %s (DSCP 26, kernel sets ECT(0)); a new flow every %s, all end at %s\n\n",
		tosRoCE, o.stagger, o.duration)
	d.printf("Every second, class 3: dequeue rate, CE marks and the fraction of ECN-capable arrivals marked,\n")
	d.printf("backlog now and peak, gauge [#=queue |=min_th, right edge=max_th], sojourn p50/p99 (estimated from log2 bins).\n\n")
}

// flowEvent tells the live view a flow started or ended.
type flowEvent struct {
	idx     int
	started bool
	res     FlowResult
}

func (d *demo) tcpTraffic(ctx context.Context) error {
	o, dumbbell := d.w, d.dumbbell
	raddr := dumbbell.ReceiverAddr.String()

	// One single-shot server per flow, so each flow has its own port.
	var servers []*exec.Cmd
	var srvOut []*bytes.Buffer
	srvCtx, srvCancel := context.WithTimeout(ctx, o.duration+30*time.Second)
	defer func() {
		srvCancel() // a single-shot server whose client never came waits forever
		for _, s := range servers {
			_ = s.Wait()
		}
	}()
	for i := range o.senders {
		var buf bytes.Buffer
		cmd := dumbbell.Receiver.Command(srvCtx, "iperf3", "-s", "-1", "-B", raddr, "-p", strconv.Itoa(basePort+i))
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start iperf3 server: %w", err)
		}
		servers = append(servers, cmd)
		srvOut = append(srvOut, &buf)
	}
	if err := d.waitListening(ctx, o.senders); err != nil {
		srvCancel()
		for i := range srvOut {
			if s := strings.TrimSpace(srvOut[i].String()); s != "" {
				err = fmt.Errorf("%w\niperf3 server %d: %s", err, i+1, s)
			}
		}
		return err
	}

	base, err := d.port.Stats()
	if err != nil {
		return err
	}
	events := make(chan flowEvent, 2*o.senders)
	var wg sync.WaitGroup
	mono0, err := d.startMeter()
	if err != nil {
		return err
	}
	t0 := time.Now()
	for i := range o.senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.flow(ctx, i, t0, events)
		}()
	}

	flows := make([]FlowResult, o.senders)
	var samples []Sample
	prev := base
	active, pending := 0, o.senders
	var trafficEnd time.Duration // when the last flow ended
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	d.printf("%s", liveHeader)
	cc := &d.cfg.Classes[qdisc.ClassRoCE]
	for pending > 0 {
		select {
		case ev := <-events:
			f := &ev.res
			if ev.started {
				active++
				d.printf("  ---- t=%.0fs  flow %d joins: %s %s -> %s:%d for %.0f s\n",
					time.Since(t0).Seconds(), ev.idx+1, f.Sender, f.Src, f.Dst, f.Port, f.Seconds)
				continue
			}
			active--
			pending--
			trafficEnd = time.Since(t0)
			flows[ev.idx] = ev.res
			if f.Error != "" && ctx.Err() == nil {
				d.printf("  ---- flow %d failed: %s\n", ev.idx+1, f.Error)
			}
		case <-tick.C:
			st, err := d.port.Stats()
			if err != nil {
				cancelAndWait(&wg, events)
				return err
			}
			s := interval(&prev.Classes[qdisc.ClassRoCE], &st.Classes[qdisc.ClassRoCE], st.Time.Sub(prev.Time), o.rate)
			s.T, s.Flows = st.Time.Sub(t0).Seconds(), active
			renderSample(d.out, &s, cc)
			samples = append(samples, s)
			prev = st
		case <-ctx.Done():
			// The flows' commands die with ctx; wait for their goroutines.
			cancelAndWait(&wg, events)
			return ctx.Err()
		}
	}
	wg.Wait()
	host, err := d.stopMeter()
	if err != nil {
		return err
	}

	// Let the queue drain so the counters are at rest for the invariant.
	st, err := d.settledStats()
	if err != nil {
		return err
	}
	sum := &Summary{
		Senders: o.senders, Rate: o.rate, DurationS: o.duration.Seconds(), StaggerS: o.stagger.Seconds(),
		Kernel: kernelRelease(), Port: d.port.Info(), Flows: flows, TrafficS: trafficEnd.Seconds(), Scale: d.scale(),
		ClassConfig: *cc, Samples: samples,
	}
	if q, err := d.port.Qdisc(); err == nil {
		sum.Qdisc = &q
	}
	sum.finish(&st, sub(st.Classes[qdisc.ClassRoCE].DequeuedBytes, base.Classes[qdisc.ClassRoCE].DequeuedBytes))
	sum.HostLost.set(host, mono0, sum.TrafficS, sum.Utilization)
	renderSummary(d.out, sum)
	d.printf("\n")
	if err := d.writeOutputs(o, nil, sum); err != nil {
		return err
	}
	return runErrors(sum.FlowsWithErrs, o.senders, sum.Invariant)
}

// cancelAndWait drains events until every flow goroutine has returned.
func cancelAndWait(wg *sync.WaitGroup, events <-chan flowEvent) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-events:
		case <-done:
			return
		}
	}
}

// flow runs iperf3 client i, starting at t0 + i·stagger and ending with the
// run, and reports its start and its result.
func (d *demo) flow(ctx context.Context, i int, t0 time.Time, events chan<- flowEvent) {
	o, dumbbell := d.w, d.dumbbell
	offset := time.Duration(i) * o.stagger
	secs := o.duration - offset
	f := FlowResult{
		Sender: dumbbell.Senders[i].Name, Src: dumbbell.SenderAddrs[i].String(), Dst: dumbbell.ReceiverAddr.String(),
		Port: basePort + i, StartS: offset.Seconds(), Seconds: secs.Seconds(),
	}
	finish := func(err error) {
		if err != nil {
			f.Error = err.Error()
		}
		events <- flowEvent{idx: i, res: f}
	}
	select {
	case <-time.After(time.Until(t0.Add(offset))):
	case <-ctx.Done():
		finish(ctx.Err())
		return
	}
	cctx, cancel := context.WithTimeout(ctx, secs+15*time.Second)
	defer cancel()
	cmd := dumbbell.Senders[i].Command(cctx, "iperf3", "-c", f.Dst, "-p", strconv.Itoa(f.Port),
		"-t", strconv.Itoa(int((secs+time.Second-1)/time.Second)), "-S", tosRoCE, "-C", congestion, "-J", "--connect-timeout", "3000")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		finish(fmt.Errorf("start iperf3: %w", err))
		return
	}
	events <- flowEvent{idx: i, started: true, res: f}
	werr := cmd.Wait()
	r, perr := parseIperf(stdout.Bytes())
	switch {
	case ctx.Err() != nil:
		finish(ctx.Err())
		return
	case perr == nil && r.Error != "":
		finish(fmt.Errorf("iperf3: %s", r.Error))
		return
	case werr != nil || perr != nil:
		msg := strings.TrimSpace(stderr.String())
		finish(fmt.Errorf("iperf3: %v %v %s", werr, perr, msg))
		return
	}
	f.GoodputBps = r.End.SumReceived.BitsPerSec
	f.ReceivedBytes = r.End.SumReceived.Bytes
	f.Seconds = r.End.SumReceived.Seconds
	f.Retransmits = r.End.SumSent.Retransmits
	f.Congestion = r.End.SenderCongestion
	for _, iv := range r.Intervals {
		f.intervals = append(f.intervals, iv.Sum)
	}
	finish(nil)
}

// waitListening waits until the receiver has n iperf3 servers listening.
func (d *demo) waitListening(ctx context.Context, n int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ports map[int]bool
		err := d.dumbbell.Receiver.Do(func() error {
			var text strings.Builder
			for _, f := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
				b, err := os.ReadFile(f)
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
				text.Write(b)
			}
			ports = listeningPorts(text.String())
			return nil
		})
		if err != nil {
			return err
		}
		ready := 0
		for i := range n {
			if ports[basePort+i] {
				ready++
			}
		}
		if ready == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("iperf3 servers in the receiver: %d of %d listening after 5s", ready, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ---- preflight ----

// runFunc runs a command to completion.
type runFunc func(ctx context.Context, name string, args ...string) error

// runLoud runs commands with their output shown, for apt-get.
func runLoud(w io.Writer) runFunc {
	return func(ctx context.Context, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = w, w
		return cmd.Run()
	}
}

// ensureIperf3 installs iperf3 with apt-get if it is missing, refreshing
// the package lists only if the first install fails.
func ensureIperf3(ctx context.Context, w io.Writer, lookPath func(string) (string, error), run runFunc) error {
	if _, err := lookPath("iperf3"); err == nil {
		return nil
	}
	if _, err := lookPath("apt-get"); err != nil {
		return errors.New("iperf3 is not installed and there is no apt-get: install iperf3 with your package manager")
	}
	install := []string{"install", "-y", "iperf3"}
	fmt.Fprintln(w, "iperf3 is not installed; installing it: apt-get install -y iperf3")
	if err := run(ctx, "apt-get", install...); err != nil {
		fmt.Fprintln(w, "install failed; refreshing the package lists: apt-get update")
		if err := run(ctx, "apt-get", "update"); err != nil {
			return fmt.Errorf("apt-get update: %w", err)
		}
		fmt.Fprintln(w, "retrying: apt-get install -y iperf3")
		if err := run(ctx, "apt-get", install...); err != nil {
			return fmt.Errorf("apt-get install -y iperf3: %w", err)
		}
	}
	if _, err := lookPath("iperf3"); err != nil {
		return fmt.Errorf("iperf3 still missing after apt-get install: %w", err)
	}
	fmt.Fprintln(w, "iperf3 installed")
	return nil
}
