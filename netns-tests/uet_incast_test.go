package netnstests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc"
)

// The UET incast, N senders × 2 MB into one port, under each congestion
// control (issue 11 §4a, §4c): 8 with a deep queue (TestUETIncast), 8
// and 16 with htsim's 1-BDP queue that trims (TestUETIncastTrim).
const uetIncastBytes = 2 << 20

// uetIncastModes are the sender modes the incasts run.
var uetIncastModes = []pds.CCMode{pds.CCNSCC, pds.CCRCCC, pds.CCBoth}

// uetIncastResult is one incast's outcome.
type uetIncastResult struct {
	mode         pds.CCMode
	tail, ideal  time.Duration
	fct          []time.Duration
	port, trimQ  qdisc.ClassStats
	drops        uint64
	backlogDrops uint64
	// queue: the data class's backlog sampled every uetQueueSample while
	// the senders ran, bytes.
	queueP50, queueP99, queueMax int64
	server                       pds.Counters
	retx, timeouts, inferred     uint64
	// probesLost: CTRL ACK_REQs the senders sent that the receiver never
	// saw. A probe follows the data in its class and is shorter than
	// the port's trim size, so a full class drops it (bpf/port_trim.h trims
	// only what is longer); its sender probes again.
	probesLost     uint64
	nacks          uint64 // TRIMMED_LASTHOP
	creditRequests uint64
	pacer          string
	// pacerLost is the schedule the receiver's credit pacer lost: time it
	// was due to grant and woke more than its CatchUp late (the host's
	// scheduler held it), credit the senders never got.
	pacerLost time.Duration
	// host is what the host took from the run (host/hostlost), starved
	// the part of it inside [start, tail]: time the port sat idle while
	// a sender was held.
	host    hostlost.Report
	starved time.Duration
}

// netRatio is the tail over the ideal extended by the host-starved time:
// the transport's own efficiency, the host's share taken out.
func (r uetIncastResult) netRatio() float64 {
	return float64(r.tail) / float64(r.ideal+r.starved)
}

func (r uetIncastResult) ratio() float64 { return float64(r.tail) / float64(r.ideal) }

// htsimMargin is how far the lab's tail FCT / ideal, net of the time the
// host starved the port, may sit above htsim's (issue 26).
const htsimMargin = 0.03

// checkTail fails the incast whose tail over the ideal extended by the
// time the host took from the port (netRatio) is more than htsimMargin
// above htsim's in the same setting. RCCC's credit pacer runs in the
// receiver's transmit loop: its late grants are held time too. What the
// host does to the controllers (a round trip it stretched reads as
// queueing) the figure cannot take out: a host-starved run may run once
// more (runIncast).
func (r uetIncastResult) checkTail(t *testing.T, c *hostChecks, key string) {
	t.Helper()
	ref, ok := htsim.RecordedTail(key)
	if !ok {
		t.Fatalf("no htsim reference for %s", key)
	}
	t.Logf("%s: tail FCT / ideal %.3f raw, %.3f net of the host's %v; htsim %.3f (%+.3f)",
		key, r.ratio(), r.netRatio(), r.starved.Round(10*time.Microsecond), ref, r.netRatio()-ref)
	if r.netRatio() > ref+htsimMargin {
		c.Errorf("%s: tail FCT %v is %.3f × the ideal %v, %.3f net of the %v the host starved the port: want ≤ htsim's %.3f + %.2f",
			key, r.tail.Round(time.Millisecond), r.ratio(), r.ideal.Round(time.Millisecond), r.netRatio(), r.starved.Round(10*time.Microsecond), ref, htsimMargin)
	}
}

// runIncast runs the incast and checks its tail against htsim's under
// key, again if the host starved a run whose tail failed (retryStarved).
func runIncast(t *testing.T, senders int, mode pds.CCMode, cfg qdisc.Config, key string) uetIncastResult {
	t.Helper()
	var r uetIncastResult
	retryStarved(t, func(t *testing.T, c *hostChecks) hostlost.Report {
		r = runUETIncast(t, senders, mode, cfg)
		r.checkTail(t, c, key)
		return r.host
	})
	return r
}

