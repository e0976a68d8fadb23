// Package netnstests runs the switch port on real kernel queues, in
// network namespaces each test builds and tears down itself. Tests run one
// at a time (no t.Parallel): they measure rates and queues on 2 cores.
package netnstests

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestMain(m *testing.M) {
	var before map[string]bool
	if os.Geteuid() == 0 {
		var err error
		if before, err = portPrograms(); err != nil {
			fmt.Fprintln(os.Stderr, "list programs:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if os.Geteuid() == 0 {
		left, err := leftovers(before)
		if err != nil {
			fmt.Fprintln(os.Stderr, "check leftovers:", err)
			code = 1
		}
		if len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the tests left things behind: %v\n", left)
			code = 1
		}
	}
	os.Exit(code)
}

func listProgramIDs() (map[ebpf.ProgramID]string, error) {
	out := map[ebpf.ProgramID]string{}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		if info, err := p.Info(); err == nil {
			out[id] = info.Name
		}
		p.Close()
	}
}

const tcxKernel = "6.6"

// htbLag is the host's share of a span in which HTB, its queue never
// empty, sent sent bytes at rate r: the service its late timer lost, as
// a report. The virtual-queue port has no xmit hook to book HTB's
// lateness (bpf/idle.h), so its own counters are the measure; HTB's
// queue lags the virtual queue's clock by exactly this.
func htbLag(t *testing.T, r units.Rate, span time.Duration, sent uint64) hostlost.Report {
	t.Helper()
	served := time.Duration(float64(sent) * 8 / float64(r) * float64(time.Second))
	lost := max(span-served, 0)
	rep := hostlost.Report{Wall: span, Starved: lost, Budget: hostlost.DefaultBudget}
	rep.Share = lost.Seconds() / span.Seconds()
	rep.HostStarved = rep.Share > rep.Budget
	t.Logf("HTB sent %d B in %v at %v: %v of service (%.1f %%) lost to the host", sent, span.Round(time.Millisecond), r, lost.Round(time.Millisecond), 100*rep.Share)
	return rep
}

