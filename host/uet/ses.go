package uet

import "fmt"

// SES header lengths in bytes (packet-uet.c's UET_SES_STD_MIN_HDR_LEN and
// UET_SES_RESP_HDR_LEN).
const (
	SESStdLen  = 44 // standard request header, REQ_STD (next header 3)
	SESRespLen = 12 // response header, RESP (next header 4)
)

// Largest values of the SES fields narrower than their Go type.
const (
	MaxSESVersion       = 3         // 2 bits
	MaxJobID            = 1<<24 - 1 // 24 bits
	MaxPIDOnFEP         = 0x0FFF    // 12 bits
	MaxResourceIndex    = 0x0FFF    // 12 bits
	MaxSESPayloadLength = 0x3FFF    // 14 bits
	MaxSESList          = 3         // 2 bits
)

// Flag bits of a SES request's second byte, below the 2-bit version
// (packet-uet.c's UET_SES_REQ_FLAGS_*; xdp2's uet_ses_common_hdr).
const (
	sesFlagDC        = 0x20 // delivery complete
	sesFlagIE        = 0x10 // initiator error
	sesFlagRel       = 0x08 // relative addressing
	sesFlagHD        = 0x04 // header data present
	sesFlagEOM       = 0x02 // end of message
	sesFlagSOM       = 0x01 // start of message
	sesVersionShift  = 6
	sesSixMask       = 0x3F // opcode, return code: the low 6 bits of their byte
	sesReservedHigh2 = 0xC0 // REQ_STD byte 0 above the opcode
	sesReservedHigh4 = 0xF0 // REQ_STD bytes 8 and 10 above pid_on_fep, resource_index
	// sesReservedLenWord is the reserved part of the 32-bit word before
	// message_offset when SOM is clear: 18 bits above payload_length
	// (packet-uet.c: reserved4 0xffffc000, payload_length 0x3fff).
	sesReservedLenWord = 0xFFFFC000
)

// Field offsets from the start of the SES standard request header (packet-uet.c's
// dissect_ses_std_req; xdp2's uet_ses_request_std_hdr).
const (
	sesOffOpcode        = 0 // reserved (2) | opcode (6)
	sesOffFlags         = 1 // version (2) | dc | ie | rel | hd | eom | som
	sesOffMessageID     = 2
	sesOffIndexGen      = 4
	sesOffJobID         = 5  // 24 bits
	sesOffPIDOnFEP      = 8  // reserved (4) | pid_on_fep (12)
	sesOffResourceIndex = 10 // reserved (4) | resource_index (12)
	sesOffBufferOffset  = 12
	sesOffInitiator     = 20
	sesOffMemKey        = 24
	sesOffHeaderData    = 32 // SOM: header_data (64)
	sesOffPayloadLength = 32 // not SOM: reserved (18) | payload_length (14)
	sesOffMessageOffset = 36 // not SOM
	sesOffRequestLength = 40

	// SES response header (packet-uet.c's dissect_ses_resp; xdp2's
	// uet_ses_nodata_response_hdr).
	sesRespOffOpcode         = 0 // list (2) | opcode (6)
	sesRespOffReturnCode     = 1 // version (2) | return_code (6)
	sesRespOffMessageID      = 2
	sesRespOffIndexGen       = 4
	sesRespOffJobID          = 5 // 24 bits
	sesRespOffModifiedLength = 8
)

// SESRequest is the SES standard request header, REQ_STD (44 bytes; UE
// 1.0.1 figure 6 as packet-uet.c's dissect_ses_std_req cites it; xdp2's
// uet_ses_request_std_hdr). It follows a PDS header whose next header is
// NextHeaderReqStd. The extension headers some opcodes append (atomic,
// rendezvous) follow it in the payload and are not decoded here.
//
// The 8 bytes at offset 32 depend on SOM: the first packet of a message
// carries HeaderData there, the others PayloadLength and MessageOffset.
// BufferOffset has its own slot at offset 12: unlike the medium request,
// where HD selects between header_data and buffer_offset in one slot, HD
// in the standard request only says whether HeaderData carries data.
type SESRequest struct {
	Opcode  SESOpcode // 6 bits
	Version uint8     // 2 bits
	DC      bool      // delivery complete
	IE      bool      // initiator error (a response echoes it as INITIATOR_ERR)
	Rel     bool      // relative addressing: PIDOnFEP is relative to JobID
	HD      bool      // header data present: HeaderData is meaningful (SOM only)
	EOM     bool      // end of message: the last packet
	SOM     bool      // start of message: the first packet
	// MessageID identifies the message on its PDC; its packets share it.
	MessageID       uint16
	IndexGeneration uint8  // resource index generation
	JobID           uint32 // 24 bits
	PIDOnFEP        uint16 // 12 bits: the target process on the fabric endpoint
	ResourceIndex   uint16 // 12 bits
	// BufferOffset is the byte offset into the target buffer (for
	// DEFERRABLE_SEND and DEFERRABLE_TSEND the slot carries the restart
	// token; see SESOpcode.RestartToken).
	BufferOffset uint64
	Initiator    uint32
	// MemKeyMatchBits is the memory key (RMA) or the match bits (tagged
	// sends); for DEFERRABLE_RTR the slot carries the restart token.
	MemKeyMatchBits uint64
	HeaderData      uint64 // SOM only: immediate data for the target
	PayloadLength   uint16 // not SOM, 14 bits: bytes of payload in this packet
	MessageOffset   uint32 // not SOM: offset of this packet's payload in the message
	// RequestLength is the message length in bytes.
	RequestLength uint32
}

