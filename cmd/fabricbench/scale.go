//go:build linux

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The scale rows (issue 28, "Scale"): one RoCEv2 client agent with N QPs
// against one server, every QP active, congestion control off, all of
// them sharing one line rate (the client's port, as a NIC's QPs share
// theirs) so that the packets per second are the same at every N. Per N:
// the time until the client's agent holds every QP, the peak memory of both processes
// per QP beyond the first row's, and the client's CPU per packet against
// the first row's (goal: within 1.2x of one flow).

// The UET rows do the same with one host/pds endpoint and N streams, each
// its own job and so its own PDC, all to one server and so in one CCC
// (NSCC), the endpoint's line rate the shared one.

// scaleGoal is the CPU per packet at N flows over one flow's.
const scaleGoal = 1.2

// ScaleReport is the scale section.
type ScaleReport struct {
	// RateBps is the line rate the QPs share, MessageBytes their
	// messages, Seconds each row's run after setup.
	RateBps      float64    `json:"rate_bps"`
	MessageBytes int        `json:"message_bytes"`
	Seconds      int        `json:"seconds"`
	Runs         int        `json:"runs"`
	Goal         float64    `json:"cpu_per_packet_goal_ratio"`
	Rows         []ScaleRow `json:"rows"`
	// UETRows are the UET endpoint's, QPs counting its PDCs.
	UETRows []ScaleRow `json:"uet_rows"`
}

// ScaleRow is one N.
type ScaleRow struct {
	QPs int `json:"qps"`
	// SetupSeconds: from RunClient's start until the client's agent held
	// every QP (created; the session connects them at once).
	SetupSeconds float64 `json:"setup_seconds"`
	// Peak resident memory of the client and server processes (VmHWM),
	// and per QP beyond the first row's.
	ClientRSSBytes   uint64  `json:"client_peak_rss_bytes"`
	ServerRSSBytes   uint64  `json:"server_peak_rss_bytes"`
	ClientBytesPerQP float64 `json:"client_bytes_per_qp,omitempty"`
	ServerBytesPerQP float64 `json:"server_bytes_per_qp,omitempty"`
	GoodputBps       float64 `json:"goodput_bps"`
	TxPackets        uint64  `json:"tx_packets"`
	Retransmits      uint64  `json:"retransmits"`
	// NsPerPacket is the client's CPU (user+sys) per data packet sent
	// from every flow set up to the flows' time up (steadyWindow), Ratio
	// that over the first row's; RunNsPerPacket the same over the
	// client's whole run, its setup and teardown of N flows included.
	NsPerPacket    float64 `json:"client_cpu_ns_per_packet"`
	RunNsPerPacket float64 `json:"client_cpu_ns_per_packet_whole_run"`
	// GSOPct is the share of the client's datagrams that left in UDP GSO
	// sends; RxPerPacket the datagrams it received (ACKs, NAKs, CNPs) per
	// data packet: the two costs that grow with the flows' number.
	GSOPct          float64 `json:"gso_datagrams_pct"`
	SegmentsPerSend float64 `json:"segments_per_gso_send,omitempty"`
	RxPerPacket     float64 `json:"received_per_packet"`
	// GCPct is the Go runtime's estimate of its garbage collector's share
	// of the client's CPU in the window (GCCycles cycles): a large heap
	// of pointers, left by the setup, is scanned there.
	GCPct    float64 `json:"client_gc_cpu_pct"`
	GCCycles uint64  `json:"client_gc_cycles"`
	// NsPerDatagram is the CPU per datagram the client handled, sent or
	// received, DatagramRatio that over the first row's: the engine's
	// cost with the protocol's ACKs per packet taken out.
	NsPerDatagram float64 `json:"client_cpu_ns_per_datagram"`
	DatagramRatio float64 `json:"datagram_ratio,omitempty"`
	Ratio         float64 `json:"ratio,omitempty"`
	// Over the runs (ScaleReport.Runs): the row is the run of the median
	// CPU per packet, Ratio the median of the runs' ratios (each against
	// its own run's one-flow row), RatioMin and RatioMax their spread,
	// Failed the runs that failed.
	RatioMin float64 `json:"ratio_min,omitempty"`
	RatioMax float64 `json:"ratio_max,omitempty"`
	Failed   int     `json:"failed_runs,omitempty"`
	Verdict  string  `json:"verdict"` // ok, above, ref, failed
	Error    string  `json:"error,omitempty"`
}

