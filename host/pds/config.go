package pds

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Config configures an Endpoint. Fields marked optional have defaults
// (DefaultConfig shows them); Validate names the field, the value and the
// allowed range of a bad one.
type Config struct {
	// Conn is the endpoint's port: a pktio.EntropyConn on UDP 4793 (a
	// pipe in tests). Required.
	Conn pktio.Conn
	// Clock and Waker: the engine's (see engine.Config). Optional.
	Clock  engine.Clock
	Waker  engine.Waker
	Logger *slog.Logger
	// Held gets the time the endpoint's flows were held (engine.Config.
	// Held; host/hostlost). Optional: not measured.
	Held *hostlost.Log
	// HostQueue bounds the host queue in front of the switch port
	// (engine.Config.HostQueue; host/linkq). Optional: not bounded.
	HostQueue engine.HostQueue
	// BatchSize: packets per system call. Optional: 0 means
	// engine.DefaultBatchSize(LinkRate).
	BatchSize int
	// LinkRate is the line rate: the engine's port limiter and NSCC's
	// BDP. Optional: 1 Gbit/s.
	LinkRate units.Rate
	// PortCatchUp: after the transmit loop woke late for the port, it may
	// send what the line would have carried meanwhile, up to this much
	// time's worth (engine.Config.PortCatchUp). Optional: 2 ms, the stalls
	// of a 2-core VM with a busy core.
	PortCatchUp time.Duration
	// MTU is the IP packet size of a full data packet (IPv4 + UDP + PDS +
	// SES + payload). Optional: 4096, the lab's link MTU.
	MTU int
	// BaseRTT is NSCC's configured base RTT (htsim initNsccParams), the
	// unloaded round trip of the path. Optional: 100 µs (a namespace
	// path measured 40-80 µs; nscc's documentation).
	BaseRTT time.Duration
	// NewWindow makes a CCC's window controller. Optional: NSCC with
	// nscc.LabParams(LinkRate, BaseRTT, MTU), .Trimming() when TrimDSCP or
	// TrimLastHopDSCP say the fabric trims.
	NewWindow func(now time.Duration) cc.WindowController
	// CC is the congestion control of the endpoint's sender CCCs: NSCC
	// (the default), RCCC, both, or none. The receiver side needs no
	// mode: the endpoint's credit pacer serves every source whose data
	// packets carry a credit target (RUD_CC_REQ).
	CC CCMode
	// RCCC configures RCCC at both ends: a sender CCC's credit (CC rccc
	// or both) and the endpoint's credit pacer. Optional:
	// rccc.LabParams(LinkRate, BaseRTT, MTU + 14), the pacer at 0.99 of
	// the line, which the senders spend in wire bytes (IP packet and
	// Ethernet header).
	RCCC *rccc.Params
	// NewBalancer makes a PDC's entropy load balancer (host/lb), which
	// picks each packet's EV (UDP source port) and learns from its ACK's
	// M flag, trimmed NACKs and timeouts. Optional: none, one EV per PDC
	// (its packets take one path).
	NewBalancer func(pdc uint16) lb.Balancer
	// DSCP is the traffic class's code point in the data packets' TOS
	// byte (ECT(0) is added). Optional: 26, the lab's lossless class.
	DSCP uint8
	// TrimDSCP and TrimLastHopDSCP are the code points a switch port that
	// trims (the port's trim option) gives a packet it cut to its headers
	// instead of dropping it. A data packet that arrives with one of them
	// is answered at once with NACK TRIMMED, or TRIMMED_LASTHOP for the
	// second. (Without them only a trimmed packet that is not its
	// message's first is recognised, by a payload shorter than its SES
	// header says: the first packet's header has no payload length.) the lab's convention is
	// that the port in front of the receiver trims with TrimLastHopDSCP,
	// every other port with TrimDSCP (a receiver cannot tell which hop
	// cut a packet; uet.md). Optional: 0, none. Must differ from DSCP.
	TrimDSCP, TrimLastHopDSCP uint8
	// RTO is the retransmission timeout: a PDC whose oldest packet goes
	// unacknowledged this long resends what is unacknowledged. Optional:
	// 10 ms (a 2-core VM stalls a CPU for milliseconds).
	RTO time.Duration
	// Loss is how a PDC infers a loss before its RTO: RACK over the
	// ACKs' SACK bitmaps (the default), SLEEK over their ooo_count
	// (htsim's -sleek; needs NSCC's window: CC nscc or both), or none
	// (NACKs, probes and the RTO only).
	Loss LossInference
	// ProbeTimeout: a PDC with packets in flight and no ACK for this long
	// asks the target with a CTRL ACK_REQ for the oldest one; the target
	// answers with an ACK, or NACK PKT_NOT_RCVD if it never came (the
	// probe follows the data on its path, so it cannot overtake it). It
	// recovers a lost ACK or a lost last packet long before the RTO.
	// Optional: 500 µs.
	ProbeTimeout time.Duration
	// MaxRetries bounds the timeouts in a row before a PDC fails.
	// Optional: 50.
	MaxRetries int
	// IdleTimeout closes a PDC with nothing to send or acknowledge for
	// this long (the initiator sends CLOSE_CMD); a target frees a PDC it
	// heard nothing from for twice as long. Optional: 50 ms.
	IdleTimeout time.Duration
	// MaxPDCs and MaxCCCs bound the endpoint's contexts (initiator and
	// target PDCs together; sender and receiver CCCs together): past them
	// a new PDC is answered with NACK NO_PDC_AVAIL or NO_CCC_AVAIL.
	// Optional: 4096 and 1024.
	MaxPDCs, MaxCCCs int
	// AckBytes: a target ACKs at once when this many bytes arrived on a
	// PDC since its last ACK (htsim's sink coalesces up to 16 384 B);
	// otherwise at the end of each receive batch, and at once on CE or an
	// ACK request. Optional: 16384.
	AckBytes int
	// NoECNEcho makes the target deaf to CE: it counts CE-marked
	// arrivals but never echoes them (the M flag of its ACKs and NACKs
	// stays clear) nor ACKs at once for them. A misconfigured NIC for
	// the three-layers labs, as mlx5's roce_np/enable 0 is for RoCEv2.
	NoECNEcho bool
	// Verify checks every received payload against the pattern a Sender
	// with Stream.Verify fills (host/pattern), counting messages that
	// differ (verify_errors). Senders to this endpoint must verify too.
	Verify bool
	// Trace, if set, sees every CCC transition with its time (keep it
	// short: it runs under the endpoint's lock).
	Trace func(CCCTransition)
	// Wires are the paths' store-and-forward and propagation that the
	// lab's devices do not model, by source address: every datagram from
	// a source with a wire reaches the endpoint its Wire.Delay after it
	// arrived (pktio.DelayConn), data at the target and ACKs at the
	// initiator alike. Real time only (not with a FakeClock). Optional:
	// none.
	Wires map[netip.Addr]pktio.Wire
	// FirstPDCID is the first PDC ID the endpoint gives, the next ones
	// counting up from it. A lab gives the endpoints of one host IDs apart,
	// so that the host's NIC, which serves its flows in turn by SPDCID
	// modulo its queues (qdisc ClassConfig.FlowQueues), tells their PDCs
	// apart. Optional: 0 means a random one (a restarted endpoint does not
	// reuse the IDs its peers still hold state for).
	FirstPDCID uint16
}

