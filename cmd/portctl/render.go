package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// classLabel is "tc3 (roce)", or "tc3" when the class has no name of its own.
func classLabel(c qdisc.ClassID, name string) string {
	id := fmt.Sprintf("tc%d", c)
	if name == "" || name == id {
		return id
	}
	return id + " (" + name + ")"
}

func devLabel(dev, ns string) string {
	if ns == "" {
		return dev
	}
	return dev + " (netns " + ns + ")"
}

// dscpLines renders the DSCP map compactly: the class most DSCPs go to is
// "other", and only the exceptions are listed, one line per class.
func dscpLines(cfg *qdisc.Config) []string {
	var count [qdisc.NumClasses]int
	for _, c := range cfg.DSCPClass {
		if int(c) < qdisc.NumClasses {
			count[c]++
		}
	}
	common := qdisc.ClassID(0)
	for c := range count {
		if count[c] > count[common] {
			common = qdisc.ClassID(c)
		}
	}
	name := func(c qdisc.ClassID) string {
		if int(c) < qdisc.NumClasses {
			return classLabel(c, cfg.Classes[c].Name)
		}
		return fmt.Sprintf("tc%d", c)
	}
	var lines []string
	for c := range qdisc.NumClasses {
		if qdisc.ClassID(c) == common {
			continue
		}
		var ds []int
		for d, dc := range cfg.DSCPClass {
			if int(dc) == c {
				ds = append(ds, d)
			}
		}
		if len(ds) > 0 {
			lines = append(lines, fmt.Sprintf("dscp %s -> %s", qdisc.DSCPRuns(ds, ",", "-"), name(qdisc.ClassID(c))))
		}
	}
	lines = append(lines, fmt.Sprintf("dscp other -> %s", name(common)))
	lines = append(lines, fmt.Sprintf("non-ip -> %s", name(cfg.DefaultClass)))
	return lines
}

// renderShow prints the effective configuration of a port.
func renderShow(w io.Writer, info qdisc.Info, cfg *qdisc.Config) {
	shaping := "htb"
	if !info.HTB {
		shaping = "none"
	}
	fmt.Fprintf(w, "port %s  rate %s  queue %s  attach %s  shaping %s\n",
		devLabel(info.Dev, info.Netns), cfg.Rate, info.Mode, info.Attach, shaping)
	if info.PeerDev != "" {
		fmt.Fprintf(w, "  peer %s (dequeue hook)\n", devLabel(info.PeerDev, info.PeerNetns))
	}
	if l := departureText(info); l != "" {
		fmt.Fprintf(w, "  %s\n", l)
	}
	renderClasses(w, cfg)
}

// renderConfig prints a configuration no port holds (show without --dev).
func renderConfig(w io.Writer, src string, cfg *qdisc.Config) {
	fmt.Fprintf(w, "config: %s  rate %s  (no port)\n", src, cfg.Rate)
	renderClasses(w, cfg)
}

// renderClasses prints the DSCP map and a line per class.
func renderClasses(w io.Writer, cfg *qdisc.Config) {
	for _, l := range dscpLines(cfg) {
		fmt.Fprintf(w, "  %s\n", l)
	}
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	for i := range cfg.Classes {
		cc := &cfg.Classes[i]
		var extra []string
		switch {
		case cc.Strict:
			extra = append(extra, "strict")
		case cfg.TrimSource(qdisc.ClassID(i)):
			extra = append(extra, "strict (trim class)")
		}
		if cc.WREDDrop {
			extra = append(extra, "wred-drop")
		}
		if cc.Rate != 0 {
			extra = append(extra, "rate "+cc.Rate.String())
		}
		if cc.XoffBytes != 0 {
			extra = append(extra, fmt.Sprintf("ppfc xoff %s xon %s", cc.XoffBytes, cc.XonBytes))
			if cc.AlarmBytes != 0 {
				extra = append(extra, fmt.Sprintf("alarm %s", cc.AlarmBytes))
			}
		}
		if cc.Remark {
			extra = append(extra, fmt.Sprintf("remark dscp %d", cc.RemarkDSCP))
		}
		if cc.TrimBytes != 0 {
			extra = append(extra, fmt.Sprintf("trim %s dscp %d -> tc%d", cc.TrimBytes, cc.TrimDSCP, cc.TrimClass))
		}
		if cc.FlowQueues != 0 {
			extra = append(extra, fmt.Sprintf("flows %d", cc.FlowQueues))
		}
		fmt.Fprintf(tw, "class %s\tlimit %s\tecn %s\t%s\n",
			classLabel(qdisc.ClassID(i), cc.Name), cc.LimitBytes, cc.ECNText(), strings.Join(extra, " "))
	}
	tw.Flush()
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		io.WriteString(w, strings.TrimRight(l, " \n"))
		if strings.HasSuffix(l, "\n") {
			io.WriteString(w, "\n")
		}
	}
}

