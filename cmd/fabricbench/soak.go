//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The soak (issue 28, "Soak"): the demo's lab (three RoCEv2 senders, one
// 500 Mbit/s port with seed 000's WRED on the lossless class, DCQCN's lab
// profile) at 80 % load for an hour, flows joining and leaving: s1 runs
// one flow the whole time, s2 and s3 one sized flow after another (a new
// session and QP each, 75 % of the time on), every one verified. This
// process holds the whole lab (port, agents, sessions); it samples its
// resident memory, Go heap, goroutines and open files, and the port's
// counters, every soakSamples-th of the run. The goal: the last sixth's
// memory and goroutines within soakGoal of the first sixth's (for an hour,
// the last 10 minutes against the first 10); at rest, the port's
// enqueued = dequeued + dropped + backlog in every class, counters that
// never went backwards, nothing dropped or resent, every byte verified.

const (
	soakGoal    = 0.05
	soakSamples = 60
	// soakJudgedFrom is the shortest run judged: its first sixth is
	// past the lab's start.
	soakJudgedFrom = 10 * time.Minute
	soakPort       = 500 * units.Mbit
	// soakFlowRate caps each sender (DCQCN's line rate): s1 always on,
	// s2 and s3 on 75 % of the time offer 180 × (1 + 2 × 0.75) = 450
	// Mbit/s; DCQCN's lab profile and the sessions' setup leave about
	// 400 of it on the port, 80 % (measured: 355 of 400 offered at 160).
	soakFlowRate = 180 * units.Mbit
	soakBytes    = 4 << 20               // each of s2's and s3's flows: 0.19 s at soakFlowRate
	soakPause    = 70 * time.Millisecond // between them: 75 % on
)

// SoakReport is the soak section.
type SoakReport struct {
	Seconds float64 `json:"seconds"`
	Goal    float64 `json:"goal_ratio"`
	// Samples of this process and the port, every Seconds/soakSamples.
	Samples []SoakSample `json:"samples"`
	// RSSRatio and GoroutineRatio (of the steps' floors: a leak raises
	// the floor, a session setting up does not) are the last sixth's
	// mean over the first sixth's, the last sample (taken as the flows
	// wind down) left out; Verdict
	// "flat" when both are within Goal of 1, "grew" when either is above,
	// "shrank" when either is below and none above. HeapRatio (means)
	// moves with the collector's cycle: shown, not judged.
	RSSRatio float64 `json:"rss_ratio"`
	// PortRateBps is the port's mean rate over the samples but the
	// first and the last (the load).
	PortRateBps    float64 `json:"port_rate_bps"`
	HeapRatio      float64 `json:"heap_ratio"`
	GoroutineRatio float64 `json:"goroutine_ratio"`
	Verdict        string  `json:"verdict"`
	// Sessions are the flows that ran (s1's one and s2's and s3's
	// sized ones), all verified; Bytes their payload.
	Sessions    int    `json:"sessions"`
	Bytes       uint64 `json:"bytes"`
	Retransmits uint64 `json:"retransmits"`
	// At rest: the port's drops (class limits and the host queue) and
	// whether every class's invariant held.
	PortDropped   uint64 `json:"port_dropped_packets"`
	LimitDropped  uint64 `json:"port_dropped_limit_packets"`
	WREDDropped   uint64 `json:"port_dropped_wred_packets"`
	HostDropped   uint64 `json:"host_queue_dropped_packets"`
	InvariantOK   bool   `json:"invariant_ok"`
	CountersMono  bool   `json:"counters_monotonic"`
	EnqueuedTotal uint64 `json:"enqueued_packets"`
	Error         string `json:"error,omitempty"`
}

// SoakSample is one sample.
type SoakSample struct {
	AtSeconds float64 `json:"at_s"`
	RSSBytes  uint64  `json:"rss_bytes"`
	HeapBytes uint64  `json:"heap_inuse_bytes"`
	// Goroutines is the fewest seen over the step (sampled every 50 ms:
	// a session setting up holds a handful more), GoroutinesMax the most.
	Goroutines    int `json:"goroutines"`
	GoroutinesMax int `json:"goroutines_max"`
	FDs           int `json:"open_files"`
	Sessions      int `json:"sessions"`
	// The port's totals so far, and its rate since the last sample.
	Enqueued uint64  `json:"enqueued_packets"`
	Dequeued uint64  `json:"dequeued_packets"`
	Dropped  uint64  `json:"dropped_packets"`
	RateBps  float64 `json:"port_rate_bps"`
}

