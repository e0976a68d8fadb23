package uet

import "time"

// ServiceTime is an NSCC cc_state's service_time: how long the receiver
// held the acknowledged packet before it sent the ACK, 16 bits in units of
// ServiceTimeUnit (UE 1.0.1 §3.6.13; uet.md). The sender subtracts it from
// the RTT sample.
type ServiceTime uint16

// ServiceTimeUnit is one unit of ServiceTime.
const ServiceTimeUnit = 128 * time.Nanosecond

// MaxServiceTime is the largest service_time, 65 535 × 128 ns ≈ 8.39 ms.
const MaxServiceTime ServiceTime = 0xFFFF

// ServiceTimeOf converts d to ServiceTime units, rounding down, and
// saturates at MaxServiceTime (a negative d gives 0).
func ServiceTimeOf(d time.Duration) ServiceTime {
	switch {
	case d <= 0:
		return 0
	case d >= time.Duration(MaxServiceTime)*ServiceTimeUnit:
		return MaxServiceTime
	}
	return ServiceTime(d / ServiceTimeUnit)
}

// Duration returns s as a time.Duration.
func (s ServiceTime) Duration() time.Duration { return time.Duration(s) * ServiceTimeUnit }

// ByteUnit is the size in bytes of one unit of RcvdBytes and Credit.
const ByteUnit = 256

// Units24Mask keeps the 24 bits of a RcvdBytes or Credit.
const Units24Mask = 1<<24 - 1

// RcvdBytes is an NSCC cc_state's rcvd_bytes: the receiver's cumulative
// count of received bytes in ByteUnit units, modulo 2^24 (UE 1.0.1 §3.6.13;
// uet.md). A window of 2^24 units is 4 GiB: the sender compares two
// samples with Since as long as fewer bytes than that arrive between them.
type RcvdBytes uint32

// RcvdBytesOf returns the rcvd_bytes a receiver sends when it has received
// total bytes since the PDC began: total / 256 (rounded down) mod 2^24.
// Rounding the cumulative count, not each packet, keeps the error below
// one unit however many packets arrive.
func RcvdBytesOf(total uint64) RcvdBytes { return RcvdBytes(total / ByteUnit & Units24Mask) }

// Since returns the bytes received between the samples prev and r (r − prev
// mod 2^24, in bytes).
func (r RcvdBytes) Since(prev RcvdBytes) uint64 { return units24Since(uint32(r), uint32(prev)) }

// Bytes returns r × 256: the byte count modulo 4 GiB, rounded down to a
// unit.
func (r RcvdBytes) Bytes() uint64 { return uint64(r&Units24Mask) * ByteUnit }

// Credit is a 24-bit credit count in ByteUnit units, modulo 2^24: the
// credit_target of a *_CC_REQ and the credit of an ACK_CC's CREDIT
// cc_state. Both are cumulative (uet.md's assumption, documented there: the
// receiver's grants and the sender's target only grow), so consumers
// compare two values with Since.
type Credit uint32

// CreditOf returns total bytes as a Credit: total / 256 (rounded down) mod
// 2^24.
func CreditOf(total uint64) Credit { return Credit(total / ByteUnit & Units24Mask) }

// Since returns the bytes of credit between prev and c (c − prev mod 2^24,
// in bytes).
func (c Credit) Since(prev Credit) uint64 { return units24Since(uint32(c), uint32(prev)) }

// Bytes returns c × 256: the byte count modulo 4 GiB, rounded down to a
// unit.
func (c Credit) Bytes() uint64 { return uint64(c&Units24Mask) * ByteUnit }

func units24Since(cur, prev uint32) uint64 {
	return uint64((cur-prev)&Units24Mask) * ByteUnit
}
