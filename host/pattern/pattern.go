// Package pattern is the end-to-end content check of the transports: a
// sender fills message m with bytes that depend on (seed, m, offset) only,
// so a retransmission resends the same bytes without keeping a copy, and
// the receiver checks what arrived against the same function, in whatever
// order the packets came. The seed names the sender (a RoCEv2 QPN, a UET
// PDC).
package pattern

import "encoding/binary"

// word is splitmix64 (Steele et al., "Fast splittable pseudorandom
// number generators", 2014) of the word's coordinates.
func word(seed uint32, msg uint64, word uint64) uint64 {
	z := uint64(seed)<<40 ^ msg*0x9E3779B97F4A7C15 ^ word*0xD1B54A32D192ED03
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// Fill writes message msg's bytes [off, off+len(dst)) into dst.
func Fill(dst []byte, seed uint32, msg uint64, off int) {
	i := 0
	// Unaligned head.
	for ; i < len(dst) && (off+i)%8 != 0; i++ {
		dst[i] = byteAt(seed, msg, off+i)
	}
	for ; i+8 <= len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], word(seed, msg, uint64(off+i)/8))
	}
	for ; i < len(dst); i++ {
		dst[i] = byteAt(seed, msg, off+i)
	}
}

func byteAt(seed uint32, msg uint64, off int) byte {
	return byte(word(seed, msg, uint64(off)/8) >> (8 * (off % 8)))
}

// Match reports whether src equals message msg's bytes at off.
func Match(src []byte, seed uint32, msg uint64, off int) bool {
	i := 0
	for ; i < len(src) && (off+i)%8 != 0; i++ {
		if src[i] != byteAt(seed, msg, off+i) {
			return false
		}
	}
	for ; i+8 <= len(src); i += 8 {
		if binary.LittleEndian.Uint64(src[i:]) != word(seed, msg, uint64(off+i)/8) {
			return false
		}
	}
	for ; i < len(src); i++ {
		if src[i] != byteAt(seed, msg, off+i) {
			return false
		}
	}
	return true
}
