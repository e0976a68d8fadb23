package roce

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// PPFC header lengths in bytes.
const (
	// PPFCExtLen is the PPFC extension after the BTH.
	PPFCExtLen = 24
	// PPFCLen is a PPFC notification's whole UDP payload: BTH, extension,
	// ICRC.
	PPFCLen = BTHLen + PPFCExtLen + ICRCLen
)

// OpPPFC is the opcode of a PPFC notification, the CNP's: the BTH P bit
// tells them apart (BTH.IsPPFC).
const OpPPFC = OpCNP

// MaxPPFCPause is the longest Pause Duration the 16-bit µs field carries.
const MaxPPFCPause = 0xFFFF * time.Microsecond

// PPFC extension layout (offsets from the start of the UDP payload).
const (
	ppfcOffDest     = BTHLen
	ppfcOffFlagsPT  = ppfcOffDest + 16
	ppfcOffPort     = ppfcOffFlagsPT + 2
	ppfcOffReserved = ppfcOffPort + 2
	ppfcOffPause    = ppfcOffReserved + 2
	ppfcPTMask      = 0x3 // the 2 low bits of Flags|PT
)

// ErrNotPPFC: the packet is not a PPFC notification (its opcode is not
// 0x81, or its P bit is clear).
var ErrNotPPFC = errors.New("not a PPFC notification")

// ErrLength: the packet is longer than its headers say (a PPFC carries no
// payload).
var ErrLength = errors.New("wrong packet length")

// PPFCAction is a PPFC notification's PT field: what the source is to do.
type PPFCAction uint8

// PT values (seed 003). The draft defines stop and resume; alarm and hold
// are named only ("to be discussed in future versions"), and this
// project gives them a meaning (bpf/port.c, host/agent/ppfc.go).
const (
	PPFCStop   PPFCAction = 0
	PPFCResume PPFCAction = 1
	// PPFCAlarm: an early warning below xoff; the Pause Duration is the
	// queue's drain time to xon, for which the source does not raise its
	// rate.
	PPFCAlarm PPFCAction = 2
	// PPFCHold: "still congested: stay paused", to a source whose pause
	// ran out before the queue was down to xon; obeyed as a stop.
	PPFCHold PPFCAction = 3
)

var ppfcActionNames = enum.Names{PPFCStop: {"stop"}, PPFCResume: {"resume"}, PPFCAlarm: {"alarm"}, PPFCHold: {"hold"}}

// String returns "stop", "resume", "alarm", "hold", or "PT(n)" for a value
// the 2-bit field cannot carry.
func (a PPFCAction) String() string { return enum.String(a, ppfcActionNames, "PT") }

// PPFC is one PPFC notification (Precise Priority-based Flow Control; the
// RoCEv2 format is the Xiong & Zhu draft of June 2026, seed 003): a
// congested switch's order to a traffic source to stop (or resume)
// sending towards a destination. It travels as a RoCEv2 packet (IPv4 or
// IPv6, UDP destination port 4791, any source port) whose UDP payload is
// PPFCLen = 40 bytes, all fields big-endian but the ICRC:
//
//	BTH, 12 bytes
//	  0     OpCode 0x81 (the CNP's)
//	  1     SE, M, PadCnt, TVer: 0
//	  2-3   P_Key 0xFFFF
//	  4     F (0x80) and B (0x40) clear, P (0x20) set, RSV5 0
//	  5-7   DestQP 0: a PPFC names a destination, not a QP
//	  8     AckReq and reserved: 0
//	  9-11  PSN: the sender's per-source sequence number (informational)
//	PPFC extension, PPFCExtLen = 24 bytes
//	  0-15  Congested Destination IP, 128 bits
//	  16-17 Flags (14 bits, sent 0) | PT (the 2 low bits, PPFCAction)
//	  18-19 Congestion Port: the switch port's identifier
//	  20-21 Reserved: 0
//	  22-23 Pause Duration, µs
//	ICRC, 4 bytes, as for every RoCEv2 packet (icrc.go: little-endian,
//	BTH byte 4, so F, B and P, masked)
//
// The draft leaves the IPv4 form of the destination open. Here an IPv4
// address is carried IPv4-mapped (::ffff:a.b.c.d, RFC 4291 §2.5.5.2),
// what netip.Addr.As16 gives; the zero-padded IPv4-compatible form
// (::a.b.c.d) is deprecated (§2.5.5.1) and reads back as the IPv6 address
// it is. bpf/port.c, the switch side, writes exactly this layout.
//
// On receive ParsePPFC checks the opcode, the P bit, TVer and the length,
// and ignores what carries nothing for the source: SE, M, PadCnt, P_Key,
// F, B, RSV5, DestQP, AckReq, the Flags and the Reserved field.
type PPFC struct {
	// Dest is the congested destination. An IPv4 address is decoded as a
	// 4-byte address (never IPv4-mapped).
	Dest   netip.Addr
	Action PPFCAction
	// Port is the Congestion Port, the switch port's identifier.
	Port uint16
	// Pause is the Pause Duration, 0..MaxPPFCPause, in whole µs (encoding
	// truncates the rest). The draft calls it the recommended pausing
	// interval; what a stop with 0 means is the receiver's choice.
	Pause time.Duration
	// PSN is the BTH PSN, the sender's sequence number (24 bits).
	PSN uint32
}