// runSoak runs the soak for d.
func runSoak(ctx context.Context, d time.Duration) (*SoakReport, error) {
	rep := &SoakReport{Goal: soakGoal}
	db, err := lab.NewDumbbell(lab.DumbbellSpec{Senders: 3, MTU: 9000, DisableOffloads: true})
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil {
			progress("soak: closing the lab: %v", cerr)
		}
	}()
	// RC is go-back-N: keep each flow in order through the veths.
	if _, err := db.SteerRx(ctx); err != nil {
		return rep, err
	}
	cfg := qdisc.DefaultConfig(soakPort)
	c3 := &cfg.Classes[qdisc.ClassRoCE]
	c3.ECN, c3.MinThBytes, c3.MaxThBytes, c3.MaxP = qdisc.ECNWRED, 50*units.KiB, 1000*units.KiB, 0.1 // demo.yaml's 50kb, 1000kb (tc units: 1024)
	port, err := qdisc.Attach(cfg, qdisc.AttachOptions{Dev: db.Bottleneck.Dev, Netns: db.Bottleneck.Node.NetnsName,
		PeerDev: db.Bottleneck.PeerDev, PeerNetns: db.Bottleneck.PeerNode.NetnsName})
	if err != nil {
		return rep, fmt.Errorf("attach the port: %w", err)
	}
	defer func() {
		if cerr := port.Close(); cerr != nil {
			progress("soak: detaching the port: %v", cerr)
		}
	}()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var srv *perf.Server
	if err := db.Receiver.Do(func() (err error) {
		srv, err = perf.Listen(perf.ServerConfig{Bind: db.ReceiverAddr, Interval: -1, Logger: quiet})
		return err
	}); err != nil {
		return rep, err
	}
	sctx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx) }()
	defer func() {
		stopServer()
		if err := <-served; err != nil {
			progress("soak: server: %v", err)
		}
		srv.Close()
	}()

	client := func(bytes uint64, dur time.Duration) perf.ClientConfig {
		c := perf.DefaultClientConfig(srv.Addr().String())
		c.Bytes, c.Duration = bytes, dur
		c.MTU, c.LineRate, c.Profile = 4096, soakFlowRate, "lab"
		c.Knobs = []cc.Knob{{Name: "rate_validation", Value: "75"}} // the demo's
		c.Verify, c.Interval, c.Logger = true, 0, quiet
		return c
	}
	var (
		mu       sync.Mutex
		sessions int
		errs     []error
	)
	done := func(r *perf.Report, err error, who string) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", who, err))
			return
		}
		sessions++
		rep.Bytes += r.End.SumReceived.Bytes
		rep.Retransmits += r.End.Counters.Client.RetransmitPackets
	}
	start := time.Now()
	end := start.Add(d)
	rctx, cancel := context.WithDeadline(ctx, end.Add(30*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		var r *perf.Report
		err := db.Senders[0].Do(func() (err error) {
			r, err = perf.RunClient(rctx, client(0, d))
			return err
		})
		done(r, err, "s1")
	}()
	for i := 1; i < 3; i++ {
		go func() {
			defer wg.Done()
			for n := 1; time.Now().Add(time.Second).Before(end) && rctx.Err() == nil; n++ {
				var r *perf.Report
				err := db.Senders[i].Do(func() (err error) {
					r, err = perf.RunClient(rctx, client(soakBytes, 0))
					return err
				})
				done(r, err, fmt.Sprintf("s%d flow %d", i+1, n))
				if err != nil {
					return
				}
				select {
				case <-time.After(soakPause):
				case <-rctx.Done():
				}
			}
		}()
	}

	step := max(d/soakSamples, 500*time.Millisecond)
	// The goroutines' floor and peak over each step, every 50 ms.
	var gmu sync.Mutex
	gmin, gmax := runtime.NumGoroutine(), 0
	stopG := make(chan struct{})
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopG:
				return
			case <-t.C:
				n := runtime.NumGoroutine()
				gmu.Lock()
				gmin, gmax = min(gmin, n), max(gmax, n)
				gmu.Unlock()
			}
		}
	}()
	takeGoroutines := func() (lo, hi int) {
		n := runtime.NumGoroutine()
		gmu.Lock()
		defer gmu.Unlock()
		lo, hi = min(gmin, n), max(gmax, n)
		gmin, gmax = n, n
		return lo, hi
	}
	var last qdisc.ClassStats
	lastAt := start
	rep.CountersMono = true
	sample := func() {
		st, err := port.Stats()
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("port stats: %w", err))
			mu.Unlock()
			return
		}
		t := st.Total()
		now := time.Now()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		glo, ghi := takeGoroutines()
		s := SoakSample{AtSeconds: now.Sub(start).Seconds(), RSSBytes: procStatus("VmRSS:"), HeapBytes: ms.HeapInuse,
			Goroutines: glo, GoroutinesMax: ghi, FDs: openFiles(), Sessions: sessions,
			Enqueued: t.EnqueuedPackets, Dequeued: t.DequeuedPackets, Dropped: t.DroppedPackets()}
		mu.Unlock()
		if t.EnqueuedPackets < last.EnqueuedPackets || t.DequeuedPackets < last.DequeuedPackets || t.DroppedPackets() < last.DroppedPackets() ||
			t.DequeuedBytes < last.DequeuedBytes {
			rep.CountersMono = false
		}
		s.RateBps = float64(t.DequeuedBytes-last.DequeuedBytes) * 8 / now.Sub(lastAt).Seconds()
		last, lastAt = t, now
		rep.Samples = append(rep.Samples, s)
	}
	tick := time.NewTicker(step)
	for running := true; running; {
		select {
		case <-tick.C:
			sample()
			running = time.Now().Before(end)
		case <-ctx.Done():
			running = false
		}
		if len(rep.Samples)%max(soakSamples/12, 1) == 0 && len(rep.Samples) > 0 {
			s := rep.Samples[len(rep.Samples)-1]
			progress("soak: %4.0f s, RSS %.1f MiB, %d goroutines, %d sessions", s.AtSeconds, float64(s.RSSBytes)/(1<<20), s.Goroutines, s.Sessions)
		}
	}
	tick.Stop()
	wg.Wait()
	close(stopG)
	rep.Seconds = time.Since(start).Seconds()
	rep.Sessions = sessions

	// At rest.
	var st qdisc.Stats
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err = port.Stats(); err != nil {
			errs = append(errs, err)
			break
		}
		if t := st.Total(); t.BacklogPackets == 0 && t.Host.BacklogPackets == 0 || time.Now().After(deadline) {
			break
		}
	}
	rep.InvariantOK = true
	for i := range st.Classes {
		if err := st.Classes[i].CheckInvariant(); err != nil {
			rep.InvariantOK = false
			errs = append(errs, err)
		}
	}
	t := st.Total()
	rep.EnqueuedTotal, rep.PortDropped, rep.HostDropped = t.EnqueuedPackets, t.DroppedPackets(), t.Host.DroppedPackets
	rep.LimitDropped, rep.WREDDropped = t.DroppedLimitPackets, t.DroppedWREDPackets
	rep.judge()
	// The demo's class is lossy (WRED, no PPFC): drops and the resends
	// they cost are the fabric's, reported; what may not happen is a
	// session failing (a verify error among them), a class whose
	// counters do not add up at rest, or a counter going back.
	err = errors.Join(errs...)
	if err == nil && !rep.CountersMono {
		err = errors.New("a port counter went back between two samples")
	}
	if err != nil {
		rep.Error = err.Error()
	}
	return rep, err
}

