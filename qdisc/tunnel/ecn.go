// Package tunnel is the home of the IP-in-IP tunnel PEs (bpf/tunnel.c):
// IPv4-in-IPv4 encapsulation toward an egress PE and decapsulation with the
// ECN rules of RFC 6040, and seed 001's two-threshold mode, in which an
// outer ECT(1) is the WAN's "light congestion" signal for the PE and is not
// copied into the inner header.
//
// The ECN rules live here twice, once in C for the packets and once in Go
// (Encapsulate, Decapsulate) as the reference the BPF tests hold the
// programs to.
package tunnel

import (
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// ECN is an RFC 3168 codepoint: the low two bits of the DS field. The
// two-threshold marking of the switch ports (qdisc/aqm) uses it too.
type ECN = aqm.ECN

const (
	NotECT = aqm.NotECT
	ECT1   = aqm.ECT1
	ECT0   = aqm.ECT0
	CE     = aqm.CE
)

// EncapMode is how the ingress PE sets the outer ECN field (RFC 6040 §4.1).
type EncapMode uint32

// Values mirror enum encap_ecn_mode in bpf/tunnel.c.
const (
	// Normal copies the inner ECN field to the outer header, so that
	// congestion in the tunnel can be marked.
	Normal EncapMode = 0
	// Compat writes outer Not-ECT, for egress PEs that predate ECN
	// (RFC 6040's compatibility mode).
	Compat EncapMode = 1
)

var encapModeNames = enum.Names{Normal: {"normal"}, Compat: {"compat", "compatibility"}}

func (m EncapMode) String() string { return enum.String(m, encapModeNames, "encap-mode") }

// ParseEncapMode reads "normal" or "compat" ("compatibility").
func ParseEncapMode(s string) (EncapMode, error) {
	return enum.Parse[EncapMode](s, encapModeNames, "ecn mode")
}

func (m EncapMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m *EncapMode) UnmarshalText(b []byte) error {
	v, err := ParseEncapMode(string(b))
	if err == nil {
		*m = v
	}
	return err
}

// Encapsulate is the outer ECN field the ingress PE writes for a packet
// arriving with inner (RFC 6040 §4.1, Figure 3). Linux's ipip differs: it
// encapsulates an inner CE as outer ECT(0) (RFC 3168's full functionality).
func Encapsulate(inner ECN, mode EncapMode) ECN {
	if mode == Compat {
		return NotECT
	}
	return inner & 3
}

// Cell is what RFC 6040 §4.2 says of a decapsulation combination.
type Cell uint8

// Values mirror enum decap_cell in bpf/tunnel.c.
const (
	CellOK Cell = 0
	// CellWarn is (!): currently unused, SHOULD be logged.
	CellWarn Cell = 1
	// CellAlarm is (!!!): currently unused, SHOULD be logged, MAY raise an
	// alarm.
	CellAlarm Cell = 2
)

var cellNames = enum.Names{CellOK: {"ok"}, CellWarn: {"(!)"}, CellAlarm: {"(!!!)"}}

func (c Cell) String() string { return enum.String(c, cellNames, "cell") }

// Decapsulate is RFC 6040 §4.2's table (Figure 4): the inner ECN field the
// egress PE forwards, whether it drops the packet instead, and the cell's
// flag. In two-threshold mode (seed 001, "Two Threshold ECN Mechanism") an
// outer ECT(1) over an ECN-capable inner header is light congestion, for the
// PE alone: the inner keeps its codepoint. Outer CE is copied in either mode.
//
//	inner \ outer  Not-ECT  ECT(0)        ECT(1)        CE
//	Not-ECT        Not-ECT  Not-ECT(!!!)  Not-ECT(!!!)  drop(!!!)
//	ECT(0)         ECT(0)   ECT(0)        ECT(1)        CE
//	ECT(1)         ECT(1)   ECT(1)(!)     ECT(1)        CE
//	CE             CE       CE            CE(!!!)       CE
func Decapsulate(inner, outer ECN, twoThreshold bool) (result ECN, drop bool, cell Cell) {
	inner, outer = inner&3, outer&3
	switch inner {
	case NotECT:
		switch outer {
		case NotECT:
			return NotECT, false, CellOK
		case CE:
			return NotECT, true, CellAlarm
		}
		return NotECT, false, CellAlarm
	case CE:
		if outer == ECT1 {
			return CE, false, CellAlarm
		}
		return CE, false, CellOK
	}
	// inner ECT(0) or ECT(1)
	switch outer {
	case CE:
		return CE, false, CellOK
	case ECT1:
		if twoThreshold {
			return inner, false, CellOK
		}
		return ECT1, false, CellOK
	case ECT0:
		if inner == ECT1 {
			return ECT1, false, CellWarn
		}
	}
	return inner, false, CellOK
}
