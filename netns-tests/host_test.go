package netnstests

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/hostlost/runq"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc"
)

// What the host takes from a test's run (issue 26 §1): every test that
// measures rates or queues meters it (host/hostlost), prints it beside its
// figures and asserts efficiency on the time the host left the port. A
// check the host can still break (a queue a port held back marks) may run
// again in a host-starved run, every run logged (retryStarved).

// portMeter meters a port whose senders are not the lab's own (kernel TCP,
// iperf3): the port's idle time and the time it held packets back, which
// no sender's held time can explain away.
type portMeter struct {
	m    *hostlost.Meter
	stop func() error
	runq *runq.Tracer // meterTCP's
}

// meterTCP meters a port fed by kernel TCP: its idle and held-back time,
// and as the senders' held time the runqueue waits of this process's
// threads, of the processes watched (iperf3's) and of the softirq threads,
// which run TCP's ACK clock (host/hostlost/runq).
func meterTCP(t *testing.T, port *qdisc.Port, classes ...qdisc.ClassID) *portMeter {
	t.Helper()
	m, err := hostlost.NewMeter(hostlost.MeterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rq, err := runq.Start(runq.Config{PIDs: []int{os.Getpid()}, Softirq: true, Sink: m.Held()})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := lab.MeterPort(m, "port", port, classes...)
	if err != nil {
		rq.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rq.Close(); _ = stop(); m.Stop() })
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	return &portMeter{m: m, stop: stop, runq: rq}
}

// watch adds a sender process's threads (meterTCP).
func (p *portMeter) watch(t *testing.T, pid int) {
	if p == nil || p.runq == nil {
		return
	}
	if err := p.runq.Watch(pid); err != nil {
		t.Error(err)
	}
}

// meterPort starts metering port's classes (all when none are named).
func meterPort(t *testing.T, port *qdisc.Port, classes ...qdisc.ClassID) *portMeter {
	t.Helper()
	m, err := hostlost.NewMeter(hostlost.MeterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := lab.MeterPort(m, "port", port, classes...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop(); m.Stop() })
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	return &portMeter{m: m, stop: stop}
}

// report stops the meter and logs its report.
func (p *portMeter) report(t *testing.T) hostlost.Report {
	t.Helper()
	if p.runq != nil {
		if err := p.runq.Close(); err != nil {
			t.Error(err)
		}
	}
	if err := p.stop(); err != nil {
		t.Error(err)
	}
	r := p.m.Stop()
	t.Log(r)
	return r
}

// hostChecks collects the checks of one run that a starving host can
// break.
type hostChecks = labtest.Checks

// retryStarved judges run's host-sensitive checks as labtest.RetryStarved
// does: a failed run the host starved runs again; if the host starved
// every run, the checks are logged as host-distorted.
func retryStarved(t *testing.T, run func(t *testing.T, c *hostChecks) hostlost.Report) {
	t.Helper()
	labtest.RetryStarved(t, func(_ int, c *hostChecks) *hostlost.Report {
		r := run(t, c)
		return &r
	})
}

// worse is the report of the two whose share of its run the host took
// more of: a check over both runs is as starved as its worse run.
func worse(a, b hostlost.Report) hostlost.Report {
	if b.Share > a.Share {
		return b
	}
	return a
}

// readKernel reads the kernel's accounting for this process.
func readKernel(t *testing.T) hostlost.Kernel {
	t.Helper()
	k, err := hostlost.ReadKernel(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// kernelShare is, as a report, the share of a run's CPU time the
// hypervisor took (steal over wall × CPUs since k0): the host's measure
// for a check no port's idle time can show (a PE agent's reaction), which
// a stolen vCPU delays while its thread reads as running.
func kernelShare(t *testing.T, k0 hostlost.Kernel, wall time.Duration) hostlost.Report {
	t.Helper()
	k := readKernel(t).Sub(k0)
	rep := hostlost.Report{Wall: wall, Starved: k.Steal / time.Duration(runtime.NumCPU()), Budget: hostlost.DefaultBudget, Kernel: k}
	rep.Share = rep.Starved.Seconds() / wall.Seconds()
	rep.HostStarved = rep.Share > rep.Budget
	t.Logf("host: steal %v over %v on %d CPUs (%.1f %% of the run); run delay %v over %d threads", k.Steal.Round(time.Millisecond),
		wall.Round(time.Millisecond), runtime.NumCPU(), 100*rep.Share, k.RunDelay.Round(time.Millisecond), k.Threads)
	return rep
}
