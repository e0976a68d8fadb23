// Package qdisc makes a Linux device behave like a switch egress port:
// traffic classes selected by DSCP, one real kernel queue per class draining
// at the port speed (HTB), and ECN marking on the instantaneous backlog with
// the step or WRED curve of a data-centre switch (seed 000).
//
// The enqueue decision runs in an eBPF program at TC egress of the port. On a
// veth pair a second program at TC ingress of the peer sees every packet as it
// leaves the queue, so the backlog is exact and the sojourn measured. Devices
// whose far end is not ours (tun, a physical NIC) use a virtual queue that
// drains at the configured rate.
package qdisc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/enum"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// NumClasses is the number of traffic classes of a port, as on switches
// (priorities 0-7).
const NumClasses = 8

// NumDSCP is the number of DSCP values (6 bits).
const NumDSCP = 64

// Conventional classes of a RoCE fabric (seed 000): RoCE data on DSCP 26 in
// priority 3 with ECN; CNPs on DSCP 48 in priority 6, strict priority.
const (
	ClassBestEffort ClassID = 0
	ClassRoCE       ClassID = 3
	ClassCNP        ClassID = 6
	DSCPRoCE        DSCP    = 26
	DSCPCNP         DSCP    = 48
)

// MinRate is the slowest port and class rate, 640 kbit/s: once ten times
// the 8 kbit/s each class kept of it in HTB (its guarantee is a byte a
// second now, leafRates), kept as the floor labs and configs were
// validated against.
const MinRate = units.Rate(10 * NumClasses * 8000)

// maxBufferBytes bounds limits and thresholds: the BPF marking arithmetic
// multiplies a byte count by a 32-bit probability in 64 bits.
const maxBufferBytes = units.ByteSize(1 << 32)

// ClassID is a traffic class, 0 to NumClasses-1.
type ClassID uint8

// DSCP is a Differentiated Services Code Point, 0 to 63.
type DSCP uint8

// ECNMode is how a class marks ECN-capable packets.
type ECNMode uint32

// The modes (ECNOff, ECNStep, ...) are enum ecn_mode of bpf/port.h, as
// bpf2go generates it (bpf.PortEcnMode); each is declared in its home,
// mode_NAME.go (see marker).

// QueueMode is how a port learns its backlog.
type QueueMode uint32

// Values mirror enum queue_mode in bpf/port.h.
const (
	// QueueVeth: a real HTB queue on a veth whose peer runs the dequeue
	// program. Exact backlog, measured sojourn.
	QueueVeth QueueMode = 0
	// QueueVirtual: no dequeue hook; a virtual queue per class drains at
	// the class (or port) rate. For tun devices and physical NICs.
	QueueVirtual QueueMode = 1
)

var queueModeNames = enum.Names{QueueVeth: {"veth"}, QueueVirtual: {"virtual"}}

func (m QueueMode) String() string { return enum.String(m, queueModeNames, "queue-mode") }

func (m QueueMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m *QueueMode) UnmarshalText(b []byte) error {
	return enum.Unmarshal(m, b, queueModeNames, "queue mode")
}

