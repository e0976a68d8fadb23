package pktio

import (
	"encoding/binary"
	"math/bits"
)

// udp6Checksum is the UDP checksum over IPv6 (RFC 8200 §8.1, RFC 768): the
// one's complement of the one's complement sum of the pseudo-header (src,
// dst, upper-layer length, next header 17), the UDP header (its checksum
// field zero) and the payload, which may be split across buffers at any
// byte. A result of 0 is sent as 0xFFFF: over IPv6 a zero UDP checksum
// means none, which receivers drop.
func udp6Checksum(src, dst, udpHeader []byte, payload [][]byte) uint16 {
	var s onesSum
	s.add(src)
	s.add(dst)
	n := len(udpHeader)
	for _, b := range payload {
		n += len(b)
	}
	var pseudo [8]byte
	binary.BigEndian.PutUint32(pseudo[0:4], uint32(n))
	pseudo[7] = 17 // UDP
	s.add(pseudo[:])
	s.add(udpHeader)
	for _, b := range payload {
		s.add(b)
	}
	c := ^s.fold()
	if c == 0 {
		return 0xFFFF
	}
	return c
}

// onesSum accumulates the Internet checksum's 16-bit big-endian words
// over bytes added in pieces of any length (RFC 1071). It adds 64 bits at
// a time: 2^64 ≡ 1 modulo 2^16−1, so a carry out of the top is worth one
// at the bottom (carries, added by fold), and fold's end-around additions
// reduce the sum to 16 bits.
type onesSum struct {
	sum, carries uint64
	odd          bool // the last piece ended inside a word: its high byte is in sum
}

func (s *onesSum) add(b []byte) {
	if len(b) == 0 {
		return
	}
	if s.odd {
		s.addWord(uint64(b[0])) // the low byte of the split word
		b = b[1:]
		s.odd = false
	}
	for len(b) >= 8 {
		s.addWord(binary.BigEndian.Uint64(b))
		b = b[8:]
	}
	if len(b) >= 4 {
		s.addWord(uint64(binary.BigEndian.Uint32(b)))
		b = b[4:]
	}
	if len(b) >= 2 {
		s.addWord(uint64(binary.BigEndian.Uint16(b)))
		b = b[2:]
	}
	if len(b) == 1 {
		s.addWord(uint64(b[0]) << 8)
		s.odd = true
	}
}

func (s *onesSum) addWord(w uint64) {
	var c uint64
	s.sum, c = bits.Add64(s.sum, w, 0)
	s.carries += c
}

// fold reduces the sum to 16 bits with end-around carries.
func (s *onesSum) fold() uint16 {
	x, c := bits.Add64(s.sum, s.carries, 0)
	x += c // cannot carry again: x < 2^64 − 1 after a carry out
	x = x>>32 + x&0xFFFFFFFF
	x = x>>32 + x&0xFFFFFFFF
	x = x>>16 + x&0xFFFF
	x = x>>16 + x&0xFFFF
	return uint16(x)
}