// Len returns SESStdLen.
func (s *SESRequest) Len() int { return SESStdLen }

// Encode writes s (SESStdLen bytes) into b and returns SESStdLen, or 0 if b
// is too short. It writes HeaderData with SOM and PayloadLength and
// MessageOffset without. Fields wider than their wire field are truncated
// (Validate reports them), reserved bits are written as zero.
func (s *SESRequest) Encode(b []byte) int {
	if len(b) < SESStdLen {
		return 0
	}
	b = b[:SESStdLen]
	f := flagIf(s.DC, sesFlagDC) | flagIf(s.IE, sesFlagIE) | flagIf(s.Rel, sesFlagRel) |
		flagIf(s.HD, sesFlagHD) | flagIf(s.EOM, sesFlagEOM) | flagIf(s.SOM, sesFlagSOM)
	b[sesOffOpcode] = uint8(s.Opcode) & sesSixMask
	b[sesOffFlags] = s.Version<<sesVersionShift | f
	be.PutUint16(b[sesOffMessageID:], s.MessageID)
	b[sesOffIndexGen] = s.IndexGeneration
	put24(b[sesOffJobID:], s.JobID)
	be.PutUint16(b[sesOffPIDOnFEP:], s.PIDOnFEP&MaxPIDOnFEP)
	be.PutUint16(b[sesOffResourceIndex:], s.ResourceIndex&MaxResourceIndex)
	be.PutUint64(b[sesOffBufferOffset:], s.BufferOffset)
	be.PutUint32(b[sesOffInitiator:], s.Initiator)
	be.PutUint64(b[sesOffMemKey:], s.MemKeyMatchBits)
	if s.SOM {
		be.PutUint64(b[sesOffHeaderData:], s.HeaderData)
	} else {
		be.PutUint32(b[sesOffPayloadLength:], uint32(s.PayloadLength&MaxSESPayloadLength))
		be.PutUint32(b[sesOffMessageOffset:], s.MessageOffset)
	}
	be.PutUint32(b[sesOffRequestLength:], s.RequestLength)
	return SESStdLen
}

// DecodeSESRequest parses the SES standard request header at the start of
// b (the payload Parse returns for a PDS header with next header
// NextHeaderReqStd) into s and returns SESStdLen. It rejects only a b
// shorter than SESStdLen (ErrTruncated), leaving s as it was: every opcode
// and version value decodes, reserved bits are ignored. It allocates
// nothing on success.
func DecodeSESRequest(b []byte, s *SESRequest) (int, error) {
	if len(b) < SESStdLen {
		return 0, fmt.Errorf("uet: %w: %d bytes, the SES standard request header (REQ_STD) needs %d", ErrTruncated, len(b), SESStdLen)
	}
	b = b[:SESStdLen]
	f := b[sesOffFlags]
	*s = SESRequest{
		Opcode:          SESOpcode(b[sesOffOpcode] & sesSixMask),
		Version:         f >> sesVersionShift,
		DC:              f&sesFlagDC != 0,
		IE:              f&sesFlagIE != 0,
		Rel:             f&sesFlagRel != 0,
		HD:              f&sesFlagHD != 0,
		EOM:             f&sesFlagEOM != 0,
		SOM:             f&sesFlagSOM != 0,
		MessageID:       be.Uint16(b[sesOffMessageID:]),
		IndexGeneration: b[sesOffIndexGen],
		JobID:           get24(b[sesOffJobID:]),
		PIDOnFEP:        be.Uint16(b[sesOffPIDOnFEP:]) & MaxPIDOnFEP,
		ResourceIndex:   be.Uint16(b[sesOffResourceIndex:]) & MaxResourceIndex,
		BufferOffset:    be.Uint64(b[sesOffBufferOffset:]),
		Initiator:       be.Uint32(b[sesOffInitiator:]),
		MemKeyMatchBits: be.Uint64(b[sesOffMemKey:]),
		RequestLength:   be.Uint32(b[sesOffRequestLength:]),
	}
	if s.SOM {
		s.HeaderData = be.Uint64(b[sesOffHeaderData:])
	} else {
		s.PayloadLength = uint16(be.Uint32(b[sesOffPayloadLength:]) & MaxSESPayloadLength)
		s.MessageOffset = be.Uint32(b[sesOffMessageOffset:])
	}
	return SESStdLen, nil
}