// ClassConfig is the queue and marking policy of one traffic class.
type ClassConfig struct {
	// Name labels the class in tables. Optional.
	Name string `json:"name,omitempty"`
	// LimitBytes is the class's buffer: a packet that would take the
	// backlog above it is tail-dropped.
	LimitBytes units.ByteSize `json:"limit"`
	// ECN is the marking mode; its settings are the fields its marker
	// (mode_NAME.go) reads.
	ECN ECNMode `json:"ecn"`
	// MinThBytes is WRED's min_th, or K in step mode.
	MinThBytes units.ByteSize `json:"min_th"`
	// MaxThBytes is WRED's max_th. Unused in step mode.
	MaxThBytes units.ByteSize `json:"max_th"`
	// MaxP is WRED's marking probability at max_th, in (0, 1].
	MaxP float64 `json:"max_p"`
	// WREDDrop drops Not-ECT packets on the marking curve instead of
	// letting them pass (Linux RED's behaviour). Off: Not-ECT packets are
	// only dropped at the limit, as on RoCE switches.
	WREDDrop bool `json:"wred_drop,omitempty"`
	// Strict serves the class before all non-strict classes (CNPs).
	Strict bool `json:"strict,omitempty"`
	// Rate is the virtual queue's drain rate. Optional: 0 means the port
	// rate. Only used in QueueVirtual mode.
	Rate units.Rate `json:"rate,omitempty"`

	// The dequeue AQMs (tcn, codel, ecnsharp) decide on the sojourn of
	// the packet leaving the queue. WREDDrop makes them drop the Not-ECT
	// packets they would mark, as Linux CoDel does.

	// InsTarget is TCN's threshold and ECN♯'s ins_target: mark when the
	// sojourn exceeds it. With InsMax it is Kmin of ECN♯'s probabilistic
	// instantaneous curve. Rule of thumb: λ·RTT_p90 (seed 002 eq. 2).
	InsTarget time.Duration `json:"ins_target,omitempty"`
	// InsMax turns ECN♯'s instantaneous cut-off into the Kmin/Kmax/Pmax
	// curve DCQCN needs (seed 002 §3.5): probability rising from 0 at
	// InsTarget to MaxP at InsMax, every packet at or above InsMax.
	// 0: cut-off at InsTarget.
	InsMax time.Duration `json:"ins_max,omitempty"`
	// PstTarget and PstInterval are ECN♯'s persistent-queue target and
	// observation interval (Algorithm 1). Rules of thumb: PstTarget ≥
	// λ·RTT_avg, PstInterval ≈ RTT_p90 (§3.4).
	PstTarget   time.Duration `json:"pst_target,omitempty"`
	PstInterval time.Duration `json:"pst_interval,omitempty"`
	// SqrtLaw schedules ECN♯'s next persistent mark at now +
	// PstInterval/√count, as the authors' ns-3 code does, instead of
	// Algorithm 1's marking_next += PstInterval/count.
	SqrtLaw bool `json:"sqrt_law,omitempty"`
	// QueueSignal makes ECN♯ compare the class backlog (bytes queued when
	// the packet leaves) instead of the sojourn (§3.5: equivalent in a
	// single queue). Its thresholds are then the byte fields below.
	QueueSignal    bool           `json:"queue_signal,omitempty"`
	InsTargetBytes units.ByteSize `json:"ins_target_bytes,omitempty"`
	InsMaxBytes    units.ByteSize `json:"ins_max_bytes,omitempty"`
	PstTargetBytes units.ByteSize `json:"pst_target_bytes,omitempty"`
	// Target and Interval are CoDel's (RFC 8289: 5 ms and 100 ms on the
	// Internet; data centres use µs).
	Target   time.Duration `json:"target,omitempty"`
	Interval time.Duration `json:"interval,omitempty"`
	// ForceTargets accepts an ECN♯ PstTarget at or above InsTarget, which
	// makes the persistent logic pointless and is usually a typo.
	ForceTargets bool `json:"force_targets,omitempty"`
	// TwoThreshold are the settings of ECNTwoThreshold (seed 001).
	TwoThreshold TwoThreshold `json:"two_threshold,omitzero"`

	// XoffBytes turns on PPFC (seed 003) for the class: a packet that
	// takes the backlog to XoffBytes or above stops its source; a paused
	// source is resumed by the first packet the switch sends it once the
	// backlog is at or below XonBytes, and otherwise restarts when the
	// stop's pause ends: the time the class takes to drain to XonBytes/2.
	// 0: off. XonBytes should cover the sources' restart time at the
	// port rate, or the queue runs dry before they send again.
	XoffBytes units.ByteSize `json:"xoff,omitempty"`
	XonBytes  units.ByteSize `json:"xon,omitempty"`
	// AlarmBytes is PPFC's early warning. Optional: 0 sends no alarm. A
	// packet that takes the backlog to AlarmBytes or above (below
	// XoffBytes) alarms its source once per congestion episode (from the
	// backlog's rise above XonBytes to its fall back to XonBytes), with the
	// time the class takes to drain to XonBytes: the source does not raise
	// its rate for that long. Between XonBytes and XoffBytes, exclusive.
	// (Holds need no setting: a source stopped in an episode whose pause
	// runs out before the backlog is down to XonBytes is held again.)
	AlarmBytes units.ByteSize `json:"alarm,omitempty"`

	// TrimBytes turns on packet trimming (UET's switch behaviour; Linux
	// has none, the enqueue program does it): a packet that would be
	// tail-dropped at LimitBytes leaves instead as its first TrimBytes
	// bytes of IP packet, with DSCP TrimDSCP (its ECN bits kept), through
	// class TrimClass, served in strict priority, so that the receiver
	// can NACK it at once. Only UDP packets longer than TrimBytes are
	// trimmed, IPv4 (UDP checksum none) or IPv6 without extension headers
	// (UDP checksum computed anew over what is kept; not below 48 bytes,
	// its headers); other packets, and any when TrimClass is full too, are
	// dropped. 0: off. MinTrimBytes to MaxTrimBytes; DefaultTrimBytes
	// keeps UET's headers.
	TrimBytes units.ByteSize `json:"trim_bytes,omitempty"`
	// TrimDSCP is the code point of trimmed packets, by which a receiver
	// knows them (host/pds Config.TrimDSCP) and the next port classifies
	// them (map it to that port's trim class). 1 to 63, and not one the
	// trimming class takes. DefaultTrimDSCP with TrimBytes.
	TrimDSCP DSCP `json:"trim_dscp,omitempty"`
	// TrimClass takes the trimmed packets: another class, which does not
	// trim itself; the port serves it in strict priority (an HTB prio of
	// its own in veth mode, its own virtual queue in virtual mode) and its
	// limit applies. DefaultTrimClass with TrimBytes.
	TrimClass ClassID `json:"trim_class,omitempty"`

	// Remark rewrites the DSCP of the class's packets to RemarkDSCP as
	// they leave (their ECN bits kept), as a switch's egress rewrite
	// does. The port classifies and marks by the code point as it
	// arrived; the next hop sees the new one. Seed 000's first
	// misconfiguration ("a switch in the middle clears DSCP") is
	// remark with DSCP 0. Off by default.
	Remark     bool `json:"remark,omitempty"`
	RemarkDSCP DSCP `json:"remark_dscp,omitempty"`

	// FlowQueues splits the class into this many queues, one per flow
	// bucket, which HTB serves round robin (DRR, a frame's worth each
	// turn), as a NIC's scheduler serves its QPs or PDCs and htsim's
	// UecNIC its sources: a flow starting beside another gets its turn,
	// not the share of the FIFO its burst took. A UET packet's flow is
	// its source PDC (its SPDCID modulo FlowQueues, so a host's PDCs
	// take distinct queues); any other packet's, the kernel's hash of
	// its 5-tuple. The class's limit, marking and counters stay the
	// class's. 0: one FIFO, as a switch's class. 0 to MaxFlowQueues; not
	// on a strict or trim class, and only on a port with HTB queues
	// (queue mode veth, or shape). It cannot change on a running port.
	FlowQueues int `json:"flow_queues,omitempty"`
}