// (a) Classic-ECN TCP through a step port: the receiver sees CE, nothing is
// dropped, and the queue stays near K.
func TestStepMarkingTCP(t *testing.T) {
	for _, am := range attachModes {
		t.Run(am.name, func(t *testing.T) {
			labtest.RequireRoot(t)
			labtest.RequireKernel(t, tcxKernel)
			d := lab.NewDumbbellT(t, lab.DumbbellSpec{Senders: 2, DisableOffloads: true,
				SenderSysctls: map[string]string{"net.ipv4.tcp_ecn": "1"}})
			const rate = 200 * units.Mbit
			const k = 64 * units.KiB
			cfg := qdisc.DefaultConfig(rate)
			// 512 KB limit: the observed-curve bins are 16 KB wide.
			cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: 512 * units.KiB, ECN: qdisc.ECNStep, MinThBytes: k}
			port := attachPort(t, d.Bottleneck, cfg, am.legacy)
			// Keep each flow in order through the veths: reordering would
			// show up as spurious retransmits, not as queueing.
			if _, err := d.SteerRx(context.Background()); err != nil {
				t.Fatal(err)
			}

			// The queue and goodput a starving host moves run again
			// (retryStarved).
			retryStarved(t, func(t *testing.T, hc *hostChecks) hostlost.Report {
				const seconds = 6
				var warm qdisc.Stats
				meter := meterTCP(t, port, qdisc.ClassRoCE)
				t0 := hostlost.Now()
				res := iperf3TCP(t, d, tosRoCETCP, "cubic", seconds, func() { warm = portStats(t, port) }, meter)
				host := meter.report(t)
				c := settle(t, port).Classes[qdisc.ClassRoCE]
				var raw float64
				retrans := 0
				for _, r := range res {
					raw += r.End.SumReceived.BitsPerSecond
					retrans += r.End.SumSent.Retransmits
				}
				starved := host.StarvedBetween(t0, t0+time.Duration(seconds)*time.Second)
				goodput := raw * seconds / (seconds - starved.Seconds())
				t.Logf("retransmits: %d; goodput %.1f Mbit/s, %.1f Mbit/s net of the %v the host took from the port", retrans, raw/1e6, goodput/1e6, starved.Round(time.Millisecond))
				// The backlog distribution after slow start: the curve's
				// arrivals since the midway snapshot.
				steady := c.Curve
				for b := range steady.Arrivals {
					steady.Arrivals[b] -= warm.Classes[qdisc.ClassRoCE].Curve.Arrivals[b]
				}
				p99 := curveQuantile(steady, 0.99)
				t.Logf("goodput %.1f Mbit/s (%.1f%% of %s); CE marked %d, seen at receiver %d; drops %d; steady-state backlog p99 < %d B (K = %d B), max %d B; sojourn p99 < %v",
					goodput/1e6, 100*goodput/float64(rate), rate, c.CEMarked(), c.DequeuedCEPackets, c.DroppedPackets(), p99, uint64(k), c.MaxBacklogBytes, c.Sojourn.Quantile(0.99))

				if c.DequeuedCEPackets == 0 || c.CEMarked() == 0 {
					t.Errorf("no CE marks reached the receiver (marked %d, seen %d)", c.CEMarked(), c.DequeuedCEPackets)
				}
				if c.DequeuedCEPackets != c.CEMarked() {
					t.Errorf("marked %d packets but the receiver saw %d CE packets", c.CEMarked(), c.DequeuedCEPackets)
				}
				if c.DroppedPackets() != 0 {
					t.Errorf("dropped %d packets: ECN should have kept TCP below the limit", c.DroppedPackets())
				}
				// p99 of the backlog ECN-capable arrivals found in steady
				// state, read from 16 KB bins. Classic ECN reacts a round trip
				// after the mark (about 3 ms here), so the queue overshoots K;
				// measured p99 is below K + 32 KB; allow three bins (about 32
				// full frames) for a noisy 2-core machine.
				if limit := uint64(k) + 3*c.Curve.BinBytes; p99 > limit {
					hc.Errorf("steady-state p99 backlog < %d B exceeds K + 48 KB = %d B", p99, limit)
				}
				if goodput < 0.85*float64(rate) {
					hc.Errorf("goodput %.1f Mbit/s is below 85%% of the %s port", goodput/1e6, rate)
				}
				return host
			})
		})
	}
}