// runUETIncast runs the incast through a port with cfg under mode; trim
// says the port trims into the receiver's TrimLastHopDSCP.
func runUETIncast(t *testing.T, senders int, mode pds.CCMode, cfg qdisc.Config) uetIncastResult {
	t.Helper()
	trim := cfg.Classes[qdisc.ClassRoCE].TrimBytes > 0
	b := newUETBed(t, senders, cfg, func(c *pds.Config) {
		c.CC = mode
		if trim {
			c.TrimLastHopDSCP = uint8(cfg.Classes[qdisc.ClassRoCE].TrimDSCP)
		}
	})
	res := uetIncastResult{mode: mode, ideal: time.Duration(float64(senders*uetIncastBytes*8) / (uetPayloadShare() * float64(roceRate)) * 1e9)}
	drops0 := softnetDrops()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var queue []int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		queue = sampleBacklog(ctx, t, b.port, qdisc.ClassRoCE)
	}()
	b.startMeter(t)
	start, startMono := time.Now(), hostlost.Now()
	res.fct = waitSenders(t, start, b.startIncast(t, uetIncastBytes), 20*res.ideal)
	stop()
	wg.Wait()
	res.host = b.hostLost(t)
	st := settle(t, b.port)
	res.port = st.Classes[qdisc.ClassRoCE]
	if trim {
		res.trimQ = st.Classes[cfg.Classes[qdisc.ClassRoCE].TrimClass]
	}
	res.drops = portDrops(st)
	res.backlogDrops = softnetDrops() - drops0
	res.server = b.server.Counters()
	for i, f := range res.fct {
		res.tail = max(res.tail, f)
		ca := b.clients[i].Counters()
		res.retx += ca.Retransmits
		res.timeouts += ca.Timeouts
		res.inferred += ca.InferredLosses
		res.nacks += ca.NacksReceived[uet.NackTrimmedLastHop.String()]
		res.creditRequests += ca.CreditRequestsSent
		res.probesLost += ca.ProbesSent
	}
	res.probesLost -= min(res.probesLost, res.server.ProbesReceived)
	res.starved = res.host.StarvedBetween(startMono, startMono+res.tail)
	slices.Sort(queue)
	if n := len(queue); n > 0 {
		res.queueP50, res.queueP99, res.queueMax = queue[n/2], queue[n*99/100], queue[n-1]
	}
	ps := b.server.PacerStats()
	res.pacerLost = ps.Lost
	res.pacer = fmt.Sprintf("%d grants (%d slow pulls), %s granted, %d caught up, %v lost", ps.Grants, ps.SlowPulls, kib(float64(ps.GrantedBytes)), ps.CaughtUp, ps.Lost)
	r := res.port
	t.Logf("%s: FCTs %v; tail %v = %.3f × ideal %v; %.3f × (ideal + %v the port was starved)", mode, res.fct, res.tail.Round(time.Millisecond), res.ratio(), res.ideal.Round(time.Millisecond),
		res.netRatio(), res.starved.Round(10*time.Microsecond))
	t.Logf("%s: port: queue p50 %s p99 %s max %s (%d samples), sojourn p50 < %v p99 < %v; %d CE marked, %d trimmed of %d, %d dropped; trim class: %d in, max %s; held back %v, caught up %v",
		mode, kib(float64(res.queueP50)), kib(float64(res.queueP99)), kib(float64(r.MaxBacklogBytes)), len(queue), r.Sojourn.Quantile(0.5), r.Sojourn.Quantile(0.99),
		r.CEMarked(), r.TrimmedPackets, r.EnqueuedPackets, res.drops, res.trimQ.TrimInPackets, kib(float64(res.trimQ.MaxBacklogBytes)), r.HeldBack.Round(10*time.Microsecond), r.CaughtUp.Round(10*time.Microsecond))
	cs := res.server
	t.Logf("%s: receiver: %d messages, %d verify errors, %d trimmed, NACKs %v, %d duplicates, %d credits sent, %d credit ACKs; pacer: %s; senders: %d retransmits, %d inferred losses, %d timeouts, %d credit requests; host backlog drops %d",
		mode, cs.MessagesReceived, cs.VerifyErrors, cs.TrimmedReceived, cs.NacksSent, cs.Duplicates, cs.CreditsSent, cs.CreditAcksSent, res.pacer, res.retx, res.inferred, res.timeouts, res.creditRequests, res.backlogDrops)
	if want := uint64(senders * uetIncastBytes / uetMsgBytes); cs.MessagesReceived != want || cs.VerifyErrors != 0 {
		t.Errorf("%s: receiver: %d messages, %d verify errors; want %d, 0", mode, cs.MessagesReceived, cs.VerifyErrors, want)
	}
	if mode != pds.CCNSCC && cs.CreditsSent == 0 {
		t.Errorf("%s: the receiver granted no credit", mode)
	}
	if cs.CreditTargetsCapped != 0 || cs.StaleCredits != 0 {
		t.Errorf("%s: %d credit targets capped, %d stale credits: want 0 from well-behaved senders", mode, cs.CreditTargetsCapped, cs.StaleCredits)
	}
	return res
}

// uetQueueSample is how often the incasts read the port's backlog. Each
// read is BPF syscalls, and a softirq that interrupts one skips the
// port's departure hook (the peer counts such departures late): read
// every 1 ms, up to 8.9 % of an incast's departures were late, near
// checkInvariants' 10 %.
const uetQueueSample = 3 * time.Millisecond