// flowQueueClass is the first class with flow queues, if any.
func (c *Config) flowQueueClass() (int, bool) {
	for i := range c.Classes {
		if c.Classes[i].FlowQueues > 0 {
			return i, true
		}
	}
	return 0, false
}

// MaxFlowQueues is the most flow queues a class has (ClassConfig.FlowQueues):
// each is an HTB class of its own, 256 HTB minors per class.
const MaxFlowQueues = 256

// Packet trimming settings (ClassConfig.TrimBytes, TrimDSCP, TrimClass).
const (
	// DefaultTrimBytes keeps every header a UET receiver needs to NACK
	// a trimmed packet: IPv4 (20) + UDP (8) + PDS (12 for RUD_REQ, 16
	// for RUD_CC_REQ) + SES standard request (44) = 88 bytes, with 40 to
	// spare for IPv4 options or a longer PDS header. RoCEv2's BTH and
	// RETH (20 + 8 + 12 + 16 = 56) fit too.
	DefaultTrimBytes units.ByteSize = 128
	// MinTrimBytes is an IPv4 and a UDP header: the least a trimmed
	// packet keeps to stay a UDP datagram.
	MinTrimBytes units.ByteSize = 28
	// MaxTrimBytes is an Ethernet MTU: trimming to more keeps payload,
	// not headers.
	MaxTrimBytes units.ByteSize = 1500
	// DefaultTrimDSCP is a code point no standard PHB uses (CS1 is 8,
	// AF11 10) and nothing else in the lab sends.
	DefaultTrimDSCP DSCP = 9
	// DefaultTrimClass is the highest class, free in DefaultConfig.
	DefaultTrimClass ClassID = NumClasses - 1
)

