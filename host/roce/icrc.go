package roce

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/netip"
	"sync"
)

// The invariant CRC of a RoCEv2 packet (Annex A17, roce-wire.md §ICRC) is
// the IEEE/zlib CRC-32 over
//
//	8 bytes of 0xFF (standing in for the masked IB LRH)
//	‖ IP header ‖ UDP header ‖ BTH ‖ extension headers ‖ payload ‖ pad
//
// with every field a router may rewrite replaced by ones: IPv4 TOS, TTL and
// header checksum; IPv6 traffic class, flow label and hop limit; the UDP
// checksum; BTH byte 4 (FECN, BECN, reserved). It is sent little-endian.
// Linux rxe (rxe_icrc.c) computes the same value.

// IP and UDP constants the ICRC reconstruction needs (RFC 791, RFC 8200,
// RFC 768).
const (
	ipv4HdrLen     = 20 // without options (IHL 5)
	ipv6HdrLen     = 40
	udpHdrLen      = 8
	ipVersion4     = 4
	ipVersion6     = 6
	ipVersionShift = 4
	ipv4IHLMask    = 0x0F
	ipv4IHLUnit    = 4 // IHL counts 32-bit words
	ipProtoUDP     = 17
	ipv4FlagDF     = 0x4000
	ipv4FlagMF     = 0x2000
	ipv4FragOffset = 0x1FFF

	ipv4OffTOS      = 1
	ipv4OffTotalLen = 2
	ipv4OffID       = 4
	ipv4OffFlags    = 6
	ipv4OffTTL      = 8
	ipv4OffProto    = 9
	ipv4OffCsum     = 10
	ipv4OffSrc      = 12
	ipv4OffDst      = 16
	ipv6OffVerTC    = 0 // version (4) | traffic class high nibble
	ipv6OffFlow     = 1 // traffic class low nibble | flow label (20)
	ipv6OffPayLen   = 4
	ipv6OffNextHdr  = 6
	ipv6OffHopLimit = 7
	ipv6OffSrc      = 8
	ipv6OffDst      = 24
	ipv6TCMaskHi    = 0x0F // traffic class bits in byte 0
	udpOffSrcPort   = 0
	udpOffDstPort   = 2
	udpOffLen       = 4
	udpOffCsum      = 6

	icrcMasked = 0xFF // value of every masked byte
	// icrcLRHOnesLen is the run of 0xFF bytes the CRC starts with.
	icrcLRHOnesLen = 8
)

var (
	le = binary.LittleEndian // the ICRC is sent little-endian

	// icrcSeed is the CRC after the 8 leading 0xFF bytes. As zlib state it
	// is ^0xdebb20e3, the raw start value of rxe_icrc.c.
	icrcSeed = func() uint32 {
		var ones [icrcLRHOnesLen]byte
		for i := range ones {
			ones[i] = icrcMasked
		}
		return crc32.Update(0, crc32.IEEETable, ones[:])
	}()

	// Scratch for the masked IP/UDP/BTH headers. crc32.Update reaches its
	// CLMUL path through a function variable, so anything it is given
	// escapes: a stack array would be moved to the heap on every call.
	// Pooled buffers keep the ICRC allocation-free.
	icrcScratchPool = sync.Pool{New: func() any { return new(icrcScratch) }}
)

type icrcScratch [ipv6HdrLen + udpHdrLen + BTHLen]byte

// icrcUpdate runs the IEEE CRC over p from state crc (zlib convention).
func icrcUpdate(crc uint32, p []byte) uint32 {
	return crc32.Update(crc, crc32.IEEETable, p)
}

// icrcCovered returns the part of a UDP payload the ICRC covers: everything
// but its last ICRCLen bytes.
func icrcCovered(udpPayload []byte) []byte {
	if len(udpPayload) < ICRCLen {
		return nil
	}
	return udpPayload[:len(udpPayload)-ICRCLen]
}

