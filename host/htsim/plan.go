package htsim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Plan is a Scenario as htsim runs it. Fields ending in Ps are in htsim's
// time (picoseconds), which is the lab's divided by TimeScale.
type Plan struct {
	Scenario Scenario `json:"scenario"`

	// Nodes is the fabric's hosts; Receiver the one every sender sends
	// to; senders are hosts 0 to Senders−1.
	Nodes    int `json:"nodes"`
	Receiver int `json:"receiver"`
	// Tiers is the fat tree's (2: leaf-spine), HostsPerToR its radix down.
	Tiers       int `json:"tiers"`
	HostsPerToR int `json:"hosts_per_tor"`
	// TimeScale is lab time per htsim time: 1 native (for a rate of a
	// whole number of ps per byte), about RTT / 12 µs scaled.
	TimeScale float64 `json:"time_scale"`
	// PicosPerByte is htsim's serialisation: it truncates 8e12/rate, so
	// the rate is chosen for a whole number.
	PicosPerByte int64 `json:"ps_per_byte"`
	// HopLatencyPs is each link's latency, solved so that UnloadedRTTPs
	// is the scenario's RTT (to 4 × Tiers ps).
	HopLatencyPs int64 `json:"hop_latency_ps"`
	// UnloadedRTTPs is htsim's network_max_unloaded_rtt: NSCC's base RTT
	// and BDP.
	UnloadedRTTPs int64 `json:"unloaded_rtt_ps"`
	// WireMTUBytes is htsim's packet size; PayloadBytes its mss (− 64).
	WireMTUBytes int `json:"wire_mtu_bytes"`
	PayloadBytes int `json:"payload_bytes"`
	// QueuePackets is every switch queue's limit in packets of
	// WireMTUBytes, as many as fit; MinThPackets and MaxThPackets its ECN
	// thresholds, to the nearest packet (htsim.md's runs: 0.2 BDP at
	// 250 Mbit/s, 1.52 packets, is 2), at most the limit.
	QueuePackets int64 `json:"queue_packets"`
	MinThPackets int64 `json:"min_th_packets"`
	MaxThPackets int64 `json:"max_th_packets"`
	// TrimWireBytes is a trimmed packet on the wire; 0: trimming off.
	TrimWireBytes int `json:"trim_wire_bytes"`
	// TargetQDelayPs is NSCC's target_qdelay; 0: htsim derives it.
	TargetQDelayPs int64 `json:"target_qdelay_ps,omitempty"`
	// SACKThresholdBytes is the receiver's ACK coalescing.
	SACKThresholdBytes int64 `json:"sack_threshold_bytes"`
	// SLEEK is htsim's SLEEK loss recovery.
	SLEEK bool `json:"sleek"`
	// BDPBytes is the lab's: Rate × the unloaded RTT in the lab's time.
	BDPBytes float64 `json:"bdp_bytes"`
	// Ideal is every sender's bytes at the payload capacity of the
	// receiver's link, no RTT, in the lab's time:
	// N × size × (mtu/mss) × 8 / rate.
	Ideal time.Duration `json:"ideal"`
	// IdealPs is Ideal in htsim's time, at its serialisation.
	IdealPs float64 `json:"ideal_ps"`
	// EndPs is when htsim stops; a run whose flows have not all finished
	// is run once more, 8 times as long.
	EndPs int64 `json:"end_ps"`
	// SamplePeriodPs is how often the receiver's queue is sampled:
	// IdealPs / 1000.
	SamplePeriodPs int64 `json:"sample_period_ps"`

	linkMbps string // htsim's spelling of a rate of PicosPerByte
}

// referenceRTTPs is htsim's reference network's RTT (initNsccParams:
// 100 Gbit/s, 12 µs), the regime Scaled maps onto.
const referenceRTTPs = 12e6

// samplesPerIdeal: htsim.md samples the queue 1000 times per run.
const samplesPerIdeal = 1000