// trimFrameOverhead is the Ethernet header a trimmed frame carries besides
// its TrimBytes of IP packet.
const trimFrameOverhead = 14

// SetTrim turns trimming on with the defaults: DefaultTrimBytes of IP
// packet, DefaultTrimDSCP, through DefaultTrimClass.
func (cc *ClassConfig) SetTrim() {
	cc.TrimBytes, cc.TrimDSCP, cc.TrimClass = DefaultTrimBytes, DefaultTrimDSCP, DefaultTrimClass
}

// StrictPriority reports whether the port serves class c before the other
// classes: Strict, or the trim class of a class that trims.
func (c *Config) StrictPriority(class ClassID) bool {
	if int(class) >= NumClasses {
		return false
	}
	if c.Classes[class].Strict {
		return true
	}
	return c.TrimSource(class)
}

// TrimSource reports whether some class trims into class c.
func (c *Config) TrimSource(class ClassID) bool {
	for i := range c.Classes {
		if cc := &c.Classes[i]; cc.TrimBytes != 0 && cc.TrimClass == class && ClassID(i) != class {
			return true
		}
	}
	return false
}

// Notifies reports whether some class sends notifications through
// ppfc_egress: PPFC, or CNPs to tunnel-ingress PEs (two-threshold).
func (c *Config) Notifies() bool {
	for i := range c.Classes {
		if c.Classes[i].ECN == ECNTwoThreshold && c.Classes[i].TwoThreshold.NotifyInterval > 0 {
			return true
		}
	}
	return c.PPFC()
}

// PPFC reports whether some class sends PPFC notifications.
func (c *Config) PPFC() bool {
	for i := range c.Classes {
		if c.Classes[i].XoffBytes != 0 {
			return true
		}
	}
	return false
}

// Config is the whole configuration of a port.
type Config struct {
	// Rate is the port speed: the HTB root rate, and the virtual queue's
	// drain rate.
	Rate units.Rate `json:"rate"`
	// DSCPClass maps each DSCP to a traffic class.
	DSCPClass [NumDSCP]ClassID `json:"dscp_class"`
	// DefaultClass takes frames that are not IP (ARP, LLDP).
	DefaultClass ClassID                 `json:"default_class"`
	Classes      [NumClasses]ClassConfig `json:"classes"`
}

// DefaultConfig is a port of the given speed set up as in seed 000: DSCP 26
// goes to class 3 ("roce") with WRED between 50 KB and 1 MB and max_p 0.1
// (the seed's "queue 3 ecn min 51200 max 1024000 probability 0.1"); DSCP 48
// goes to class 6 ("cnp"), strict priority; everything else to class 0.
func DefaultConfig(rate units.Rate) Config {
	c := Config{Rate: rate, DefaultClass: ClassBestEffort}
	for i := range c.Classes {
		c.Classes[i] = ClassConfig{Name: fmt.Sprintf("tc%d", i), LimitBytes: 1 * units.MiB}
	}
	c.Classes[ClassBestEffort].Name = "default"
	c.Classes[ClassRoCE] = ClassConfig{
		Name:       "roce",
		LimitBytes: 2 * units.MiB,
		ECN:        ECNWRED,
		MinThBytes: 51200,
		MaxThBytes: 1024000,
		MaxP:       0.1,
	}
	c.Classes[ClassCNP] = ClassConfig{Name: "cnp", LimitBytes: 256 * units.KiB, Strict: true}
	c.DSCPClass[DSCPRoCE] = ClassRoCE
	c.DSCPClass[DSCPCNP] = ClassCNP
	return c
}

