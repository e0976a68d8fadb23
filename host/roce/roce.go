// Package roce encodes and decodes RoCEv2 packets: the InfiniBand Base
// Transport Header (BTH), its extension headers (RETH, AETH, ImmDt, DETH,
// AtomicETH, AtomicAckETH), the Congestion Notification Packet (CNP), the
// PPFC notification of the seed 003 draft (PPFC) and the invariant CRC
// (ICRC) computed over the IP/UDP encapsulation.
//
// Wire format: IBTA Vol. 1 ch. 9 (transport headers) and Annex A17 (RoCEv2),
// as implemented by Linux rxe (drivers/infiniband/sw/rxe/rxe_hdr.h,
// rxe_icrc.c); see /work/shared/reference/roce-wire.md.
//
// Decoding never panics on any input (see the fuzz targets). Encoding,
// decoding and the ICRC functions allocate nothing on their success paths;
// the ICRC functions reuse pooled scratch for the masked IP/UDP/BTH headers
// (see icrcScratchPool). Errors allocate: they wrap a sentinel with the
// field and value at fault.
package roce

import "errors"

// UDPPort is the IANA-assigned UDP destination port of RoCEv2 (Annex A17).
const UDPPort = 4791

// Header lengths in bytes (IBTA Vol. 1 §9.2, §9.3; Annex A17.9.3 for CNP).
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	ImmDtLen        = 4
	DETHLen         = 8
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ICRCLen         = 4
	// CNPReservedLen is the zero-filled field after a CNP's BTH.
	CNPReservedLen = 16
)

// DefaultPKey is the default partition key: full member (top bit set) of
// the default partition 0x7FFF (IBTA Vol. 1 §10.9, partitioning).
const DefaultPKey = 0xFFFF

// Sentinel errors. Decoding functions wrap them with the offending field and
// value; test with errors.Is.
var (
	// ErrTruncated: the buffer ends before the headers (or ICRC) its own
	// fields say it has.
	ErrTruncated = errors.New("truncated packet")
	// ErrVersion: BTH TVer is not 0 (IBTA Vol. 1 §9.2, the only defined
	// transport header version).
	ErrVersion = errors.New("unsupported BTH transport version")
	// ErrUnknownOpcode: the BTH opcode is not one this package decodes.
	ErrUnknownOpcode = errors.New("unknown opcode")
	// ErrPad: the BTH pad count is larger than the payload it pads.
	ErrPad = errors.New("pad count exceeds payload")
	// ErrCNPLength: a CNP longer than its BTH, reserved field and ICRC
	// (Annex A17.9.3).
	ErrCNPLength = errors.New("CNP of the wrong length")
	// ErrNotIP: ICRCFromIP was given something other than an IPv4 or IPv6
	// packet (or an IPv4 header with an IHL below 5).
	ErrNotIP = errors.New("not an IPv4 or IPv6 packet")
	// ErrNotUDP: the IP packet does not carry UDP directly (other protocol,
	// IPv6 extension headers).
	ErrNotUDP = errors.New("not a UDP packet")
	// ErrFragment: the IPv4 packet is a fragment; the ICRC covers the whole
	// datagram, so it can only be computed after reassembly.
	ErrFragment = errors.New("IPv4 fragment")
)