// putMaskedUDP writes a UDP header with the checksum masked.
func putMaskedUDP(b []byte, srcPort, dstPort uint16, udpLen int) {
	be.PutUint16(b[udpOffSrcPort:], srcPort)
	be.PutUint16(b[udpOffDstPort:], dstPort)
	be.PutUint16(b[udpOffLen:], uint16(udpLen))
	b[udpOffCsum], b[udpOffCsum+1] = icrcMasked, icrcMasked
}

// icrcTransport continues crc over sc[:n] (masked headers already filled
// in) followed by covered, the BTH onward, with BTH byte 4 masked. The BTH
// is copied next to the headers so that short packets take one CRC call.
// The last zeros bytes of covered (after the BTH) are taken to be zero and
// not read (icrcZeros).
func icrcTransport(crc uint32, sc *icrcScratch, n int, covered []byte, zeros int) uint32 {
	m := copy(sc[n:n+BTHLen], covered)
	if m > bthOffECN {
		sc[n+bthOffECN] = icrcMasked
	}
	zeros = max(0, min(zeros, len(covered)-m))
	crc = icrcUpdate(crc, sc[:n+m])
	crc = icrcUpdate(crc, covered[m:len(covered)-zeros])
	return icrcZeros(crc, zeros)
}

// ICRCv4 returns the ICRC (zlib value) of udpPayload sent from src to dst
// over IPv4. udpPayload is the whole UDP payload including its last 4 ICRC
// bytes, which are not covered. The IP header is reconstructed as Linux
// sends it from an unconnected UDP socket with IP_PMTUDISC_DO: IHL 5, ID 0,
// DF set (kernel.md); ICRCIDDelta turns it into another ID's. It returns 0
// if either address is not IPv4 (or IPv4-mapped IPv6).
func ICRCv4(src, dst netip.AddrPort, udpPayload []byte) uint32 {
	return icrcV4(src, dst, udpPayload, 0)
}

func icrcV4(src, dst netip.AddrPort, udpPayload []byte, zeros int) uint32 {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	if !sa.Is4() || !da.Is4() {
		return 0
	}
	udpLen := udpHdrLen + len(udpPayload)
	sc := icrcScratchPool.Get().(*icrcScratch)
	b := sc[:ipv4HdrLen+udpHdrLen]
	b[0] = ipVersion4<<ipVersionShift | ipv4HdrLen/ipv4IHLUnit
	b[ipv4OffTOS] = icrcMasked
	be.PutUint16(b[ipv4OffTotalLen:], uint16(ipv4HdrLen+udpLen))
	be.PutUint16(b[ipv4OffID:], 0)
	be.PutUint16(b[ipv4OffFlags:], ipv4FlagDF)
	b[ipv4OffTTL] = icrcMasked
	b[ipv4OffProto] = ipProtoUDP
	b[ipv4OffCsum], b[ipv4OffCsum+1] = icrcMasked, icrcMasked
	s4, d4 := sa.As4(), da.As4()
	copy(b[ipv4OffSrc:], s4[:])
	copy(b[ipv4OffDst:], d4[:])
	return icrcAfterIP(sc, ipv4HdrLen, src, dst, udpPayload, zeros)
}

// ICRCv6 returns the ICRC (zlib value) of udpPayload sent from src to dst
// over IPv6 without extension headers. udpPayload includes its last 4 ICRC
// bytes, which are not covered.
func ICRCv6(src, dst netip.AddrPort, udpPayload []byte) uint32 {
	return icrcV6(src, dst, udpPayload, 0)
}

func icrcV6(src, dst netip.AddrPort, udpPayload []byte, zeros int) uint32 {
	udpLen := udpHdrLen + len(udpPayload)
	sc := icrcScratchPool.Get().(*icrcScratch)
	b := sc[:ipv6HdrLen+udpHdrLen]
	b[ipv6OffVerTC] = ipVersion6<<ipVersionShift | ipv6TCMaskHi
	b[ipv6OffFlow], b[ipv6OffFlow+1], b[ipv6OffFlow+2] = icrcMasked, icrcMasked, icrcMasked
	be.PutUint16(b[ipv6OffPayLen:], uint16(udpLen))
	b[ipv6OffNextHdr] = ipProtoUDP
	b[ipv6OffHopLimit] = icrcMasked
	s16, d16 := src.Addr().As16(), dst.Addr().As16()
	copy(b[ipv6OffSrc:], s16[:])
	copy(b[ipv6OffDst:], d16[:])
	return icrcAfterIP(sc, ipv6HdrLen, src, dst, udpPayload, zeros)
}