// NewPlan validates s and derives how htsim runs it.
func NewPlan(s Scenario) (Plan, error) {
	if err := s.Validate(); err != nil {
		return Plan{}, err
	}
	p := Plan{Scenario: s, WireMTUBytes: s.wireMTU()}
	p.PayloadBytes = p.WireMTUBytes - headerBytes
	switch s.Topology {
	case Dumbbell:
		// K = 2N: N hosts per ToR and N spines.
		k := 2 * s.Senders
		p.Tiers, p.HostsPerToR, p.Nodes, p.Receiver = 2, k/2, k*k/2, s.Senders
	case FatTree:
		k := 2
		for k*k*k/4 < s.Senders+1 {
			k += 2
		}
		p.Tiers, p.HostsPerToR, p.Nodes = 3, k/2, k*k*k/4
		p.Receiver = p.Nodes - 1
	}
	nativePsPerByte := 8e12 / float64(s.Rate)
	labRTTPs := float64(s.BaseRTT) * 1e3
	if s.HopLatency != 0 {
		pb := max(int64(math.Round(nativePsPerByte)), 1)
		labRTTPs = float64(p.unloadedRTTPs(s.HopLatency.Nanoseconds()*1e3, htsimBitsPerSecond(pb))) * nativePsPerByte / float64(pb)
	}
	target := nativePsPerByte
	if s.Mapping == Scaled {
		target *= referenceRTTPs / labRTTPs
	}
	ps := int64(math.Round(target))
	if ps < 1 {
		// Only Scaled gets here: a long RTT slows time down so far that
		// a byte takes under half a ps.
		return Plan{}, fieldErr("rate", s.Rate, "at most %s with mapping %s and an RTT of %v: htsim serialises a whole number of ps per byte",
			units.Rate(16e12*referenceRTTPs/labRTTPs), s.Mapping, time.Duration(labRTTPs/1e3))
	}
	p.linkMbps = linkMbps(ps)
	bps := htsimBitsPerSecond(ps)
	// ps itself but at the slowest rates, where htsim has none.
	p.PicosPerByte = htsimPicosPerByte(bps)
	p.TimeScale = nativePsPerByte / float64(p.PicosPerByte)

	rttPs := labRTTPs / p.TimeScale
	fixed := p.unloadedRTTPs(0, bps)
	if s.HopLatency != 0 && p.TimeScale == 1 {
		p.HopLatencyPs = s.HopLatency.Nanoseconds() * 1e3
	} else {
		p.HopLatencyPs = int64(math.Round((rttPs - float64(fixed)) / float64(4*p.Tiers)))
	}
	if p.HopLatencyPs < 0 {
		return Plan{}, fieldErr("base_rtt", s.BaseRTT, "at least %v at rate %s: htsim's RTT holds %d serialisations of an MTU packet and of an ACK",
			time.Duration(float64(fixed)*p.TimeScale/1e3).Round(time.Nanosecond)+time.Nanosecond, s.Rate, 2*p.Tiers)
	}
	p.UnloadedRTTPs = p.unloadedRTTPs(p.HopLatencyPs, bps)

	mtu := p.WireMTUBytes
	p.QueuePackets, p.MinThPackets, p.MaxThPackets = s.PortQueue.packets(mtu)
	if s.Trim {
		p.TrimWireBytes = int(DefaultTrimBytes) + ethernetBytes
		if s.TrimBytes != 0 {
			p.TrimWireBytes = int(s.TrimBytes) + ethernetBytes
		}
	}
	if s.TargetQDelay != 0 {
		p.TargetQDelayPs = int64(math.Round(float64(s.TargetQDelay) * 1e3 / p.TimeScale))
	}
	switch {
	case s.SACKThresholdBytes != 0:
		p.SACKThresholdBytes = int64(s.SACKThresholdBytes)
	case s.Trim:
		p.SACKThresholdBytes = int64(DefaultSACKThresholdBytes)
	default:
		p.SACKThresholdBytes = int64(mtu)
	}
	p.SLEEK = s.SLEEK

	p.BDPBytes = float64(s.Rate) / 8 * float64(p.UnloadedRTTPs) * p.TimeScale / 1e12
	wire := float64(s.Senders) * float64(s.FlowBytes) * float64(mtu) / float64(p.PayloadBytes)
	p.IdealPs = wire * float64(p.PicosPerByte)
	p.Ideal = time.Duration(math.Round(wire * nativePsPerByte / 1e3))
	p.SamplePeriodPs = max(int64(p.IdealPs/samplesPerIdeal), 1)
	// Room for a tail of twice the ideal and four of htsim's minimum RTOs
	// (main_uec.cpp: 15 µs + 6 drains of a full queue): a deep queue's
	// flow can stall until one.
	minRTOPs := 15e6 + float64(p.QueuePackets*int64(mtu))*6*8*1e12/float64(bps)
	p.EndPs = int64(2*p.IdealPs + 4*minRTOPs + 20*float64(p.UnloadedRTTPs))
	return p, nil
}

// unloadedRTTPs is htsim's calculate_rtt (main_uec.cpp) for a hop latency
// and htsim's link rate: 2 × the diameter's latency plus a data packet's
// and an ACK's serialisation at each of the diameter's hops, in doubles
// truncated to ps, as htsim computes it.
func (p *Plan) unloadedRTTPs(hopPs int64, bps uint64) int64 {
	diameter := 2 * p.Tiers
	gbps := float64(bps) / 1e9
	data := float64(p.WireMTUBytes*8) / gbps * float64(diameter) * 1000
	ack := float64(headerBytes*8) / gbps * float64(diameter) * 1000
	return int64(float64(2*hopPs*int64(diameter)) + data + ack)
}

