package perf

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/sidechan"
)

// iperf3's adaptive units (src/units.c unit_snprintf): bytes 1024-based,
// bits 1000-based, printed to fit four places.
var (
	byteLabels = []string{"Bytes", "KBytes", "MBytes", "GBytes", "TBytes"}
	bitLabels  = []string{"bits", "Kbits", "Mbits", "Gbits", "Tbits"}
)

func iperfUnit(v, base float64, labels []string) string {
	i := 0
	for v >= base && i < len(labels)-1 {
		v /= base
		i++
	}
	switch {
	case v < 9.995:
		return fmt.Sprintf("%4.2f %s", v, labels[i])
	case v < 99.95:
		return fmt.Sprintf("%4.1f %s", v, labels[i])
	}
	return fmt.Sprintf("%4.0f %s", v, labels[i])
}

// FormatBytes prints a byte count as iperf3 does: "112 MBytes", "1.09
// GBytes" (K, M, G = 1024, 1024², 1024³).
func FormatBytes(b float64) string { return iperfUnit(b, 1024, byteLabels) }

// FormatBitrate prints bits per second as iperf3 does: "941 Mbits/sec"
// (K, M, G = 1000, 1000², 1000³).
func FormatBitrate(bps float64) string { return iperfUnit(bps, 1000, bitLabels) + "/sec" }

const (
	sepLine  = "- - - - - - - - - - - - - - - - - - - - - - - - -"
	dashLine = "-----------------------------------------------------------"
	// The client's columns; values line up under the names.
	clientHeader = "[ ID] Interval           Transfer     Bitrate         Rc                α      CNPs   Retr"
	serverHeader = "[ ID] Interval           Transfer     Bitrate         ECN-CE   CNPs sent"
)

func streamID(id uint32) string { return fmt.Sprintf("[%3d]", id) }

// intervalPrefix is "[ 17]   0.00-1.00   sec   112 MBytes   941 Mbits/sec".
func intervalPrefix(id string, start, end float64, bytes uint64, bps float64) string {
	return fmt.Sprintf("%s %6.2f-%-6.2f sec  %s  %s", id, start, end, FormatBytes(float64(bytes)), FormatBitrate(bps))
}

func formatRc(cc string, bps uint64) string {
	if cc == string(agent.CCNone) && bps == 0 {
		return "unpaced"
	}
	return FormatBitrate(float64(bps))
}

func formatAlpha(cc string, a float64) string {
	if cc == string(agent.CCNone) {
		return "    -"
	}
	return fmt.Sprintf("%5.3f", a)
}

// writeIntervalText prints one interval: a line per QP, a [SUM] line when
// there are several, and iperf3's separator.
func writeIntervalText(w io.Writer, iv *Interval, cc string) {
	omit := func(o bool) string {
		if o {
			return "  (omitted)"
		}
		return ""
	}
	for _, s := range iv.Streams {
		fmt.Fprintf(w, "%s  %-16s %5s %5d  %5d%s\n",
			intervalPrefix(streamID(s.ID), s.Start, s.End, s.Bytes, s.BitsPerSecond),
			formatRc(cc, s.RcBps), formatAlpha(cc, s.Alpha), s.CNPHandled+s.CNPIgnored, s.Retransmits, omit(s.Omitted))
	}
	if len(iv.Streams) > 1 {
		s := iv.Sum
		fmt.Fprintf(w, "%s  %-16s %5s %5d  %5d%s\n",
			intervalPrefix("[SUM]", s.Start, s.End, s.Bytes, s.BitsPerSecond),
			formatRc(cc, s.RcBps), "", s.CNPHandled+s.CNPIgnored, s.Retransmits, omit(s.Omitted))
		fmt.Fprintln(w, sepLine)
	}
}

