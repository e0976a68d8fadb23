package perf

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/pds"
)

// protocolUET is test_start.protocol of a UET run.
const protocolUET = "UET"

// UET's columns; values line up under the names (the RoCEv2 lines' Rc
// column holds the CCC's window).
const (
	uetClientHeader  = "[ ID] Interval           Transfer     Bitrate         cwnd          Retr"
	uetSummaryHeader = "[ ID] Interval           Transfer     Bitrate                       Retr"
	uetServerHeader  = "[ ID] Interval           Transfer     Bitrate         ECN-CE     Dup"
)

// uetTestLine is "Starting Test: …" of a UET run.
func uetTestLine(ts *TestStart) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Starting Test: protocol: UET, %d streams, %d byte messages, omitting %g seconds, ", ts.NumStreams, ts.Blksize, ts.Omit)
	if ts.Bytes > 0 {
		fmt.Fprintf(&b, "%d bytes to send, ", ts.Bytes)
	} else {
		fmt.Fprintf(&b, "%g second test, ", ts.Duration)
	}
	rtt := time.Duration(ts.BaseRTTUs * float64(time.Microsecond))
	fmt.Fprintf(&b, "mtu %d, dscp %d, cc %s (line rate %s, base_rtt %v)", ts.MTU, ts.DSCP, ts.CC,
		strings.TrimSpace(FormatBitrate(float64(ts.LineRateBps))), rtt)
	if ts.LB != "" {
		fmt.Fprintf(&b, ", lb %s", ts.LB)
	}
	if ts.Verify {
		b.WriteString(", verify")
	}
	b.WriteString(rawForText(ts.RawForPorts))
	return b.String()
}

// formatCwnd prints a window, "-" for none (the CCC is gone).
func formatCwnd(b uint64) string {
	if b == 0 {
		return "-"
	}
	return strings.TrimSpace(FormatBytes(float64(b)))
}

// formatCredit prints RCCC credit, which is negative while a CCC waits
// for a grant it already spent: "12.0 KBytes", "-3.00 KBytes".
func formatCredit(b int) string {
	if b < 0 {
		return "-" + strings.TrimSpace(FormatBytes(float64(-b)))
	}
	return strings.TrimSpace(FormatBytes(float64(b)))
}

// intervalCredit is an interval line's credit column: nothing without
// RCCC.
func intervalCredit(b *int) string {
	if b == nil {
		return ""
	}
	return "  credit " + formatCredit(*b)
}

