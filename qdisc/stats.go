package qdisc

import (
	"fmt"
	"math"
	"time"

	"github.com/fabriclab/fabriclab/bpf"
)

// SojournHistogram counts sojourns in log2 buckets of nanoseconds: bucket b
// holds [2^b, 2^(b+1)) ns (bucket 0 also holds 0), the last bucket everything
// from 2^31 ns up.
type SojournHistogram [sojournBuckets]uint64

// Count is the number of samples.
func (h *SojournHistogram) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile estimates the q-quantile (0 < q <= 1) as the upper edge of the
// bucket it falls in: a bound, never an underestimate by more than 2x.
func (h *SojournHistogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for b, c := range h {
		seen += c
		if seen >= rank {
			return time.Duration(uint64(1) << (b + 1))
		}
	}
	return time.Duration(uint64(1) << sojournBuckets)
}

// ClassStats are the counters of one traffic class, summed over CPUs.
type ClassStats struct {
	Class ClassID `json:"class"`
	Name  string  `json:"name"`
	// Enqueued counts every packet offered to the class, dropped or not:
	// at rest Enqueued = Dequeued + Dropped + Backlog.
	EnqueuedPackets uint64 `json:"enqueued_packets"`
	EnqueuedBytes   uint64 `json:"enqueued_bytes"`
	DequeuedPackets uint64 `json:"dequeued_packets"`
	DequeuedBytes   uint64 `json:"dequeued_bytes"`
	// DequeuedCE counts CE packets leaving the queue: what the receiver
	// sees (veth mode only).
	DequeuedCEPackets uint64 `json:"dequeued_ce_packets"`
	// Arrivals by ECN codepoint.
	ArrivedNotECT uint64 `json:"arrived_not_ect"`
	ArrivedECT0   uint64 `json:"arrived_ect0"`
	ArrivedECT1   uint64 `json:"arrived_ect1"`
	ArrivedCE     uint64 `json:"arrived_ce"`
	// CE marks by the codepoint the packet arrived with.
	CEMarkedECT0        uint64 `json:"ce_marked_ect0"`
	CEMarkedECT1        uint64 `json:"ce_marked_ect1"`
	DroppedLimitPackets uint64 `json:"dropped_limit_packets"`
	DroppedLimitBytes   uint64 `json:"dropped_limit_bytes"`
	DroppedWREDPackets  uint64 `json:"dropped_wred_packets"`
	DroppedWREDBytes    uint64 `json:"dropped_wred_bytes"`
	// The dequeue AQMs' decisions (tcn, codel, ecnsharp): CE marks made
	// as packets left the queue, split into ECN♯'s instantaneous
	// condition (and TCN) and its persistent one (and CoDel). A packet
	// both conditions pick counts as instantaneous. Both are included in
	// CEMarkedECT0/ECT1. Not-ECT packets a drop profile discards at
	// dequeue count as AQMDropped (and as dequeued: they left the queue).
	AQMInsMarks       uint64           `json:"aqm_ins_marks"`
	AQMPstMarks       uint64           `json:"aqm_pst_marks"`
	AQMDroppedPackets uint64           `json:"aqm_dropped_packets"`
	AQMDroppedBytes   uint64           `json:"aqm_dropped_bytes"`
	BacklogBytes      uint64           `json:"backlog_bytes"`
	BacklogPackets    uint64           `json:"backlog_packets"`
	MaxBacklogBytes   uint64           `json:"max_backlog_bytes"`
	MaxBacklogPackets uint64           `json:"max_backlog_packets"`
	SojournSum        time.Duration    `json:"sojourn_sum_ns"`
	SojournSamples    uint64           `json:"sojourn_samples"`
	Sojourn           SojournHistogram `json:"sojourn_hist_log2_ns"`
	// Curve is the observed marking curve of ECN-capable arrivals.
	Curve MarkingCurve `json:"curve"`
	// Host is the host queue after the port: zero unless the port counts
	// departures at xmit (Info().Departure).
	Host HostQueueStats `json:"host_queue"`
	// PPFC notifications sent to the class's sources (XoffBytes), and
	// stops not sent because the source was paused already.
	PPFCStopsSent      uint64 `json:"ppfc_stops_sent"`
	PPFCResumesSent    uint64 `json:"ppfc_resumes_sent"`
	PPFCStopsCoalesced uint64 `json:"ppfc_stops_coalesced"`
	// Holds sent (a source stopped in this congestion episode whose pause
	// ran out before the backlog was down to xon) and not sent because the
	// source was paused; alarms sent (AlarmBytes) and not sent because the
	// source was alarmed in this episode already.
	PPFCHoldsSent       uint64 `json:"ppfc_holds_sent"`
	PPFCHoldsCoalesced  uint64 `json:"ppfc_holds_coalesced"`
	PPFCAlarmsSent      uint64 `json:"ppfc_alarms_sent"`
	PPFCAlarmsCoalesced uint64 `json:"ppfc_alarms_coalesced"`
	// Trimming (ClassConfig.TrimBytes), in the class that trims: packets
	// cut and moved to the trim class, the bytes cut off them and the
	// bytes they kept (TrimmedBytes + TrimmedKeptBytes is what they
	// brought); and packets it would have trimmed but the trim class was
	// full too, dropped (part of DroppedPackets). Packets it could not
	// trim (not UDP, IPv6 with extension headers, no longer than
	// TrimBytes) are DroppedLimit.
	TrimmedPackets     uint64 `json:"trimmed_packets"`
	TrimmedBytes       uint64 `json:"trimmed_bytes"`
	TrimmedKeptBytes   uint64 `json:"trimmed_kept_bytes"`
	TrimDroppedPackets uint64 `json:"trim_dropped_packets"`
	TrimDroppedBytes   uint64 `json:"trim_dropped_bytes"`
	// In the trim class: the trimmed packets it took in from other
	// classes, counted in its Enqueued too.
	TrimInPackets uint64 `json:"trim_in_packets"`
	TrimInBytes   uint64 `json:"trim_in_bytes"`
	// Two-threshold marking (seed 001): ECT(0) packets marked ECT(1)
	// ("light congestion", from T1), and packets marked CE ("heavy", from
	// T2; also in CEMarkedECT0/ECT1).
	LightMarked uint64 `json:"light_marked,omitempty"`
	HeavyMarked uint64 `json:"heavy_marked,omitempty"`
	// WAN CNPs sent to tunnel-ingress PEs by kind (TwoThreshold.
	// NotifyInterval), and marks whose CNP was coalesced.
	WANCNPLightSent uint64 `json:"wan_cnp_light_sent,omitempty"`
	WANCNPHeavySent uint64 `json:"wan_cnp_heavy_sent,omitempty"`
	WANCNPCoalesced uint64 `json:"wan_cnp_coalesced,omitempty"`
	// Idle periods of the class's link (bpf/idle.h): from the end of a
	// departure that left the class empty to the next arrival, their
	// count and total length, and those the idle log (Port.OpenIdleLog)
	// had no room for. An idle period still open is not counted.
	IdlePeriods uint64        `json:"idle_periods"`
	Idle        time.Duration `json:"idle_ns"`
	IdleLogLost uint64        `json:"idle_log_lost,omitempty"`
	// HeldBack is the service the port lost (xmit hook only): time its
	// departures of this class came after the link was free and the
	// packet was queued, the emulated switch's own host-lost time, and
	// how many departures were late (IdlePeriod.Held).
	HeldBack        time.Duration `json:"held_back_ns"`
	HeldBackPackets uint64        `json:"held_back_packets"`
	// CaughtUp is the lateness HTB made up by sending ahead of the line
	// after it, not in HeldBack.
	CaughtUp time.Duration `json:"caught_up_ns"`
	// RemarkedPackets left with the class's RemarkDSCP.
	RemarkedPackets uint64 `json:"remarked_packets,omitempty"`
}