// writeStartText prints iperf3's preamble: where it connects, each QP pair
// and the test parameters.
func writeStartText(w io.Writer, r *Report) {
	st := &r.Start
	fmt.Fprintf(w, "Connecting to host %s, port %d\n", st.ConnectingTo.Host, st.ConnectingTo.Port)
	for i, c := range st.Connected {
		if st.TestStart.Protocol == protocolUET {
			fmt.Fprintf(w, "%s local %s port %d pdc %d job %#x connected to %s port %d\n",
				streamID(uint32(i+1)), c.LocalHost, c.LocalPort, c.PDC, c.JobID, c.RemoteHost, c.RemotePort)
			continue
		}
		fmt.Fprintf(w, "%s local %s port %d qpn %#x (source port %d) connected to %s port %d qpn %#x\n",
			streamID(c.QPN), c.LocalHost, c.LocalPort, c.QPN, c.SourcePort, c.RemoteHost, c.RemotePort, c.RemoteQPN)
	}
	fmt.Fprintln(w, testLine(&st.TestStart))
}

func testLine(ts *TestStart) string {
	if ts.Protocol == protocolUET {
		return uetTestLine(ts)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Starting Test: protocol: %s, %d QPs, %d byte messages, omitting %g seconds, ", ts.Protocol, ts.NumStreams, ts.Blksize, ts.Omit)
	if ts.Bytes > 0 {
		fmt.Fprintf(&b, "%d bytes to send, ", ts.Bytes)
	} else {
		fmt.Fprintf(&b, "%g second test, ", ts.Duration)
	}
	fmt.Fprintf(&b, "op %s, mtu %d, dscp %d, cc %s", ts.Op, ts.MTU, ts.DSCP, ts.CC)
	switch {
	case ts.CC == string(agent.CCDCQCN):
		fmt.Fprintf(&b, " (profile %s, line rate %s)", ts.Profile, strings.TrimSpace(FormatBitrate(float64(ts.LineRateBps))))
	case ts.LineRateBps > 0:
		fmt.Fprintf(&b, " (paced at %s per QP)", strings.TrimSpace(FormatBitrate(float64(ts.LineRateBps))))
	default:
		b.WriteString(" (unpaced)")
	}
	if ts.Verify {
		b.WriteString(", verify")
	}
	b.WriteString(rawForText(ts.RawForPorts))
	return b.String()
}

// rawForText says why --send auto sent raw: "" when it did not.
func rawForText(devs []string) string {
	if len(devs) == 0 {
		return ""
	}
	return fmt.Sprintf(", send raw (a port is attached here on %s)", strings.Join(devs, ", "))
}

// writeSummaryText prints iperf3's sender and receiver lines per QP, the
// [SUM] lines and the NIC counters.
func writeSummaryText(w io.Writer, r *Report) {
	e := &r.End
	fmt.Fprintln(w, sepLine)
	fmt.Fprintln(w, "[ ID] Interval           Transfer     Bitrate                         CNPs   Retr")
	many := len(e.Streams) > 1
	haveRcv := len(e.Counters.Server) > 0
	for _, s := range e.Streams {
		snd, rcv := &s.Sender, &s.Receiver
		fmt.Fprintf(w, "%s  %-16s %5s %5d  %5d  sender\n",
			intervalPrefix(streamID(snd.ID), snd.Start, snd.End, snd.Bytes, snd.BitsPerSecond), "", "",
			snd.RPCNPHandled+snd.RPCNPIgnored, snd.Retransmits)
		if haveRcv {
			fmt.Fprintf(w, "%s  %-16s %5s %5s  %5s  receiver\n",
				intervalPrefix(streamID(rcv.ID), rcv.Start, rcv.End, rcv.Bytes, rcv.BitsPerSecond), "", "", "", "")
		}
	}
	if many {
		sent, _ := e.totals()
		fmt.Fprintf(w, "%s  %-16s %5s %5d  %5d  sender\n",
			intervalPrefix("[SUM]", e.SumSent.Start, e.SumSent.End, e.SumSent.Bytes, e.SumSent.BitsPerSecond), "", "",
			sent.RPCNPHandled+sent.RPCNPIgnored, e.SumSent.Retransmits)
		if haveRcv {
			fmt.Fprintf(w, "%s  %-16s %5s %5s  %5s  receiver\n",
				intervalPrefix("[SUM]", e.SumReceived.Start, e.SumReceived.End, e.SumReceived.Bytes, e.SumReceived.BitsPerSecond), "", "", "", "")
		}
	}
	if !haveRcv {
		fmt.Fprintln(w, "(no receiver lines: the server's counters did not arrive; the np_* and responder counters below are 0)")
	}
	fmt.Fprintln(w, countersLine(e))
	if extra := dropsLine(e); extra != "" {
		fmt.Fprintln(w, extra)
	}
	fmt.Fprintf(w, "CPU Utilization: local %.1f%% (%.1f%%u/%.1f%%s)\n", e.CPU.HostTotal, e.CPU.HostUser, e.CPU.HostSystem)
}

// countersLine prints the eight counters people grep, each from the end
// that counts it as mlx5 does: the notification point and the responder
// (out_of_sequence, duplicate_request) at the server, the reaction point
// and the requester (packet_seq_err, local_ack_timeout_err) at the client.
func countersLine(e *End) string {
	snd, rcv := e.totals()
	return fmt.Sprintf("counters: np_cnp_sent=%d np_ecn_marked_roce_packets=%d rp_cnp_handled=%d rp_cnp_ignored=%d "+
		"out_of_sequence=%d packet_seq_err=%d local_ack_timeout_err=%d duplicate_request=%d",
		rcv.NPCNPSent, rcv.NPECNMarkedRoCEPackets, snd.RPCNPHandled, snd.RPCNPIgnored,
		rcv.OutOfSequence, snd.PacketSeqErr, snd.LocalAckTimeoutErr, rcv.DuplicateRequest)
}

// dropsLine lists what went wrong, if anything did.
func dropsLine(e *End) string {
	_, rcv := e.totals()
	c := &e.Counters.Client
	var parts []string
	add := func(name string, v uint64) {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, v))
		}
	}
	add("verify_errors", rcv.VerifyErrors)
	add("remote_access_err", rcv.RemoteAccessErr+c.RemoteAccessErr)
	add("invalid_request", rcv.InvalidRequest+c.InvalidRequest)
	add("client_malformed", c.Malformed)
	add("client_icrc_errors", c.ICRCErrors)
	add("client_unknown_qp", c.UnknownQP)
	add("client_send_errors", c.SendErrors)
	add("client_pkey_violations", c.PKeyViolations)
	add("client_neighbor_resolves", c.NeighborResolves)
	add("client_udp_recv_buffer_drops", e.Counters.ClientUDP.RecvBufferDrops)
	if len(parts) == 0 {
		return ""
	}
	return "errors: " + strings.Join(parts, " ")
}