type scaleOpts struct {
	qps     []int
	runs    int // each row's, interleaved: 1, 100, ..., 1, 100, ...
	run     int // the run in progress, from 0
	rate    units.Rate
	seconds int
	profile string // the client children's CPU profiles: PREFIX-{roce,uet}-N.pprof
}

// profileArgs are a client child's arguments for its CPU profile: the
// first run's.
func (o scaleOpts) profileArgs(transport string, n int) []string {
	if o.profile == "" || o.run > 0 {
		return nil
	}
	return []string{"-cpuprofile", fmt.Sprintf("%s-%s-%d.pprof", o.profile, transport, n)}
}

// parseQPList reads "1,100,1000,10000".
func parseQPList(s string, max int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > max {
			return nil, fmt.Errorf("-scale-qps %q: %q: want a comma-separated list of 1..%d", s, f, max)
		}
		out = append(out, n)
	}
	return out, nil
}

// runScale runs the rows in a two-namespace lab of its own.
func runScale(ctx context.Context, o scaleOpts) (*ScaleReport, error) {
	o.runs = max(o.runs, 1)
	rep := &ScaleReport{RateBps: float64(o.rate), MessageBytes: scaleMessageBytes, Seconds: o.seconds, Goal: scaleGoal, Runs: o.runs}
	l, err := pairLab(0)
	if err != nil {
		return rep, err
	}
	defer closeLab(l)
	exe, err := os.Executable()
	if err != nil {
		return rep, err
	}
	var errs []error
	for _, tr := range []struct {
		what string // "QPs", "UET PDCs"
		rows *[]ScaleRow
		run  func(context.Context, string, *lab.Node, *lab.Node, int, scaleOpts) (ScaleRow, error)
	}{{"QPs", &rep.Rows, scaleRun}, {"UET PDCs", &rep.UETRows, uetScaleRun}} {
		// The runs interleaved, each judged against its own one-flow
		// row: the reference moves between runs (11.5-16 us a packet),
		// so a ratio is of two rows measured minutes apart at most.
		var runs [][]ScaleRow
		for r := range o.runs {
			if ctx.Err() != nil {
				break // a cancelled run is not a failed one
			}
			o.run = r
			var rows []ScaleRow
			for _, n := range o.qps {
				if ctx.Err() != nil {
					break
				}
				progress("scale: %d %s sharing %s for %d s (run %d of %d)", n, tr.what, o.rate, o.seconds, r+1, o.runs)
				row, err := tr.run(ctx, exe, l.Node("a"), l.Node("b"), n, o)
				if err != nil {
					row.Verdict, row.Error = "failed", err.Error()
					errs = append(errs, fmt.Errorf("%d %s, run %d: %w", n, tr.what, r+1, err))
				}
				rows = append(rows, row)
			}
			if len(rows) < len(o.qps) {
				break // cancelled within the run
			}
			judgeScale(rows)
			runs = append(runs, rows)
		}
		*tr.rows = mergeScaleRuns(runs)
	}
	return rep, errors.Join(errs...)
}

