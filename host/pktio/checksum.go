package pktio

import "encoding/binary"

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
// over bytes added in pieces of any length (RFC 1071).
type onesSum struct {
	sum uint64
	odd bool // the last piece ended inside a word: its high byte is in sum
}

func (s *onesSum) add(b []byte) {
	if len(b) == 0 {
		return
	}
	if s.odd {
		s.sum += uint64(b[0]) // the low byte of the split word
		b = b[1:]
		s.odd = false
	}
	// 32-bit words: the fold below adds their halves.
	for len(b) >= 4 {
		s.sum += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		s.sum += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s.sum += uint64(b[0]) << 8
		s.odd = true
	}
}

// fold reduces the sum to 16 bits with end-around carries.
func (s *onesSum) fold() uint16 {
	x := s.sum
	for x > 0xFFFF {
		x = x>>16 + x&0xFFFF
	}
	return uint16(x)
}