// serverAgentLine lists what the server's agent dropped before any QP and
// the sessions it refused or cut, since it started; only non-zero causes.
func serverAgentLine(sa *ServerAgent) string {
	if sa == nil {
		return ""
	}
	var l serverLine
	c := &sa.AgentCounters
	l.add("malformed", c.Malformed)
	l.add("icrc_errors", c.ICRCErrors)
	l.add("unknown_qp", c.UnknownQP)
	l.add("wrong_peer", c.WrongPeer)
	l.add("pkey_violations", c.PKeyViolations)
	l.add("neighbor_resolves", c.NeighborResolves)
	l.add("unsupported_opcode", c.Unsupported)
	l.add("send_errors", c.SendErrors)
	l.add("ppfc_received_stop", c.PPFCReceivedStop)
	l.add("ppfc_received_resume", c.PPFCReceivedResume)
	l.add("ppfc_received_alarm", c.PPFCReceivedAlarm)
	l.add("ppfc_received_hold", c.PPFCReceivedHold)
	l.add("ppfc_ignored_source", c.PPFCIgnoredSource)
	l.add("ppfc_ignored_destination", c.PPFCIgnoredDestination)
	return l.String(&sa.SideChannel.Stats)
}

// serverLine is a server's "server since start: …" line, RoCEv2's and
// UET's: its non-zero counters, then the side channel's refused and
// aborted sessions by cause.
type serverLine struct{ parts []string }

func (l *serverLine) add(name string, v uint64) {
	if v != 0 {
		l.parts = append(l.parts, fmt.Sprintf("%s=%d", name, v))
	}
}

func (l *serverLine) addText(part string) { l.parts = append(l.parts, part) }

