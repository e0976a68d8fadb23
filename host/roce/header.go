package roce

import (
	"encoding/binary"
	"fmt"
)

var be = binary.BigEndian // IBTA Vol. 1 §9.2: all header fields big-endian

// BTH bit fields (IBTA Vol. 1 §9.2).
const (
	bthSE        = 0x80 // byte 1: solicited event
	bthMigReq    = 0x40 // byte 1: migration request
	bthPadMask   = 0x30 // byte 1: pad count
	bthPadShift  = 4
	bthTVerMask  = 0x0F // byte 1: transport header version, 0
	bthFECN      = 0x80 // byte 4: forward ECN (Annex A17: F bit)
	bthBECN      = 0x40 // byte 4: backward ECN (Annex A17: B bit)
	bthPPFC      = 0x20 // byte 4: P, a PPFC notification (seed 003 draft)
	bthByte4Rsvd = 0x1F // byte 4: reserved
	bthAckReq    = 0x80 // byte 8: acknowledge request
	bthByte8Rsvd = 0x7F // byte 8: reserved

	bthOffFlags  = 1
	bthOffPKey   = 2
	bthOffECN    = 4 // the byte the ICRC masks
	bthOffDestQP = 4 // 32-bit word whose low 24 bits are DestQP
	bthOffAck    = 8
	bthOffPSN    = 8 // 32-bit word whose low 24 bits are the PSN

	// MaxPadCount is the largest BTH pad count (2 bits): payloads are padded
	// to a multiple of 4 bytes.
	MaxPadCount = 3
	// QPNMask keeps the 24 bits of a queue pair number.
	QPNMask = 0xFFFFFF
)

// BTH is the Base Transport Header (IBTA Vol. 1 §9.2). TVer is always 0 and
// the reserved bits are written as zero and ignored when read.
//
// PPFC is the P bit of the PPFC draft (seed 003), in a bit IBTA reserves:
// on opcode 0x81 it makes the packet a PPFC notification (ParsePPFC)
// instead of a CNP. The ICRC masks it with the rest of byte 4.
type BTH struct {
	Opcode   Opcode
	SE       bool  // solicited event
	MigReq   bool  // migration request (M)
	PadCount uint8 // 0..3 bytes of pad between payload and ICRC
	PKey     uint16
	FECN     bool   // forward ECN (Annex A17: F)
	BECN     bool   // backward ECN (Annex A17: B)
	PPFC     bool   // P: a PPFC notification (seed 003)
	DestQP   uint32 // 24 bits
	AckReq   bool
	PSN      uint32 // 24 bits
}

// encode writes the 12-byte BTH into b, which must hold BTHLen bytes.
// DestQP and PSN are truncated to 24 bits, PadCount to 2.
func (t *BTH) encode(b []byte) {
	_ = b[BTHLen-1]
	b[0] = byte(t.Opcode)
	f := (t.PadCount << bthPadShift) & bthPadMask // TVer = 0
	if t.SE {
		f |= bthSE
	}
	if t.MigReq {
		f |= bthMigReq
	}
	b[bthOffFlags] = f
	be.PutUint16(b[bthOffPKey:], t.PKey)
	be.PutUint32(b[bthOffDestQP:], t.DestQP&QPNMask)
	var ecn byte
	if t.FECN {
		ecn |= bthFECN
	}
	if t.BECN {
		ecn |= bthBECN
	}
	if t.PPFC {
		ecn |= bthPPFC
	}
	b[bthOffECN] = ecn
	be.PutUint32(b[bthOffPSN:], t.PSN&PSNMask)
	if t.AckReq {
		b[bthOffAck] = bthAckReq
	}
}

// decode fills t from b (at least BTHLen bytes) without validating.
func (t *BTH) decode(b []byte) {
	_ = b[BTHLen-1]
	t.Opcode = Opcode(b[0])
	f := b[bthOffFlags]
	t.SE = f&bthSE != 0
	t.MigReq = f&bthMigReq != 0
	t.PadCount = (f & bthPadMask) >> bthPadShift
	t.PKey = be.Uint16(b[bthOffPKey:])
	t.FECN = b[bthOffECN]&bthFECN != 0
	t.BECN = b[bthOffECN]&bthBECN != 0
	t.PPFC = b[bthOffECN]&bthPPFC != 0
	t.DestQP = be.Uint32(b[bthOffDestQP:]) & QPNMask
	t.AckReq = b[bthOffAck]&bthAckReq != 0
	t.PSN = be.Uint32(b[bthOffPSN:]) & PSNMask
}

// RETH is the RDMA Extended Transport Header (IBTA Vol. 1 §9.3.3).
type RETH struct {
	VA     uint64 // remote virtual address
	RKey   uint32
	DMALen uint32 // bytes of the whole RDMA operation
}

// DETH is the Datagram Extended Transport Header carried by UD packets
// (IBTA Vol. 1 §9.3.2): Q_Key (32), 8 reserved bits, source QP (24).
type DETH struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

// AtomicETH is the Atomic Extended Transport Header of COMPARE_SWAP and
// FETCH_ADD (IBTA Vol. 1 §9.3.4).
type AtomicETH struct {
	VA        uint64
	RKey      uint32
	SwapOrAdd uint64 // swap data (COMPARE_SWAP) or add data (FETCH_ADD)
	Compare   uint64 // compare data (COMPARE_SWAP only)
}

// AETH is the ACK Extended Transport Header (IBTA Vol. 1 §9.3.5).
type AETH struct {
	Syndrome Syndrome
	MSN      uint32 // message sequence number, 24 bits
}