// mergeScaleRuns makes one row per N of the runs' (each judged): the run
// of the median CPU per packet, with the median of the runs' ratios and
// their least and most.
func mergeScaleRuns(runs [][]ScaleRow) []ScaleRow {
	if len(runs) == 0 {
		return nil
	}
	var out []ScaleRow
	for i := range runs[0] {
		var ok []ScaleRow
		var ratios []float64
		failed := 0
		for _, rs := range runs {
			if i >= len(rs) || rs[i].Error != "" {
				failed++
				continue
			}
			ok = append(ok, rs[i])
			if rs[i].Ratio > 0 {
				ratios = append(ratios, rs[i].Ratio)
			}
		}
		if len(ok) == 0 {
			row := runs[0][i]
			row.Failed = failed
			out = append(out, row)
			continue
		}
		slices.SortFunc(ok, func(a, b ScaleRow) int { return cmp.Compare(a.NsPerPacket, b.NsPerPacket) })
		row := ok[(len(ok)-1)/2]
		row.Failed = failed
		row.Ratio, row.RatioMin, row.RatioMax = 0, 0, 0
		if row.Verdict != "ref" {
			row.Verdict = "no reference" // every run's one-flow row failed
		}
		if len(ratios) > 0 {
			slices.Sort(ratios)
			row.Ratio = stats.NearestRank(ratios, 0.5)
			row.RatioMin, row.RatioMax = ratios[0], ratios[len(ratios)-1]
			row.Verdict = "ok"
			if row.Ratio > scaleGoal {
				row.Verdict = "above"
			}
		}
		out = append(out, row)
	}
	return out
}

// uetScaleRun runs one UET row: a server child with room for n PDCs, then
// a client child with n streams.
func uetScaleRun(ctx context.Context, exe string, a, b *lab.Node, n int, o scaleOpts) (ScaleRow, error) {
	row := ScaleRow{QPs: n}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(o.seconds+120)*time.Second)
	defer cancel()
	// pds's default idle timeout: a PDC's turn comes once per n packets
	// (10,000 PDCs at 400 Mbit/s: ~0.3 s), and the target keeps a PDC
	// four of its turns (host/pds targetExpiry).
	srv, err := startUETServer(rctx, b, exe, []string{uetChildArg, "-mode", "server", "-local", addrB.Addr().String(), "-max-pdcs", strconv.Itoa(n)})
	if err != nil {
		return row, err
	}
	out, stderr, runErr := runClient(rctx, a, exe, append([]string{uetChildArg, "-mode", "client", "-local", addrA.Addr().String(), "-server", addrB.Addr().String(),
		"-streams", strconv.Itoa(n), "-link-rate", o.rate.String(), "-seconds", strconv.Itoa(o.seconds), "-msg", strconv.Itoa(scaleMessageBytes)},
		o.profileArgs("uet", n)...)...)
	st, serr := srv.stop()
	res, err := parseChild(out, runErr, stderr)
	if err != nil {
		return row, err
	}
	if serr != nil {
		return row, serr
	}
	if st["verify_errors"] != 0 {
		return row, fmt.Errorf("uet server: %d verify errors", st["verify_errors"])
	}
	row.SetupSeconds, row.ClientRSSBytes, row.ServerRSSBytes = res.SetupSeconds, res.PeakRSSBytes, st["peak_rss_bytes"]
	row.GoodputBps, row.TxPackets, row.Retransmits = res.GoodputBps, res.TxPackets, res.Retransmits
	row.fillCosts(res)
	return row, nil
}

// scaleMessageBytes keeps every QP's server buffer at the 64 KiB minimum:
// 10,000 QPs register 640 MiB.
const scaleMessageBytes = 4096

// scaleRun runs one row: a server child allowing n QPs, then a client
// child with n.
func scaleRun(ctx context.Context, exe string, a, b *lab.Node, n int, o scaleOpts) (ScaleRow, error) {
	row := ScaleRow{QPs: n}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(o.seconds+120)*time.Second)
	defer cancel()
	cmd := b.Command(rctx, exe, childArg, "-mode", "server", "-bind", addrB.Addr().String(), "-max-qps", strconv.Itoa(n))
	var srvJSON strings.Builder
	cmd.Stdout = &srvJSON
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	srv, err := startServer(rctx, b, cmd, perf.DefaultPort, "server")
	if err != nil {
		return row, err
	}
	defer srv.stop()
	out, stderr, runErr := runClient(rctx, a, exe, append([]string{childArg, "-mode", "client", "-server", addrB.Addr().String(),
		"-qps", strconv.Itoa(n), "-rate", strconv.FormatFloat(float64(o.rate), 'f', 0, 64),
		"-seconds", strconv.Itoa(o.seconds), "-msg", strconv.Itoa(scaleMessageBytes)}, o.profileArgs("roce", n)...)...)
	res, err := parseChild(out, runErr, stderr)
	srv.stop()
	if err != nil {
		return row, fmt.Errorf("%w (server output: %s)", err, srv.output())
	}
	if err := srv.failed(); err != nil {
		return row, fmt.Errorf("server: %w", err)
	}
	row.SetupSeconds = res.SetupSeconds
	row.ClientRSSBytes = res.PeakRSSBytes
	var sr serverResult
	if err := json.Unmarshal([]byte(srvJSON.String()), &sr); err != nil {
		return row, fmt.Errorf("server output %q: %w", srvJSON.String(), err)
	}
	row.ServerRSSBytes = sr.PeakRSSBytes
	row.GoodputBps, row.TxPackets, row.Retransmits = res.GoodputBps, res.TxPackets, res.Retransmits
	row.fillCosts(res)
	return row, nil
}