// curveQuantile is the upper edge of the backlog bin holding the q-quantile
// of the backlog ECN-capable arrivals found.
func curveQuantile(c qdisc.MarkingCurve, q float64) uint64 {
	var n uint64
	for _, a := range c.Arrivals {
		n += a
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for b, a := range c.Arrivals {
		seen += a
		if seen >= rank {
			return uint64(b+1) * c.BinBytes
		}
	}
	return uint64(len(c.Arrivals)) * c.BinBytes
}

// (b) WRED: non-reactive ECT(0) UDP at twice the port rate, on and off so the
// queue sweeps the whole curve; in each backlog bin the marking fraction
// follows min_th/max_th/max_p.
func TestWREDCurveUDP(t *testing.T) {
	for _, am := range attachModes {
		t.Run(am.name, func(t *testing.T) {
			const rate = 100 * units.Mbit
			cfg := qdisc.DefaultConfig(rate)
			// Bins are 1 MB / 32 = 32 KB: min_th and max_th fall on bin edges.
			const minTh, maxTh, maxP = 128 * units.KiB, 640 * units.KiB, 0.2
			cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: 1 * units.MiB, ECN: qdisc.ECNWRED,
				MinThBytes: minTh, MaxThBytes: maxTh, MaxP: maxP}
			d, port, sk, dst := udpPort(t, 1, cfg, am.legacy)

			// 60 ms at 200 Mbit/s fills 750 KB (past max_th), 100 ms off
			// drains it: about 50 sweeps in 8 s.
			f := flow{tos: tosRoCEECT0, payload: 1400, rate: 2 * rate, on: 60 * time.Millisecond, off: 100 * time.Millisecond, total: 8 * time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sent, err := f.send(ctx, d.Senders[0], dst)
			if err != nil {
				t.Fatal(err)
			}
			c := settle(t, port).Classes[qdisc.ClassRoCE]
			t.Logf("sent %d, enqueued %d, marked %d (%.1f%%), dropped %d, max backlog %d B",
				sent, c.EnqueuedPackets, c.CEMarked(), 100*float64(c.CEMarked())/float64(c.EnqueuedPackets), c.DroppedPackets(), c.MaxBacklogBytes)

			checked := 0
			bin := float64(c.Curve.BinBytes)
			for b := range qdisc.CurveBins {
				n := c.Curve.Arrivals[b]
				if n < 300 {
					continue // too few samples to judge
				}
				if float64(b+1)*bin > float64(1*units.MiB)-1500 {
					// Arrivals here may find the class at its limit and be
					// tail-dropped, never marked: a sender that falls behind
					// on a busy machine catches up in one burst past 750 KB
					// (seen: 217 drops, bin 31 marked 0.54 of 476 arrivals).
					continue
				}
				// Expected fraction: the curve at the bin's middle (it is
				// linear within a bin, so the middle is the mean).
				mid := (float64(b) + 0.5) * bin
				var want float64
				switch {
				case mid < float64(minTh):
					want = 0
				case mid >= float64(maxTh):
					want = 1
				default:
					want = maxP * (mid - float64(minTh)) / float64(maxTh-minTh)
				}
				got := c.Curve.Fraction(b)
				// 4.5σ: about 40 bins are judged per run (both attach
				// modes), and at 4σ one in 300 runs failed by chance
				// alone (CI: bin 10 at 4.1σ, its neighbours on the curve).
				sigma := math.Sqrt(want * (1 - want) / float64(n))
				tol := math.Max(4.5*sigma, 0.02)
				t.Logf("bin %2d [%4d, %4d) KB: %5d ECT arrivals, marked %.4f, curve %.4f ± %.4f", b, b*int(bin)/1024, (b+1)*int(bin)/1024, n, got, want, tol)
				if math.Abs(got-want) > tol {
					t.Errorf("bin %d: marked fraction %.4f, curve says %.4f (tolerance %.4f)", b, got, want, tol)
				}
				checked++
			}
			if checked < 15 {
				t.Errorf("only %d bins had enough samples: the queue did not sweep the curve", checked)
			}
			// The receiving host sees the marks the port made.
			if got := sk.received[3].Load(); got < c.DequeuedCEPackets*99/100 || got > c.DequeuedCEPackets {
				t.Errorf("receiver socket saw %d CE datagrams, the port dequeued %d", got, c.DequeuedCEPackets)
			}
		})
	}
}

// (c) Not-ECT UDP at twice the rate: never marked, dropped only at the
// buffer limit, and every packet accounted for.
func TestNotECTTailDrop(t *testing.T) {
	for _, am := range attachModes {
		t.Run(am.name, func(t *testing.T) {
			const rate = 100 * units.Mbit
			cfg := qdisc.DefaultConfig(rate) // class 3: WRED 50 KB..1 MB, limit 2 MB
			d, port, sk, dst := udpPort(t, 1, cfg, am.legacy)

			f := flow{tos: tosRoCENotECT, payload: 1400, rate: 2 * rate, total: 3 * time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			sent, err := f.send(ctx, d.Senders[0], dst)
			if err != nil {
				t.Fatal(err)
			}
			c := settle(t, port).Classes[qdisc.ClassRoCE]
			limit := uint64(cfg.Classes[qdisc.ClassRoCE].LimitBytes)
			t.Logf("sent %d; class 3: enqueued %d, dequeued %d, dropped at limit %d, wred-dropped %d, marked %d; max backlog %d B of %d; receiver got %d (%d CE)",
				sent, c.EnqueuedPackets, c.DequeuedPackets, c.DroppedLimitPackets, c.DroppedWREDPackets, c.CEMarked(), c.MaxBacklogBytes, limit, sk.total(), sk.received[3].Load())

			if c.ArrivedNotECT != c.EnqueuedPackets || c.EnqueuedPackets < uint64(sent)*99/100 {
				t.Errorf("class 3 saw %d packets (%d Not-ECT) of %d sent", c.EnqueuedPackets, c.ArrivedNotECT, sent)
			}
			if c.CEMarked() != 0 || c.DequeuedCEPackets != 0 || sk.received[3].Load() != 0 {
				t.Errorf("Not-ECT packets were marked: %d marked, %d CE dequeued, %d CE received", c.CEMarked(), c.DequeuedCEPackets, sk.received[3].Load())
			}
			if c.DroppedWREDPackets != 0 {
				t.Errorf("%d early drops with the drop profile off", c.DroppedWREDPackets)
			}
			// Twice the rate for 3 s: about half the packets must go.
			if frac := float64(c.DroppedLimitPackets) / float64(c.EnqueuedPackets); frac < 0.3 || frac > 0.6 {
				t.Errorf("dropped %.2f of the packets at the limit, want about 0.5", frac)
			}
			if c.MaxBacklogBytes > limit {
				t.Errorf("max backlog %d B exceeds the %d B limit", c.MaxBacklogBytes, limit)
			}
			if c.MaxBacklogBytes < limit-4*1500 {
				t.Errorf("max backlog %d B: the queue never reached the %d B limit", c.MaxBacklogBytes, limit)
			}
			if got := sk.total(); got < c.DequeuedPackets*99/100 || got > c.DequeuedPackets {
				t.Errorf("receiver got %d datagrams, the port dequeued %d", got, c.DequeuedPackets)
			}
		})
	}
}

// (d) CNPs (DSCP 48, strict priority) overtake a full RoCE class.
func TestCNPStrictPriority(t *testing.T) {
	for _, am := range attachModes {
		t.Run(am.name, func(t *testing.T) {
			// The CNPs' p99 sojourn is the one check a stalled CPU moves
			// (retryStarved): 1 % of 4000 CNPs waits past 1 ms once the
			// VM has stopped the port's CPUs for ~20 ms (2000 CNPs a
			// second, each stall of S ms delaying 2(S-1) of them past
			// 1 ms). Seen once in 8 fresh-clone runs: p99 < 2.1 ms.
			retryStarved(t, func(t *testing.T, hc *hostChecks) hostlost.Report {
				return cnpStrictPriorityRun(t, am.legacy, hc)
			})
		})
	}
}

// cnpStallBudget is the stolen CPU time over the CNP phase that can push
// 1 % of its CNPs past 1 ms (see TestCNPStrictPriority).
const cnpStallBudget = 20 * time.Millisecond

func cnpStrictPriorityRun(t *testing.T, legacy bool, hc *hostChecks) hostlost.Report {
	const rate = 100 * units.Mbit
	d, port, _, dst := udpPort(t, 2, qdisc.DefaultConfig(rate), legacy)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	roce := flow{tos: tosRoCEECT0, payload: 1400, rate: 2 * rate, total: 3 * time.Second}
	// CNPs: 2000 small packets a second, starting once the RoCE queue is
	// full.
	cnp := flow{tos: tosCNP, payload: 32, rate: 2000 * 74 * 8, total: 2 * time.Second}
	errc := make(chan error, 1)
	go func() {
		_, err := roce.send(ctx, d.Senders[0], dst)
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond)
	k0, t0 := readKernel(t), time.Now()
	cnpSent, err := cnp.send(ctx, d.Senders[1], dst)
	if err != nil {
		t.Fatal(err)
	}
	// The host's figure: CPU time the hypervisor stole over the CNP
	// phase, on any CPU (the port dequeues on whichever runs it).
	k, wall := readKernel(t).Sub(k0), time.Since(t0)
	host := hostlost.Report{Wall: wall, Starved: k.Steal, Budget: cnpStallBudget.Seconds() / wall.Seconds(), Kernel: k}
	host.Share = host.Starved.Seconds() / wall.Seconds()
	host.HostStarved = host.Starved >= cnpStallBudget
	t.Logf("host: steal %v over the %v of CNPs (budget %v)", k.Steal.Round(time.Millisecond), wall.Round(time.Millisecond), cnpStallBudget)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	s := settle(t, port)
	r, c := s.Classes[qdisc.ClassRoCE], s.Classes[qdisc.ClassCNP]
	t.Logf("roce: mean sojourn %v, p99 < %v, max backlog %d B, dropped %d; cnp: %d sent, %d dequeued, mean sojourn %v, p99 < %v, dropped %d",
		r.MeanSojourn(), r.Sojourn.Quantile(0.99), r.MaxBacklogBytes, r.DroppedPackets(),
		cnpSent, c.DequeuedPackets, c.MeanSojourn(), c.Sojourn.Quantile(0.99), c.DroppedPackets())

	if r.MeanSojourn() < 50*time.Millisecond {
		t.Errorf("RoCE class mean sojourn %v: the class was not kept full", r.MeanSojourn())
	}
	if c.DroppedPackets() != 0 || c.DequeuedPackets != uint64(cnpSent) {
		t.Errorf("CNP class: %d dropped, %d of %d dequeued", c.DroppedPackets(), c.DequeuedPackets, cnpSent)
	}
	// One full RoCE frame in service at 100 Mbit/s is 115 µs; allow
	// scheduling noise on a 2-core VM, far below the RoCE queue's ~160 ms.
	// No stall of the host excuses a tail a tenth of the RoCE queue's
	// sojourn: that is strict priority not working.
	p99 := c.Sojourn.Quantile(0.99)
	if p99 > r.MeanSojourn()/10 {
		t.Errorf("CNP p99 sojourn < %v against the RoCE class's mean %v: strict priority did not let CNPs overtake", p99, r.MeanSojourn())
	} else if p99 > 2*time.Millisecond {
		hc.Errorf("CNP p99 sojourn < %v: above 2 ms, behind the full RoCE class", p99)
	}
	// Strict priority does not pre-empt: a CNP waits for the frame the
	// port is sending, half a frame's service on average (58 µs at 100
	// Mbit/s; 86-92 µs measured with HTB's timer). While the strict class
	// had the port's rate as its own guarantee, HTB let a CNP out at once,
	// beside that frame (mean 14 µs). The host only lengthens it.
	ser := time.Duration(float64((roce.payload+42)*8) / float64(rate) * float64(time.Second))
	if m := c.MeanSojourn(); m < ser/4 {
		t.Errorf("CNP mean sojourn %v, under a quarter of a RoCE frame's %v service: CNPs left beside the frame on the wire, not after it", m, ser)
	}
	return host
}

// Detach leaves the devices as they were: default qdisc, no filters.
func TestDetachLeavesNothing(t *testing.T) {
	for _, am := range attachModes {
		t.Run(am.name, func(t *testing.T) {
			labtest.RequireRoot(t)
			labtest.RequireKernel(t, tcxKernel)
			d := lab.NewDumbbellT(t, lab.DumbbellSpec{Senders: 1})
			b := d.Bottleneck
			before := tcShow(t, b.Node, b.Dev) + tcShow(t, b.PeerNode, b.PeerDev)
			port, err := qdisc.Attach(qdisc.DefaultConfig(units.Gbit), qdisc.AttachOptions{
				Dev: b.Dev, Netns: b.Node.NetnsName, PeerDev: b.PeerDev, PeerNetns: b.PeerNode.NetnsName, Legacy: am.legacy})
			if err != nil {
				t.Fatal(err)
			}
			during := tcShow(t, b.Node, b.Dev) + tcShow(t, b.PeerNode, b.PeerDev)
			if during == before {
				t.Fatalf("attach changed nothing visible to tc:\n%s", during)
			}
			if err := port.Close(); err != nil {
				t.Fatal(err)
			}
			if err := port.Close(); err != nil {
				t.Fatalf("second close: %v", err)
			}
			if after := tcShow(t, b.Node, b.Dev) + tcShow(t, b.PeerNode, b.PeerDev); after != before {
				t.Errorf("detach left a difference:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

func tcShow(t *testing.T, n *lab.Node, dev string) string {
	t.Helper()
	var out []byte
	for _, args := range [][]string{
		{"qdisc", "show", "dev", dev},
		{"filter", "show", "dev", dev, "ingress"},
		{"filter", "show", "dev", dev, "egress"},
	} {
		o, _ := n.Command(context.Background(), "tc", args...).CombinedOutput()
		out = append(out, o...)
	}
	// TCX links are not tc objects: TestMain checks that no port program
	// stays loaded.
	return string(out)
}

// A second attach on a pinned port fails and leaves the first one working.
func TestSecondAttachKeepsFirst(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	d := lab.NewDumbbellT(t, lab.DumbbellSpec{Senders: 1})
	b := d.Bottleneck
	opts := qdisc.AttachOptions{Dev: b.Dev, Netns: b.Node.NetnsName, PeerDev: b.PeerDev, PeerNetns: b.PeerNode.NetnsName, Pin: true}
	first, err := qdisc.Attach(qdisc.DefaultConfig(units.Gbit), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if second, err := qdisc.Attach(qdisc.DefaultConfig(units.Gbit), opts); err == nil {
		second.Close()
		t.Fatal("second attach on the same device succeeded")
	}
	p, err := qdisc.Open(b.Node.NetnsName, b.Dev)
	if err != nil {
		t.Fatalf("first port gone after a failed second attach: %v", err)
	}
	if _, err := p.Stats(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := qdisc.Open(b.Node.NetnsName, b.Dev); err == nil {
		t.Fatal("port still recorded after detach")
	}
}

// TestShapedVirtualPort: a virtual-queue port with Shape (a rate limiter
// on a NIC, as a PE's agent uses on a lab server) really sends at its rate
// and its HTB queue is the one its virtual queue models: sampled side by
// side while a sender runs at twice the rate, the two backlogs agree
// within a quarter of the class's limit, the virtual queue marks and drops
// at its limit and HTB drops nothing. SetRate moves both: at half the
// rate the receiver gets half.
func TestShapedVirtualPort(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	d := lab.NewDumbbellT(t, lab.DumbbellSpec{Senders: 1, DisableOffloads: true})
	const rate = 100 * units.Mbit
	cfg := qdisc.DefaultConfig(rate) // class 3: WRED 50 KB..1 MB, limit 2 MB
	if _, err := qdisc.Attach(cfg, qdisc.AttachOptions{Dev: d.Bottleneck.Dev, Netns: d.Bottleneck.Node.NetnsName, Mode: qdisc.QueueVirtual, NoShaping: true, Shape: true}); err == nil {
		t.Fatal("shape with no-shaping attached")
	}
	port, err := qdisc.Attach(cfg, qdisc.AttachOptions{Dev: d.Bottleneck.Dev, Netns: d.Bottleneck.Node.NetnsName, Mode: qdisc.QueueVirtual, Shape: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := port.Close(); err != nil {
			t.Errorf("detach: %v", err)
		}
		if out := tcShow(t, d.Bottleneck.Node, d.Bottleneck.Dev); strings.Contains(out, "htb") {
			t.Errorf("HTB left on the device after detach:\n%s", out)
		}
	})
	if info := port.Info(); !info.HTB || info.Mode != qdisc.QueueVirtual {
		t.Fatalf("port info %+v: want a virtual-queue port with HTB", info)
	}
	sk := newSink(t, d.Receiver)
	dst := netip.AddrPortFrom(d.ReceiverAddr, uint16(sk.port))
	limit := float64(cfg.Classes[qdisc.ClassRoCE].LimitBytes)

	for _, r := range []units.Rate{rate, rate / 2} {
		retryStarved(t, func(t *testing.T, hc *hostChecks) hostlost.Report {
			if err := port.SetRate(r); err != nil {
				t.Fatal(err)
			}
			before, got0 := portStats(t, port).Classes[qdisc.ClassRoCE], sk.total()
			q0, err := port.Qdisc()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			var (
				wg   sync.WaitGroup
				sent int
				serr error
			)
			wg.Add(1)
			go func() {
				defer wg.Done()
				sent, serr = flow{tos: tosRoCEECT0, payload: 1400, rate: 2 * r, total: 2 * time.Second}.send(ctx, d.Senders[0], dst)
			}()
			// Side by side, from 0.5 s (both queues full by then) to 1.8 s.
			time.Sleep(500 * time.Millisecond)
			var diffs, htbMax []float64
			qa, ta := q0, time.Now()
			for i := range 26 {
				s, err1 := port.Stats()
				q, err2 := port.Qdisc()
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				diffs = append(diffs, math.Abs(float64(q.BacklogBytes)-float64(s.Classes[qdisc.ClassRoCE].BacklogBytes)))
				htbMax = append(htbMax, float64(q.BacklogBytes))
				if i == 0 {
					qa, ta = q, time.Now()
				}
				time.Sleep(50 * time.Millisecond)
			}
			qb, tb := q0, time.Now()
			if q, err := port.Qdisc(); err == nil {
				qb = q
			}
			wg.Wait()
			cancel()
			host := htbLag(t, r, tb.Sub(ta), qb.SentBytes-qa.SentBytes)
			if serr != nil {
				t.Fatal(serr)
			}
			// Drained: HTB's queue at the rate, 2 MB in 160 ms at most.
			time.Sleep(500 * time.Millisecond)
			c := portStats(t, port).Classes[qdisc.ClassRoCE]
			q, err := port.Qdisc()
			if err != nil {
				t.Fatal(err)
			}
			got := sk.total() - got0
			// The rate over the 2 s of sending plus the drain of what the
			// limit held: delivered bytes / (2 s + limit/rate).
			wire := float64(got) * (1400 + 42) * 8
			secs := 2 + limit*8/float64(r)
			slices.Sort(diffs)
			t.Logf("%v: sent %d, delivered %d (%.1f Mbit/s over %.2f s); virtual: enqueued %d, dropped %d, CE %d; HTB: sent %d, dropped %d; |HTB - virtual| median %.0f B, max %.0f B; HTB max %.0f B",
				r, sent, got, wire/secs/1e6, secs, c.EnqueuedPackets-before.EnqueuedPackets, c.DroppedLimitPackets-before.DroppedLimitPackets,
				c.CEMarked()-before.CEMarked(), q.SentPackets-q0.SentPackets, q.Drops-q0.Drops, diffs[len(diffs)/2], diffs[len(diffs)-1], slices.Max(htbMax))
			// A host that takes HTB's service time lowers the rate: below
			// 0.9 of it, a starved run runs again; below half, or above
			// the rate, the port is wrong whatever the host did.
			switch bps := wire / secs; {
			case bps < 0.5*float64(r) || bps > 1.05*float64(r):
				t.Errorf("%v: delivered %.1f Mbit/s, want the port rate", r, bps/1e6)
			case bps < 0.9*float64(r):
				hc.Errorf("%v: delivered %.1f Mbit/s, want the port rate (0.9 of it at least)", r, bps/1e6)
			}
			// HTB's fifos hold the class's limit and a quarter more: they
			// drop only what HTB lags the virtual queue by beyond that.
			if d, n := q.Drops-q0.Drops, q.SentPackets-q0.SentPackets; d*50 > n {
				hc.Errorf("%v: HTB dropped %d packets of %d; the virtual queue's limit should drop first", r, d, n)
			}
			if m := slices.Max(htbMax); m > limit*5/4+16<<10 {
				t.Errorf("%v: HTB's backlog reached %.0f B, beyond its fifo (the class's %.0f B and a quarter)", r, m, limit)
			}
			if c.DroppedLimitPackets == before.DroppedLimitPackets || c.CEMarked() == before.CEMarked() {
				t.Errorf("%v: the virtual queue marked %d and dropped %d at twice its rate", r, c.CEMarked()-before.CEMarked(), c.DroppedLimitPackets-before.DroppedLimitPackets)
			}
			if slices.Max(htbMax) < limit/2 {
				t.Errorf("%v: HTB's backlog peaked at %.0f B: it did not shape", r, slices.Max(htbMax))
			}
			// HTB's dequeue runs on timers and softirqs: with a core kept
			// busy it lags the virtual queue's clock (358 KB median measured
			// at 100 Mbit/s, 10-17 KB idle), and the real queue grows by the
			// lag. A quarter of the limit bounds that; the lag is the
			// port's held-back time, so a run the host starved runs again
			// (retryStarved).
			if med := diffs[len(diffs)/2]; med > limit/4 {
				hc.Errorf("%v: HTB's backlog and the virtual queue's differ by %.0f B (median), want within %.0f", r, med, limit/4)
			}
			return host
		})
	}
}