func (l *serverLine) String(side *sidechan.Stats) string {
	byCause := func(name string, m map[string]uint64) {
		var n uint64
		var each []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if m[k] > 0 {
				n += m[k]
				each = append(each, fmt.Sprintf("%s=%d", k, m[k]))
			}
		}
		if n > 0 {
			l.parts = append(l.parts, fmt.Sprintf("%s=%d (%s)", name, n, strings.Join(each, " ")))
		}
	}
	byCause("refused_sessions", side.Refused)
	byCause("aborted_sessions", side.Aborted)
	if len(l.parts) == 0 {
		return "server since start: no drops, no refused sessions"
	}
	return "server since start: " + strings.Join(l.parts, " ")
}

// writePerftestPreamble prints perftest's address lines for each QP pair.
func writePerftestPreamble(w io.Writer, r *Report) {
	ts := &r.Start.TestStart
	op := "RDMA_Write"
	if ts.Op == agent.OpSend.String() {
		op = "Send"
	}
	fmt.Fprintln(w, strings.Repeat("-", 87))
	fmt.Fprintf(w, "%27s%s BW Test\n", "", op)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", ts.NumStreams)
	fmt.Fprintf(w, " Connection type : RC\t\tUsing SRQ      : OFF\n")
	fmt.Fprintf(w, " Mtu             : %d[B]\n", ts.MTU)
	fmt.Fprintf(w, " Link type       : Ethernet\n")
	fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	fmt.Fprintln(w, strings.Repeat("-", 87))
	for _, c := range r.Start.Connected {
		fmt.Fprintf(w, " local address: LID 0000 QPN %#06x PSN %#06x RKey %#08x VAddr %#016x\n", c.QPN, c.PSN, c.RKey, c.VAddr)
		fmt.Fprintf(w, " GID: %s\n", perftestGID(c.LocalHost))
	}
	for _, c := range r.Start.Connected {
		fmt.Fprintf(w, " remote address: LID 0000 QPN %#06x PSN %#06x RKey %#08x VAddr %#016x\n", c.RemoteQPN, c.RemotePSN, c.RemoteRKey, c.RemoteVAddr)
		fmt.Fprintf(w, " GID: %s\n", perftestGID(c.RemoteHost))
	}
	fmt.Fprintln(w, strings.Repeat("-", 87))
}

// perftestGID prints an address as perftest prints a RoCEv2 GID: the
// IPv4-mapped IPv6 address, bytes in decimal, colon separated.
func perftestGID(host string) string {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	b := a.As16() // IPv4 comes out mapped: ::ffff:a.b.c.d
	parts := make([]string, 16)
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02d", x)
	}
	return strings.Join(parts, ":")
}

// writePerftestSummary prints ib_write_bw's result table.
func writePerftestSummary(w io.Writer, p *Perftest) {
	fmt.Fprintln(w, strings.Repeat("-", 87))
	fmt.Fprintln(w, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	fmt.Fprintf(w, " %-10d %-10d     %-18.2f %-20.2f %-.6f\n", p.Bytes, p.Iterations, p.BWPeakMBps, p.BWAvgMBps, p.MsgRateMpps)
	fmt.Fprintln(w, strings.Repeat("-", 87))
}

// WriteText prints the whole report as the client prints it over a run:
// preamble, intervals, summary (and perftest's table if it has one).
func (r *Report) WriteText(w io.Writer) {
	if r.Start.TestStart.Protocol == protocolUET {
		r.writeUETText(w)
		return
	}
	writeStartText(w, r)
	if r.End.Perftest != nil {
		writePerftestPreamble(w, r)
	}
	if len(r.Intervals) > 0 {
		fmt.Fprintln(w, clientHeader)
	}
	for i := range r.Intervals {
		writeIntervalText(w, &r.Intervals[i], r.Start.TestStart.CC)
	}
	writeSummaryText(w, r)
	if r.End.Perftest != nil {
		writePerftestSummary(w, r.End.Perftest)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
}

// WriteJSON prints the report as indented JSON, like iperf3 -J.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "\t")
	return enc.Encode(r)
}