// judge compares the last sixth of the samples with the first.
func (r *SoakReport) judge() {
	// The first step is the flows starting (its goroutines' floor was 9
	// where every later step's was 17: 1.055x for no leak), the last
	// the flows winding down.
	judged := r.Samples
	if len(judged) > 2 {
		judged = judged[1 : len(judged)-1]
	}
	n := len(judged) / 6
	if n == 0 {
		r.Verdict = "too short"
		return
	}
	// A sixth of a short run is the lab warming up (agents, buffers,
	// the collector's first cycles): its ratios are shown, not judged.
	short := judged[len(judged)-1].AtSeconds < soakJudgedFrom.Seconds()
	mean := func(s []SoakSample, f func(SoakSample) float64) float64 {
		var sum float64
		for _, x := range s {
			sum += f(x)
		}
		return sum / float64(len(s))
	}
	first, lastS := judged[:n], judged[len(judged)-n:]
	if len(r.Samples) > 2 {
		r.PortRateBps = mean(r.Samples[1:len(r.Samples)-1], func(s SoakSample) float64 { return s.RateBps })
	}
	ratio := func(f func(SoakSample) float64) float64 { return mean(lastS, f) / mean(first, f) }
	r.RSSRatio = ratio(func(s SoakSample) float64 { return float64(s.RSSBytes) })
	r.HeapRatio = ratio(func(s SoakSample) float64 { return float64(s.HeapBytes) })
	r.GoroutineRatio = ratio(func(s SoakSample) float64 { return float64(s.Goroutines) })
	switch {
	case short:
		r.Verdict = "not judged (under " + soakJudgedFrom.String() + ")"
	case r.RSSRatio > 1+r.Goal || r.GoroutineRatio > 1+r.Goal:
		r.Verdict = "grew"
	case r.RSSRatio < 1-r.Goal || r.GoroutineRatio < 1-r.Goal:
		r.Verdict = "shrank" // the runtime gave memory back: no leak, not flat either
	default:
		r.Verdict = "flat"
	}
}