// htsimBitsPerSecond is the rate htsim holds for a rate of ps picoseconds
// per byte: it reads our Mbit/s as a double and truncates its bits/s.
func htsimBitsPerSecond(ps int64) uint64 {
	mbps, _ := strconv.ParseFloat(linkMbps(ps), 64)
	return uint64(mbps * 1e6)
}

// htsimPicosPerByte is htsim's serialisation of a rate (queue.cpp:
// 8e12 / bitrate, truncated).
func htsimPicosPerByte(bps uint64) int64 { return int64(8e12 / float64(bps)) }

// linkMbps spells the rate of ps picoseconds per byte in Mbit/s so that
// htsim truncates it back to ps: 8e12/ps in kbit/s, rounded down (192 →
// "41666.666", not 41666.667, which htsim runs at 191 ps, 41.885 Gbit/s);
// below 90 Mbit/s a kbit/s is too coarse and more decimals follow.
func linkMbps(ps int64) string {
	exact := 8e6 / float64(ps) // Mbit/s
	for dec := 3; dec <= 6; dec++ {
		scale := math.Pow10(dec)
		s := strconv.FormatFloat(math.Floor(exact*scale)/scale, 'f', dec, 64)
		f, _ := strconv.ParseFloat(s, 64)
		if bps := uint64(f * 1e6); bps > 0 && htsimPicosPerByte(bps) == ps {
			return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
		}
	}
	// Under about 2.8 Mbit/s no whole bit/s gives ps exactly: the
	// nearest, and half a bit more so that htsim's truncation keeps it.
	b := uint64(math.Round(8e12 / float64(ps)))
	return fmt.Sprintf("%d.%06d5", b/1e6, b%1e6)
}

// micros spells ps in µs so that htsim's timeFromUs (a double × 1e6,
// truncated) gives ps back: half a ps more, to 7 decimals.
func micros(ps int64) string {
	return fmt.Sprintf("%d.%06d5", ps/1e6, ps%1e6)
}

// ConnectionMatrix is the .cm file: every sender starts FlowBytes to the
// receiver at 0.
func (p *Plan) ConnectionMatrix() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Nodes %d\nConnections %d\n", p.Nodes, p.Scenario.Senders)
	for i := range p.Scenario.Senders {
		fmt.Fprintf(&b, "%d->%d start 0 size %d\n", i, p.Receiver, p.Scenario.FlowBytes)
	}
	return b.String()
}

// args are htsim_uec's arguments for the plan, its matrix at cm and its
// log at log, stopping at endPs.
func (p *Plan) args(cm, log string, endPs int64) []string {
	a := append([]string{"-tm", cm}, ccFlags(p.Scenario.CC)...)
	itoa := func(v int64) string { return strconv.FormatInt(v, 10) }
	a = append(a,
		"-linkspeed", p.linkMbps,
		"-mtu", strconv.Itoa(p.WireMTUBytes),
		"-tiers", strconv.Itoa(p.Tiers),
		"-hop_latency", micros(p.HopLatencyPs),
	)
	a = append(a, queueFlags(p.QueuePackets, p.MinThPackets, p.MaxThPackets, p.TrimWireBytes)...)
	if p.TargetQDelayPs != 0 {
		a = append(a, "-target_q_delay", micros(p.TargetQDelayPs))
	}
	if p.SACKThresholdBytes != int64(DefaultSACKThresholdBytes) {
		a = append(a, "-sack_threshold", itoa(p.SACKThresholdBytes))
	}
	if p.SLEEK {
		a = append(a, "-sleek")
	}
	return append(a,
		"-end", itoa((endPs+999_999)/1e6), // whole µs, rounded up
		"-seed", strconv.Itoa(p.Scenario.Seed),
		"-log", "tor_downqueue",
		"-logtime_us", micros(p.SamplePeriodPs),
		"-o", log,
	)
}

// queueFlags are htsim_uec's flags for every switch queue: its limit and
// ECN thresholds in packets, and the trimmed size on the wire (0: off).
func queueFlags(queue, minTh, maxTh int64, trimWireBytes int) []string {
	itoa := func(v int64) string { return strconv.FormatInt(v, 10) }
	a := []string{"-q", itoa(queue), "-ecn", itoa(minTh), itoa(maxTh)}
	if trimWireBytes == 0 {
		return append(a, "-disable_trim")
	}
	return append(a, "-trimsize", strconv.Itoa(trimWireBytes))
}

// ccFlags are htsim_uec's flags for a congestion control.
func ccFlags(cc pds.CCMode) []string {
	switch cc {
	case pds.CCNSCC:
		return []string{"-sender_cc_only"}
	case pds.CCRCCC:
		return []string{"-receiver_cc_only"}
	case pds.CCBoth:
		return []string{"-sender_cc", "-receiver_cc"}
	}
	return nil
}
