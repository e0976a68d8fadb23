package htsim

import (
	"errors"
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc/enum"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Scenario is an N → 1 UET incast in the lab's terms: every sender starts
// FlowBytes to one receiver at time 0, through the receiver's port.
type Scenario struct {
	// Senders is N.
	Senders int `json:"senders"`
	// FlowBytes is what each sender sends (the lab's tests: 2 MiB).
	FlowBytes units.ByteSize `json:"flow_bytes"`
	// Rate is every link's line rate (the lab's port rate).
	Rate units.Rate `json:"rate"`
	// MTUBytes is the lab's IP packet size (4096); on the wire a packet
	// is 14 bytes of Ethernet more, and htsim's 64-byte header leaves
	// MTUBytes + 14 − 64 of payload.
	MTUBytes int `json:"mtu"`
	// BaseRTT is the unloaded round trip of an MTU packet and its ACK:
	// NSCC's config_base_rtt, which htsim derives from its hop latency.
	// Exactly one of BaseRTT and HopLatency is set.
	BaseRTT time.Duration `json:"base_rtt,omitempty"`
	// HopLatency is each link's latency, from which htsim derives the
	// unloaded RTT. Optional: 0 solves it from BaseRTT. htsim's own
	// settings use 1 µs.
	HopLatency time.Duration `json:"hop_latency,omitempty"`
	// PortQueue is the receiver's port's queue.
	PortQueue
	// Trim turns packet trimming on; off, a full queue drops.
	Trim bool `json:"trim"`
	// TrimBytes is what a trimmed packet keeps of its IP packet.
	// Optional: 0 is DefaultTrimBytes (qdisc's).
	TrimBytes units.ByteSize `json:"trim_bytes,omitempty"`
	// CC is the congestion control: nscc, rccc or both.
	CC pds.CCMode `json:"cc"`
	// Seed seeds htsim's random numbers (ECN, trimming, path choice).
	Seed int `json:"seed"`
	// Mapping says how the lab's time maps onto htsim's.
	Mapping Mapping `json:"mapping"`
	// Topology is the fabric. Optional: the zero value is Dumbbell.
	Topology Topology `json:"topology,omitempty"`

	// TargetQDelay is NSCC's target_qdelay in the lab's time. Optional:
	// 0 lets htsim derive it: 0.75 × RTT with trimming, RTT without. The
	// lab's nscc.LabParams uses RTT in both.
	TargetQDelay time.Duration `json:"target_qdelay,omitempty"`
	// SACKThresholdBytes is how many bytes the receiver takes before it
	// ACKs (htsim coalesces to DefaultSACKThresholdBytes, with no ACK
	// request). Optional: 0 is the project's mapping: one wire MTU (an
	// ACK per packet, as the lab's target ACKs every receive batch)
	// without trimming, htsim's default with trimming (where an ACK per
	// packet moves the ratios by under 0.01).
	SACKThresholdBytes units.ByteSize `json:"sack_threshold,omitempty"`
	// SLEEK turns on htsim's SLEEK loss recovery, which its own no-trim
	// setting uses with 16 KiB ACKs: it hides the stall those ACKs cause
	// below 4 packets of window but resends spuriously. Off by default,
	// the closer mapping of the lab (SetHtsimRecovery sets htsim's).
	SLEEK bool `json:"sleek,omitempty"`
}

// PortQueue is a switch port's queue in the lab's terms: LimitBytes its
// limit, MinThBytes and MaxThBytes its ECN thresholds (the lab's WRED
// min_th and max_th), between which htsim marks with a probability rising
// linearly to 1. htsim counts whole packets of the wire MTU: the limit
// becomes as many as fit, the thresholds the nearest.
type PortQueue struct {
	LimitBytes units.ByteSize `json:"limit"`
	MinThBytes units.ByteSize `json:"min_th"`
	MaxThBytes units.ByteSize `json:"max_th"`
}

// validate checks the queue, and that it holds a packet of wireMTU bytes
// when the MTU is valid (mtuOK).
func (q *PortQueue) validate(bad func(field string, v any, allowed string, args ...any), wireMTU int, mtuOK bool) {
	if q.LimitBytes > 1<<40 {
		bad("limit", q.LimitBytes, "at most 1tb")
	} else if mtuOK && packets(q.LimitBytes, wireMTU) < 1 {
		bad("limit", q.LimitBytes, "at least one packet of the wire MTU (%db)", wireMTU)
	}
	if q.MaxThBytes > q.LimitBytes {
		bad("max_th", q.MaxThBytes, "at most limit (%s)", q.LimitBytes)
	}
	if q.MinThBytes > q.MaxThBytes {
		bad("min_th", q.MinThBytes, "at most max_th (%s)", q.MaxThBytes)
	}
}

// packets is the queue in htsim's packets of wireMTU bytes (its -q and
// -ecn): the limit as many as fit, the thresholds to the nearest packet,
// at most the limit.
func (q *PortQueue) packets(wireMTU int) (limit, minTh, maxTh int64) {
	limit = packets(q.LimitBytes, wireMTU)
	return limit, min(nearestPackets(q.MinThBytes, wireMTU), limit), min(nearestPackets(q.MaxThBytes, wireMTU), limit)
}

// DefaultTrimBytes is qdisc.DefaultTrimBytes: UET's headers and some to
// spare.
const DefaultTrimBytes units.ByteSize = 128

// DefaultSACKThresholdBytes is htsim's ACK coalescing (UecSink
// _bytes_unacked_threshold).
const DefaultSACKThresholdBytes units.ByteSize = 16384

// SetHtsimRecovery sets htsim's own loss recovery for the scenario's
// trimming: its 16 KiB ACK coalescing, and SLEEK without trimming.
func (s *Scenario) SetHtsimRecovery() {
	s.SACKThresholdBytes = DefaultSACKThresholdBytes
	s.SLEEK = !s.Trim
}

// Mapping is how a lab scenario's time maps onto htsim's.
type Mapping uint8

const (
	// Native runs htsim at the lab's own rate and RTT. htsim then scales
	// NSCC's increases by b = target_qdelay / 12 µs (62.5 at 1 ms with
	// trimming): the regime nscc.LabParams avoids with b = 1.
	Native Mapping = iota
	// Scaled slows htsim's reference network (12 µs) down to the lab's
	// RTT: the same BDP in bytes and packets, the same queue, thresholds
	// and flows in BDPs, and NSCC at its reference dynamics. Times in the
	// Result are the lab's.
	Scaled
	numMappings
)

var mappingNames = enum.Names{Native: {"native"}, Scaled: {"scaled"}}

func (m Mapping) String() string { return enum.String(m, mappingNames, "Mapping") }

// ParseMapping reads a mapping's name (native, scaled).
func ParseMapping(s string) (Mapping, error) { return parseName[Mapping](s, mappingNames, "mapping") }

// MarshalText writes the mapping's name.
func (m Mapping) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads a mapping's name.
func (m *Mapping) UnmarshalText(b []byte) error { return enum.Set(m, string(b), ParseMapping) }

// Topology is the fabric the incast runs through.
type Topology uint8

const (
	// Dumbbell is the lab's single port in front of the receiver as a
	// 2-tier leaf-spine: every sender on one ToR, the receiver on
	// another, as many spines as senders, so only the receiver's
	// downlink is oversubscribed (2N² hosts, receiver N).
	Dumbbell Topology = iota
	// FatTree is htsim's own 3-tier fat tree of the fewest hosts K³/4
	// (K even) above the senders, the receiver the last: with 15 senders
	// it is htsim's connection_matrices/incast.cm.
	FatTree
	numTopologies
)

var topologyNames = enum.Names{Dumbbell: {"dumbbell"}, FatTree: {"fattree"}}

func (t Topology) String() string { return enum.String(t, topologyNames, "Topology") }

// ParseTopology reads a topology's name (dumbbell, fattree).
func ParseTopology(s string) (Topology, error) {
	return parseName[Topology](s, topologyNames, "topology")
}

// MarshalText writes the topology's name.
func (t Topology) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads a topology's name.
func (t *Topology) UnmarshalText(b []byte) error { return enum.Set(t, string(b), ParseTopology) }

// parseName reads a name of names, any case, as a FieldError of field.
func parseName[T enum.Integer](s string, names enum.Names, field string) (T, error) {
	v, err := enum.Parse[T](s, names, field)
	if err != nil {
		return 0, &FieldError{Field: field, Value: s, Allowed: names.List()}
	}
	return v, nil
}

// FieldError is one bad field of a Scenario.
type FieldError struct {
	Field   string // the json name: "min_th"
	Value   string // as the scenario holds it
	Allowed string // what would be accepted
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("htsim: %s (%s) must be %s", e.Field, e.Value, e.Allowed)
}

func fieldErr(field string, value any, allowed string, args ...any) *FieldError {
	return &FieldError{Field: field, Value: fmt.Sprint(value), Allowed: fmt.Sprintf(allowed, args...)}
}

// Ranges. htsim has more room; these keep a run to seconds and its
// arithmetic exact.
const (
	MaxDumbbellSenders = 128  // 32 768 hosts
	MaxFatTreeSenders  = 1023 // K = 16
	MinMTUBytes        = 128
	MaxMTUBytes        = 65535
	// ethernetBytes is the Ethernet header the lab's port counts and
	// htsim's packet size includes.
	ethernetBytes = 14
	// headerBytes is htsim's UEC header (UecSrc::_hdr_size): mss = mtu − 64.
	headerBytes = 64
	// minTrimWireBytes is htsim's least trimmed packet (main_uec.cpp's
	// assertion).
	minTrimWireBytes = 64
	maxTime          = 10 * time.Second
	// maxFlowBytes: htsim reads a flow's size with stoi.
	maxFlowBytes = 1<<31 - 1
)

// Validate checks every field and the rules across them. The error joins
// a *FieldError per problem.
func (s *Scenario) Validate() error {
	var errs []error
	bad := func(field string, v any, allowed string, args ...any) {
		errs = append(errs, fieldErr(field, v, allowed, args...))
	}
	maxSenders := MaxDumbbellSenders
	if s.Topology == FatTree {
		maxSenders = MaxFatTreeSenders
	}
	if s.Topology >= numTopologies {
		bad("topology", s.Topology, "dumbbell or fattree")
	} else if s.Senders < 1 || s.Senders > maxSenders {
		bad("senders", s.Senders, "1 to %d with topology %s", maxSenders, s.Topology)
	}
	if s.FlowBytes < 1 || s.FlowBytes > maxFlowBytes {
		bad("flow_bytes", s.FlowBytes, "1b to %s", units.ByteSize(maxFlowBytes))
	}
	if s.Rate < units.Mbit || s.Rate > 10*units.Tbit {
		bad("rate", s.Rate, "1mbit to 10tbit")
	}
	mtuOK := s.MTUBytes >= MinMTUBytes && s.MTUBytes <= MaxMTUBytes
	if !mtuOK {
		bad("mtu", s.MTUBytes, "%d to %d (bytes of IP packet)", MinMTUBytes, MaxMTUBytes)
	}
	switch {
	case s.BaseRTT != 0 && s.HopLatency != 0:
		bad("hop_latency", s.HopLatency, "0 when base_rtt (%v) is set: one of the two", s.BaseRTT)
	case s.BaseRTT == 0 && s.HopLatency == 0:
		bad("base_rtt", s.BaseRTT, "1ns to %v, or hop_latency set", maxTime)
	case s.BaseRTT < 0 || s.BaseRTT > maxTime:
		bad("base_rtt", s.BaseRTT, "1ns to %v", maxTime)
	case s.HopLatency < 0 || s.HopLatency > maxTime:
		bad("hop_latency", s.HopLatency, "0 to %v", maxTime)
	}
	s.PortQueue.validate(bad, s.wireMTU(), mtuOK)
	if s.Trim && mtuOK && s.TrimBytes != 0 {
		if lo := units.ByteSize(minTrimWireBytes - ethernetBytes); s.TrimBytes < lo || s.TrimBytes > units.ByteSize(s.MTUBytes) {
			bad("trim_bytes", s.TrimBytes, "0 (the default, %s) or %s to mtu (%db): htsim's least trimmed packet is %d bytes on the wire",
				DefaultTrimBytes, lo, s.MTUBytes, minTrimWireBytes)
		}
	}
	if !s.Trim && s.TrimBytes != 0 {
		bad("trim_bytes", s.TrimBytes, "0 without trim")
	}
	if s.CC != pds.CCNSCC && s.CC != pds.CCRCCC && s.CC != pds.CCBoth {
		bad("cc", s.CC, "nscc, rccc or both")
	}
	if s.Mapping >= numMappings {
		bad("mapping", s.Mapping, "native or scaled")
	}
	if s.TargetQDelay < 0 || s.TargetQDelay > maxTime {
		bad("target_qdelay", s.TargetQDelay, "0 (htsim's) to %v", maxTime)
	}
	if s.TargetQDelay != 0 && s.CC == pds.CCRCCC {
		bad("target_qdelay", s.TargetQDelay, "0 with cc rccc: it is NSCC's")
	}
	if s.SACKThresholdBytes > 1<<30 {
		bad("sack_threshold", s.SACKThresholdBytes, "0 (the project's) to 1gb")
	}
	return errors.Join(errs...)
}

// wireMTU is the lab's packet on the wire, htsim's packet size.
func (s *Scenario) wireMTU() int { return s.MTUBytes + ethernetBytes }

// packets is how many whole packets of mtu bytes b holds.
func packets(b units.ByteSize, mtu int) int64 { return int64(b / units.ByteSize(mtu)) }

// nearestPackets is b in packets of mtu bytes, to the nearest.
func nearestPackets(b units.ByteSize, mtu int) int64 {
	return int64((b + units.ByteSize(mtu/2)) / units.ByteSize(mtu))
}
