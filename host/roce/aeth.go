package roce

import (
	"fmt"

	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// Syndrome is the AETH syndrome byte (IBTA Vol. 1 §9.3.5): bit 7 reserved,
// bits 6–5 the type (00 ACK, 01 RNR NAK, 11 NAK), bits 4–0 the credit
// count, RNR timer or NAK code.
type Syndrome uint8

// Syndrome fields (IBTA Vol. 1 §9.3.5).
const (
	syndromeTypeMask  Syndrome = 0xE0 // reserved bit + 2-bit type
	syndromeValueMask Syndrome = 0x1F

	SyndromeACK    Syndrome = 0x00 // 000: ACK, value = credit count
	SyndromeRNRNAK Syndrome = 0x20 // 001: receiver not ready, value = RNR timer
	SyndromeNAK    Syndrome = 0x60 // 011: NAK, value = NAKCode

	// CreditsUnlimited is the ACK credit count that means "no end-to-end
	// flow control credits in use" (IBTA Vol. 1 §9.7.7, end-to-end flow control).
	CreditsUnlimited = 0x1F

	// MSNMask keeps the 24 bits of the AETH message sequence number.
	MSNMask = 0xFFFFFF
)

// NAKCode is the low 5 bits of a NAK syndrome (IBTA Vol. 1 §9.3.5).
type NAKCode uint8

// NAK codes (IBTA Vol. 1 §9.3.5).
const (
	NAKPSNSequenceError       NAKCode = 0
	NAKInvalidRequest         NAKCode = 1
	NAKRemoteAccessError      NAKCode = 2
	NAKRemoteOperationalError NAKCode = 3
	NAKInvalidRDRequest       NAKCode = 4
)

var nakNames = enum.Names{
	NAKPSNSequenceError:       {"PSN_SEQUENCE_ERROR"},
	NAKInvalidRequest:         {"INVALID_REQUEST"},
	NAKRemoteAccessError:      {"REMOTE_ACCESS_ERROR"},
	NAKRemoteOperationalError: {"REMOTE_OPERATIONAL_ERROR"},
	NAKInvalidRDRequest:       {"INVALID_RD_REQUEST"},
}

func (c NAKCode) String() string { return enum.Format(c, nakNames, "NAK_CODE_%d") }

// ACKSyndrome returns an ACK syndrome with the 5-bit credit count credits
// (CreditsUnlimited = 0x1F for none); higher bits are dropped.
func ACKSyndrome(credits uint8) Syndrome {
	return SyndromeACK | Syndrome(credits)&syndromeValueMask
}

// NAKSyndrome returns the NAK syndrome 011 + code (0x60 | code).
func NAKSyndrome(code NAKCode) Syndrome {
	return SyndromeNAK | Syndrome(code)&syndromeValueMask
}

// RNRNAKSyndrome returns the RNR NAK syndrome 001 + the 5-bit RNR timer code.
func RNRNAKSyndrome(timer uint8) Syndrome {
	return SyndromeRNRNAK | Syndrome(timer)&syndromeValueMask
}

// IsACK reports whether s is an ACK (type 000).
func (s Syndrome) IsACK() bool { return s&syndromeTypeMask == SyndromeACK }

// IsNAK reports whether s is a NAK (type 011).
func (s Syndrome) IsNAK() bool { return s&syndromeTypeMask == SyndromeNAK }

// IsRNRNAK reports whether s is a receiver-not-ready NAK (type 001).
func (s Syndrome) IsRNRNAK() bool { return s&syndromeTypeMask == SyndromeRNRNAK }

// NAKCode returns the NAK code of a NAK syndrome (the low 5 bits; meaningless
// for other types).
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s & syndromeValueMask) }

// Credits returns the credit count of an ACK syndrome (the low 5 bits;
// meaningless for other types).
func (s Syndrome) Credits() uint8 { return uint8(s & syndromeValueMask) }

// RNRTimer returns the RNR timer code of an RNR NAK syndrome (the low 5 bits).
func (s Syndrome) RNRTimer() uint8 { return uint8(s & syndromeValueMask) }

// String returns "ACK(credits=5)", "ACK(unlimited)", "RNR_NAK(timer=14)",
// "NAK(REMOTE_ACCESS_ERROR)" or "RESERVED(0x40)".
func (s Syndrome) String() string {
	switch {
	case s.IsACK() && s.Credits() == CreditsUnlimited:
		return "ACK(unlimited)"
	case s.IsACK():
		return fmt.Sprintf("ACK(credits=%d)", s.Credits())
	case s.IsRNRNAK():
		return fmt.Sprintf("RNR_NAK(timer=%d)", s.RNRTimer())
	case s.IsNAK():
		return "NAK(" + s.NAKCode().String() + ")"
	}
	return fmt.Sprintf("RESERVED(0x%02x)", uint8(s))
}
