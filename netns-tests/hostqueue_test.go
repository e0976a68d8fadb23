package netnstests

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// queueSample is one reading of a class's queue, in bytes: the port's
// backlog read just before and just after the kernel's HTB backlog (the
// netlink dump takes a while, and the queue moves meanwhile), and the host
// queue after the port.
type queueSample struct {
	portBefore, portAfter, htb, host int64
	took                             time.Duration // from the first read to the last
}

// off is how far HTB's backlog lies outside the port's two readings.
func (q queueSample) off() int64 {
	lo, hi := min(q.portBefore, q.portAfter), max(q.portBefore, q.portAfter)
	switch {
	case q.htb < lo:
		return lo - q.htb
	case q.htb > hi:
		return q.htb - hi
	}
	return 0
}

// sampleQueues reads the RoCE class's queues every millisecond until ctx
// ends, from a real-time thread so that the senders do not stall it in the
// middle of a sample (softirqs still may).
func sampleQueues(ctx context.Context, t *testing.T, port *qdisc.Port) []queueSample {
	// The thread dies with the goroutine (no UnlockOSThread), and its
	// priority with it.
	runtime.LockOSThread()
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 10}, 0); err != nil {
		t.Errorf("real-time sampler: %v", err)
		return nil
	}
	var out []queueSample
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		t0 := time.Now()
		b1, _, err1 := port.Backlog(qdisc.ClassRoCE)
		q, err2 := port.Qdisc()
		b2, _, err3 := port.Backlog(qdisc.ClassRoCE)
		took := time.Since(t0)
		h, _, err4 := port.HostBacklog(qdisc.ClassRoCE)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			t.Errorf("sample: %v %v %v %v", err1, err2, err3, err4)
			return out
		}
		out = append(out, queueSample{portBefore: int64(b1), portAfter: int64(b2), htb: int64(q.BacklogBytes), host: int64(h), took: took})
	}
}

// quickRead is how long a sample's three reads may take for it to be
// compared: a sampler the scheduler stalls mid-sample (both CPUs are busy)
// sees the queue move by more than a frame or two in between.
const quickRead = 300 * time.Microsecond

// TestHostQueueApart: the port's backlog and sojourn are HTB's alone. The
// kernel's per-CPU backlog between HTB and the veth peer (the host queue)
// is counted apart: WRED and step see the queue the port holds, and each
// packet's sojourn is the backlog it found drained at the port rate, while
// the host queue's packets, wait and depth have their own counters and the
// accounting balances at rest at both stages.
func TestHostQueueApart(t *testing.T) {
	for _, am := range attachModes {
		t.Run(am.name, func(t *testing.T) {
			retryStarved(t, func(t *testing.T, hc *hostChecks) hostlost.Report { return hostQueueRun(t, am.legacy, hc) })
		})
	}
}