// HostQueueStats count the host queue of a class: packets HTB has handed to
// the port device that have not reached the veth peer's ingress hook yet,
// waiting in the kernel's per-CPU backlog (veth_xmit -> netif_rx -> softirq).
// It is this machine's CPUs, not the emulated port: its packets count as
// dequeued, and neither the backlog nor the sojourn include its wait. At
// rest Entered = Delivered + Dropped + Backlog.
type HostQueueStats struct {
	// Entered counts packets that left HTB (the xmit hook's departures).
	EnteredPackets uint64 `json:"entered_packets"`
	EnteredBytes   uint64 `json:"entered_bytes"`
	// Delivered counts those that reached the peer's ingress hook.
	DeliveredPackets uint64 `json:"delivered_packets"`
	DeliveredBytes   uint64 `json:"delivered_bytes"`
	// Dropped counts those the kernel dropped on the way (a full per-CPU
	// backlog, a peer going down).
	DroppedPackets uint64 `json:"dropped_packets"`
	DroppedBytes   uint64 `json:"dropped_bytes"`
	// Backlog is in flight between the two hooks now.
	BacklogPackets    uint64 `json:"backlog_packets"`
	BacklogBytes      uint64 `json:"backlog_bytes"`
	MaxBacklogPackets uint64 `json:"max_backlog_packets"`
	MaxBacklogBytes   uint64 `json:"max_backlog_bytes"`
	// Wait is the time from HTB's exit to the peer's ingress hook of each
	// delivered packet.
	WaitSum time.Duration    `json:"wait_sum_ns"`
	WaitMax time.Duration    `json:"wait_max_ns"`
	Wait    SojournHistogram `json:"wait_hist_log2_ns"`
}