// departureText says where the port counts departures, and what that means
// for its backlog and sojourn.
func departureText(info qdisc.Info) string {
	switch info.Departure {
	case qdisc.DepartXmit:
		via := "its own program on the tracepoint"
		if info.XmitDispatchNote != "" {
			via += "; the dispatcher: " + info.XmitDispatchNote
		}
		if info.XmitDispatched {
			via = "the machine's xmit dispatcher"
		}
		return fmt.Sprintf("departure xmit (%s): counted as HTB hands packets to %s; the host queue to the peer is counted apart", via, info.Dev)
	case qdisc.DepartPeerIngress:
		why := ""
		if info.DepartureNote != "" {
			why = " (" + info.DepartureNote + ")"
		}
		return "departure peer-ingress" + why + ": backlog and sojourn include the host queue between HTB and the peer"
	}
	return ""
}

// showJSON is the -j form of show.
type showJSON struct {
	Port   qdisc.Info   `json:"port"`
	Config qdisc.Config `json:"config"`
}

// statsJSON is the -j form of stats: qdisc.Stats plus the kernel's
// counters of the root qdisc.
type statsJSON struct {
	Dev   string `json:"dev"`
	Netns string `json:"netns,omitempty"`
	qdisc.Stats
	Qdisc *qdisc.QdiscCounters `json:"qdisc,omitempty"`
}

// active reports whether a class has seen traffic or holds a backlog.
func active(c *qdisc.ClassStats) bool {
	return c.EnqueuedPackets != 0 || c.BacklogPackets != 0 || c.MaxBacklogPackets != 0
}

// renderStats prints counters like tc -s: one block per class that has
// seen traffic (all classes with all), then the port and qdisc counters.
func renderStats(w io.Writer, info qdisc.Info, st *qdisc.Stats, q *qdisc.QdiscCounters, all bool) {
	dep := ""
	if info.Departure != "" {
		dep = "  departure " + string(info.Departure)
	}
	fmt.Fprintf(w, "port %s  queue %s%s  at %s\n", devLabel(info.Dev, info.Netns), info.Mode, dep, st.Time.Format("15:04:05.000"))
	shown := 0
	for i := range st.Classes {
		c := &st.Classes[i]
		if !all && !active(c) {
			continue
		}
		shown++
		renderClass(w, c)
	}
	if shown == 0 {
		fmt.Fprintf(w, "no class has seen traffic yet (-a shows all classes)\n")
	}
	p := &st.Port
	fmt.Fprintf(w, "port counters: ipv4 %d ipv6 %d vlan %d non-ip %d malformed %d pkt\n",
		p.IPv4Packets, p.IPv6Packets, p.VLANPackets, p.NonIPPackets, p.MalformedPackets)
	fmt.Fprintf(w, " unaccounted %d bytes %d pkt (marked CE %d, dropped %d)  dequeue-unstamped %d pkt\n",
		p.UnaccountedBytes, p.UnaccountedPackets, p.UnaccountedCEMarkedPackets, p.UnaccountedDroppedPackets, p.DequeueUnstampedPackets)
	if info.Departure == qdisc.DepartXmit || p.LateDeparturePackets != 0 {
		fmt.Fprintf(w, " late departures %d pkt (counted at the peer; handoff slot busy %d), stale handoffs %d\n",
			p.LateDeparturePackets, p.HandoffBusyPackets, p.HandoffStalePackets)
	}
	if p.PPFCErrors() != 0 {
		fmt.Fprintf(w, " ppfc not sent: no route %d, no neighbour %d, source behind this port %d, clone failed %d, rewrite failed %d\n",
			p.PPFCNoRoute, p.PPFCNoNeighbour, p.PPFCSelf, p.PPFCRedirectErrors, p.PPFCBuildErrors)
	}
	if q != nil {
		kind := q.Kind
		if kind == "" {
			kind = "none"
		}
		fmt.Fprintf(w, "qdisc %s root: Sent %d bytes %d pkt (dropped %d, overlimits %d) backlog %db %dp\n",
			kind, q.SentBytes, q.SentPackets, q.Drops, q.Overlimits, q.BacklogBytes, q.BacklogPackets)
	}
}