// icrcAfterIP puts the masked UDP header after the ipLen bytes of masked
// IP header in sc, returns the ICRC over both and udpPayload, and gives
// sc back to the pool.
func icrcAfterIP(sc *icrcScratch, ipLen int, src, dst netip.AddrPort, udpPayload []byte, zeros int) uint32 {
	putMaskedUDP(sc[ipLen:ipLen+udpHdrLen], src.Port(), dst.Port(), udpHdrLen+len(udpPayload))
	crc := icrcTransport(icrcSeed, sc, ipLen+udpHdrLen, icrcCovered(udpPayload), zeros)
	icrcScratchPool.Put(sc)
	return crc
}

// ICRC returns ICRCv4 if src is an IPv4 (or IPv4-mapped) address, else
// ICRCv6.
func ICRC(src, dst netip.AddrPort, udpPayload []byte) uint32 {
	return icrcOf(src, dst, udpPayload, 0)
}

func icrcOf(src, dst netip.AddrPort, udpPayload []byte, zeros int) uint32 {
	if src.Addr().Unmap().Is4() {
		return icrcV4(src, dst, udpPayload, zeros)
	}
	return icrcV6(src, dst, udpPayload, zeros)
}

// SealICRC writes the ICRC of udpPayload little-endian into its last 4
// bytes. It does nothing if udpPayload is shorter than ICRCLen.
func SealICRC(src, dst netip.AddrPort, udpPayload []byte) {
	if len(udpPayload) < ICRCLen {
		return
	}
	le.PutUint32(udpPayload[len(udpPayload)-ICRCLen:], ICRC(src, dst, udpPayload))
}

// SealICRCZeroTail is SealICRC for a packet whose zeros bytes before the
// ICRC are zero, as the caller wrote them (a payload of zeros): the result
// is the same, without reading them. Bytes of the BTH are always read.
func SealICRCZeroTail(src, dst netip.AddrPort, udpPayload []byte, zeros int) {
	if len(udpPayload) < ICRCLen {
		return
	}
	le.PutUint32(udpPayload[len(udpPayload)-ICRCLen:], icrcOf(src, dst, udpPayload, zeros))
}

// VerifyICRC reports whether the last 4 bytes of udpPayload hold its ICRC.
// A payload too short for a BTH and an ICRC does not verify. Over IPv4 the
// ICRC covers the IP ID, which a UDP socket does not show: it is taken to be
// 0 or, as a UDP GSO send numbers its segments, below GSOSegments.
func VerifyICRC(src, dst netip.AddrPort, udpPayload []byte) bool {
	if len(udpPayload) < BTHLen+ICRCLen {
		return false
	}
	got, want := le.Uint32(udpPayload[len(udpPayload)-ICRCLen:]), ICRC(src, dst, udpPayload)
	if got == want {
		return true
	}
	return src.Addr().Unmap().Is4() && segmentID(len(udpPayload), got^want) > 0
}