// MeanWait is the average host-queue wait of the delivered packets.
func (h *HostQueueStats) MeanWait() time.Duration {
	if h.DeliveredPackets == 0 {
		return 0
	}
	return h.WaitSum / time.Duration(h.DeliveredPackets)
}

// CheckInvariant reports whether entered = delivered + dropped + backlog
// holds, in packets and bytes; exactly only at rest.
func (h *HostQueueStats) CheckInvariant() error {
	if h.EnteredPackets != h.DeliveredPackets+h.DroppedPackets+h.BacklogPackets {
		return fmt.Errorf("host queue: entered %d != delivered %d + dropped %d + backlog %d packets",
			h.EnteredPackets, h.DeliveredPackets, h.DroppedPackets, h.BacklogPackets)
	}
	if h.EnteredBytes != h.DeliveredBytes+h.DroppedBytes+h.BacklogBytes {
		return fmt.Errorf("host queue: entered %d != delivered %d + dropped %d + backlog %d bytes",
			h.EnteredBytes, h.DeliveredBytes, h.DroppedBytes, h.BacklogBytes)
	}
	return nil
}

func (h *HostQueueStats) add(o *HostQueueStats) {
	h.EnteredPackets += o.EnteredPackets
	h.EnteredBytes += o.EnteredBytes
	h.DeliveredPackets += o.DeliveredPackets
	h.DeliveredBytes += o.DeliveredBytes
	h.DroppedPackets += o.DroppedPackets
	h.DroppedBytes += o.DroppedBytes
	h.BacklogPackets += o.BacklogPackets
	h.BacklogBytes += o.BacklogBytes
	h.MaxBacklogPackets += o.MaxBacklogPackets
	h.MaxBacklogBytes += o.MaxBacklogBytes
	h.WaitSum += o.WaitSum
	h.WaitMax = max(h.WaitMax, o.WaitMax)
	for b := range o.Wait {
		h.Wait[b] += o.Wait[b]
	}
}

// MarkingCurve counts ECN-capable arrivals and CE marks in CurveBins equal
// bins of the backlog they found, from 0 to the class limit: bin b holds
// backlogs in [b·limit/32, (b+1)·limit/32). BinBytes is limit/32 rounded
// down. Bins recorded before a live change of the limit keep the old width.
type MarkingCurve struct {
	BinBytes uint64            `json:"bin_bytes"`
	Arrivals [CurveBins]uint64 `json:"ect_arrivals"`
	Marks    [CurveBins]uint64 `json:"ce_marks"`
}

// CurveBins is the number of backlog bins of a MarkingCurve.
const CurveBins = 32

