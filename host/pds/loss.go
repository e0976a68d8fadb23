package pds

import "github.com/fabriclab/fabriclab/qdisc/enum"

// LossInference is how a sender takes a packet for lost before its RTO
// without a NACK: the ACKs' SACK bitmaps read by RACK (RFC 8985), their
// ooo_count read by SLEEK (htsim's UEC loss recovery), or neither (NACKs,
// probes and the RTO only; htsim's sources without -sleek).
type LossInference uint8

// The inferences. The zero value is RACK, the default.
const (
	LossRACK LossInference = iota
	LossSLEEK
	LossNone
	numLossInferences
)

var lossInferenceNames = enum.Names{LossRACK: {"rack"}, LossSLEEK: {"sleek"}, LossNone: {"none"}}

func (l LossInference) String() string { return enum.String(l, lossInferenceNames, "LossInference") }

// LossInferenceNames lists the inferences by name, as ParseLossInference
// takes them.
func LossInferenceNames() []string { return lossInferenceNames.Canonical() }

// ParseLossInference reads an inference's name (rack, sleek, none).
func ParseLossInference(s string) (LossInference, error) {
	return enum.Parse[LossInference](s, lossInferenceNames, "pds: loss")
}

// MarshalText writes the inference's name (JSON).
func (l LossInference) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads an inference's name.
func (l *LossInference) UnmarshalText(b []byte) error {
	return enum.Unmarshal(l, b, lossInferenceNames, "pds: loss")
}

// Fits reports whether the inference runs under congestion control cc:
// SLEEK's threshold is 1.5 congestion windows, so it needs NSCC's window
// (htsim runs it with NSCC only).
func (l LossInference) Fits(cc CCMode) bool { return l != LossSLEEK || cc.window() }

// SLEEK's constants (htsim uec.cpp: UecSrc::loss_retx_factor and
// min_retx_config).
const (
	// sleekFactor: a PDC enters loss recovery when the target holds this
	// many congestion windows of packets out of order.
	sleekFactor = 1.5
	// sleekMinPackets is the least such threshold, in packets.
	sleekMinPackets = 5
)

// maxWnder is a window controller with a ceiling (nscc.Controller.MaxWnd).
type maxWnder interface{ MaxWnd() int }

// sleekThreshold is the ooo_count at which a PDC enters loss recovery, in
// packets: 1.5 congestion windows, at most MaxWnd, at least 5 (htsim
// runSleek).
func (p *initiator) sleekThreshold() int {
	pkt := p.ep.cfg.MTU
	thr := int(sleekFactor * float64(p.ccc.wnd.Window()))
	if m, ok := p.ccc.wnd.(maxWnder); ok {
		thr = min(thr, m.MaxWnd())
	}
	return max(thr/pkt, sleekMinPackets)
}

// sleek is htsim's SLEEK on an ACK whose cc_state said the target holds
// ooo packets beyond its cumulative PSN: past sleekThreshold the PDC
// enters loss recovery until base passes what was sent by then, and takes
// for lost every packet from base on, a congestion window's worth, that
// is neither acknowledged nor already resent in this recovery. A packet
// it resends costs no window (htsim queueForRtx; a timeout's does).
func (p *initiator) sleek(ooo int) {
	if p.recovering && p.base >= p.recoveryEnd {
		p.recovering = false
	}
	if ooo < p.sleekThreshold() && !p.recovering {
		return
	}
	if !p.recovering && len(p.retxQ) == 0 {
		p.recovering, p.recoveryEnd = true, p.nxt
	}
	end := min(p.recoveryEnd, p.base+uint64(max(p.ccc.wnd.Window()/p.ep.cfg.MTU, 1)), p.nxt)
	for idx := max(p.base, p.rtxHigh); idx < end; idx++ {
		if _, ok := p.markLost(idx); ok {
			p.ep.ctr.InferredLosses++
			p.rtxHigh = idx + 1
		}
	}
}