// IsPPFC reports whether t is a PPFC notification's BTH: opcode 0x81 with
// the P bit set. Parse reads such a packet as a CNP (same opcode, 28 header
// bytes); ParsePPFC reads it whole.
func (t *BTH) IsPPFC() bool { return t.Opcode == OpPPFC && t.PPFC }

// AppendPPFC appends p as a whole UDP payload (PPFCLen bytes) to b with
// the ICRC left zero; SealICRC fills it in once the addresses are known
// (BuildPPFC does both). It fails on a field out of its wire range: Dest
// missing, Action above 3, Pause outside 0..MaxPPFCPause, PSN above 24
// bits.
func AppendPPFC(b []byte, p *PPFC) ([]byte, error) {
	switch {
	case !p.Dest.IsValid():
		return b, errors.New("roce: PPFC: no congested destination address")
	case p.Action > PPFCHold:
		return b, fmt.Errorf("roce: PPFC: PT %d: must be 0..3", uint8(p.Action))
	case p.Pause < 0 || p.Pause > MaxPPFCPause:
		return b, fmt.Errorf("roce: PPFC: pause duration %v: must be 0..%v", p.Pause, MaxPPFCPause)
	case p.PSN > PSNMask:
		return b, fmt.Errorf("roce: PPFC: psn %#x: must be 0..0xffffff", p.PSN)
	}
	n := len(b)
	b = append(b, make([]byte, PPFCLen)...) // no allocation within capacity
	out := b[n : n+PPFCLen]
	bth := BTH{Opcode: OpPPFC, PKey: DefaultPKey, PPFC: true, PSN: p.PSN}
	bth.encode(out)
	d := p.Dest.As16() // IPv4 comes out IPv4-mapped
	copy(out[ppfcOffDest:], d[:])
	be.PutUint16(out[ppfcOffFlagsPT:], uint16(p.Action)) // Flags 0
	be.PutUint16(out[ppfcOffPort:], p.Port)
	be.PutUint16(out[ppfcOffPause:], uint16(p.Pause/time.Microsecond))
	return b, nil // Reserved and ICRC stay zero
}

// BuildPPFC writes p into b as a whole UDP payload sent from src to dst,
// ICRC included, and returns PPFCLen; it returns 0 and an error if b is
// shorter or a field is out of range (AppendPPFC).
func BuildPPFC(b []byte, src, dst netip.AddrPort, p *PPFC) (int, error) {
	if len(b) < PPFCLen {
		return 0, fmt.Errorf("roce: PPFC: buffer of %d bytes, need %d", len(b), PPFCLen)
	}
	if _, err := AppendPPFC(b[:0], p); err != nil {
		return 0, err
	}
	SealICRC(src, dst, b[:PPFCLen])
	return PPFCLen, nil
}

// ParsePPFC decodes a whole UDP payload (BTH | PPFC extension | ICRC) into
// p. It rejects a packet whose opcode is not 0x81 or whose P bit is clear
// (ErrNotPPFC), a TVer other than 0 (ErrVersion), and any length but
// PPFCLen (ErrTruncated, ErrLength). It does not check the ICRC
// (VerifyICRC does). Non-zero Flags, Reserved, DestQP and the other fields
// listed in the format above are ignored.
func ParsePPFC(udpPayload []byte, p *PPFC) error {
	b := udpPayload
	if len(b) < BTHLen {
		return fmt.Errorf("roce: PPFC: %w: %d bytes, BTH needs %d", ErrTruncated, len(b), BTHLen)
	}
	if op := Opcode(b[0]); op != OpPPFC {
		return fmt.Errorf("roce: %w: opcode %s, want 0x81", ErrNotPPFC, op)
	}
	if b[bthOffECN]&bthPPFC == 0 {
		return fmt.Errorf("roce: %w: opcode 0x81 with the P bit clear (a CNP)", ErrNotPPFC)
	}
	if v := b[bthOffFlags] & bthTVerMask; v != 0 {
		return fmt.Errorf("roce: PPFC: %w: TVer %d, want 0", ErrVersion, v)
	}
	switch {
	case len(b) < PPFCLen:
		return fmt.Errorf("roce: PPFC: %w: %d bytes, BTH, extension and ICRC need %d", ErrTruncated, len(b), PPFCLen)
	case len(b) > PPFCLen:
		return fmt.Errorf("roce: PPFC: %w: %d bytes, a PPFC notification is %d", ErrLength, len(b), PPFCLen)
	}
	b = b[:PPFCLen]
	p.Dest = netip.AddrFrom16([16]byte(b[ppfcOffDest:ppfcOffFlagsPT])).Unmap()
	p.Action = PPFCAction(be.Uint16(b[ppfcOffFlagsPT:]) & ppfcPTMask)
	p.Port = be.Uint16(b[ppfcOffPort:])
	p.Pause = time.Duration(be.Uint16(b[ppfcOffPause:])) * time.Microsecond
	p.PSN = be.Uint32(b[bthOffPSN:]) & PSNMask
	return nil
}