// write prints the section: the curve at a twelfth of the run, then the
// verdict.
func (r *SoakReport) write(w io.Writer) {
	fmt.Fprintf(w, "\nsoak: the demo's lab at 80 %% load (s1 always on, s2 and s3 %s flows 75 %% of the time, each capped at %s; port %s, WRED), %.0f s\n",
		units.ByteSize(soakBytes), soakFlowRate, soakPort, r.Seconds)
	fmt.Fprintf(w, "the port carried %.0f Mbit/s on average, %.0f %% of its rate\n", r.PortRateBps/1e6, 100*r.PortRateBps/float64(soakPort))
	fmt.Fprintf(w, "%8s  %10s  %10s  %10s  %6s  %9s  %12s  %10s\n", "at", "RSS", "Go heap", "goroutines", "files", "sessions", "port pkts", "port rate")
	fmt.Fprintf(w, "%8s  %10s  %10s  %10s\n", "", "", "", "(min-max)")
	every := max(len(r.Samples)/12, 1)
	for i, s := range r.Samples {
		if i%every != 0 && i != len(r.Samples)-1 {
			continue
		}
		fmt.Fprintf(w, "%7.0fs  %6.1f MiB  %6.1f MiB  %10s  %6d  %9d  %12d  %6.0f Mb/s\n", s.AtSeconds, float64(s.RSSBytes)/(1<<20),
			float64(s.HeapBytes)/(1<<20), fmt.Sprintf("%d-%d", s.Goroutines, s.GoroutinesMax), s.FDs, s.Sessions, s.Enqueued, s.RateBps/1e6)
	}
	fmt.Fprintf(w, "last sixth over first (means): RSS %.3fx, Go heap %.3fx (not judged), goroutines' floor %.3fx: %s (goal within %.0f %%)\n",
		r.RSSRatio, r.HeapRatio, r.GoroutineRatio, r.Verdict, 100*r.Goal)
	fmt.Fprintf(w, "%d sessions, %.1f MiB verified, %d packets resent; at rest: port enqueued %d, dropped %d (%.4f %%: limit %d, WRED %d; the demo's class is lossy, no PPFC), host queue dropped %d, invariant %v, counters monotonic %v\n",
		r.Sessions, float64(r.Bytes)/(1<<20), r.Retransmits, r.EnqueuedTotal, r.PortDropped, 100*float64(r.PortDropped)/float64(max(r.EnqueuedTotal, 1)),
		r.LimitDropped, r.WREDDropped, r.HostDropped, r.InvariantOK, r.CountersMono)
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
}

// procStatus is a kB field of /proc/self/status in bytes, 0 if unknown.
func procStatus(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// openFiles counts this process's open file descriptors.
func openFiles() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(es)
}