// fillCosts fills the client's costs per data packet from its result.
func (row *ScaleRow) fillCosts(res childResult) {
	if res.TxPackets > 0 {
		row.RunNsPerPacket = (res.UserSeconds + res.SysSeconds) * 1e9 / float64(res.TxPackets)
		row.NsPerPacket = row.RunNsPerPacket
		if res.SteadyTxPackets > 0 {
			row.NsPerPacket = res.SteadyCPUSeconds * 1e9 / float64(res.SteadyTxPackets)
		}
		row.RxPerPacket = float64(res.ConnReceived) / float64(res.TxPackets)
		if res.SteadyCPUSeconds > 0 {
			row.GCPct = 100 * min(res.SteadyGCCPUSeconds/res.SteadyCPUSeconds, 1)
		}
		row.GCCycles = res.SteadyGCCycles
		row.NsPerDatagram = row.NsPerPacket / (1 + row.RxPerPacket)
	}
	if res.ConnDatagrams > 0 {
		row.GSOPct = 100 * float64(res.GSODatagrams) / float64(res.ConnDatagrams)
	}
	if res.GSOSends > 0 {
		row.SegmentsPerSend = float64(res.GSODatagrams) / float64(res.GSOSends)
	}
}

// judgeScale fills the per-QP memory and the ratios against the first
// row.
func judgeScale(rows []ScaleRow) {
	if len(rows) == 0 || rows[0].Error != "" {
		return
	}
	ref := rows[0]
	rows[0].Verdict = "ref"
	for i := 1; i < len(rows); i++ {
		row := &rows[i]
		if row.Error != "" {
			continue
		}
		if extra := row.QPs - ref.QPs; extra > 0 {
			row.ClientBytesPerQP = (float64(row.ClientRSSBytes) - float64(ref.ClientRSSBytes)) / float64(extra)
			row.ServerBytesPerQP = (float64(row.ServerRSSBytes) - float64(ref.ServerRSSBytes)) / float64(extra)
		}
		if ref.NsPerPacket > 0 {
			row.Ratio = row.NsPerPacket / ref.NsPerPacket
		}
		if ref.NsPerDatagram > 0 {
			row.DatagramRatio = row.NsPerDatagram / ref.NsPerDatagram
		}
		row.Verdict = "ok"
		if row.Ratio > scaleGoal {
			row.Verdict = "above"
		}
	}
}