// Fraction is the observed marking fraction in bin b (0 with no arrivals).
func (c *MarkingCurve) Fraction(b int) float64 {
	if c.Arrivals[b] == 0 {
		return 0
	}
	return float64(c.Marks[b]) / float64(c.Arrivals[b])
}

// CEMarked is the number of packets this class marked CE.
func (s *ClassStats) CEMarked() uint64 { return s.CEMarkedECT0 + s.CEMarkedECT1 }

// DroppedPackets is the number of packets this class dropped, any cause.
func (s *ClassStats) DroppedPackets() uint64 {
	return s.DroppedLimitPackets + s.DroppedWREDPackets + s.AQMDroppedPackets + s.TrimDroppedPackets
}

// DroppedBytes is the number of bytes this class dropped, any cause.
func (s *ClassStats) DroppedBytes() uint64 {
	return s.DroppedLimitBytes + s.DroppedWREDBytes + s.AQMDroppedBytes + s.TrimDroppedBytes
}

// enqueueDrops are the packets and bytes dropped before entering the queue.
func (s *ClassStats) enqueueDrops() (packets, bytes uint64) {
	return s.DroppedLimitPackets + s.DroppedWREDPackets + s.TrimDroppedPackets,
		s.DroppedLimitBytes + s.DroppedWREDBytes + s.TrimDroppedBytes
}

// MeanSojourn is the average time a packet waited in the queue.
func (s *ClassStats) MeanSojourn() time.Duration {
	if s.SojournSamples == 0 {
		return 0
	}
	return s.SojournSum / time.Duration(s.SojournSamples)
}

// CheckInvariant reports whether enqueued = dequeued + dropped + trimmed +
// backlog holds, in packets and bytes (a trimmed packet's bytes are those
// cut and those kept), and the host queue's own identity (HostQueueStats).
// It holds exactly only when no packet is in flight between the counters
// (the port is idle).
// Drops at dequeue (AQMDropped) are part of Dequeued: they left the queue.
// Trimmed packets leave the class that trims them on arrival and enter
// their trim class, whose own identity counts them (TrimIn).
func (s *ClassStats) CheckInvariant() error {
	if err := s.Host.CheckInvariant(); err != nil {
		return fmt.Errorf("class %d: %w", s.Class, err)
	}
	dp, db := s.enqueueDrops()
	if s.EnqueuedPackets != s.DequeuedPackets+dp+s.TrimmedPackets+s.BacklogPackets {
		return fmt.Errorf("class %d: enqueued %d != dequeued %d + dropped at enqueue %d + trimmed %d + backlog %d packets",
			s.Class, s.EnqueuedPackets, s.DequeuedPackets, dp, s.TrimmedPackets, s.BacklogPackets)
	}
	if tb := s.TrimmedBytes + s.TrimmedKeptBytes; s.EnqueuedBytes != s.DequeuedBytes+db+tb+s.BacklogBytes {
		return fmt.Errorf("class %d: enqueued %d != dequeued %d + dropped at enqueue %d + trimmed %d + backlog %d bytes",
			s.Class, s.EnqueuedBytes, s.DequeuedBytes, db, tb, s.BacklogBytes)
	}
	return nil
}

