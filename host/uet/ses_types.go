package uet

import "github.com/fabriclab/fabriclab/qdisc/enum"

// SESOpcode is the 6-bit opcode of a SES request header (packet-uet.c's UET_SES_OPCODE_*, xdp2's uet_ses_request_msg_type).
// 0x10–0x2F are reserved; xdp2 names 0x30–0x3E vendor-defined and 0x3F an
// escape to an extended opcode.
type SESOpcode uint8

// SES request opcodes.
const (
	SESNoOp             SESOpcode = 0x00
	SESWrite            SESOpcode = 0x01
	SESRead             SESOpcode = 0x02
	SESAtomic           SESOpcode = 0x03
	SESFetchingAtomic   SESOpcode = 0x04
	SESSend             SESOpcode = 0x05
	SESRendezvousSend   SESOpcode = 0x06
	SESDatagramSend     SESOpcode = 0x07
	SESDeferrableSend   SESOpcode = 0x08 // buffer_offset carries the restart token
	SESTaggedSend       SESOpcode = 0x09
	SESRendezvousTSend  SESOpcode = 0x0A
	SESDeferrableTSend  SESOpcode = 0x0B // buffer_offset carries the restart token
	SESDeferrableRTR    SESOpcode = 0x0C // ready to restart: mem_key_match_bits carries the restart token
	SESTSendAtomic      SESOpcode = 0x0D
	SESTSendFetchAtomic SESOpcode = 0x0E
	SESMsgError         SESOpcode = 0x0F // terminate the message in error
	maxSESOpcode                  = SESMsgError
)

// sesOpcodeNames are packet-uet.c's UET_SES_OPCODE_* macro names without
// the prefix.
var sesOpcodeNames = enum.Names{
	SESNoOp:             {"NO_OP"},
	SESWrite:            {"WRITE"},
	SESRead:             {"READ"},
	SESAtomic:           {"ATOMIC"},
	SESFetchingAtomic:   {"FETCHING_ATOMIC"},
	SESSend:             {"SEND"},
	SESRendezvousSend:   {"RENDEZVOUS_SEND"},
	SESDatagramSend:     {"DATAGRAM_SEND"},
	SESDeferrableSend:   {"DEFERRABLE_SEND"},
	SESTaggedSend:       {"TAGGED_SEND"},
	SESRendezvousTSend:  {"RENDEZVOUS_TSEND"},
	SESDeferrableTSend:  {"DEFERRABLE_TSEND"},
	SESDeferrableRTR:    {"DEFERRABLE_RTR"},
	SESTSendAtomic:      {"TSEND_ATOMIC"},
	SESTSendFetchAtomic: {"TSEND_FETCH_ATOMIC"},
	SESMsgError:         {"MSG_ERROR"},
}

// String returns the opcode's name ("WRITE"), or "0x10" for a value
// UE 1.0.1 does not define.
func (o SESOpcode) String() string { return enum.Format(o, sesOpcodeNames, "0x%02x") }

// Known reports whether UE 1.0.1 defines the opcode (0x00–0x0F).
func (o SESOpcode) Known() bool { return o <= maxSESOpcode }

// RestartToken reports whether a standard request with opcode o carries a
// restart token, and in which slot: the buffer_offset slot for
// DEFERRABLE_SEND and DEFERRABLE_TSEND, the mem_key_match_bits slot for
// DEFERRABLE_RTR (packet-uet.c's restart_token; xdp2 splits the 64 bits into
// initiator and target restart tokens of 32 bits each).
func (o SESOpcode) RestartToken() (inBufferOffset, inMemKey bool) {
	switch o {
	case SESDeferrableSend, SESDeferrableTSend:
		return true, false
	case SESDeferrableRTR:
		return false, true
	}
	return false, false
}

// SESRespOpcode is the 6-bit opcode of a SES response header (packet-uet.c's
// UET_SES_RSP_*; xdp2 names 0x30–0x3F vendor-defined).
type SESRespOpcode uint8

// SES response opcodes.
const (
	SESRespDefault  SESRespOpcode = 0x00 // DEFAULT_RESPONSE
	SESRespResponse SESRespOpcode = 0x01 // RESPONSE
	// SESRespWithData belongs in the RESP_DATA and RESP_DATA_SMALL
	// headers (next header 5 and 6), not in RESP.
	SESRespWithData   SESRespOpcode = 0x02 // RESPONSE_W_DATA
	SESRespNoResponse SESRespOpcode = 0x03 // NO_RESPONSE
)

var sesRespOpcodeNames = enum.Names{
	SESRespDefault:    {"DEFAULT_RESPONSE"},
	SESRespResponse:   {"RESPONSE"},
	SESRespWithData:   {"RESPONSE_W_DATA"},
	SESRespNoResponse: {"NO_RESPONSE"},
}

// String returns packet-uet.c's UET_SES_RSP_* name without the prefix
// ("DEFAULT_RESPONSE"), or "0x04" and up.
func (o SESRespOpcode) String() string { return enum.Format(o, sesRespOpcodeNames, "0x%02x") }

// Known reports whether UE 1.0.1 defines the opcode (0–3).
func (o SESRespOpcode) Known() bool { return int(o) < len(sesRespOpcodeNames) }

// NoData reports whether o is an opcode of the response header without
// data (RESP, next header 4): DEFAULT_RESPONSE, RESPONSE or NO_RESPONSE.
// packet-uet.c flags any other opcode in a RESP header; this package
// decodes it as it is and leaves the check to the caller.
func (o SESRespOpcode) NoData() bool {
	return o == SESRespDefault || o == SESRespResponse || o == SESRespNoResponse
}

