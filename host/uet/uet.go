package uet

import (
	"encoding/binary"
	"errors"
)

// Port is the IANA-assigned UDP destination port of UET (the port
// Wireshark's packet-uet.c and xdp2's pds.h decode). The UDP source port
// carries the entropy value (EV) that switches hash on to pick a path.
//
// The libfabric reference provider (uet-ref-prov) uses 49150 in its header
// file; this project uses the IANA port only.
const Port = 4793

// Header lengths in bytes (UE 1.0.1 §3.5.10; packet-uet.c's
// UET_PDS_RUD_ROD_MIN_HDR_LEN, UET_PDS_RUD_ROD_CC_MIN_HDR_LEN,
// UET_PDS_ACK_EXT_HDR_SIZE).
const (
	PrologueLen  = 2
	RequestLen   = 12 // RUD_REQ, ROD_REQ
	RequestCCLen = 16 // RUD_CC_REQ, ROD_CC_REQ: + ccc_id | credit_target
	AckLen       = 12 // ACK
	AckCCLen     = 32 // ACK_CC: ACK + 20-byte extension with cc_state
	NackLen      = 16
	CtrlLen      = 16
	// MaxHeaderLen is the longest header this package encodes (ACK_CC).
	MaxHeaderLen = AckCCLen
)

var be = binary.BigEndian // UE 1.0.1: every PDS field is big-endian

// Sentinel errors. Parse, DecodeHeader and the SES decoders wrap them
// with the field, the value and what was expected; test with errors.Is.
var (
	// ErrTruncated: the buffer ends before the header its type needs (a
	// PDS header, or the SES header DecodeSESRequest or DecodeSESResponse
	// reads).
	ErrTruncated = errors.New("truncated header")
	// ErrUnknownType: the prologue's type is 0 or 15–31 (not defined by
	// UE 1.0.1).
	ErrUnknownType = errors.New("unknown PDS type")
	// ErrUnsupportedType: a defined type this package does not decode
	// (TSS, RUDI_REQ, RUDI_RESP, UUD_REQ, ACK_CCX, NACK_CCX).
	ErrUnsupportedType = errors.New("PDS type not decoded by this package")
	// ErrCCType: an ACK_CC whose cc_type is neither NSCC (0) nor CREDIT (1):
	// its cc_state has no layout this package knows.
	ErrCCType = errors.New("unknown ACK_CC cc_type")
	// ErrField: a field out of its wire range, or set where the form does
	// not carry it (Validate, of a PDS or a SES header).
	ErrField = errors.New("field out of range")
)