// Header is BTH plus the extension headers its opcode carries. Fields of
// extension headers the opcode does not carry are ignored by Encode and
// zeroed by DecodeHeader.
type Header struct {
	BTH  BTH
	RETH RETH
	AETH AETH
	Imm  uint32 // ImmDt (IBTA Vol. 1 §9.3.7), as the 4 bytes read big-endian
	DETH DETH
	// Atomic is the AtomicETH of COMPARE_SWAP and FETCH_ADD.
	Atomic AtomicETH
	// AtomicAck is the AtomicAckETH of ATOMIC_ACKNOWLEDGE: the remote data
	// before the atomic operation (IBTA Vol. 1 §9.3.6).
	AtomicAck uint64
}

// Len returns the encoded length of h: BTH plus the extension headers of
// h.BTH.Opcode, or 0 for an unknown opcode.
func (h *Header) Len() int { return h.BTH.Opcode.HeaderLen() }

// Encode writes h (Len() bytes; for CNP the BTH and 16 zero bytes) into b
// and returns the number of bytes written, or 0 if b is too short or the
// opcode is unknown.
func (h *Header) Encode(b []byte) int {
	info := &opTable[h.BTH.Opcode]
	n := int(info.hdrLen)
	if n == 0 || len(b) < n {
		return 0
	}
	b = b[:n]
	h.BTH.encode(b)
	off := BTHLen
	// Wire order: IBTA Vol. 1 §9.2.
	if info.ext&extDETH != 0 {
		be.PutUint32(b[off:], h.DETH.QKey)
		be.PutUint32(b[off+4:], h.DETH.SrcQP&QPNMask) // reserved byte 0
		off += DETHLen
	}
	if info.ext&extRETH != 0 {
		be.PutUint64(b[off:], h.RETH.VA)
		be.PutUint32(b[off+8:], h.RETH.RKey)
		be.PutUint32(b[off+12:], h.RETH.DMALen)
		off += RETHLen
	}
	if info.ext&extAtomicETH != 0 {
		be.PutUint64(b[off:], h.Atomic.VA)
		be.PutUint32(b[off+8:], h.Atomic.RKey)
		be.PutUint64(b[off+12:], h.Atomic.SwapOrAdd)
		be.PutUint64(b[off+20:], h.Atomic.Compare)
		off += AtomicETHLen
	}
	if info.ext&extAETH != 0 {
		be.PutUint32(b[off:], uint32(h.AETH.Syndrome)<<24|h.AETH.MSN&MSNMask)
		off += AETHLen
	}
	if info.ext&extAtomicAckETH != 0 {
		be.PutUint64(b[off:], h.AtomicAck)
		off += AtomicAckETHLen
	}
	if info.ext&extImmDt != 0 {
		be.PutUint32(b[off:], h.Imm)
		off += ImmDtLen
	}
	if info.ext&extCNPReserved != 0 {
		clear(b[off : off+CNPReservedLen]) // Annex A17.9.3: reserved, zero
		off += CNPReservedLen
	}
	return off
}

// DecodeHeader parses the BTH and the extension headers its opcode carries
// from the start of b into h, and returns the number of bytes consumed.
// It rejects a TVer other than 0 (ErrVersion), an opcode this package does
// not know (ErrUnknownOpcode) and a b shorter than the headers
// (ErrTruncated). Reserved bits are ignored.
func DecodeHeader(b []byte, h *Header) (int, error) {
	if len(b) < BTHLen {
		return 0, fmt.Errorf("roce: %w: %d bytes, BTH needs %d", ErrTruncated, len(b), BTHLen)
	}
	if v := b[bthOffFlags] & bthTVerMask; v != 0 {
		return 0, fmt.Errorf("roce: %w: TVer %d, want 0", ErrVersion, v)
	}
	op := Opcode(b[0])
	info := &opTable[op]
	n := int(info.hdrLen)
	if n == 0 {
		return 0, fmt.Errorf("roce: %w: %s", ErrUnknownOpcode, op)
	}
	if len(b) < n {
		return 0, fmt.Errorf("roce: %w: %d bytes, %s headers need %d", ErrTruncated, len(b), op, n)
	}
	b = b[:n]
	*h = Header{}
	h.BTH.decode(b)
	off := BTHLen
	if info.ext&extDETH != 0 {
		h.DETH.QKey = be.Uint32(b[off:])
		h.DETH.SrcQP = be.Uint32(b[off+4:]) & QPNMask
		off += DETHLen
	}
	if info.ext&extRETH != 0 {
		h.RETH.VA = be.Uint64(b[off:])
		h.RETH.RKey = be.Uint32(b[off+8:])
		h.RETH.DMALen = be.Uint32(b[off+12:])
		off += RETHLen
	}
	if info.ext&extAtomicETH != 0 {
		h.Atomic.VA = be.Uint64(b[off:])
		h.Atomic.RKey = be.Uint32(b[off+8:])
		h.Atomic.SwapOrAdd = be.Uint64(b[off+12:])
		h.Atomic.Compare = be.Uint64(b[off+20:])
		off += AtomicETHLen
	}
	if info.ext&extAETH != 0 {
		w := be.Uint32(b[off:])
		h.AETH.Syndrome = Syndrome(w >> 24)
		h.AETH.MSN = w & MSNMask
		off += AETHLen
	}
	if info.ext&extAtomicAckETH != 0 {
		h.AtomicAck = be.Uint64(b[off:])
		off += AtomicAckETHLen
	}
	if info.ext&extImmDt != 0 {
		h.Imm = be.Uint32(b[off:])
		off += ImmDtLen
	}
	if info.ext&extCNPReserved != 0 {
		off += CNPReservedLen // Annex A17.9.3: reserved, ignored on receive
	}
	return off, nil
}