// ICRCFromIP returns the ICRC (zlib value) of a whole IPv4 or IPv6 packet,
// from its IP header through the pad, without the trailing ICRC, using the
// IP header as it is (real ID, flags, options). The covered length comes
// from the IP header (total length or payload length, minus ICRCLen); bytes
// of pkt beyond it (the ICRC itself, Ethernet trailer padding) are ignored.
// It fails on non-IP packets (ErrNotIP), non-UDP ones including IPv6 with
// extension headers (ErrNotUDP), IPv4 fragments (ErrFragment) and packets
// too short for IP, UDP, BTH and ICRC (ErrTruncated).
func ICRCFromIP(pkt []byte) (uint32, error) {
	if len(pkt) == 0 {
		return 0, fmt.Errorf("roce: %w: empty IP packet", ErrTruncated)
	}
	var ipHdr, ipFixed, total int
	switch v := pkt[0] >> ipVersionShift; v {
	case ipVersion4:
		if len(pkt) < ipv4HdrLen {
			return 0, fmt.Errorf("roce: %w: %d bytes, IPv4 header needs %d", ErrTruncated, len(pkt), ipv4HdrLen)
		}
		ipHdr = int(pkt[0]&ipv4IHLMask) * ipv4IHLUnit
		if ipHdr < ipv4HdrLen {
			return 0, fmt.Errorf("roce: %w: IPv4 IHL %d, want at least 5", ErrNotIP, ipHdr/ipv4IHLUnit)
		}
		if p := pkt[ipv4OffProto]; p != ipProtoUDP {
			return 0, fmt.Errorf("roce: %w: IPv4 protocol %d", ErrNotUDP, p)
		}
		if f := be.Uint16(pkt[ipv4OffFlags:]); f&(ipv4FlagMF|ipv4FragOffset) != 0 {
			return 0, fmt.Errorf("roce: %w: flags/offset %#04x", ErrFragment, f)
		}
		ipFixed, total = ipv4HdrLen, int(be.Uint16(pkt[ipv4OffTotalLen:]))
	case ipVersion6:
		if len(pkt) < ipv6HdrLen {
			return 0, fmt.Errorf("roce: %w: %d bytes, IPv6 header needs %d", ErrTruncated, len(pkt), ipv6HdrLen)
		}
		if nh := pkt[ipv6OffNextHdr]; nh != ipProtoUDP {
			return 0, fmt.Errorf("roce: %w: IPv6 next header %d", ErrNotUDP, nh)
		}
		ipHdr, ipFixed = ipv6HdrLen, ipv6HdrLen
		total = ipv6HdrLen + int(be.Uint16(pkt[ipv6OffPayLen:]))
	default:
		return 0, fmt.Errorf("roce: %w: IP version %d", ErrNotIP, v)
	}
	if need := ipHdr + udpHdrLen + BTHLen + ICRCLen; total < need {
		return 0, fmt.Errorf("roce: %w: IP length %d, IP/UDP/BTH/ICRC need %d", ErrTruncated, total, need)
	}
	end := total - ICRCLen
	if len(pkt) < end {
		return 0, fmt.Errorf("roce: %w: %d bytes, IP length %d leaves %d before the ICRC",
			ErrTruncated, len(pkt), total, end)
	}
	pkt = pkt[:end]

	sc := icrcScratchPool.Get().(*icrcScratch)
	b := sc[:ipFixed]
	copy(b, pkt)
	if ipFixed == ipv4HdrLen {
		b[ipv4OffTOS] = icrcMasked
		b[ipv4OffTTL] = icrcMasked
		b[ipv4OffCsum], b[ipv4OffCsum+1] = icrcMasked, icrcMasked
	} else {
		b[ipv6OffVerTC] |= ipv6TCMaskHi
		b[ipv6OffFlow], b[ipv6OffFlow+1], b[ipv6OffFlow+2] = icrcMasked, icrcMasked, icrcMasked
		b[ipv6OffHopLimit] = icrcMasked
	}
	crc, n := icrcSeed, ipFixed
	if ipHdr > ipFixed { // IPv4 options, covered as sent
		crc = icrcUpdate(crc, b)
		crc = icrcUpdate(crc, pkt[ipFixed:ipHdr])
		n = 0
	}
	u := sc[n : n+udpHdrLen]
	copy(u, pkt[ipHdr:])
	u[udpOffCsum], u[udpOffCsum+1] = icrcMasked, icrcMasked
	crc = icrcTransport(crc, sc, n+udpHdrLen, pkt[ipHdr+udpHdrLen:], 0)
	icrcScratchPool.Put(sc)
	return crc, nil
}