// writeUETIntervalText prints one interval: a line per stream with the
// CCC's window, a [SUM] line when there are several. Retransmissions are
// the endpoint's: on the [SUM] line, or the stream's when it is alone.
func writeUETIntervalText(w io.Writer, iv *Interval) {
	omit := func(o bool) string {
		if o {
			return "  (omitted)"
		}
		return ""
	}
	many := len(iv.Streams) > 1
	for _, s := range iv.Streams {
		retr := fmt.Sprint(s.Retransmits)
		if many {
			retr = ""
		}
		line := fmt.Sprintf("%s  %-13s %5s%s%s", intervalPrefix(streamID(s.ID), s.Start, s.End, s.Bytes, s.BitsPerSecond),
			formatCwnd(s.CwndBytes), retr, intervalCredit(s.CreditBytes), omit(s.Omitted))
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	if many {
		s := iv.Sum
		fmt.Fprintf(w, "%s  %-13s %5d%s%s\n", intervalPrefix("[SUM]", s.Start, s.End, s.Bytes, s.BitsPerSecond),
			formatCwnd(s.CwndBytes), s.Retransmits, intervalCredit(s.CreditBytes), omit(s.Omitted))
		fmt.Fprintln(w, sepLine)
	}
}

// writeUETSummaryText prints the sender and receiver lines per stream, the
// [SUM] lines, the transport's counters and the CPU time.
func writeUETSummaryText(w io.Writer, r *Report) {
	e := &r.End
	fmt.Fprintln(w, sepLine)
	fmt.Fprintln(w, uetSummaryHeader)
	many := len(e.Streams) > 1
	haveRcv := e.UET != nil && e.UET.Receiver != nil
	for _, s := range e.Streams {
		snd, rcv := &s.Sender, &s.Receiver
		retr := fmt.Sprint(snd.Retransmits)
		if many {
			retr = ""
		}
		fmt.Fprintf(w, "%s  %-13s %5s  sender\n", intervalPrefix(streamID(snd.ID), snd.Start, snd.End, snd.Bytes, snd.BitsPerSecond), "", retr)
		if haveRcv {
			fmt.Fprintf(w, "%s  %-13s %5s  receiver\n", intervalPrefix(streamID(rcv.ID), rcv.Start, rcv.End, rcv.Bytes, rcv.BitsPerSecond), "", "")
		}
	}
	if many {
		fmt.Fprintf(w, "%s  %-13s %5d  sender\n", intervalPrefix("[SUM]", e.SumSent.Start, e.SumSent.End, e.SumSent.Bytes, e.SumSent.BitsPerSecond), "", e.SumSent.Retransmits)
		if haveRcv {
			fmt.Fprintf(w, "%s  %-13s %5s  receiver\n", intervalPrefix("[SUM]", e.SumReceived.Start, e.SumReceived.End, e.SumReceived.Bytes, e.SumReceived.BitsPerSecond), "", "")
		}
	}
	if !haveRcv {
		fmt.Fprintln(w, "(no receiver lines: the server's counters did not arrive)")
	}
	if e.UET != nil {
		fmt.Fprintln(w, uetLine(e.UET))
		if haveRcv {
			fmt.Fprintln(w, uetReceiverLine(e.UET.Receiver, r.Start.TestStart.Verify))
		}
		if e.UET.TraceDropped > 0 {
			fmt.Fprintf(w, "ccc trace: %d transition(s) not shown (the trace fell behind)\n", e.UET.TraceDropped)
		}
	}
	fmt.Fprintf(w, "CPU Utilization: local %.1f%% (%.1f%%u/%.1f%%s)\n", e.CPU.HostTotal, e.CPU.HostUser, e.CPU.HostSystem)
}

// byName prints counts by name, sorted: "PKT_NOT_RCVD:2,TRIMMED:1", or
// "none".
func byName(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// uetLine is the sender's transport in one line: retransmissions and what
// caused them, the probes, the NACKs by code, the CCC's transitions and
// its window at the end.
func uetLine(u *UETEnd) string {
	var b strings.Builder
	b.WriteString("uet:")
	if c := u.Client; c != nil {
		fmt.Fprintf(&b, " retransmits=%d timeouts=%d inferred_losses=%d probes_sent=%d ecn_echoes=%d nacks_received=%s ccc_transitions=%s",
			c.Retransmits, c.Timeouts, c.InferredLosses, c.ProbesSent, c.ECNEchoes, byName(c.NacksReceived), byName(c.Transitions))
	}
	credit := false // the run used RCCC: a CCC with credit, or credit counted
	for _, c := range u.CCCs {
		credit = credit || c.RCCC != nil
	}
	if c := u.Client; c != nil && (credit || c.CreditRequestsSent+c.CreditsReceived+c.StaleCredits > 0) {
		fmt.Fprintf(&b, " credit_requests_sent=%d credits_received=%d stale_credits=%d", c.CreditRequestsSent, c.CreditsReceived, c.StaleCredits)
	}
	for _, c := range u.CCCs {
		if c.RCCC == nil || c.NSCC != nil {
			fmt.Fprintf(&b, " cwnd=%s", formatCwnd(uint64(c.CwndBytes)))
		}
		if n := c.NSCC; n != nil {
			fmt.Fprintf(&b, " (nscc: decreases=%d quick_adapts=%d nack_decreases=%d losses=%d)", n.Decreases, n.QuickAdapts, n.NackDecreases, n.Losses)
		}
		if r := c.RCCC; r != nil {
			fmt.Fprintf(&b, " credit=%s (rccc: speculating=%t credit_requests=%d credits=%d duplicate_credits=%d stale_credits=%d credit_bytes=%d clamped_bytes=%d sent_bytes=%d speculative_bytes=%d unused_speculative_bytes=%d overdrawn=%d)",
				formatCredit(r.Credit), r.Speculating, r.CreditRequests, r.Credits, r.DuplicateCredits, r.StaleCredits, r.CreditBytes, r.ClampedBytes,
				r.SentBytes, r.SpeculativeBytes, r.UnusedSpeculative, r.Overdrawn)
		}
	}
	return b.String()
}

// uetReceiverLine is the server's PDCs of the session, summed.
func uetReceiverLine(rs []UETReceiverStats, verify bool) string {
	var t pds.Received
	for _, s := range rs {
		t.Add(s.Received)
	}
	line := fmt.Sprintf("receiver: messages=%d", t.Messages)
	if verify {
		line += fmt.Sprintf(" verify_errors=%d", t.VerifyErrors)
	}
	return line + fmt.Sprintf(" duplicates=%d out_of_order=%d ce_received=%d", t.Duplicates, t.OutOfOrder, t.CEReceived)
}

// traceLine prints one CCC transition: "[ccc 1]   0.000123 s  IDLE -> ACTIVE
// (198.18.0.2 -> 198.18.0.1 tc 26, 1 PDC)".
func traceLine(ev *CCCEvent) string {
	pdcs := "PDCs"
	if ev.PDCs == 1 {
		pdcs = "PDC"
	}
	return fmt.Sprintf("[ccc %d] %10.6f s  %s -> %s (%s -> %s tc %d, %d %s)", ev.CCC, ev.Time, ev.From, ev.To, ev.Src, ev.Dst, ev.TC, ev.PDCs, pdcs)
}

// writeUETText is WriteText of a UET report.
func (r *Report) writeUETText(w io.Writer) {
	writeStartText(w, r)
	if len(r.Intervals) > 0 {
		fmt.Fprintln(w, uetClientHeader)
	}
	for i := range r.Intervals {
		writeUETIntervalText(w, &r.Intervals[i])
	}
	if r.End.UET != nil {
		for i := range r.End.UET.Trace {
			fmt.Fprintln(w, traceLine(&r.End.UET.Trace[i]))
		}
	}
	writeUETSummaryText(w, r)
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
}