// PortCounters are the port-wide counters.
type PortCounters struct {
	IPv4Packets      uint64 `json:"ipv4_packets"`
	IPv6Packets      uint64 `json:"ipv6_packets"`
	VLANPackets      uint64 `json:"vlan_packets"`
	NonIPPackets     uint64 `json:"non_ip_packets"`
	MalformedPackets uint64 `json:"malformed_packets"`
	// Frames the kernel cannot stamp (non-IP, in-band VLAN tag) pass
	// through the class queue outside the accounting.
	UnaccountedPackets         uint64 `json:"unaccounted_packets"`
	UnaccountedBytes           uint64 `json:"unaccounted_bytes"`
	UnaccountedCEMarkedPackets uint64 `json:"unaccounted_ce_marked_packets"`
	UnaccountedDroppedPackets  uint64 `json:"unaccounted_dropped_packets"`
	DequeueUnstampedPackets    uint64 `json:"dequeue_unstamped_packets"`
	// With the xmit hook: departures the peer's hook counted because the
	// xmit hook had not (LateDeparture; their sojourn includes the host
	// queue), of which HandoffBusy because another packet in flight held
	// the handoff slot of its skb; HandoffStale counts handoffs of packets
	// the kernel freed without a trace, found later and booked as
	// host-queue drops.
	LateDeparturePackets uint64 `json:"late_departure_packets"`
	HandoffBusyPackets   uint64 `json:"handoff_busy_packets"`
	HandoffStalePackets  uint64 `json:"handoff_stale_packets"`
	// PPFC notifications not sent: no route or no neighbour toward the
	// source, a source behind the port itself, a failed clone; and
	// notifications that could not be built or clones not rewritten
	// (dropped).
	PPFCNoRoute        uint64 `json:"ppfc_no_route"`
	PPFCNoNeighbour    uint64 `json:"ppfc_no_neighbour"`
	PPFCSelf           uint64 `json:"ppfc_self"`
	PPFCRedirectErrors uint64 `json:"ppfc_redirect_errors"`
	PPFCBuildErrors    uint64 `json:"ppfc_build_errors"`
	// WANCNPFailed counts WAN CNPs not sent: no route or neighbour toward
	// the PE, a PE behind the port itself, a failed clone or rewrite.
	WANCNPFailed uint64 `json:"wan_cnp_failed,omitempty"`
}

// PPFCErrors sums the PPFC notifications the port failed to send.
func (p *PortCounters) PPFCErrors() uint64 {
	return p.PPFCNoRoute + p.PPFCNoNeighbour + p.PPFCSelf + p.PPFCRedirectErrors + p.PPFCBuildErrors
}

// Stats is a snapshot of a port's counters.
type Stats struct {
	Time    time.Time    `json:"time"`
	Port    PortCounters `json:"port"`
	Classes []ClassStats `json:"classes"`
}

// Total sums the class counters (maxima are summed too, as an upper bound).
// It has no marking curve: the classes' bins have different widths.
func (s *Stats) Total() ClassStats {
	var t ClassStats
	t.Name = "total"
	for i := range s.Classes {
		c := &s.Classes[i]
		t.EnqueuedPackets += c.EnqueuedPackets
		t.EnqueuedBytes += c.EnqueuedBytes
		t.DequeuedPackets += c.DequeuedPackets
		t.DequeuedBytes += c.DequeuedBytes
		t.DequeuedCEPackets += c.DequeuedCEPackets
		t.ArrivedNotECT += c.ArrivedNotECT
		t.ArrivedECT0 += c.ArrivedECT0
		t.ArrivedECT1 += c.ArrivedECT1
		t.ArrivedCE += c.ArrivedCE
		t.CEMarkedECT0 += c.CEMarkedECT0
		t.CEMarkedECT1 += c.CEMarkedECT1
		t.DroppedLimitPackets += c.DroppedLimitPackets
		t.DroppedLimitBytes += c.DroppedLimitBytes
		t.DroppedWREDPackets += c.DroppedWREDPackets
		t.DroppedWREDBytes += c.DroppedWREDBytes
		t.AQMInsMarks += c.AQMInsMarks
		t.AQMPstMarks += c.AQMPstMarks
		t.AQMDroppedPackets += c.AQMDroppedPackets
		t.AQMDroppedBytes += c.AQMDroppedBytes
		t.BacklogBytes += c.BacklogBytes
		t.BacklogPackets += c.BacklogPackets
		t.MaxBacklogBytes += c.MaxBacklogBytes
		t.MaxBacklogPackets += c.MaxBacklogPackets
		t.SojournSum += c.SojournSum
		t.SojournSamples += c.SojournSamples
		for b := range c.Sojourn {
			t.Sojourn[b] += c.Sojourn[b]
		}
		t.Host.add(&c.Host)
		t.PPFCStopsSent += c.PPFCStopsSent
		t.PPFCResumesSent += c.PPFCResumesSent
		t.PPFCStopsCoalesced += c.PPFCStopsCoalesced
		t.PPFCHoldsSent += c.PPFCHoldsSent
		t.PPFCHoldsCoalesced += c.PPFCHoldsCoalesced
		t.PPFCAlarmsSent += c.PPFCAlarmsSent
		t.PPFCAlarmsCoalesced += c.PPFCAlarmsCoalesced
		t.TrimmedPackets += c.TrimmedPackets
		t.TrimmedBytes += c.TrimmedBytes
		t.TrimmedKeptBytes += c.TrimmedKeptBytes
		t.TrimDroppedPackets += c.TrimDroppedPackets
		t.TrimDroppedBytes += c.TrimDroppedBytes
		t.TrimInPackets += c.TrimInPackets
		t.TrimInBytes += c.TrimInBytes
		t.RemarkedPackets += c.RemarkedPackets
		t.LightMarked += c.LightMarked
		t.HeavyMarked += c.HeavyMarked
		t.WANCNPLightSent += c.WANCNPLightSent
		t.WANCNPHeavySent += c.WANCNPHeavySent
		t.WANCNPCoalesced += c.WANCNPCoalesced
	}
	return t
}