// hostQueueRun is one run of TestHostQueueApart. The sojourn checks are
// host-sensitive (hc): HTB's timer running late holds queued packets
// back, and they wait longer than their backlog drained at the rate.
func hostQueueRun(t *testing.T, legacy bool, hc *hostChecks) hostlost.Report {
	const rate = 200 * units.Mbit
	const limit = 256 * units.KiB // the curve's backlog bins are 8 KiB
	cfg := qdisc.DefaultConfig(rate)
	// A step class whose K is never reached: the test measures
	// queues, not marking.
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: limit, ECN: qdisc.ECNStep, MinThBytes: limit - 1}
	d, port, sk, dst := udpPort(t, 2, cfg, legacy)
	meter := meterPort(t, port, qdisc.ClassRoCE)

	// Two senders at 0.65x the port rate each, 15 ms on, 40 ms
	// off: the queue builds to ~110 KB (bursts add ~30 KB) and
	// drains, 70 times. The p99 sojourn, ~5.5 ms, lies mid-way in
	// its log2 bucket [4.2, 8.4) ms: at 20 ms on it sat at the
	// bucket's edge and a stall of 0.5 ms moved it one bucket up.
	const seconds = 4
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	var samples []queueSample
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		samples = sampleQueues(sctx, t, port)
	}()
	errs := make([]error, len(d.Senders))
	var senders sync.WaitGroup
	for i, s := range d.Senders {
		senders.Add(1)
		go func() {
			defer senders.Done()
			f := flow{tos: tosRoCEECT0, payload: 1400, rate: rate * 65 / 100, on: 15 * time.Millisecond, off: 40 * time.Millisecond, total: seconds * time.Second}
			_, errs[i] = f.send(ctx, s, dst)
		}()
	}
	senders.Wait()
	stop()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	rep := meter.report(t)
	s := settle(t, port) // both identities, late departures, busy slots
	c := s.Classes[qdisc.ClassRoCE]
	h := c.Host

	// The host queue is there and counted apart.
	t.Logf("host queue: %d packets, mean wait %v, p99 < %v, max %v, max depth %d packets; late departures %d of %d",
		h.EnteredPackets, h.MeanWait(), h.Wait.Quantile(0.99), h.WaitMax, h.MaxBacklogPackets, s.Port.LateDeparturePackets, c.DequeuedPackets)
	if h.EnteredPackets == 0 || h.DeliveredPackets == 0 || h.WaitSum == 0 || h.MaxBacklogPackets == 0 {
		t.Fatalf("no host queue counted: %+v", h)
	}
	// A burst may reach the limit now and then (the curve below
	// takes those arrivals out); keep it rare.
	if h.DroppedPackets != 0 || c.DroppedPackets()*10 > c.EnqueuedPackets {
		t.Errorf("dropped %d packets between HTB and the peer, %d of %d at the port", h.DroppedPackets, c.DroppedPackets(), c.EnqueuedPackets)
	}
	if late := s.Port.LateDeparturePackets; h.EnteredPackets+late != c.DequeuedPackets {
		t.Errorf("dequeued %d, but %d entered the host queue and %d departed late", c.DequeuedPackets, h.EnteredPackets, late)
	}
	if got := sk.total(); got != h.DeliveredPackets+s.Port.LateDeparturePackets {
		t.Errorf("receiver got %d datagrams, the peer hook delivered %d (+%d late)", got, h.DeliveredPackets, s.Port.LateDeparturePackets)
	}

	// (1) The backlog WRED and step decide on is HTB's own: the
	// port's count against the kernel's, read together. The
	// netlink read takes 0.3-1 ms here and the queue moves
	// meanwhile, so single samples are loose; their means are not.
	var sumPort, sumHTB, sumHost float64
	var offs []float64
	var busy int
	var maxHost int64
	for _, q := range samples {
		sumPort += float64(q.portBefore+q.portAfter) / 2
		sumHTB += float64(q.htb)
		sumHost += float64(q.host)
		maxHost = max(maxHost, q.host)
		if q.htb > 0 {
			busy++
		}
		if q.took <= quickRead {
			offs = append(offs, float64(q.off()))
		}
	}
	if len(samples) < 1000 || busy < 100 {
		t.Fatalf("%d samples, %d with a queue: too few to compare", len(samples), busy)
	}
	ns := float64(len(samples))
	slices.Sort(offs)
	quick := "none"
	if len(offs) > 0 {
		quick = fmt.Sprintf("%d, HTB's backlog outside the port's two readings by p99 %.0f B, max %.0f B", len(offs), offs[len(offs)*99/100], offs[len(offs)-1])
	}
	t.Logf("%d samples, %d with a queue: mean backlog port %.0f B, HTB %.0f B, host queue %.0f B (max %d B); read within %v: %s",
		len(samples), busy, sumPort/ns, sumHTB/ns, sumHost/ns, maxHost, quickRead, quick)
	// A packet between the TC egress hook and HTB's enqueue, or
	// between HTB's dequeue and the xmit hook, is counted by the
	// port only (measured: +0.6 frame on average); the host queue
	// is in neither.
	if d := (sumPort - sumHTB) / ns; d > 2*1514 || d < -2*1514 {
		t.Errorf("the port's backlog is %.0f B off HTB's on average (more than 2 frames)", d)
	}

	// (2) The sojourn is that queue draining at the port rate: a
	// packet that finds B bytes ahead waits (B + its own) / rate.
	// The curve counts arrivals by the backlog they found, in bins
	// [lo, hi): the mean sojourn must lie between the bins' edges.
	// Arrivals dropped at the limit found it full, in the last
	// bin (a bin is wider than a frame), and have no sojourn.
	arrivals := c.Curve.Arrivals
	arrivals[qdisc.CurveBins-1] -= c.DroppedLimitPackets
	curve := c.Curve
	curve.Arrivals = arrivals
	var n, lo, hi float64
	for b, a := range arrivals {
		n += float64(a)
		lo += float64(a) * float64(uint64(b)*c.Curve.BinBytes)
		hi += float64(a) * float64(uint64(b+1)*c.Curve.BinBytes)
	}
	bps := rate.BytesPerSecond()
	own := float64(c.DequeuedBytes) / float64(c.DequeuedPackets)
	wantLo := time.Duration((lo/n + own) / bps * 1e9)
	wantHi := time.Duration((hi/n + own) / bps * 1e9)
	soj := c.MeanSojourn()
	t.Logf("mean sojourn %v; the backlog arrivals found says %v..%v; p99 sojourn < %v, p99 backlog found < %d B; with the host queue the peer would have measured %v",
		soj, wantLo, wantHi, c.Sojourn.Quantile(0.99), curveQuantile(curve, 0.99), soj+h.MeanWait())
	if wantHi < 300*time.Microsecond {
		t.Errorf("the load built too small a queue (the mean arrival found under %v of it)", wantHi)
	}
	// HTB serves in bursts of up to 100 µs of the rate.
	const slack = 150 * time.Microsecond
	if soj < wantLo-slack || soj > wantHi+slack {
		hc.Errorf("mean sojourn %v, but the backlog the packets found says %v..%v (± %v)", soj, wantLo, wantHi, slack)
	}
	// The same at p99: the log2 bucket of the sojourn's p99,
	// [p99/2, p99), must meet the 99th percentile's backlog bin
	// drained at the rate.
	bin := curveQuantile(curve, 0.99)
	binLo := time.Duration((float64(bin-c.Curve.BinBytes) + own) / bps * 1e9)
	binHi := time.Duration((float64(bin)+own)/bps*1e9) + slack
	excess := soj - (wantHi + slack)
	if p99 := c.Sojourn.Quantile(0.99); p99 < binLo || p99/2 > binHi {
		hc.Errorf("p99 sojourn in [%v, %v), but the p99 backlog found drains in %v..%v", p99/2, p99, binLo, binHi)
		excess = max(excess, p99/2-binHi)
	}
	// A packet waits past its backlog drained at the rate only
	// while HTB holds the link back: a run whose held-back time
	// covers the excess is the host's, whatever its share.
	if back := rep.Ports[0].HeldBack; hc.Failed() && !rep.HostStarved && back >= excess {
		t.Logf("HTB held the link back %v in the run, the sojourn's excess over its backlog %v: the host's", back, excess)
		rep.HostStarved = true
	}
	return rep
}
