package roce

import "fmt"

// padAlign is the payload alignment the BTH pad count restores
// (IBTA Vol. 1 §9.2: PadCnt bytes pad the payload to a 4-byte multiple).
const padAlign = 4

// PadFor returns the pad count for a payload of payloadLen bytes.
func PadFor(payloadLen int) uint8 {
	return uint8(-payloadLen & (padAlign - 1))
}

// PacketLen returns the length of a whole UDP payload for opcode op carrying
// payloadLen bytes: headers, payload, pad and ICRC. It returns 0 for an
// unknown opcode or a negative payloadLen.
func PacketLen(op Opcode, payloadLen int) int {
	h := op.HeaderLen()
	if h == 0 || payloadLen < 0 {
		return 0
	}
	return h + payloadLen + int(PadFor(payloadLen)) + ICRCLen
}

// Build writes a whole UDP payload into b: h's headers, payload, zero pad
// and 4 zero ICRC bytes (seal them with SealICRC once the addresses are
// known). It sets h.BTH.PadCount from len(payload) and returns the total
// length, or 0 if b is too short or the opcode is unknown.
func Build(b []byte, h *Header, payload []byte) int {
	n := PacketLen(h.BTH.Opcode, len(payload))
	if n == 0 || len(b) < n {
		return 0
	}
	b = b[:n]
	pad := PadFor(len(payload))
	h.BTH.PadCount = pad
	off := h.Encode(b)
	off += copy(b[off:], payload)
	clear(b[off:]) // pad and ICRC placeholder
	return n
}

// Parse decodes a whole UDP payload (headers | payload | pad | ICRC) into h
// and returns the payload without pad, a subslice of udpPayload whose
// capacity ends at the pad. It checks that the buffer holds the headers and
// the ICRC, that TVer is 0, that the opcode is known and that the pad fits
// in what follows the headers, and that a CNP carries nothing after its
// reserved field (ErrCNPLength). These are the receive rules the kernel RP
// and NP apply too (bpf/roce_check.h); PKeyMatch is the last of them. It
// does not check the ICRC (VerifyICRC does) nor that the payload is 4-byte
// aligned or that other opcodes without payload carry none. A PPFC
// notification parses as a CNP with h.BTH.PPFC set (BTH.IsPPFC):
// ParsePPFC reads its extension.
func Parse(udpPayload []byte, h *Header) (payload []byte, err error) {
	n, err := DecodeHeader(udpPayload, h)
	if err != nil {
		return nil, err
	}
	if len(udpPayload) < n+ICRCLen {
		return nil, fmt.Errorf("roce: %w: %d bytes, %s headers and ICRC need %d",
			ErrTruncated, len(udpPayload), h.BTH.Opcode, n+ICRCLen)
	}
	body := udpPayload[n : len(udpPayload)-ICRCLen]
	pad := int(h.BTH.PadCount)
	if pad > len(body) {
		return nil, fmt.Errorf("roce: %w: PadCnt %d, %d bytes after the %s headers",
			ErrPad, pad, len(body), h.BTH.Opcode)
	}
	if h.BTH.Opcode == OpCNP && !h.BTH.PPFC && len(body) != 0 {
		return nil, fmt.Errorf("roce: %w: %d bytes after the reserved field", ErrCNPLength, len(body))
	}
	end := len(body) - pad
	return body[:end:end], nil
}

// PKeyMatch is IBTA Vol. 1 §10.9.3's P_Key check of a received packet's
// P_Key against its QP's: the bases (low 15 bits) equal and not 0 (0x0000
// and 0x8000 are the invalid P_Key), and at least one of the two a full
// member (top bit). A QP drops a packet that does not match.
func PKeyMatch(packet, qp uint16) bool {
	return packet&pkeyBase == qp&pkeyBase && packet&pkeyBase != 0 && (packet|qp)&pkeyFull != 0
}

const (
	pkeyBase = 0x7FFF
	pkeyFull = 0x8000
)

// ValidPKey reports whether k can be a QP's P_Key: any but the invalid
// P_Key (base 0).
func ValidPKey(k uint16) bool { return k&pkeyBase != 0 }

// CNPHeader returns the header of a Congestion Notification Packet for the
// QP that sent a CE-marked packet (Annex A17.9.3): opcode 0x81, BECN set,
// FECN clear, SE/M/PadCnt/AckReq 0, PSN 0. Build it with no payload: the
// UDP payload is 12 + 16 reserved + 4 ICRC = 32 bytes.
func CNPHeader(destQP uint32, pkey uint16) Header {
	return Header{BTH: BTH{
		Opcode: OpCNP,
		PKey:   pkey,
		BECN:   true,
		DestQP: destQP & QPNMask,
	}}
}