// Validate checks every field and reports each problem with the field, the
// value and what is allowed.
func (c *Config) Validate() error {
	var errs []error
	if c.Rate < MinRate {
		errs = append(errs, fmt.Errorf("rate (%s) must be at least %s", c.Rate, MinRate))
	}
	if c.DefaultClass >= NumClasses {
		errs = append(errs, fmt.Errorf("default_class (%d) must be 0 to %d", c.DefaultClass, NumClasses-1))
	}
	for d, cl := range c.DSCPClass {
		if cl >= NumClasses {
			errs = append(errs, fmt.Errorf("dscp %d: class (%d) must be 0 to %d", d, cl, NumClasses-1))
		}
	}
	for i := range c.Classes {
		if err := c.Classes[i].validate(); err != nil {
			errs = append(errs, fmt.Errorf("class %d: %w", i, err))
		}
		if err := c.validateTrim(ClassID(i)); err != nil {
			errs = append(errs, fmt.Errorf("class %d: %w", i, err))
		}
		if fq := c.Classes[i].FlowQueues; fq != 0 && c.StrictPriority(ClassID(i)) {
			errs = append(errs, fmt.Errorf("class %d: flow_queues (%d) must be 0 on a strict or trim class (its packets are served first, one FIFO)", i, fq))
		}
	}
	return errors.Join(errs...)
}

// validateTrim checks how class i's trimming fits the other classes.
func (c *Config) validateTrim(i ClassID) error {
	cc := &c.Classes[i]
	if cc.TrimBytes == 0 || cc.TrimClass >= NumClasses {
		return nil // off, or reported by validate
	}
	var errs []error
	t := &c.Classes[cc.TrimClass]
	switch {
	case cc.TrimClass == i:
		errs = append(errs, fmt.Errorf("trim: trim_class (%d) must be another class (0 to %d, not %d)", cc.TrimClass, NumClasses-1, i))
	case t.TrimBytes != 0:
		errs = append(errs, fmt.Errorf("trim: trim_class (%d) trims too: a trim class must not trim (trimmed packets could only be dropped there)", cc.TrimClass))
	case uint64(t.LimitBytes) < uint64(cc.TrimBytes)+trimFrameOverhead:
		errs = append(errs, fmt.Errorf("trim: trim_class %d's limit (%s) must hold one trimmed frame (trim_bytes %s + %db Ethernet header)",
			cc.TrimClass, t.LimitBytes, cc.TrimBytes, trimFrameOverhead))
	}
	if cc.TrimDSCP < NumDSCP && c.DSCPClass[cc.TrimDSCP] == i {
		errs = append(errs, fmt.Errorf("trim: trim_dscp (%d) is a DSCP of class %d itself: a receiver could not tell trimmed packets from whole ones (map it to the trim class: dscp %d -> class %d)",
			cc.TrimDSCP, i, cc.TrimDSCP, cc.TrimClass))
	}
	return errors.Join(errs...)
}

