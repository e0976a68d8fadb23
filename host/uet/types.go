package uet

import (
	"fmt"

	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// Type is the 5-bit PDS type of the prologue (UE 1.0.1 §3.5.10.2; the
// values of packet-uet.c and xdp2's pds.h).
type Type uint8

// PDS types.
const (
	TypeTSS      Type = 1 // TSS encryption header (packet-uet.c: UET_TYPE_ENC)
	TypeRUDReq   Type = 2
	TypeRODReq   Type = 3
	TypeRUDIReq  Type = 4
	TypeRUDIResp Type = 5
	TypeUUDReq   Type = 6
	TypeAck      Type = 7
	TypeAckCC    Type = 8
	TypeAckCCX   Type = 9
	TypeNack     Type = 10
	TypeCtrl     Type = 11
	TypeNackCCX  Type = 12
	TypeRUDCCReq Type = 13
	TypeRODCCReq Type = 14
	maxType      Type = 0x1F // 5 bits
)

// family groups the types that share a header form.
type family uint8

const (
	famNone        family = iota // unknown
	famUnsupported               // defined, not decoded here
	famRequest
	famAck
	famNack
	famCtrl
)

type typeInfo struct {
	name   string
	fam    family
	hdrLen uint8
}

var typeTable = [maxType + 1]typeInfo{
	TypeTSS:      {"TSS", famUnsupported, 0},
	TypeRUDReq:   {"RUD_REQ", famRequest, RequestLen},
	TypeRODReq:   {"ROD_REQ", famRequest, RequestLen},
	TypeRUDIReq:  {"RUDI_REQ", famUnsupported, 0},
	TypeRUDIResp: {"RUDI_RESP", famUnsupported, 0},
	TypeUUDReq:   {"UUD_REQ", famUnsupported, 0},
	TypeAck:      {"ACK", famAck, AckLen},
	TypeAckCC:    {"ACK_CC", famAck, AckCCLen},
	TypeAckCCX:   {"ACK_CCX", famUnsupported, 0},
	TypeNack:     {"NACK", famNack, NackLen},
	TypeCtrl:     {"CTRL", famCtrl, CtrlLen},
	TypeNackCCX:  {"NACK_CCX", famUnsupported, 0},
	TypeRUDCCReq: {"RUD_CC_REQ", famRequest, RequestCCLen},
	TypeRODCCReq: {"ROD_CC_REQ", famRequest, RequestCCLen},
}

func (t Type) info() *typeInfo {
	if t > maxType {
		return &typeInfo{}
	}
	return &typeTable[t]
}

// String returns the type's name as in uet.md ("RUD_CC_REQ"), or "0x1f"
// for a value UE 1.0.1 does not define.
func (t Type) String() string {
	if n := t.info().name; n != "" {
		return n
	}
	return fmt.Sprintf("0x%02x", uint8(t))
}

// Known reports whether UE 1.0.1 defines the type (1–14).
func (t Type) Known() bool { return t.info().fam != famNone }

// Decoded reports whether this package encodes and decodes the type:
// the requests, ACK, ACK_CC, NACK and CTRL.
func (t Type) Decoded() bool { return t.info().hdrLen != 0 }

// HeaderLen returns the PDS header length of the type, or 0 if this
// package does not decode it.
func (t Type) HeaderLen() int { return int(t.info().hdrLen) }

// IsRequest reports whether t is RUD_REQ, ROD_REQ, RUD_CC_REQ or ROD_CC_REQ.
func (t Type) IsRequest() bool { return t.info().fam == famRequest }

// HasReqCC reports whether t is a request that carries the 32-bit
// req_cc_state (RUD_CC_REQ, ROD_CC_REQ).
func (t Type) HasReqCC() bool { return t == TypeRUDCCReq || t == TypeRODCCReq }

// IsROD reports whether t is a ROD (reliable ordered delivery) request.
func (t Type) IsROD() bool { return t == TypeRODReq || t == TypeRODCCReq }

// NextHeader is the 4-bit next-header field of the prologue: which SES
// header follows the PDS header (UE 1.0.1 §4.3.6; packet-uet.c). CTRL
// packets carry a CtrlType in the same bits instead.
type NextHeader uint8

// Next-header values (packet-uet.c's UET_PDS_NH_*).
const (
	NextHeaderNone         NextHeader = 0 // no SES header
	NextHeaderReqSmall     NextHeader = 1
	NextHeaderReqMedium    NextHeader = 2
	NextHeaderReqStd       NextHeader = 3
	NextHeaderRsp          NextHeader = 4
	NextHeaderRspData      NextHeader = 5
	NextHeaderRspDataSmall NextHeader = 6
	maxNibble                         = 0xF
)

var nextHeaderNames = enum.Names{
	NextHeaderNone:         {"NO_SES"},
	NextHeaderReqSmall:     {"REQ_SMALL"},
	NextHeaderReqMedium:    {"REQ_MEDIUM"},
	NextHeaderReqStd:       {"REQ_STD"},
	NextHeaderRsp:          {"RESP"},
	NextHeaderRspData:      {"RESP_DATA"},
	NextHeaderRspDataSmall: {"RESP_DATA_SMALL"},
}

// String returns packet-uet.c's short name ("REQ_STD"), or "0xf".
func (n NextHeader) String() string { return enum.Format(n, nextHeaderNames, "%#x") }

// CtrlType is the control type a CTRL packet carries in the prologue's
// next-header bits (UE 1.0.1 §3.5.16; xdp2's uet_pds_control_pkt_type).
type CtrlType uint8

// Control types.
const (
	CtrlNoop      CtrlType = 0
	CtrlAckReq    CtrlType = 1 // request for ACK
	CtrlClearCmd  CtrlType = 2
	CtrlClearReq  CtrlType = 3
	CtrlCloseCmd  CtrlType = 4
	CtrlCloseReq  CtrlType = 5
	CtrlProbe     CtrlType = 6 // answered by an ACK with the probe flag
	CtrlCredit    CtrlType = 7 // RCCC credit grant
	CtrlCreditReq CtrlType = 8
	// CtrlNegotiation is in uet.md and xdp2; packet-uet.c does not
	// know it and shows "Unknown (9)".
	CtrlNegotiation CtrlType = 9
)

var ctrlTypeNames = enum.Names{
	CtrlNoop:        {"NOOP"},
	CtrlAckReq:      {"ACK_REQ"},
	CtrlClearCmd:    {"CLEAR_CMD"},
	CtrlClearReq:    {"CLEAR_REQ"},
	CtrlCloseCmd:    {"CLOSE_CMD"},
	CtrlCloseReq:    {"CLOSE_REQ"},
	CtrlProbe:       {"PROBE"},
	CtrlCredit:      {"CREDIT"},
	CtrlCreditReq:   {"CREDIT_REQ"},
	CtrlNegotiation: {"NEGOTIATION"},
}

// String returns the control type's name ("CREDIT"), or "0xf".
func (c CtrlType) String() string { return enum.Format(c, ctrlTypeNames, "%#x") }

// AckReq is the 2-bit req field of an ACK's flags: what the ACK asks of the
// source (packet-uet.c's uet_pds_flags_ack_req_vals).
type AckReq uint8

// ACK requests.
const (
	AckReqNone     AckReq = 0
	AckReqClear    AckReq = 1 // clear PSN
	AckReqClose    AckReq = 2 // close the PDC
	AckReqReserved AckReq = 3
)

var ackReqNames = enum.Names{AckReqNone: {"NONE"}, AckReqClear: {"CLEAR"}, AckReqClose: {"CLOSE"}, AckReqReserved: {"RESERVED"}}

// String returns "NONE", "CLEAR", "CLOSE", "RESERVED", or "0x4" and up.
func (r AckReq) String() string { return enum.Format(r, ackReqNames, "%#x") }

// CCType is the 4-bit cc_type of an ACK_CC: the layout of its cc_state.
type CCType uint8

// Congestion-control state types (UE 1.0.1 §3.5.10; packet-uet.c
// UET_PDS_CC_*).
const (
	CCNSCC   CCType = 0 // sender-based NSCC: NSCCState
	CCCredit CCType = 1 // receiver credit (RCCC): CreditState
)

var ccTypeNames = enum.Names{CCNSCC: {"NSCC"}, CCCredit: {"CREDIT"}}

// String returns "NSCC", "CREDIT", or "0xf".
func (c CCType) String() string { return enum.Format(c, ccTypeNames, "%#x") }

// NackCode is the 8-bit nack_code of a NACK (UE 1.0.1 §3.5.12.8; the
// values of packet-uet.c and xdp2's pds.h).
type NackCode uint8

// NACK codes. 0x0C and 0x1B–0xFC are not defined.
const (
	NackTrimmed           NackCode = 0x01
	NackTrimmedLastHop    NackCode = 0x02
	NackTrimmedAck        NackCode = 0x03 // an ACK carrying read response data was trimmed
	NackNoPDCAvail        NackCode = 0x04
	NackNoCCCAvail        NackCode = 0x05
	NackNoBitmap          NackCode = 0x06
	NackNoPktBuffer       NackCode = 0x07
	NackNoGtdDelAvail     NackCode = 0x08
	NackNoSESMsgAvail     NackCode = 0x09
	NackNoResource        NackCode = 0x0A
	NackPSNOORWindow      NackCode = 0x0B
	NackRODOOO            NackCode = 0x0D
	NackInvDPDCID         NackCode = 0x0E
	NackPDCHdrMismatch    NackCode = 0x0F
	NackClosing           NackCode = 0x10
	NackClosingInErr      NackCode = 0x11
	NackPktNotRcvd        NackCode = 0x12
	NackGtdDelRespUnavail NackCode = 0x13
	NackAckWithData       NackCode = 0x14
	NackInvalidSYN        NackCode = 0x15
	NackPDCModeMismatch   NackCode = 0x16
	NackNewStartPSN       NackCode = 0x17
	NackRcvdSESProcg      NackCode = 0x18
	NackUnexpEvent        NackCode = 0x19
	NackRcvrInferLoss     NackCode = 0x1A
	NackExpNormal         NackCode = 0xFD
	NackExpErr            NackCode = 0xFE
	NackExpFatal          NackCode = 0xFF
)

// nackCodeNames are the names of packet-uet.c's UET_PDS_NACK_CODE_* macros
// without the prefix.
var nackCodeNames = enum.Names{
	NackTrimmed:           {"TRIMMED"},
	NackTrimmedLastHop:    {"TRIMMED_LASTHOP"},
	NackTrimmedAck:        {"TRIMMED_ACK"},
	NackNoPDCAvail:        {"NO_PDC_AVAIL"},
	NackNoCCCAvail:        {"NO_CCC_AVAIL"},
	NackNoBitmap:          {"NO_BITMAP"},
	NackNoPktBuffer:       {"NO_PKT_BUFFER"},
	NackNoGtdDelAvail:     {"NO_GTD_DEL_AVAIL"},
	NackNoSESMsgAvail:     {"NO_SES_MSG_AVAIL"},
	NackNoResource:        {"NO_RESOURCE"},
	NackPSNOORWindow:      {"PSN_OOR_WINDOW"},
	NackRODOOO:            {"ROD_OOO"},
	NackInvDPDCID:         {"INV_DPDCID"},
	NackPDCHdrMismatch:    {"PDC_HDR_MISMATCH"},
	NackClosing:           {"CLOSING"},
	NackClosingInErr:      {"CLOSING_IN_ERR"},
	NackPktNotRcvd:        {"PKT_NOT_RCVD"},
	NackGtdDelRespUnavail: {"GTD_DEL_RESP_UNAVAIL"},
	NackAckWithData:       {"ACK_WITH_DATA"},
	NackInvalidSYN:        {"INVALID_SYN"},
	NackPDCModeMismatch:   {"PDC_MODE_MISMATCH"},
	NackNewStartPSN:       {"NEW_START_PSN"},
	NackRcvdSESProcg:      {"RCVD_SES_PROCG"},
	NackUnexpEvent:        {"UNEXP_EVENT"},
	NackRcvrInferLoss:     {"RCVR_INFER_LOSS"},
	NackExpNormal:         {"EXP_NACK_NORMAL"},
	NackExpErr:            {"EXP_NACK_ERR"},
	NackExpFatal:          {"EXP_NACK_FATAL"},
}

// String returns the code's name ("NO_CCC_AVAIL"), or "0x0c" for a value
// UE 1.0.1 does not define.
func (c NackCode) String() string { return enum.Format(c, nackCodeNames, "0x%02x") }

// Known reports whether UE 1.0.1 defines the code.
func (c NackCode) Known() bool {
	_, ok := enum.Lookup(c, nackCodeNames)
	return ok
}
