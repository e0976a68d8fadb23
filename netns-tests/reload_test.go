package netnstests

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/qdisc"
)

// reloadConfig runs three flows of 60 Mbit/s through a 200 Mbit/s port:
// 90 % of it.
const reloadConfig = `
log: {level: debug}
metrics: {listen: "198.18.10.1:9471"}
ports:
  - dev: eth0
    mode: virtual
    rate: 200mbit
    tc: ["3:wred:min=100kb,max=400kb,p=0.2"]
flows:
  - {name: f1, server: 198.18.10.2:18600, line_rate: 60mbit, duration: 120s}
  - {name: f2, server: 198.18.10.2:18600, line_rate: 60mbit, duration: 120s}
  - {name: f3, server: 198.18.10.2:18600, line_rate: 60mbit, duration: 120s}
`

// TestDaemonReloadUnderLoad (issue 28, fault 4): SIGHUP while three flows
// fill 90 % of the port, with the port's AQM changed, one flow's rate
// changed and one flow removed. Only what the change implies moves: the
// unchanged flow keeps its QP and its rate through the reload (measured in
// 100 ms bins: the disturbance), the changed flow restarts at its new
// rate, the removed one stops, the port keeps its counters and drops
// nothing. An invalid file is then refused whole. Rates are judged flow
// against flow (the daemon paces them all on the same CPUs): beside
// stress-ng its 60 Mbit/s flows send 47–52, the host's, not the reload's.
// The rates are the host's too when the hypervisor steals the CPUs (one
// CI run: 28.7 % of it stolen, f1 across the reload at 0.82 of itself):
// such a run is run again (retryStarved), each logged.
func TestDaemonReloadUnderLoad(t *testing.T) {
	retryStarved(t, reloadUnderLoad)
}