// write prints the section.
func (r *ScaleReport) write(w io.Writer) {
	fmt.Fprintf(w, "\nscale: one RoCEv2 client agent, N QPs all active, --cc none, sharing %s (the client's port), %d B messages, %d s a row, %d runs interleaved\n",
		units.Rate(r.RateBps), r.MessageBytes, r.Seconds, r.Runs)
	r.writeRows(w, r.Rows, "QPs", "QP")
	if len(r.UETRows) > 0 {
		fmt.Fprintf(w, "\nscale, UET: one client endpoint, N streams all active (each its own job: N PDCs in one CCC, NSCC), sharing %s (its line rate), %d B messages, %d s a row, %d runs\n",
			units.Rate(r.RateBps), r.MessageBytes, r.Seconds, r.Runs)
		r.writeRows(w, r.UETRows, "PDCs", "PDC")
	}
	fmt.Fprintln(w, "setup: from the client's start until its agent (endpoint) held every QP (PDC); RSS: each process's peak resident memory (VmHWM);")
	fmt.Fprintln(w, "/QP: memory over the first row's, per extra QP (PDC); goodput in Mbit/s; GSO: the client's datagrams sent in UDP GSO sends,")
	fmt.Fprintln(w, "and their segments per send; rx/pkt: datagrams it received (ACKs, NAKs, CNPs) per data packet; ns/dgram: its CPU per datagram")
	fmt.Fprintln(w, "sent or received, and that over the first row's (the engine's cost, the protocol's ACKs per packet taken out; not the goal);")
	fmt.Fprintln(w, "GC: the Go runtime's estimate of its garbage collector's share of that CPU from every flow set up to time up, and its cycles;")
	fmt.Fprintln(w, "run ns/pkt: the client process's CPU (user+sys, getrusage) per data packet over its whole run, the side channel's setup and")
	fmt.Fprintln(w, "teardown of N flows included; cli ns/pkt: the same from every flow set up to the flows' time up (N flows active: the goal's);")
	fmt.Fprintln(w, "the row is the run of the median ns/pkt; ratio: the median of the runs' ratios, each over its own run's one-flow row, and")
	fmt.Fprintln(w, "their least-most.")
}

// writeRows prints one table of rows, each counting what (QPs, PDCs).
func (r *ScaleReport) writeRows(w io.Writer, rows []ScaleRow, what, one string) {
	fmt.Fprintf(w, "%8s  %9s  %12s  %12s  %10s  %10s  %10s  %11s  %6s  %14s  %8s  %10s  %10s  %7s  %11s  %s\n",
		what, "setup", "client RSS", "server RSS", "cli /"+one, "srv /"+one, "goodput", "GSO", "rx/pkt", "ns/dgram", "GC", "run ns/pkt", "cli ns/pkt", "ratio", "spread", "verdict (goal <= "+strconv.FormatFloat(r.Goal, 'f', 1, 64)+"x one "+one+"'s)")
	for _, row := range rows {
		if row.Error != "" {
			fmt.Fprintf(w, "%8d  failed: %s\n", row.QPs, row.Error)
			continue
		}
		ratio, spread := "-", "-"
		if row.Ratio > 0 {
			ratio = fmt.Sprintf("%.2fx", row.Ratio)
			spread = fmt.Sprintf("%.2f-%.2f", row.RatioMin, row.RatioMax)
		}
		verdict := row.Verdict
		if row.Failed > 0 {
			verdict += fmt.Sprintf(" (%d runs failed)", row.Failed)
		}
		perQP := func(v float64) string {
			if v == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f KiB", v/1024)
		}
		mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
		gso := fmt.Sprintf("%.0f%%", row.GSOPct)
		if row.SegmentsPerSend > 0 {
			gso += fmt.Sprintf(" x%.1f", row.SegmentsPerSend)
		}
		dgram := fmt.Sprintf("%.0f", row.NsPerDatagram)
		if row.DatagramRatio > 0 {
			dgram += fmt.Sprintf(" %.2fx", row.DatagramRatio)
		}
		gc := fmt.Sprintf("%.0f%% x%d", row.GCPct, row.GCCycles)
		fmt.Fprintf(w, "%8d  %8.2fs  %12s  %12s  %10s  %10s  %9.0fM  %11s  %6.2f  %14s  %8s  %10.0f  %10.0f  %7s  %11s  %s\n",
			row.QPs, row.SetupSeconds, mib(row.ClientRSSBytes), mib(row.ServerRSSBytes),
			perQP(row.ClientBytesPerQP), perQP(row.ServerBytesPerQP), row.GoodputBps/1e6, gso, row.RxPerPacket, dgram, gc, row.RunNsPerPacket, row.NsPerPacket, ratio, spread, verdict)
	}
}
