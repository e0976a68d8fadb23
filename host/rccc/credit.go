package rccc

import "github.com/fabriclab/fabriclab/host/uet"

// The wire's credit and credit_target are cumulative counts of 256-byte
// units modulo 2^24 (uet.md's assumption; uet.Credit). Each end keeps the
// count unwrapped, in 64 bits, and reads a wire value as the count nearest
// to the last one it accepted: the wire value is ahead by its 24-bit
// difference read as a signed number (serial-number arithmetic as in
// RFC 1982). Either end moves by at most MaxWnd plus a grant between two
// values the other accepts, far below the 2^23 units (2 GiB) that reading
// needs.
const (
	unitsMod  = 1 << 24
	unitsHalf = 1 << 23
)

// Ahead returns how many 256-byte units the 24-bit cumulative value wire
// is ahead of the unwrapped count ref: wire − ref mod 2^24, read as a
// signed 24-bit number, −2^23..2^23−1. Positive: new units; 0: the same
// count (a duplicate); negative: an older value (reordered, stale). Bits
// of wire above the 24 are ignored.
func Ahead(ref uint64, wire uet.Credit) int32 {
	d := (uint32(wire) - uint32(ref)) & uet.Units24Mask
	if d >= unitsHalf {
		return int32(d) - unitsMod
	}
	return int32(d)
}

// CreditTargetOf returns the credit_target for a cumulative target of
// total bytes: total / 256 rounded up, mod 2^24 (htsim quantize_ceil: a
// target rounded down would leave a sender part of a unit short for
// ever). Grants are whole units, so the receiver's credit is
// uet.CreditOf(granted bytes).
func CreditTargetOf(total uint64) uet.Credit {
	q := total / uet.ByteUnit
	if total%uet.ByteUnit != 0 {
		q++
	}
	return uet.Credit(q & uet.Units24Mask)
}

// ceilUnits is bytes / 256 rounded up, for any sign.
func ceilUnits(bytes int64) int64 {
	q := bytes / uet.ByteUnit
	if bytes%uet.ByteUnit > 0 {
		q++
	}
	return q
}