func reloadUnderLoad(t *testing.T, hc *hostChecks) hostlost.Report {
	dl := newDaemonLab(t)
	bin := buildDaemon(t)
	dl.serveFlows(t)
	dl.writeConfig(t, reloadConfig)
	dl.start(t, bin)

	acked := func(flow string) float64 {
		v, _ := value(dl.metrics(t), "fabriclab_qp_acked_bytes_total", map[string]string{"flow": flow})
		return v
	}
	waitFor(t, 10*time.Second, "all three flows acknowledged", func() bool {
		return acked("f1") > 1e6 && acked("f2") > 1e6 && acked("f3") > 1e6
	})
	// rates samples the flows' acknowledged bytes every 100 ms for d and
	// returns each flow's rate over d (bit/s) and f1's 100 ms bins.
	type sample struct {
		at    time.Time
		bytes map[string]float64
	}
	take := func() sample {
		mf := dl.metrics(t)
		s := sample{at: time.Now(), bytes: map[string]float64{}}
		for _, f := range []string{"f1", "f2", "f3"} {
			s.bytes[f], _ = value(mf, "fabriclab_qp_acked_bytes_total", map[string]string{"flow": f})
		}
		return s
	}
	rate := func(a, b sample, f string) float64 { return 8 * (b.bytes[f] - a.bytes[f]) / b.at.Sub(a.at).Seconds() }
	window := func(d time.Duration, during func()) (first, last sample, f1Bins []float64) {
		first = take()
		prev := first
		for end := time.Now().Add(d); time.Now().Before(end); {
			if during != nil {
				during()
				during = nil
			}
			time.Sleep(100 * time.Millisecond)
			s := take()
			f1Bins = append(f1Bins, rate(prev, s, "f1"))
			prev = s
		}
		return first, prev, f1Bins
	}
	mf := dl.metrics(t)
	qp1 := seriesLabel(mf, "fabriclab_qp_acked_bytes_total", "flow", "f1", "qpn")
	enq0, _ := value(mf, "fabriclab_port_enqueued_packets_total", map[string]string{"port": "eth0"})

	k0, w0 := readKernel(t), time.Now()
	d0, err := hostlost.ReadKernel(dl.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	b0, b1, beforeBins := window(2*time.Second, nil)
	before := map[string]float64{"f1": rate(b0, b1, "f1"), "f2": rate(b0, b1, "f2"), "f3": rate(b0, b1, "f3")}

	// The reload: AQM p 0.2 -> 0.5, f2 60 -> 40 Mbit/s, f3 removed.
	next := strings.Replace(reloadConfig, "p=0.2", "p=0.5", 1)
	next = strings.Replace(next, "{name: f2, server: 198.18.10.2:18600, line_rate: 60mbit", "{name: f2, server: 198.18.10.2:18600, line_rate: 40mbit", 1)
	next = strings.Replace(next, "  - {name: f3, server: 198.18.10.2:18600, line_rate: 60mbit, duration: 120s}\n", "", 1)
	r0, r1, acrossBins := window(3*time.Second, func() {
		dl.writeConfig(t, next)
		dl.signal(t, syscall.SIGHUP)
	})
	h, err := dl.health()
	if err != nil || h.Generation != 2 || h.Status != "ok" {
		t.Fatalf("after the reload: %+v (%v)", h, err)
	}
	a0, a1, _ := window(2*time.Second, nil)
	host := kernelShare(t, k0, time.Since(w0))
	if d1, err := hostlost.ReadKernel(dl.cmd.Process.Pid); err == nil {
		d := d1.Sub(d0)
		t.Logf("fabriclabd: run delay %v over %d threads, on a CPU %v, in %v", d.RunDelay.Round(time.Millisecond), d.Threads, d.RunTime.Round(time.Millisecond), time.Since(w0).Round(time.Millisecond))
	}

	mf = dl.metrics(t)
	if q := seriesLabel(mf, "fabriclab_qp_acked_bytes_total", "flow", "f1", "qpn"); q != qp1 {
		t.Errorf("f1, unchanged, has a new QP: %s -> %s", qp1, q)
	}
	// Each flow's agent numbers its QPs alike: the log says which restarted.
	stopped := func(flow string) int {
		return strings.Count(dl.logs.String(), `"msg":"flow stopped","flow":"`+flow+`"`)
	}
	if stopped("f1") != 0 || stopped("f2") != 1 || stopped("f3") != 1 {
		t.Errorf("flows stopped by the reload: f1 %d, f2 %d, f3 %d times; want 0, 1, 1", stopped("f1"), stopped("f2"), stopped("f3"))
	}
	if _, ok := value(mf, "fabriclab_flow_runs_total", map[string]string{"flow": "f3"}); ok {
		t.Error("f3, removed, is still in the metrics")
	}
	if e, _ := value(mf, "fabriclab_port_enqueued_packets_total", map[string]string{"port": "eth0"}); e < enq0 {
		t.Errorf("the port's counters went back: %v -> %v", enq0, e)
	}
	for _, c := range []string{"fabriclab_port_dropped_limit_packets_total", "fabriclab_port_dropped_wred_packets_total"} {
		if v, _ := value(mf, c, map[string]string{"port": "eth0"}); v != 0 {
			t.Errorf("%s = %v at 90 %% load", c, v)
		}
	}
	if v, _ := value(mf, "fabriclab_qp_retransmitted_packets_total", map[string]string{"flow": "f1"}); v != 0 {
		t.Errorf("f1 retransmitted %v packets across the reload", v)
	}
	p, err := qdisc.Open(dl.d.NetnsName, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	qc, err := p.Config()
	p.Release()
	if err != nil || qc.Classes[3].MaxP != 0.5 {
		t.Errorf("class 3 max_p %v (%v), want 0.5", qc.Classes[3].MaxP, err)
	}

	across := rate(r0, r1, "f1")
	after := map[string]float64{"f1": rate(a0, a1, "f1"), "f2": rate(a0, a1, "f2")}
	minBin := func(bins []float64) float64 {
		m := bins[0]
		for _, b := range bins {
			m = min(m, b)
		}
		return m
	}
	mbit := func(v float64) string { return fmt.Sprintf("%.1f", v/1e6) }
	t.Logf("f1 before %s, across the reload %s (lowest 100 ms bin %s; before it: %s), after %s Mbit/s; f2 before %s, after %s (want 40); f3 before %s",
		mbit(before["f1"]), mbit(across), mbit(minBin(acrossBins)), mbit(minBin(beforeBins)), mbit(after["f1"]), mbit(before["f2"]), mbit(after["f2"]), mbit(before["f3"]))
	// What the reload controls, each flow against another paced by the
	// same daemon on the same CPUs, so that the host's share (the daemon's
	// own run delay is in the log) cancels: f1 across the reload within
	// 10 % of itself before, f2 at 40/60 of f1 after it. The daemon
	// pacing 60 Mbit/s is not judged here (beside stress-ng it sent
	// 47–52 of 60).
	if r := across / before["f1"]; r < 0.9 || r > 1.1 {
		hc.Errorf("f1 across the reload at %.3f of its rate before (want 0.9..1.1)", r)
	}
	if r := after["f2"] / after["f1"]; r < 0.6 || r > 0.75 {
		hc.Errorf("f2 after the reload at %.3f of f1's rate (want 0.6..0.75: 40/60 = 0.667)", r)
	}

	// An invalid file is refused whole: nothing of it applies.
	bad := strings.Replace(next, "line_rate: 40mbit", "line_rate: 30mbit", 1)
	bad = strings.Replace(bad, "p=0.5", "p=0.7", 1)
	bad = strings.Replace(bad, "rate: 200mbit", "rate: 200mbps-ish", 1)
	dl.writeConfig(t, bad)
	dl.signal(t, syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the refusal", func() bool { h, _ := dl.health(); return h.ReloadsFailed == 1 })
	if h, _ := dl.health(); h.Generation != 2 || !strings.Contains(h.LastReloadError, "ports[0].rate") {
		t.Errorf("after the invalid file: %+v", h)
	}
	mf = dl.metrics(t)
	if stopped("f1") != 0 || stopped("f2") != 1 {
		t.Errorf("the refused file stopped a flow: f1 %d, f2 %d times in all", stopped("f1"), stopped("f2"))
	}
	p, err = qdisc.Open(dl.d.NetnsName, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	qc, err = p.Config()
	p.Release()
	if err != nil || qc.Classes[3].MaxP != 0.5 {
		t.Errorf("after the refused file class 3 max_p %v (%v), want 0.5 still", qc.Classes[3].MaxP, err)
	}
	dl.signal(t, syscall.SIGTERM)
	dl.waitExit(t)
	return host
}
