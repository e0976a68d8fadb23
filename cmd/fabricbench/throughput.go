//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// goalRatio is the throughput the port may cost: port/bare >= 0.97.
const goalRatio = 0.97

const (
	devA      = "veth-a" // in node a: the port device (egress = the port)
	devB      = "veth-b" // in node b: its peer, runs port_dequeue
	iperfPort = 5201
)

var (
	addrA = netip.MustParsePrefix("198.18.0.1/30")
	addrB = netip.MustParsePrefix("198.18.0.2/30")
)

// ThroughputRow is one configuration of the veth pair.
type ThroughputRow struct {
	Config string `json:"config"`
	// Gbps is end.sum_received.bits_per_second of each round, in order.
	Gbps        []float64 `json:"gbps"`
	MedianGbps  float64   `json:"median_gbps"`
	Retransmits []int     `json:"retransmits"`
	// Ratio is MedianGbps over the bare veth's (0 on the bare row).
	Ratio     float64 `json:"ratio_to_bare,omitempty"`
	GoalRatio float64 `json:"goal_ratio,omitempty"`
	Verdict   string  `json:"verdict"` // ok, below, below (within noise), or ref
	// SpreadPct is (max - min) / median of the rounds, in percent.
	SpreadPct float64 `json:"spread_pct"`
	// Drops are the port's tail drops in each round (port rows only): a
	// dropped GSO packet makes the local TCP sender enter CWR, so a round
	// with drops measures the class limit, not the programs' cost.
	Drops []uint64 `json:"drops,omitempty"`
	// PortCounters summarises what the port saw over all its rounds.
	PortCounters string `json:"port_counters,omitempty"`
}

type tpConfig struct {
	name   string
	attach bool
	legacy bool
}

var tpConfigs = []tpConfig{
	{name: "bare veth"},
	{name: "port, TCX, no shaping", attach: true},
	{name: "port, legacy clsact, no shaping", attach: true, legacy: true},
}

// runThroughput runs rounds x configs iperf3 tests, interleaved (bare, tcx,
// legacy, bare, ...) so slow drifts of the VM hit every configuration alike.
//
// cpu >= 0 pins the iperf3 client and server to that CPU (iperf3 -A). The
// veth's receive softirq runs on the sending CPU, so the whole path then
// runs on one core: no cross-CPU reordering (spurious fast retransmits,
// rounds varying by +-15% unpinned on the 2-CPU VM), and since that core is
// the bottleneck, per-packet program cost shows in the throughput instead of
// hiding in an idle second core. cpu < 0 leaves the scheduler free.
//
// limit > 0 replaces every class's buffer limit of DefaultConfig.
func runThroughput(ctx context.Context, rounds, seconds, cpu int, limit units.ByteSize) ([]ThroughputRow, error) {
	rows := make([]ThroughputRow, len(tpConfigs))
	for i, c := range tpConfigs {
		rows[i] = ThroughputRow{Config: c.name, Verdict: "n/a"}
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return rows, errIperfMissing
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return rows, errors.New("ip (iproute2) not found in PATH: host/lab runs commands with `ip netns exec`; install iproute2")
	}

	l, err := pairLab(0)
	if err != nil {
		return rows, err
	}
	defer closeLab(l)
	a, b := l.Node("a"), l.Node("b")

	stats := make([]portTotals, len(tpConfigs))
	n := 0
	var errs []error
	for r := range rounds {
		for i, c := range tpConfigs {
			if ctx.Err() != nil {
				return finishRows(rows, stats), errors.Join(append(errs, ctx.Err())...)
			}
			n++
			progress("throughput round %d/%d: %s (%d s)", r+1, rounds, c.name, seconds)
			dropsBefore := stats[i].dropped
			res, err := oneRun(ctx, a, b, c, iperfPort+n, seconds, cpu, limit, &stats[i])
			if c.attach {
				rows[i].Drops = append(rows[i].Drops, stats[i].dropped-dropsBefore)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("round %d, %s: %w", r+1, c.name, err))
				continue
			}
			rows[i].Gbps = append(rows[i].Gbps, res.gbps)
			rows[i].Retransmits = append(rows[i].Retransmits, res.retransmits)
		}
	}
	return finishRows(rows, stats), errors.Join(errs...)
}

func finishRows(rows []ThroughputRow, stats []portTotals) []ThroughputRow {
	for i := range rows {
		rows[i].MedianGbps = median(rows[i].Gbps)
		if g := rows[i].Gbps; len(g) > 1 && rows[i].MedianGbps > 0 {
			rows[i].SpreadPct = 100 * (slices.Max(g) - slices.Min(g)) / rows[i].MedianGbps
		}
		if tpConfigs[i].attach && stats[i].rounds > 0 {
			rows[i].PortCounters = stats[i].String()
		}
	}
	bare := rows[0].MedianGbps
	rows[0].Verdict = "ref"
	for i := 1; i < len(rows); i++ {
		if bare <= 0 || rows[i].MedianGbps <= 0 {
			continue
		}
		rows[i].Ratio = rows[i].MedianGbps / bare
		rows[i].GoalRatio = goalRatio
		rows[i].Verdict = "ok"
		if rows[i].Ratio < goalRatio {
			rows[i].Verdict = "below"
			// A deficit smaller than the bare veth's own round-to-round
			// spread cannot be told from noise at these -rounds/-seconds.
			if 100*(1-rows[i].Ratio) < rows[0].SpreadPct {
				rows[i].Verdict = "below (within noise)"
			}
		}
	}
	return rows
}

