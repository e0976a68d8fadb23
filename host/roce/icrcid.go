package roce

import (
	"hash/crc32"
	"sync"
	"sync/atomic"
)

// GSOSegments is the most datagrams a sender puts in one UDP GSO send
// (pktio): the kernel numbers the IPv4 IDs of the segments of one send
// 0, 1, 2 … from the ID of the send (inet_gso_segment), which is 0 for an
// unconnected DF socket, so their IDs are 0 to GSOSegments-1. The ICRC
// covers the ID: such a sender seals segment k for ID k (ICRCIDDelta), and
// VerifyICRC, which sees no IP header, accepts those IDs.
const GSOSegments = 64

// The IPv4 ID's place in the ICRC's input: after the 8 bytes of ones and
// the first 4 bytes of the IP header; after it come the rest of the IP
// header, the UDP header and the covered UDP payload.
const (
	icrcIDBits       = 16
	icrcIDTrailerLen = ipv4HdrLen - ipv4OffID - 2 + udpHdrLen - ICRCLen // + the UDP payload's length
)

// maxIDDeltaLengths bounds the cache of ICRCIDDelta's tables: one per UDP
// payload length, and a host sends a handful (ACK, CNP, full and last data
// packets); a receiver verifying whatever arrives must not grow it without
// bound.
const maxIDDeltaLengths = 1024

// idDelta holds, for one UDP payload length, the change of the ICRC for each
// bit of the ID and for each segment ID.
type idDelta struct {
	bit [icrcIDBits]uint32
	seg [GSOSegments]uint32 // seg[k]: ID k
}

var (
	idDeltas      sync.Map // int (UDP payload length) -> *idDelta
	idDeltasCount atomic.Int32
)

// rawCRC is the CRC-32 of p with a zero start and no final inversion: the
// linear part of the zlib CRC, so that for messages of one length
// crc(a) ^ crc(b) == rawCRC(a ^ b).
func rawCRC(p []byte) uint32 { return ^crc32.Update(^uint32(0), crc32.IEEETable, p) }

// idDeltaFor returns the table of a UDP payload length.
func idDeltaFor(udpPayloadLen int) *idDelta {
	if d, ok := idDeltas.Load(udpPayloadLen); ok {
		return d.(*idDelta)
	}
	// A 1 in bit b of the ID followed by the zeros up to the ICRC.
	buf := make([]byte, 2+icrcIDTrailerLen+udpPayloadLen)
	d := new(idDelta)
	for b := range icrcIDBits {
		clear(buf[:2])
		be.PutUint16(buf, 1<<b)
		d.bit[b] = rawCRC(buf)
	}
	for k := range d.seg {
		d.seg[k] = d.of(uint16(k))
	}
	if idDeltasCount.Load() < maxIDDeltaLengths {
		if _, loaded := idDeltas.LoadOrStore(udpPayloadLen, d); !loaded {
			idDeltasCount.Add(1)
		}
	}
	return d
}

func (d *idDelta) of(id uint16) uint32 {
	var x uint32
	for b := 0; id != 0; b, id = b+1, id>>1 {
		if id&1 != 0 {
			x ^= d.bit[b]
		}
	}
	return x
}

// ICRCIDDelta is what an IPv4 ID of id instead of 0 changes in the ICRC
// (zlib value) of a RoCEv2 packet whose UDP payload, ICRC included, is
// udpPayloadLen bytes: CRC-32 is linear, so
// ICRC(ID id) = ICRC(ID 0) ^ ICRCIDDelta(len, id), whatever the rest of the
// packet holds.
func ICRCIDDelta(udpPayloadLen int, id uint16) uint32 {
	if udpPayloadLen < ICRCLen {
		return 0
	}
	d := idDeltaFor(udpPayloadLen)
	if int(id) < len(d.seg) {
		return d.seg[id]
	}
	return d.of(id)
}

// segmentID returns the ID below GSOSegments whose ICRC delta for a UDP
// payload of n bytes is x, or -1.
func segmentID(n int, x uint32) int {
	d := idDeltaFor(n)
	for k, v := range d.seg {
		if v == x {
			return k
		}
	}
	return -1
}
