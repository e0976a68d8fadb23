package roce

// PSNMask keeps the 24 bits of a packet sequence number.
const PSNMask = 0xFFFFFF

// psnSignShift moves the 24-bit PSN sign bit to bit 31 of an int32.
const psnSignShift = 32 - 24

// PSNAdd returns psn + n modulo 2^24 (n may be negative).
func PSNAdd(psn uint32, n int) uint32 {
	return (psn + uint32(n)) & PSNMask
}

// PSNDiff returns a − b as a signed 24-bit distance in [−2^23, 2^23):
// PSNs are compared within half the sequence space (IBTA Vol. 1 §9.7.2),
// so PSNDiff(0, 0xFFFFFF) == 1.
func PSNDiff(a, b uint32) int32 {
	return int32((a-b)<<psnSignShift) >> psnSignShift
}

// PSNLess reports whether a comes before b in PSN serial order.
func PSNLess(a, b uint32) bool { return PSNDiff(a, b) < 0 }