// Validate reports the first field of s that Encode would truncate or
// ignore: a field wider than its wire field, or a field of the variant SOM
// does not select. Every 6-bit opcode is valid (reserved and vendor
// opcodes included), and so is any combination of flags: HD without SOM
// is the target's concern.
func (s *SESRequest) Validate() error {
	if err := checkBits(
		bitField{"REQ_STD opcode", uint64(s.Opcode), 6},
		bitField{"REQ_STD version", uint64(s.Version), 2},
		bitField{"REQ_STD job_id", uint64(s.JobID), 24},
		bitField{"REQ_STD pid_on_fep", uint64(s.PIDOnFEP), 12},
		bitField{"REQ_STD resource_index", uint64(s.ResourceIndex), 12},
	); err != nil {
		return err
	}
	switch {
	case s.SOM && (s.PayloadLength != 0 || s.MessageOffset != 0):
		return fmt.Errorf("uet: %w: REQ_STD payload_length %d, message_offset %d with SOM: the slot carries header_data", ErrField, s.PayloadLength, s.MessageOffset)
	case !s.SOM && s.HeaderData != 0:
		return fmt.Errorf("uet: %w: REQ_STD header_data %#x without SOM: the slot carries payload_length and message_offset", ErrField, s.HeaderData)
	}
	return checkBits(bitField{"REQ_STD payload_length", uint64(s.PayloadLength), 14})
}

// SESResponse is the SES response header without data, RESP (12 bytes;
// UE 1.0.1 figure 15 as packet-uet.c's dissect_ses_resp cites it; xdp2's uet_ses_nodata_response_hdr). It
// follows a PDS header (an ACK's, usually) whose next header is
// NextHeaderRsp. It has no reserved bits.
type SESResponse struct {
	// List is the 2-bit list the message was delivered to (xdp2: 0
	// expected, 1 overflow, 2 and 3 vendor-defined).
	List       uint8
	Opcode     SESRespOpcode // 6 bits; a RESP carries DEFAULT_RESPONSE, RESPONSE or NO_RESPONSE (NoData)
	Version    uint8         // 2 bits
	ReturnCode SESReturnCode // 6 bits
	MessageID  uint16        // the request's MessageID
	// IndexGeneration is packet-uet.c's resource_index_gen (xdp2:
	// ri_generation).
	IndexGeneration uint8
	JobID           uint32 // 24 bits
	// ModifiedLength is the number of bytes the target placed (packet-uet.c
	// "Modified Length").
	ModifiedLength uint32
}

// Len returns SESRespLen.
func (r *SESResponse) Len() int { return SESRespLen }

// Encode writes r (SESRespLen bytes) into b and returns SESRespLen, or 0
// if b is too short. Fields wider than their wire field are truncated
// (Validate reports them).
func (r *SESResponse) Encode(b []byte) int {
	if len(b) < SESRespLen {
		return 0
	}
	b = b[:SESRespLen]
	b[sesRespOffOpcode] = r.List<<6 | uint8(r.Opcode)&sesSixMask
	b[sesRespOffReturnCode] = r.Version<<6 | uint8(r.ReturnCode)&sesSixMask
	be.PutUint16(b[sesRespOffMessageID:], r.MessageID)
	b[sesRespOffIndexGen] = r.IndexGeneration
	put24(b[sesRespOffJobID:], r.JobID)
	be.PutUint32(b[sesRespOffModifiedLength:], r.ModifiedLength)
	return SESRespLen
}

// DecodeSESResponse parses the SES response header at the start of b (the
// payload Parse returns for a PDS header with next header NextHeaderRsp)
// into r and returns SESRespLen. It rejects only a b shorter than
// SESRespLen (ErrTruncated), leaving r as it was: every opcode and return
// code decodes, RESPONSE_W_DATA and undefined ones included (see
// SESRespOpcode.NoData). It allocates nothing on success.
func DecodeSESResponse(b []byte, r *SESResponse) (int, error) {
	if len(b) < SESRespLen {
		return 0, fmt.Errorf("uet: %w: %d bytes, the SES response header (RESP) needs %d", ErrTruncated, len(b), SESRespLen)
	}
	b = b[:SESRespLen]
	*r = SESResponse{
		List:            b[sesRespOffOpcode] >> 6,
		Opcode:          SESRespOpcode(b[sesRespOffOpcode] & sesSixMask),
		Version:         b[sesRespOffReturnCode] >> 6,
		ReturnCode:      SESReturnCode(b[sesRespOffReturnCode] & sesSixMask),
		MessageID:       be.Uint16(b[sesRespOffMessageID:]),
		IndexGeneration: b[sesRespOffIndexGen],
		JobID:           get24(b[sesRespOffJobID:]),
		ModifiedLength:  be.Uint32(b[sesRespOffModifiedLength:]),
	}
	return SESRespLen, nil
}

// Validate reports the first field of r wider than its wire field. Every
// 6-bit opcode and return code is valid.
func (r *SESResponse) Validate() error {
	return checkBits(
		bitField{"RESP list", uint64(r.List), 2},
		bitField{"RESP opcode", uint64(r.Opcode), 6},
		bitField{"RESP version", uint64(r.Version), 2},
		bitField{"RESP return_code", uint64(r.ReturnCode), 6},
		bitField{"RESP job_id", uint64(r.JobID), 24},
	)
}