// sampleBacklog reads class's backlog every uetQueueSample until ctx ends.
func sampleBacklog(ctx context.Context, t *testing.T, port *qdisc.Port, class qdisc.ClassID) []int64 {
	var out []int64
	tick := time.NewTicker(uetQueueSample)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		b, _, err := port.Backlog(class)
		if err != nil {
			t.Errorf("backlog: %v", err)
			return out
		}
		out = append(out, int64(b))
	}
}

// uetTrimPortConfig is htsim's trimming setting (uet.md's caveats) scaled
// to the lab: a data queue of 1 × BDP at uetBaseRTT, ECN from 0.2 to 0.8
// of it, and a packet the full queue would drop trimmed to its headers
// (qdisc ClassConfig.SetTrim: 128 B, DSCP 9, the strict trim class).
func uetTrimPortConfig() qdisc.Config {
	cfg := qdisc.DefaultConfig(fabricRate)
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "uet", LimitBytes: uetBDP, ECN: qdisc.ECNWRED,
		MinThBytes: uetBDP / 5, MaxThBytes: uetBDP * 4 / 5, MaxP: 1}
	cfg.Classes[qdisc.ClassRoCE].SetTrim()
	return cfg.Slowed(labScale)
}

// TestUETIncast: 8 senders each write 2 MiB to one receiver at once
// through a deep queue (no trimming), under NSCC, RCCC and both: every
// byte verified, nothing dropped, the tail over the ideal (16 MiB at the
// payload capacity) extended by the time the host starved the port within
// htsimMargin of htsim's (checkTail).
func TestUETIncast(t *testing.T) {
	roceSize(t)
	queue := map[pds.CCMode]uetIncastResult{}
	for _, mode := range uetIncastModes {
		t.Run(mode.String(), func(t *testing.T) {
			r := runIncast(t, 8, mode, uetPortConfig(), "deep/8/"+mode.String())
			queue[mode] = r
			if r.drops != 0 {
				t.Errorf("the port dropped %d packets", r.drops)
			}
		})
	}
	// A deep queue keeps what RCCC's senders send on speculative credit
	// at the start (8 × MaxWnd, 750 KB at 500 Mbit/s): the pacer grants
	// 0.99 of the line from then on and drains it at 1 % of the line, so
	// RCCC alone leaves the queue there for the whole incast (its median
	// 3.6-5.3 × NSCC's, quiet). htsim's RCCC runs with trimming and 1-BDP
	// queues (uet.md), where TestUETIncastTrim shows its queue below
	// NSCC's. With both, NSCC's window bounds the start: the guard is that
	// both leave no more than NSCC alone, within NSCC's own spread. Over
	// 19 runs (12 quiet, 6 beside stress-ng --cpu 2 --cpu-load 50, one
	// CI) NSCC's p50 alone spanned 90-118 KiB (1.31 ×) and both's
	// 102-114 KiB; both / NSCC reached 1.27 once (NSCC at its 90) and
	// 1.11 otherwise. RCCC alone stayed at 3.5 × NSCC's or more, so a
	// bound at uetBothQueueRatio still tells the two apart.
	n, r, b := queue[pds.CCNSCC], queue[pds.CCRCCC], queue[pds.CCBoth]
	t.Logf("queue p50: nscc %s, rccc %s (%.2f), both %s (%.2f); p99: nscc %s, rccc %s (%.2f), both %s (%.2f)",
		kib(float64(n.queueP50)), kib(float64(r.queueP50)), queueRatio(r.queueP50, n.queueP50), kib(float64(b.queueP50)), queueRatio(b.queueP50, n.queueP50),
		kib(float64(n.queueP99)), kib(float64(r.queueP99)), queueRatio(r.queueP99, n.queueP99), kib(float64(b.queueP99)), queueRatio(b.queueP99, n.queueP99))
	if n.queueP50 > 0 && float64(b.queueP50) > uetBothQueueRatio*float64(n.queueP50) {
		t.Errorf("queue p50 under both %s, under NSCC %s: want at most %.1f × NSCC's", kib(float64(b.queueP50)), kib(float64(n.queueP50)), uetBothQueueRatio)
	}
}

// uetBothQueueRatio bounds the deep incast's queue p50 under both over
// NSCC's alone: NSCC's p50 run to run (1.31 ×, TestUETIncast) with room,
// less than half RCCC's alone.
const uetBothQueueRatio = 1.5

// queueRatio is a/b, b at least 1.
func queueRatio(a, b int64) float64 { return float64(a) / float64(max(b, 1)) }