func (cc *ClassConfig) validate() error {
	var errs []error
	if cc.LimitBytes == 0 || cc.LimitBytes > maxBufferBytes {
		errs = append(errs, fmt.Errorf("limit (%s) must be greater than 0 and at most %s", cc.LimitBytes, maxBufferBytes))
	}
	if mk := markerOf(cc.ECN); mk != nil {
		errs = append(errs, mk.validate(cc)...)
	} else {
		errs = append(errs, fmt.Errorf("ecn (%d) must be %s", uint32(cc.ECN), ECNModeNames()))
	}
	// Settings only another mode reads, which would silently do nothing.
	for i, mk := range markers {
		if sc, ok := mk.marker.(strayChecker); ok && ECNMode(i) != cc.ECN {
			if err := sc.stray(cc); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if cc.FlowQueues < 0 || cc.FlowQueues > MaxFlowQueues {
		errs = append(errs, fmt.Errorf("flow_queues (%d) must be 0 (one FIFO) to %d", cc.FlowQueues, MaxFlowQueues))
	}
	if cc.Rate != 0 && cc.Rate < MinRate {
		errs = append(errs, fmt.Errorf("rate (%s) must be 0 (the port's) or at least %s", cc.Rate, MinRate))
	}
	if cc.WREDDrop && cc.ECN == ECNOff {
		errs = append(errs, errors.New("wred_drop needs an ecn mode other than off: it drops where ECT would be marked"))
	}
	switch {
	case cc.XoffBytes == 0 && cc.XonBytes != 0:
		errs = append(errs, fmt.Errorf("ppfc: xon (%s) needs xoff (0: PPFC off)", cc.XonBytes))
	case cc.XoffBytes > cc.LimitBytes:
		errs = append(errs, fmt.Errorf("ppfc: xoff (%s) must not exceed limit (%s)", cc.XoffBytes, cc.LimitBytes))
	case cc.XoffBytes != 0 && cc.XonBytes >= cc.XoffBytes:
		errs = append(errs, fmt.Errorf("ppfc: xon (%s) must be below xoff (%s)", cc.XonBytes, cc.XoffBytes))
	}
	switch {
	case cc.AlarmBytes == 0:
	case cc.XoffBytes == 0:
		errs = append(errs, fmt.Errorf("ppfc: alarm (%s) needs xoff (0: PPFC off)", cc.AlarmBytes))
	case cc.AlarmBytes <= cc.XonBytes || cc.AlarmBytes >= cc.XoffBytes:
		// At or below xon an alarm would carry no drain time, and no
		// congestion episode would have begun.
		errs = append(errs, fmt.Errorf("ppfc: alarm (%s) must be above xon (%s) and below xoff (%s), or 0 (off)", cc.AlarmBytes, cc.XonBytes, cc.XoffBytes))
	}
	switch {
	case cc.RemarkDSCP >= NumDSCP:
		errs = append(errs, fmt.Errorf("remark: remark_dscp (%d) must be 0 to %d", cc.RemarkDSCP, NumDSCP-1))
	case !cc.Remark && cc.RemarkDSCP != 0:
		errs = append(errs, fmt.Errorf("remark: remark_dscp (%d) needs remark (off)", cc.RemarkDSCP))
	}
	switch {
	case cc.TrimBytes == 0 && (cc.TrimDSCP != 0 || cc.TrimClass != 0):
		errs = append(errs, fmt.Errorf("trim: trim_dscp (%d) and trim_class (%d) need trim_bytes (0: trimming off)", cc.TrimDSCP, cc.TrimClass))
	case cc.TrimBytes == 0:
	default:
		if cc.TrimBytes < MinTrimBytes || cc.TrimBytes > MaxTrimBytes {
			errs = append(errs, fmt.Errorf("trim: trim_bytes (%s) must be %s to %s, or 0 (off)", cc.TrimBytes, MinTrimBytes, MaxTrimBytes))
		}
		if cc.TrimDSCP == 0 || cc.TrimDSCP >= NumDSCP {
			errs = append(errs, fmt.Errorf("trim: trim_dscp (%d) must be 1 to %d (0 is best effort: a receiver could not tell trimmed packets)", cc.TrimDSCP, NumDSCP-1))
		}
		if cc.TrimClass >= NumClasses {
			errs = append(errs, fmt.Errorf("trim: trim_class (%d) must be 0 to %d", cc.TrimClass, NumClasses-1))
		}
	}
	return errors.Join(errs...)
}

// maxAQMTime bounds AQM durations: the programs compute interval·2^16 and
// max_p·(sojourn−Kmin) in 64 bits.
const maxAQMTime = 4 * time.Second

func checkDuration(field string, d time.Duration, mode ECNMode) error {
	if d <= 0 || d > maxAQMTime {
		return fmt.Errorf("%s: %s (%s) must be greater than 0 and at most %s", mode, field, units.FormatDuration(d), units.FormatDuration(maxAQMTime))
	}
	return nil
}

// DSCPRuns groups sorted DSCPs into runs, "24-27,30" with sep ","
// and dash "-": portctl's DSCP map and the dialects print them so.
func DSCPRuns(ds []int, sep, dash string) string {
	var parts []string
	for i := 0; i < len(ds); {
		j := i
		for j+1 < len(ds) && ds[j+1] == ds[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ds[i]))
		} else {
			parts = append(parts, strconv.Itoa(ds[i])+dash+strconv.Itoa(ds[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, sep)
}
