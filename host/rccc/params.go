package rccc

import (
	"errors"
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Params holds RCCC's configuration, the sender's (speculative credit, the
// target's ceiling) and the receiver's pacer's (rate, grant, slow pull),
// as htsim holds them for both ends (uet.md "RCCC"; htsim UecSrc::initRccc,
// UecSink, UecPullPacer, main_uec.cpp). DefaultParams derives them; a field
// may be changed afterwards, and nothing else is re-derived from it.
type Params struct {
	// LinkRate is the receiving NIC's line rate (htsim UecPullPacer:
	// linkSpeed × ports): the pacer's rate is PacerRateFactor × LinkRate,
	// and the BDP that MaxWnd follows is LinkRate × ConfigBaseRTT.
	LinkRate units.Rate
	// PacerRateFactor (htsim pull_rate_modifier) is the share of the line
	// rate the pacer grants: 0.99, "just less than line rate"
	// (main_uec.cpp), so that credited traffic alone never builds a queue
	// at the receiver's last hop.
	PacerRateFactor float64
	// ConfigBaseRTT is the unloaded round trip (htsim initRccc's
	// peer_rtt): BDP = LinkRate × ConfigBaseRTT.
	ConfigBaseRTT time.Duration
	// MTUBytes is a full packet's size as the sender spends credit on it:
	// the least a speculating sender asks for.
	MTUBytes int
	// GrantBytes (htsim _credit_per_pull, "4 packets of credit per pull,
	// as per default in UEC spec") is the most credit one grant adds: a
	// multiple of 256 bytes (the wire's unit).
	GrantBytes int
	// MaxWndBDPs is MaxWnd in BDPs (htsim initRccc: configured_maxwnd =
	// 1.5 BDP, as NSCC's). A sender never holds more credit than MaxWnd
	// and never asks for more than MaxWnd beyond what it holds.
	MaxWndBDPs float64
	// SpeculativeBytes is the credit a sender starts with, before anything
	// from the receiver (htsim startConnection: _credit = configured
	// maxwnd); the first ACK, NACK or credit drops what is left. 0: the
	// sender waits for a grant (it sends CTRL CREDIT_REQ to ask).
	SpeculativeBytes int
	// SlowPullBytes is the credit one slow pull adds: a source whose target
	// was met is granted credit it did not ask for, when no source lacks
	// any, so that its next message need not wait a round trip (htsim
	// UecPullPacer::doNextEvent: _credit_per_pull).
	SlowPullBytes int
	// SlowPullMaxBytes is the most unrequested credit slow pulls give one
	// source (htsim: quantize_floor(configured maxwnd)). 0: no slow pull.
	SlowPullMaxBytes int
	// CatchUp is how late the pacer may make up: an Advance that comes
	// after NextEvent grants at once what the schedule missed, up to this
	// much time's worth; the rest of the lateness is lost rate. 0 (htsim,
	// whose events are never late): nothing is made up. What is made up
	// arrives as one burst at the last hop: at most CatchUp × pacer rate
	// more queue.
	CatchUp time.Duration
}

// DefaultParams returns RCCC's defaults for a receiving NIC of linkRate, a
// base RTT of baseRTT and an MTU of mtu bytes, as htsim sets them: pacer
// at 0.99 × line rate, grants of 4 MTU (htsim: 4 MSS, rounded down to 256
// bytes), MaxWnd 1.5·BDP, speculative credit = MaxWnd, slow pulls of one
// grant up to MaxWnd (rounded down to 256 bytes), no catch-up.
func DefaultParams(linkRate units.Rate, baseRTT time.Duration, mtu int) Params {
	p := Params{
		LinkRate:        linkRate,
		PacerRateFactor: 0.99,
		ConfigBaseRTT:   baseRTT,
		MTUBytes:        mtu,
		GrantBytes:      4 * mtu / uet.ByteUnit * uet.ByteUnit,
		MaxWndBDPs:      1.5,
	}
	w := p.MaxWndBytes()
	p.SpeculativeBytes = w
	p.SlowPullBytes = p.GrantBytes
	p.SlowPullMaxBytes = w / uet.ByteUnit * uet.ByteUnit
	return p
}

// LabParams are DefaultParams for a software lab, whose pacer runs on a
// host that wakes late: CatchUp = baseRTT. A pacer woken up to a base RTT
// late makes the grants up (Linux timers slip by tens of µs; one grant
// takes 132 µs at 1 Gbit/s), at the price of at most one BDP of extra queue
// at the last hop, the queue NSCC aims at (target_qdelay = base RTT).
func LabParams(linkRate units.Rate, baseRTT time.Duration, mtu int) Params {
	p := DefaultParams(linkRate, baseRTT, mtu)
	p.CatchUp = baseRTT
	return p
}

// BDPBytes is LinkRate × ConfigBaseRTT in bytes.
func (p Params) BDPBytes() float64 { return cc.BDPBytes(p.LinkRate, p.ConfigBaseRTT) }

// MaxWndBytes is MaxWndBDPs × BDP in whole bytes, at least one MTU.
func (p Params) MaxWndBytes() int {
	return cc.MaxWndBytes(p.MaxWndBDPs, p.LinkRate, p.ConfigBaseRTT, p.MTUBytes)
}

// PacerRate is the rate the pacer grants credit at: PacerRateFactor ×
// LinkRate.
func (p Params) PacerRate() units.Rate {
	return units.Rate(p.PacerRateFactor * float64(p.LinkRate))
}

// Ranges: chosen here, wide, and such that the arithmetic stays finite;
// neither the spec nor htsim gives any.
const (
	minMTU        = 64
	maxMTU        = 65535
	maxTime       = time.Second
	maxGrant      = 1 << 20 // bytes
	maxMaxWnd     = 1000    // BDPs
	maxRateFactor = 2       // htsim runs its sender-only pacers at 1.1
)

// Validate checks every field's range and the rules across fields. The
// error joins one line per problem; each names the field, the value and
// the allowed range.
func (p Params) Validate() error {
	var errs []error
	bad := func(name string, v any, rule string) {
		errs = append(errs, fmt.Errorf("rccc: %s=%v: must be %s", name, v, rule))
	}
	if p.LinkRate == 0 {
		bad("link_rate", p.LinkRate, "> 0")
	}
	if !(p.PacerRateFactor > 0 && p.PacerRateFactor <= maxRateFactor) {
		bad("pacer_rate_factor", p.PacerRateFactor, fmt.Sprintf("in (0, %d] (share of link_rate; htsim 0.99)", maxRateFactor))
	}
	if p.ConfigBaseRTT < 1 || p.ConfigBaseRTT > maxTime {
		bad("config_base_rtt", p.ConfigBaseRTT, fmt.Sprintf("1ns..%v", maxTime))
	}
	mtuOK := p.MTUBytes >= minMTU && p.MTUBytes <= maxMTU
	if !mtuOK {
		bad("mtu", p.MTUBytes, fmt.Sprintf("%d..%d (bytes)", minMTU, maxMTU))
	}
	checkUnits := func(name string, v, lo int) {
		if v < lo || v > maxGrant || v%uet.ByteUnit != 0 {
			bad(name, v, fmt.Sprintf("a multiple of %d in %d..%d (bytes)", uet.ByteUnit, lo, maxGrant))
		}
	}
	checkUnits("grant", p.GrantBytes, uet.ByteUnit)
	checkUnits("slow_pull", p.SlowPullBytes, uet.ByteUnit)
	wndOK := false
	if !(p.MaxWndBDPs > 0 && p.MaxWndBDPs <= maxMaxWnd) {
		bad("max_wnd", p.MaxWndBDPs, fmt.Sprintf("in (0, %d] (BDPs)", maxMaxWnd))
	} else if p.LinkRate > 0 && p.ConfigBaseRTT > 0 && mtuOK {
		if err := cc.MaxWndCheck("rccc", p.MaxWndBDPs, p.LinkRate, p.ConfigBaseRTT, p.MTUBytes); err != nil {
			errs = append(errs, err)
		} else {
			wndOK = true
		}
	}
	if wndOK {
		w := p.MaxWndBytes()
		if p.SpeculativeBytes < 0 || p.SpeculativeBytes > w {
			bad("speculative", p.SpeculativeBytes, fmt.Sprintf("0..max_wnd (0..%d bytes)", w))
		}
		if p.SlowPullMaxBytes < 0 || p.SlowPullMaxBytes > w {
			bad("slow_pull_max", p.SlowPullMaxBytes, fmt.Sprintf("0..max_wnd (0..%d bytes)", w))
		}
	}
	if p.CatchUp < 0 || p.CatchUp > maxTime {
		bad("catch_up", p.CatchUp, fmt.Sprintf("0..%v", maxTime))
	}
	return errors.Join(errs...)
}