// TestUETIncastTrim: the incast, 8 → 1 and 16 → 1, into a port whose
// data queue holds one BDP and trims what it cannot hold (htsim's
// setting). The port is the receiver's last hop, so its trimmed DSCP is
// the receiver's TrimLastHopDSCP: every trimmed packet is NACKed
// TRIMMED_LASTHOP at once and resent, nothing waits for a timeout,
// nothing is dropped, every byte arrives verified, and the tail net of
// the host's time is within htsimMargin of htsim's (checkTail).
func TestUETIncastTrim(t *testing.T) {
	roceSize(t)
	cfg := uetTrimPortConfig()
	for _, senders := range []int{8, 16} {
		// The queue a host held back is the host's: a group whose
		// queues break the rule in a host-starved run runs again
		// (as retryStarved does).
		for attempt := 1; attempt <= labtest.StarvedAttempts; attempt++ {
			if !trimGroup(t, cfg, senders, attempt) {
				break
			}
		}
	}
}

// trimGroup runs one group of TestUETIncastTrim (senders → 1 under each
// mode) and reports whether it should run again: its queues broke the
// rule in a host-starved run before the last attempt.
func trimGroup(t *testing.T, cfg qdisc.Config, senders, attempt int) (again bool) {
	queue := map[pds.CCMode]uetIncastResult{}
	name := fmt.Sprint(senders)
	if attempt > 1 {
		name += "-again"
	}
	for _, mode := range uetIncastModes {
		t.Run(fmt.Sprintf("%s/%s", name, mode), func(t *testing.T) {
			r := runIncast(t, senders, mode, cfg, fmt.Sprintf("trim/%d/%s", senders, mode))
			queue[mode] = r
			if r.port.TrimmedPackets == 0 && mode == pds.CCNSCC {
				t.Errorf("the port trimmed nothing: the test did not fill its queue")
			}
			// Every packet the port trimmed reached the receiver as one
			// and was NACKed, and the senders heard every NACK (the trim
			// class is strict and never full; ACKs and NACKs go back on
			// an empty path).
			// (A trimmed copy of a PSN that already arrived gets none.)
			if r.server.TrimmedReceived != r.port.TrimmedPackets || r.nacks+r.server.TrimmedDuplicates != r.port.TrimmedPackets {
				t.Errorf("port trimmed %d; receiver saw %d (%d of PSNs it had); senders got %d TRIMMED_LASTHOP NACKs: want all equal but the duplicates",
					r.port.TrimmedPackets, r.server.TrimmedReceived, r.server.TrimmedDuplicates, r.nacks)
			}
			// No data packet is lost: the port's only drops are probes
			// too short to trim.
			if r.drops != r.probesLost || r.timeouts != 0 || r.backlogDrops != 0 {
				t.Errorf("port drops %d (%d probes lost), timeouts %d, host backlog drops %d: want no drop but the probes', no timeout (trimming replaces loss)", r.drops, r.probesLost, r.timeouts, r.backlogDrops)
			}
		})
	}
	// Issue 11 §4c: RCCC keeps the last hop's queue below what NSCC alone
	// leaves, in htsim's setting (a 1-BDP queue that trims).
	n, r, b := queue[pds.CCNSCC], queue[pds.CCRCCC], queue[pds.CCBoth]
	t.Logf("%d -> 1: queue p50: nscc %s, rccc %s (%.2f), both %s (%.2f)", senders,
		kib(float64(n.queueP50)), kib(float64(r.queueP50)), queueRatio(r.queueP50, n.queueP50), kib(float64(b.queueP50)), queueRatio(b.queueP50, n.queueP50))
	var broken []string
	for _, m := range []uetIncastResult{r, b} {
		if n.queueP50 > 0 && m.queueP50 >= n.queueP50 {
			broken = append(broken, fmt.Sprintf("%d -> 1: queue p50 under %s %s, under NSCC %s: want below NSCC's", senders, m.mode, kib(float64(m.queueP50)), kib(float64(n.queueP50))))
		}
	}
	if len(broken) == 0 {
		return false
	}
	var starved []string
	for _, m := range []uetIncastResult{n, r, b} {
		if m.host.HostStarved {
			starved = append(starved, fmt.Sprintf("%s %.1f %%", m.mode, 100*m.host.Share))
		}
	}
	if len(starved) > 0 && attempt < labtest.StarvedAttempts {
		t.Logf("%s; the host starved the run (%s of it): running the group again", strings.Join(broken, "; "), strings.Join(starved, ", "))
		return true
	}
	if len(starved) > 0 {
		t.Logf("HOST-DISTORTED, not judged: %s; the host starved the group in each of %d runs (last: %s of it)", strings.Join(broken, "; "), attempt, strings.Join(starved, ", "))
		return false
	}
	for _, e := range broken {
		t.Error(e)
	}
	return false
}