func renderClass(w io.Writer, c *qdisc.ClassStats) {
	fmt.Fprintf(w, "class %s\n", classLabel(c.Class, c.Name))
	trimFull := ""
	if c.TrimDroppedPackets != 0 {
		trimFull = fmt.Sprintf(", trim class full %d", c.TrimDroppedPackets)
	}
	fmt.Fprintf(w, " Sent %d bytes %d pkt (dropped %d: limit %d, wred %d, aqm %d%s)  marked CE %d (ect0 %d, ect1 %d)  sent CE %d\n",
		c.DequeuedBytes, c.DequeuedPackets, c.DroppedPackets(), c.DroppedLimitPackets, c.DroppedWREDPackets, c.AQMDroppedPackets, trimFull,
		c.CEMarked(), c.CEMarkedECT0, c.CEMarkedECT1, c.DequeuedCEPackets)
	if c.TrimmedPackets+c.TrimDroppedPackets != 0 {
		fmt.Fprintf(w, " trimmed %d pkt to the trim class: cut %d bytes, kept %d bytes\n",
			c.TrimmedPackets, c.TrimmedBytes, c.TrimmedKeptBytes)
	}
	if c.TrimInPackets != 0 {
		fmt.Fprintf(w, " trimmed in %d bytes %d pkt (from classes that trim; counted in arrived)\n", c.TrimInBytes, c.TrimInPackets)
	}
	if c.LightMarked+c.HeavyMarked > 0 {
		fmt.Fprintf(w, " two-threshold: light marks (ect0 -> ect1) %d, heavy marks (ce) %d\n", c.LightMarked, c.HeavyMarked)
		if n := c.WANCNPLightSent + c.WANCNPHeavySent + c.WANCNPCoalesced; n > 0 {
			fmt.Fprintf(w, " CNPs to tunnel PEs: light %d, heavy %d, coalesced %d\n", c.WANCNPLightSent, c.WANCNPHeavySent, c.WANCNPCoalesced)
		}
	}
	if c.AQMInsMarks+c.AQMPstMarks+c.AQMDroppedPackets > 0 {
		fmt.Fprintf(w, " at dequeue: marked %d instantaneous, %d persistent; dropped %d not-ect\n",
			c.AQMInsMarks, c.AQMPstMarks, c.AQMDroppedPackets)
	}
	fmt.Fprintf(w, " backlog %db %dp  max backlog %db %dp\n",
		c.BacklogBytes, c.BacklogPackets, c.MaxBacklogBytes, c.MaxBacklogPackets)
	if c.SojournSamples > 0 {
		fmt.Fprintf(w, " sojourn mean %s p50 %s p99 %s (%d samples)\n",
			units.FormatMeasured(c.MeanSojourn()), units.FormatBound(c.Sojourn.Quantile(0.5)),
			units.FormatBound(c.Sojourn.Quantile(0.99)), c.SojournSamples)
	}
	fmt.Fprintf(w, " arrived %d bytes %d pkt: not-ect %d, ect0 %d, ect1 %d, ce %d\n",
		c.EnqueuedBytes, c.EnqueuedPackets, c.ArrivedNotECT, c.ArrivedECT0, c.ArrivedECT1, c.ArrivedCE)
	if c.PPFCStopsSent+c.PPFCResumesSent+c.PPFCStopsCoalesced+c.PPFCHoldsSent+c.PPFCHoldsCoalesced+c.PPFCAlarmsSent+c.PPFCAlarmsCoalesced != 0 {
		fmt.Fprintf(w, " ppfc: stops sent %d (coalesced %d), holds sent %d (coalesced %d), resumes sent %d, alarms sent %d (coalesced %d)\n",
			c.PPFCStopsSent, c.PPFCStopsCoalesced, c.PPFCHoldsSent, c.PPFCHoldsCoalesced, c.PPFCResumesSent, c.PPFCAlarmsSent, c.PPFCAlarmsCoalesced)
	}
	if h := &c.Host; h.EnteredPackets != 0 || h.BacklogPackets != 0 {
		fmt.Fprintf(w, " host queue (after the port, not in its backlog): entered %d pkt, delivered %d, dropped %d, in flight %db %dp (max %db %dp)\n",
			h.EnteredPackets, h.DeliveredPackets, h.DroppedPackets, h.BacklogBytes, h.BacklogPackets, h.MaxBacklogBytes, h.MaxBacklogPackets)
		if h.DeliveredPackets > 0 {
			fmt.Fprintf(w, " host wait mean %s p50 %s p99 %s max %s\n",
				units.FormatMeasured(h.MeanWait()), units.FormatBound(h.Wait.Quantile(0.5)),
				units.FormatBound(h.Wait.Quantile(0.99)), units.FormatMeasured(h.WaitMax))
		}
	}
}