// Bounds of the configuration.
const (
	minMTU          = 512
	maxMTU          = 9000
	maxPDCWindow    = 1024 // packets between a PDC's oldest unacknowledged and its next PSN
	maxSynPackets   = uet.PSNOffsetMask
	MinRTO          = 100 * time.Microsecond // MinRTO and MaxRTO bound Config.RTO, slowed
	MaxRTO          = 10 * time.Second
	maxIdleTimeout  = time.Hour
	MaxContexts     = 1 << 16 // PDC IDs are 16 bits: MaxPDCs and MaxCCCs are below it
	defaultDSCP     = 26
	defaultAckBytes = 16384
)

// DefaultConfig returns the defaults, Conn unset.
func DefaultConfig() Config {
	return Config{
		LinkRate:     units.Gbit,
		MTU:          4096,
		BaseRTT:      100 * time.Microsecond,
		DSCP:         defaultDSCP,
		RTO:          10 * time.Millisecond,
		ProbeTimeout: 500 * time.Microsecond,
		MaxRetries:   50,
		IdleTimeout:  50 * time.Millisecond,
		MaxPDCs:      4096,
		MaxCCCs:      1024,
		AckBytes:     defaultAckBytes,
	}
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.LinkRate = cmp.Or(c.LinkRate, d.LinkRate)
	c.BatchSize = cmp.Or(c.BatchSize, engine.DefaultBatchSize(c.LinkRate))
	c.MTU = cmp.Or(c.MTU, d.MTU)
	c.PortCatchUp = cmp.Or(c.PortCatchUp, d.PortCatchUp)
	c.BaseRTT = cmp.Or(c.BaseRTT, d.BaseRTT)
	c.DSCP = cmp.Or(c.DSCP, d.DSCP)
	c.RTO = cmp.Or(c.RTO, d.RTO)
	c.ProbeTimeout = cmp.Or(c.ProbeTimeout, d.ProbeTimeout)
	c.MaxRetries = cmp.Or(c.MaxRetries, d.MaxRetries)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, d.IdleTimeout)
	c.MaxPDCs = cmp.Or(c.MaxPDCs, d.MaxPDCs)
	c.MaxCCCs = cmp.Or(c.MaxCCCs, d.MaxCCCs)
	c.AckBytes = cmp.Or(c.AckBytes, d.AckBytes)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks c as New would use it (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Conn == nil:
		return fmt.Errorf("pds: conn: required")
	case c.MTU < minMTU || c.MTU > maxMTU:
		return fmt.Errorf("pds: mtu %d: must be %d..%d", c.MTU, minMTU, maxMTU)
	case c.PortCatchUp < 0 || c.PortCatchUp > time.Second:
		return fmt.Errorf("pds: port_catch_up %v: must be 0..1s", c.PortCatchUp)
	case c.DSCP > 63:
		return fmt.Errorf("pds: dscp %d: must be 0..63", c.DSCP)
	case c.TrimDSCP > 63 || c.TrimDSCP != 0 && c.TrimDSCP == c.DSCP:
		return fmt.Errorf("pds: trim_dscp %d: must be 0..63 and not dscp (%d)", c.TrimDSCP, c.DSCP)
	case c.TrimLastHopDSCP > 63 || c.TrimLastHopDSCP != 0 && c.TrimLastHopDSCP == c.DSCP:
		return fmt.Errorf("pds: trim_lasthop_dscp %d: must be 0..63 and not dscp (%d)", c.TrimLastHopDSCP, c.DSCP)
	case c.BaseRTT < time.Microsecond || c.BaseRTT > time.Second:
		return fmt.Errorf("pds: base_rtt %v: must be 1us..1s", c.BaseRTT)
	case c.RTO < MinRTO || c.RTO > MaxRTO:
		return fmt.Errorf("pds: rto %v: must be %v..%v", c.RTO, MinRTO, MaxRTO)
	case c.ProbeTimeout < 10*time.Microsecond || c.ProbeTimeout > c.RTO:
		return fmt.Errorf("pds: probe_timeout %v: must be 10us..rto (%v)", c.ProbeTimeout, c.RTO)
	case c.MaxRetries < 1 || c.MaxRetries > 1000:
		return fmt.Errorf("pds: max_retries %d: must be 1..1000", c.MaxRetries)
	case c.IdleTimeout < c.RTO || c.IdleTimeout > maxIdleTimeout:
		return fmt.Errorf("pds: idle_timeout %v: must be rto (%v)..%v", c.IdleTimeout, c.RTO, maxIdleTimeout)
	case c.MaxPDCs < 1 || c.MaxPDCs >= MaxContexts:
		return fmt.Errorf("pds: max_pdcs %d: must be 1..%d", c.MaxPDCs, MaxContexts-1)
	case c.MaxCCCs < 1 || c.MaxCCCs >= MaxContexts:
		return fmt.Errorf("pds: max_cccs %d: must be 1..%d", c.MaxCCCs, MaxContexts-1)
	case c.AckBytes < c.MTU || c.AckBytes > 1<<20:
		return fmt.Errorf("pds: ack_bytes %d: must be mtu (%d)..%d", c.AckBytes, c.MTU, 1<<20)
	}
	if c.CC >= numCCModes {
		return fmt.Errorf("pds: cc %d: must be one of %v", c.CC, CCModeNames())
	}
	for a, w := range c.Wires {
		if err := w.Validate(); err != nil {
			return fmt.Errorf("pds: wires[%v]: %w", a, err)
		}
	}
	if _, fake := c.Clock.(*engine.FakeClock); fake && len(c.Wires) > 0 {
		return errors.New("pds: wires: a wire delays in real time; not with a fake clock")
	}
	if c.Loss >= numLossInferences {
		return fmt.Errorf("pds: loss %d: must be one of %v", c.Loss, LossInferenceNames())
	}
	if !c.Loss.Fits(c.CC) {
		return fmt.Errorf("pds: loss sleek with cc %v: SLEEK's threshold is 1.5 congestion windows, so it needs cc nscc or both", c.CC)
	}
	// RCCC first: its MTU is the frame's, so with the lab's parameters its
	// MaxWnd needs the larger base_rtt and its hint satisfies NSCC too.
	if err := c.rcccParams().Validate(); err != nil {
		return fmt.Errorf("pds: %w", err) // rccc names itself
	}
	if c.NewWindow == nil {
		p := c.nsccParams()
		if err := p.Validate(); err != nil {
			return fmt.Errorf("pds: nscc for link_rate %v base_rtt %v mtu %d: %w", c.LinkRate, c.BaseRTT, c.MTU, err)
		}
	}
	return nil
}

// nsccParams are the default NSCC parameters (after withDefaults): the
// lab's (nscc.LabParams), for a fabric that trims when the endpoint knows
// trimmed packets' code points (nscc.Params.Trimming: tq 0.75 × RTT).
func (c Config) nsccParams() nscc.Params {
	p := nscc.LabParams(c.LinkRate, c.BaseRTT, c.MTU)
	if c.Trims() {
		p = p.Trimming()
	}
	return p
}

// Trims reports whether the endpoint is told the fabric trims: it knows
// the code points of trimmed packets.
func (c Config) Trims() bool { return c.TrimDSCP != 0 || c.TrimLastHopDSCP != 0 }

// rcccParams is Config.RCCC or its default (after withDefaults).
func (c Config) rcccParams() rccc.Params {
	if c.RCCC != nil {
		return *c.RCCC
	}
	return rccc.LabParams(c.LinkRate, c.BaseRTT, c.MTU+ethernetLen)
}