// portTotals accumulates the port counters of one configuration.
type portTotals struct {
	rounds                              int
	attach                              string
	enqueued, dequeued, dropped, marked uint64
	unaccounted, unstamped              uint64
	maxBacklog                          uint64
}

func (t *portTotals) add(p *qdisc.Port) error {
	s, err := p.Stats()
	if err != nil {
		return err
	}
	tot := s.Total()
	t.rounds++
	t.attach = string(p.Info().Attach)
	t.enqueued += tot.EnqueuedPackets
	t.dequeued += tot.DequeuedPackets
	t.dropped += tot.DroppedLimitPackets + tot.DroppedWREDPackets
	t.marked += tot.CEMarkedECT0 + tot.CEMarkedECT1
	t.unaccounted += s.Port.UnaccountedPackets
	t.unstamped += s.Port.DequeueUnstampedPackets
	for _, c := range s.Classes {
		t.maxBacklog = max(t.maxBacklog, c.MaxBacklogBytes)
	}
	return nil
}

func (t *portTotals) String() string {
	return fmt.Sprintf("attach=%s enqueued=%s dropped=%d marked=%d unaccounted=%d unstamped=%d max_backlog=%s",
		t.attach, si(t.enqueued), t.dropped, t.marked, t.unaccounted, t.unstamped, units.ByteSize(t.maxBacklog))
}

// portConfig is DefaultConfig (the rate is unused without shaping), with
// every class limit set to limit when limit > 0.
func portConfig(limit units.ByteSize) qdisc.Config {
	cfg := qdisc.DefaultConfig(100 * units.Gbit)
	if limit > 0 {
		for i := range cfg.Classes {
			cfg.Classes[i].LimitBytes = limit
		}
	}
	return cfg
}

type iperfResult struct {
	gbps        float64
	retransmits int
}

// oneRun attaches the port if the configuration has one, runs one iperf3
// test a -> b, and detaches. Every step is bounded by a timeout.
func oneRun(ctx context.Context, a, b *lab.Node, c tpConfig, port, seconds, cpu int, limit units.ByteSize, st *portTotals) (res iperfResult, err error) {
	if c.attach {
		p, err := qdisc.Attach(portConfig(limit), qdisc.AttachOptions{
			Dev: devA, Netns: a.NetnsName, PeerDev: devB, PeerNetns: b.NetnsName,
			NoShaping: true, Legacy: c.legacy,
		})
		if err != nil {
			return res, fmt.Errorf("attach: %w", err)
		}
		defer func() {
			if serr := st.add(p); serr != nil && err == nil {
				err = fmt.Errorf("port stats: %w", serr)
			}
			if cerr := p.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("detach: %w", cerr)
			}
		}()
		want := qdisc.AttachTCX
		if c.legacy {
			want = qdisc.AttachLegacy
		}
		if got := p.Info().Attach; got != want {
			return res, fmt.Errorf("attached with %s, want %s", got, want)
		}
	}
	return iperf(ctx, a, b, port, seconds, cpu)
}

// iperf runs a one-off server in b and a JSON client in a.
func iperf(ctx context.Context, a, b *lab.Node, port, seconds, cpu int) (iperfResult, error) {
	var res iperfResult
	var rep struct {
		iperfHead
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			SumSent struct {
				Retransmits int `json:"retransmits"`
			} `json:"sum_sent"`
		} `json:"end"`
	}
	if err := runIperf(ctx, a, b, port, seconds, cpu, nil, &rep); err != nil {
		return res, err
	}
	if rep.End.SumReceived.BitsPerSecond <= 0 {
		return res, errors.New("iperf3 reported no end.sum_received.bits_per_second")
	}
	res.gbps = rep.End.SumReceived.BitsPerSecond / 1e9
	res.retransmits = rep.End.SumSent.Retransmits
	return res, nil
}

var errExited = errors.New("exited before listening")

// waitListening polls the node's TCP table (from inside its namespace) until
// a socket listens on port. Probing with a connection instead would use up
// the one test a -1 server accepts.
func waitListening(ctx context.Context, n *lab.Node, port int, exited <-chan struct{}) error {
	want := fmt.Sprintf(":%04X", port)
	deadline := time.Now().Add(5 * time.Second)
	for {
		var found bool
		err := n.Do(func() error {
			for _, f := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
				ok, err := listensOn(f, want)
				if err != nil {
					return err
				}
				found = found || ok
			}
			return nil
		})
		if err != nil {
			return err
		}
		if found {
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("not listening after 5 s")
		}
	}
}

func listensOn(path, portSuffix string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st ...; st 0A is LISTEN.
		if len(fields) > 3 && strings.HasSuffix(fields[1], portSuffix) && fields[3] == "0A" {
			return true, nil
		}
	}
	return false, sc.Err()
}