// rateHeader is the header of the --watch table.
const rateHeader = "time          class                 Mbit/s        pps     ce/s   drop/s  backlog            sojourn    host wait"

// renderRates prints one --watch report: per-interval rates of every class
// that moved or holds a backlog, and the port total.
func renderRates(w io.Writer, prev, cur *qdisc.Stats) {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		dt = 1e-9
	}
	ts := cur.Time.Format("15:04:05.000")
	row := func(label string, p, c *qdisc.ClassStats) {
		dBytes := c.DequeuedBytes - p.DequeuedBytes
		dPkts := c.DequeuedPackets - p.DequeuedPackets
		dCE := c.CEMarked() - p.CEMarked()
		dDrop := c.DroppedPackets() - p.DroppedPackets()
		soj := "-"
		if n := c.SojournSamples - p.SojournSamples; n > 0 {
			soj = units.FormatMeasured((c.SojournSum - p.SojournSum) / time.Duration(n))
		}
		// The host queue's mean wait: not part of the sojourn.
		host := "-"
		if n := c.Host.DeliveredPackets - p.Host.DeliveredPackets; n > 0 {
			host = units.FormatMeasured((c.Host.WaitSum - p.Host.WaitSum) / time.Duration(n))
		}
		backlog := fmt.Sprintf("%db %dp", c.BacklogBytes, c.BacklogPackets)
		fmt.Fprintf(w, "%s  %-18s %9.1f %10.0f %8.0f %8.0f  %-17s  %-9s  %s\n", ts, label,
			float64(dBytes)*8/dt/1e6, float64(dPkts)/dt, float64(dCE)/dt, float64(dDrop)/dt, backlog, soj, host)
	}
	for i := range cur.Classes {
		if i >= len(prev.Classes) {
			break
		}
		p, c := &prev.Classes[i], &cur.Classes[i]
		if c.EnqueuedPackets == p.EnqueuedPackets && c.DequeuedPackets == p.DequeuedPackets && c.BacklogPackets == 0 {
			continue
		}
		row(classLabel(c.Class, c.Name), p, c)
	}
	pt, ct := prev.Total(), cur.Total()
	row("total", &pt, &ct)
}