// SESReturnCode is the 6-bit return code of a SES response (packet-uet.c's
// UET_SES_RSP_RC_*). 0x25–0x2F are not defined; xdp2 names 0x30–0x37
// vendor-defined and 0x3E an escape to an extended code.
type SESReturnCode uint8

// SES return codes.
const (
	SESRCNull               SESReturnCode = 0x00
	SESRCOK                 SESReturnCode = 0x01
	SESRCBadGeneration      SESReturnCode = 0x02
	SESRCDisabled           SESReturnCode = 0x03
	SESRCDisabledGen        SESReturnCode = 0x04
	SESRCNoMatch            SESReturnCode = 0x05
	SESRCUnsupportedOp      SESReturnCode = 0x06
	SESRCUnsupportedSize    SESReturnCode = 0x07
	SESRCATInvalid          SESReturnCode = 0x08
	SESRCATPerm             SESReturnCode = 0x09
	SESRCATATSError         SESReturnCode = 0x0A
	SESRCATNoTrans          SESReturnCode = 0x0B
	SESRCATOutOfRange       SESReturnCode = 0x0C
	SESRCHostPoisoned       SESReturnCode = 0x0D
	SESRCHostUnsuccessCmpl  SESReturnCode = 0x0E
	SESRCAMOUnsupportedOp   SESReturnCode = 0x0F
	SESRCAMOUnsupportedDT   SESReturnCode = 0x10
	SESRCAMOUnsupportedSize SESReturnCode = 0x11
	SESRCAMOUnaligned       SESReturnCode = 0x12
	SESRCAMOFPNaN           SESReturnCode = 0x13
	SESRCAMOFPUnderflow     SESReturnCode = 0x14
	SESRCAMOFPOverflow      SESReturnCode = 0x15
	SESRCAMOFPInexact       SESReturnCode = 0x16
	SESRCPermViolation      SESReturnCode = 0x17
	SESRCOpViolation        SESReturnCode = 0x18
	SESRCBadIndex           SESReturnCode = 0x19
	SESRCBadPID             SESReturnCode = 0x1A
	SESRCBadJobID           SESReturnCode = 0x1B
	SESRCBadMKey            SESReturnCode = 0x1C
	SESRCBadAddr            SESReturnCode = 0x1D
	SESRCCancelled          SESReturnCode = 0x1E
	SESRCUndeliverable      SESReturnCode = 0x1F
	SESRCUncor              SESReturnCode = 0x20
	SESRCUncorTrnsnt        SESReturnCode = 0x21
	SESRCTooLong            SESReturnCode = 0x22
	SESRCInitiatorErr       SESReturnCode = 0x23 // echoes the request's IE flag
	SESRCDropped            SESReturnCode = 0x24
	maxSESReturnCode                      = SESRCDropped
)

// sesReturnCodeNames are packet-uet.c's UET_SES_RSP_RC_* macro names
// without the prefix.
var sesReturnCodeNames = enum.Names{
	SESRCNull:               {"NULL"},
	SESRCOK:                 {"OK"},
	SESRCBadGeneration:      {"BAD_GENERATION"},
	SESRCDisabled:           {"DISABLED"},
	SESRCDisabledGen:        {"DISABLED_GEN"},
	SESRCNoMatch:            {"NO_MATCH"},
	SESRCUnsupportedOp:      {"UNSUPPORTED_OP"},
	SESRCUnsupportedSize:    {"UNSUPPORTED_SIZE"},
	SESRCATInvalid:          {"AT_INVALID"},
	SESRCATPerm:             {"AT_PERM"},
	SESRCATATSError:         {"AT_ATS_ERROR"},
	SESRCATNoTrans:          {"AT_NO_TRANS"},
	SESRCATOutOfRange:       {"AT_OUT_OF_RANGE"},
	SESRCHostPoisoned:       {"HOST_POISONED"},
	SESRCHostUnsuccessCmpl:  {"HOST_UNSUCCESS_CMPL"},
	SESRCAMOUnsupportedOp:   {"AMO_UNSUPPORTED_OP"},
	SESRCAMOUnsupportedDT:   {"AMO_UNSUPPORTED_DT"},
	SESRCAMOUnsupportedSize: {"AMO_UNSUPPORTED_SIZE"},
	SESRCAMOUnaligned:       {"AMO_UNALIGNED"},
	SESRCAMOFPNaN:           {"AMO_FP_NAN"},
	SESRCAMOFPUnderflow:     {"AMO_FP_UNDERFLOW"},
	SESRCAMOFPOverflow:      {"AMO_FP_OVERFLOW"},
	SESRCAMOFPInexact:       {"AMO_FP_INEXACT"},
	SESRCPermViolation:      {"PERM_VIOLATION"},
	SESRCOpViolation:        {"OP_VIOLATION"},
	SESRCBadIndex:           {"BAD_INDEX"},
	SESRCBadPID:             {"BAD_PID"},
	SESRCBadJobID:           {"BAD_JOB_ID"},
	SESRCBadMKey:            {"BAD_MKEY"},
	SESRCBadAddr:            {"BAD_ADDR"},
	SESRCCancelled:          {"CANCELLED"},
	SESRCUndeliverable:      {"UNDELIVERABLE"},
	SESRCUncor:              {"UNCOR"},
	SESRCUncorTrnsnt:        {"UNCOR_TRNSNT"},
	SESRCTooLong:            {"TOO_LONG"},
	SESRCInitiatorErr:       {"INITIATOR_ERR"},
	SESRCDropped:            {"DROPPED"},
}

// String returns the code's name ("NO_MATCH"), or "0x25" for a value
// UE 1.0.1 does not define.
func (c SESReturnCode) String() string { return enum.Format(c, sesReturnCodeNames, "0x%02x") }

// Known reports whether UE 1.0.1 defines the code (0x00–0x24).
func (c SESReturnCode) Known() bool { return c <= maxSESReturnCode }