// readStats sums the per-CPU counters and reads the shared queue state.
func readStats(m *bpf.PortMaps, cfg *Config) (Stats, error) {
	s := Stats{Time: time.Now(), Classes: make([]ClassStats, NumClasses)}
	var ports []bpf.PortPortStats
	if err := m.PortCounters.Lookup(uint32(0), &ports); err != nil {
		return s, fmt.Errorf("read port counters: %w", err)
	}
	for _, p := range ports {
		s.Port.IPv4Packets += p.Ipv4Packets
		s.Port.IPv6Packets += p.Ipv6Packets
		s.Port.VLANPackets += p.VlanPackets
		s.Port.NonIPPackets += p.NonIpPackets
		s.Port.MalformedPackets += p.MalformedPackets
		s.Port.UnaccountedPackets += p.UnaccountedPackets
		s.Port.UnaccountedBytes += p.UnaccountedBytes
		s.Port.UnaccountedCEMarkedPackets += p.UnaccountedCeMarkedPackets
		s.Port.UnaccountedDroppedPackets += p.UnaccountedDroppedPackets
		s.Port.DequeueUnstampedPackets += p.DequeueUnstampedPackets
		s.Port.LateDeparturePackets += p.LateDeparturePackets
		s.Port.HandoffBusyPackets += p.HandoffBusyPackets
		s.Port.HandoffStalePackets += p.HandoffStalePackets
		s.Port.PPFCNoRoute += p.PpfcNoRoute
		s.Port.PPFCNoNeighbour += p.PpfcNoNeigh
		s.Port.PPFCSelf += p.PpfcSelf
		s.Port.PPFCRedirectErrors += p.PpfcRedirectErrors
		s.Port.PPFCBuildErrors += p.PpfcBuildErrors
		s.Port.WANCNPFailed += p.WanCnpFailed
	}
	for i := range NumClasses {
		c := &s.Classes[i]
		c.Class = ClassID(i)
		if cfg != nil {
			c.Name = cfg.Classes[i].Name
		}
		var q bpf.PortClassState
		if err := m.ClassQueue.Lookup(uint32(i), &q); err != nil {
			return s, fmt.Errorf("read class %d queue: %w", i, err)
		}
		c.BacklogBytes = q.BacklogBytes
		c.BacklogPackets = q.BacklogPackets
		c.MaxBacklogBytes = q.MaxBacklogBytes
		c.MaxBacklogPackets = q.MaxBacklogPackets
		c.Host.BacklogBytes = q.HostBacklogBytes
		c.Host.BacklogPackets = q.HostBacklogPackets
		c.Host.MaxBacklogBytes = q.MaxHostBacklogBytes
		c.Host.MaxBacklogPackets = q.MaxHostBacklogPackets
		var percpu []bpf.PortClassStats
		if err := m.ClassCounters.Lookup(uint32(i), &percpu); err != nil {
			return s, fmt.Errorf("read class %d counters: %w", i, err)
		}
		for _, p := range percpu {
			c.EnqueuedPackets += p.EnqueuedPackets
			c.EnqueuedBytes += p.EnqueuedBytes
			c.DequeuedPackets += p.DequeuedPackets
			c.DequeuedBytes += p.DequeuedBytes
			c.DequeuedCEPackets += p.DequeuedCePackets
			c.ArrivedNotECT += p.ArrivedByEcn[0]
			c.ArrivedECT1 += p.ArrivedByEcn[1]
			c.ArrivedECT0 += p.ArrivedByEcn[2]
			c.ArrivedCE += p.ArrivedByEcn[3]
			c.CEMarkedECT0 += p.CeMarkedEct0
			c.CEMarkedECT1 += p.CeMarkedEct1
			c.DroppedLimitPackets += p.DroppedLimitPackets
			c.DroppedLimitBytes += p.DroppedLimitBytes
			c.DroppedWREDPackets += p.DroppedWredPackets
			c.DroppedWREDBytes += p.DroppedWredBytes
			c.AQMInsMarks += p.AqmInsMarks
			c.AQMPstMarks += p.AqmPstMarks
			c.AQMDroppedPackets += p.AqmDroppedPackets
			c.AQMDroppedBytes += p.AqmDroppedBytes
			c.SojournSum += time.Duration(p.SojournSumNs)
			c.SojournSamples += p.SojournSamples
			for b := range p.SojournHist {
				c.Sojourn[b] += p.SojournHist[b]
			}
			for b := range p.CurveEctArrivals {
				c.Curve.Arrivals[b] += p.CurveEctArrivals[b]
				c.Curve.Marks[b] += p.CurveCeMarks[b]
			}
			h := &c.Host
			h.EnteredPackets += p.HostEnteredPackets
			h.EnteredBytes += p.HostEnteredBytes
			h.DeliveredPackets += p.HostDeliveredPackets
			h.DeliveredBytes += p.HostDeliveredBytes
			h.DroppedPackets += p.HostDroppedPackets
			h.DroppedBytes += p.HostDroppedBytes
			h.WaitSum += time.Duration(p.HostWaitSumNs)
			h.WaitMax = max(h.WaitMax, time.Duration(p.HostWaitMaxNs))
			for b := range p.HostWaitHist {
				h.Wait[b] += p.HostWaitHist[b]
			}
			c.PPFCStopsSent += p.PpfcStopSent
			c.PPFCResumesSent += p.PpfcResumeSent
			c.PPFCStopsCoalesced += p.PpfcStopCoalesced
			c.PPFCHoldsSent += p.PpfcHoldSent
			c.PPFCHoldsCoalesced += p.PpfcHoldCoalesced
			c.PPFCAlarmsSent += p.PpfcAlarmSent
			c.PPFCAlarmsCoalesced += p.PpfcAlarmCoalesced
			c.TrimmedPackets += p.TrimmedPackets
			c.TrimmedBytes += p.TrimmedBytes
			c.TrimmedKeptBytes += p.TrimmedKeptBytes
			c.TrimDroppedPackets += p.TrimDroppedPackets
			c.TrimDroppedBytes += p.TrimDroppedBytes
			c.TrimInPackets += p.TrimInPackets
			c.TrimInBytes += p.TrimInBytes
			c.LightMarked += p.LightMarked
			c.HeavyMarked += p.HeavyMarked
			c.WANCNPLightSent += p.WanCnpLightSent
			c.WANCNPHeavySent += p.WanCnpHeavySent
			c.WANCNPCoalesced += p.WanCnpCoalesced
			c.IdlePeriods += p.IdlePeriods
			c.Idle += time.Duration(p.IdleNs)
			c.IdleLogLost += p.IdleLogLost
			c.HeldBack += time.Duration(p.HeldBackNs)
			c.HeldBackPackets += p.HeldBackPackets
			c.CaughtUp += time.Duration(p.CaughtUpNs)
			c.RemarkedPackets += p.RemarkedPackets
		}
		if cfg != nil {
			c.Curve.BinBytes = uint64(cfg.Classes[i].LimitBytes) / CurveBins
		}
	}
	return s, nil
}
