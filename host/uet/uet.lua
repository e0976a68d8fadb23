-- uet.lua: a Wireshark dissector for the Ultra Ethernet Transport (UET)
-- PDS and SES headers that fabriclab's host/uet encodes, on UDP port 4793.
--
-- Why: Debian 12's Wireshark/tshark 4.0 has no UET dissector (the built-in
-- packet-uet.c is in later releases). This one decodes the forms host/uet
-- decodes -- RUD_REQ, ROD_REQ, RUD_CC_REQ, ROD_CC_REQ (with the SYN form of
-- the dpdcid slot), ACK (with the probe form), ACK_CC (NSCC and CREDIT
-- cc_state), NACK, CTRL -- and flags the rest. After a request, ACK,
-- ACK_CC or NACK whose next header is REQ_STD (3) or RESP (4) it decodes
-- the SES standard request or response header as host/uet's
-- DecodeSESRequest and DecodeSESResponse do; other SES headers are shown
-- as data.
--
-- Use:
--   tshark -X lua_script:host/uet/uet.lua -r capture.pcap -Y fluet
--   tshark -X lua_script:host/uet/uet.lua -r capture.pcap -O fluet   (full tree)
--   tshark -X lua_script:host/uet/uet.lua -r capture.pcap -T fields \
--          -e fluet.type -e fluet.psn -e fluet.cc.nscc.rcvd_bytes
-- or, for the GUI, copy this file to ~/.local/lib/wireshark/plugins/.
--
-- Names: the protocol's filter name is "fluet" (fabriclab UET), not "uet",
-- so that this script still loads in a Wireshark that has the built-in
-- "uet" protocol (two protocols cannot share a filter name). The column
-- shows "UET". Field names are the host/uet Go struct fields in snake_case
-- without the form's name: Request.PSN -> fluet.psn, Ack.CACKPSN ->
-- fluet.cack_psn, Ack.CC.NSCC.RcvdBytes -> fluet.cc.nscc.rcvd_bytes,
-- Nack.Code -> fluet.code. SES fields sit under fluet.ses: SESRequest.JobID
-- -> fluet.ses.job_id, and the response's under fluet.ses.resp, since a
-- RESP's opcode has values of its own: SESResponse.ReturnCode ->
-- fluet.ses.resp.return_code. Generated fields (not on the wire) are the Go
-- methods: fluet.clear_psn (ClearPSN), fluet.start_psn (StartPSN),
-- fluet.ack_psn (AckPSN), fluet.cc.sack_base (SACKBase). Values are shown
-- in wire units; the labels add bytes and nanoseconds.
--
-- Wire format: host/uet/doc.go, from uet.md, packet-uet.c and xdp2's pds.h.
-- Where this dissector differs from packet-uet.c (rc and rcv_cwnd_pend at
-- byte 2 of the NSCC cc_state, probe_opaque on probe ACKs, the SYN form and
-- isROD on CTRL, signed sack_psn_offset; a RESP with an opcode it does not
-- carry is shown in full; a restart token is shown in the buffer_offset or
-- mem_key_match_bits field it occupies, labelled), doc.go says why.
--
-- Expert info: fluet.short (shorter than the header its type needs),
-- fluet.unknown_type (type 0 or 15-31), fluet.unsupported_type (TSS, RUDI,
-- UUD, ACK_CCX, NACK_CCX: not decoded), fluet.cc_type_unknown (ACK_CC
-- cc_type other than NSCC and CREDIT) -- the packets host/uet.Parse rejects --
-- and fluet.reserved (reserved bits set; host/uet ignores them). After the
-- PDS header: fluet.ses.short (shorter than its SES header: what
-- DecodeSESRequest and DecodeSESResponse reject) and fluet.ses.resp_opcode (a
-- RESP whose opcode is not DEFAULT_RESPONSE, RESPONSE or NO_RESPONSE;
-- packet-uet.c flags it too, host/uet decodes it as it is).
--
-- TestWiresharkDissector (host/uet) checks every field this script shows
-- against host/uet.Parse on a pcap of every form.

local UDP_PORT = 4793

local p_uet = Proto("fluet", "Ultra Ethernet Transport PDS (fabriclab)")

local type_names = {
	[1] = "TSS", [2] = "RUD_REQ", [3] = "ROD_REQ", [4] = "RUDI_REQ", [5] = "RUDI_RESP",
	[6] = "UUD_REQ", [7] = "ACK", [8] = "ACK_CC", [9] = "ACK_CCX", [10] = "NACK",
	[11] = "CTRL", [12] = "NACK_CCX", [13] = "RUD_CC_REQ", [14] = "ROD_CC_REQ",
}
local next_header_names = {
	[0] = "NO_SES", [1] = "REQ_SMALL", [2] = "REQ_MEDIUM", [3] = "REQ_STD",
	[4] = "RESP", [5] = "RESP_DATA", [6] = "RESP_DATA_SMALL",
}
local ctrl_type_names = {
	[0] = "NOOP", [1] = "ACK_REQ", [2] = "CLEAR_CMD", [3] = "CLEAR_REQ", [4] = "CLOSE_CMD",
	[5] = "CLOSE_REQ", [6] = "PROBE", [7] = "CREDIT", [8] = "CREDIT_REQ", [9] = "NEGOTIATION",
}
local ack_req_names = { [0] = "NONE", [1] = "CLEAR", [2] = "CLOSE", [3] = "RESERVED" }
local cc_type_names = { [0] = "NSCC", [1] = "CREDIT" }
local nack_code_names = {
	[0x01] = "TRIMMED", [0x02] = "TRIMMED_LASTHOP", [0x03] = "TRIMMED_ACK",
	[0x04] = "NO_PDC_AVAIL", [0x05] = "NO_CCC_AVAIL", [0x06] = "NO_BITMAP",
	[0x07] = "NO_PKT_BUFFER", [0x08] = "NO_GTD_DEL_AVAIL", [0x09] = "NO_SES_MSG_AVAIL",
	[0x0A] = "NO_RESOURCE", [0x0B] = "PSN_OOR_WINDOW", [0x0D] = "ROD_OOO",
	[0x0E] = "INV_DPDCID", [0x0F] = "PDC_HDR_MISMATCH", [0x10] = "CLOSING",
	[0x11] = "CLOSING_IN_ERR", [0x12] = "PKT_NOT_RCVD", [0x13] = "GTD_DEL_RESP_UNAVAIL",
	[0x14] = "ACK_WITH_DATA", [0x15] = "INVALID_SYN", [0x16] = "PDC_MODE_MISMATCH",
	[0x17] = "NEW_START_PSN", [0x18] = "RCVD_SES_PROCG", [0x19] = "UNEXP_EVENT",
	[0x1A] = "RCVR_INFER_LOSS", [0xFD] = "EXP_NACK_NORMAL", [0xFE] = "EXP_NACK_ERR",
	[0xFF] = "EXP_NACK_FATAL",
}

-- SES names (host/uet: SESOpcode, SESRespOpcode, SESReturnCode; packet-uet.c's
-- macro names without their prefix).
local ses_opcode_names = {
	[0x00] = "NO_OP", [0x01] = "WRITE", [0x02] = "READ", [0x03] = "ATOMIC",
	[0x04] = "FETCHING_ATOMIC", [0x05] = "SEND", [0x06] = "RENDEZVOUS_SEND",
	[0x07] = "DATAGRAM_SEND", [0x08] = "DEFERRABLE_SEND", [0x09] = "TAGGED_SEND",
	[0x0A] = "RENDEZVOUS_TSEND", [0x0B] = "DEFERRABLE_TSEND", [0x0C] = "DEFERRABLE_RTR",
	[0x0D] = "TSEND_ATOMIC", [0x0E] = "TSEND_FETCH_ATOMIC", [0x0F] = "MSG_ERROR",
}
local ses_resp_opcode_names = {
	[0] = "DEFAULT_RESPONSE", [1] = "RESPONSE", [2] = "RESPONSE_W_DATA", [3] = "NO_RESPONSE",
}
local ses_return_code_names = {
	[0x00] = "NULL", [0x01] = "OK", [0x02] = "BAD_GENERATION", [0x03] = "DISABLED",
	[0x04] = "DISABLED_GEN", [0x05] = "NO_MATCH", [0x06] = "UNSUPPORTED_OP",
	[0x07] = "UNSUPPORTED_SIZE", [0x08] = "AT_INVALID", [0x09] = "AT_PERM",
	[0x0A] = "AT_ATS_ERROR", [0x0B] = "AT_NO_TRANS", [0x0C] = "AT_OUT_OF_RANGE",
	[0x0D] = "HOST_POISONED", [0x0E] = "HOST_UNSUCCESS_CMPL", [0x0F] = "AMO_UNSUPPORTED_OP",
	[0x10] = "AMO_UNSUPPORTED_DT", [0x11] = "AMO_UNSUPPORTED_SIZE", [0x12] = "AMO_UNALIGNED",
	[0x13] = "AMO_FP_NAN", [0x14] = "AMO_FP_UNDERFLOW", [0x15] = "AMO_FP_OVERFLOW",
	[0x16] = "AMO_FP_INEXACT", [0x17] = "PERM_VIOLATION", [0x18] = "OP_VIOLATION",
	[0x19] = "BAD_INDEX", [0x1A] = "BAD_PID", [0x1B] = "BAD_JOB_ID", [0x1C] = "BAD_MKEY",
	[0x1D] = "BAD_ADDR", [0x1E] = "CANCELLED", [0x1F] = "UNDELIVERABLE", [0x20] = "UNCOR",
	[0x21] = "UNCOR_TRNSNT", [0x22] = "TOO_LONG", [0x23] = "INITIATOR_ERR", [0x24] = "DROPPED",
}

-- Header lengths (host/uet: RequestLen, RequestCCLen, AckLen, AckCCLen,
-- NackLen, CtrlLen).
local header_len = {
	[2] = 12, [3] = 12, [13] = 16, [14] = 16, [7] = 12, [8] = 32, [10] = 16, [11] = 16,
}
-- SES header lengths (host/uet: SESStdLen, SESRespLen) by next header.
local NH_REQ_STD, NH_RSP = 3, 4
local ses_len = { [NH_REQ_STD] = 44, [NH_RSP] = 12 }
local ses_name = { [NH_REQ_STD] = "REQ_STD", [NH_RSP] = "RESP" }
local unsupported = { [1] = true, [4] = true, [5] = true, [6] = true, [9] = true, [12] = true }

-- Flag bits of the prologue's low byte and the reserved ones per form
-- (host/uet: Flag*, reserved*Flags).
local FLAG_M, FLAG_ISROD, FLAG_RETX = 0x20, 0x20, 0x10
local FLAG_AR, FLAG_PROBE, FLAG_NT, FLAG_SYN = 0x08, 0x08, 0x08, 0x04
local RSVD_REQUEST, RSVD_ACK, RSVD_NACK, RSVD_CTRL = 0x63, 0x41, 0x47, 0x43

local f = p_uet.fields
-- Prologue.
f.type = ProtoField.uint16("fluet.type", "Type", base.DEC, type_names, 0xF800)
f.next_header = ProtoField.uint16("fluet.next_header", "Next header", base.DEC, next_header_names, 0x0780)
f.ctrl_type = ProtoField.uint16("fluet.ctrl_type", "Control type", base.DEC, ctrl_type_names, 0x0780)
f.flags = ProtoField.uint16("fluet.flags", "Flags", base.HEX, nil, 0x007F)
f.m = ProtoField.bool("fluet.m", "M (ECN echo)", 16, nil, FLAG_M)
f.is_rod = ProtoField.bool("fluet.is_rod", "isROD", 16, nil, FLAG_ISROD)
f.retx = ProtoField.bool("fluet.retx", "Retx (retransmission)", 16, nil, FLAG_RETX)
f.ar = ProtoField.bool("fluet.ar", "AR (ACK request)", 16, nil, FLAG_AR)
f.probe = ProtoField.bool("fluet.probe", "P (probe ACK)", 16, nil, FLAG_PROBE)
f.nt = ProtoField.bool("fluet.nt", "NT (RUDI NACK)", 16, nil, FLAG_NT)
f.syn = ProtoField.bool("fluet.syn", "SYN", 16, nil, FLAG_SYN)
f.req = ProtoField.uint16("fluet.req", "Req", base.DEC, ack_req_names, 0x0006)
-- Requests and CTRL.
f.clear_psn_offset = ProtoField.int16("fluet.clear_psn_offset", "Clear PSN offset", base.DEC)
f.clear_psn = ProtoField.uint32("fluet.clear_psn", "Clear PSN", base.DEC)
f.psn = ProtoField.uint32("fluet.psn", "PSN", base.DEC)
f.spdcid = ProtoField.uint16("fluet.spdcid", "SPDCID", base.DEC)
f.dpdcid = ProtoField.uint16("fluet.dpdcid", "DPDCID", base.DEC)
f.use_rsv_pdc = ProtoField.bool("fluet.use_rsv_pdc", "Use reserved PDC", 16, nil, 0x8000)
f.psn_offset = ProtoField.uint16("fluet.psn_offset", "PSN offset", base.DEC, nil, 0x0FFF)
f.start_psn = ProtoField.uint32("fluet.start_psn", "Start PSN", base.DEC)
f.ccc_id = ProtoField.uint8("fluet.ccc_id", "CCC ID", base.DEC)
f.credit_target = ProtoField.uint24("fluet.credit_target", "Credit target (256 B units)", base.DEC)
f.probe_opaque = ProtoField.uint16("fluet.probe_opaque", "Probe opaque", base.HEX)
f.payload = ProtoField.uint32("fluet.payload", "Payload", base.HEX)
-- ACK and ACK_CC.
f.ack_psn_offset = ProtoField.int16("fluet.ack_psn_offset", "ACK PSN offset", base.DEC)
f.ack_psn = ProtoField.uint32("fluet.ack_psn", "ACK PSN", base.DEC)
f.cack_psn = ProtoField.uint32("fluet.cack_psn", "Cumulative ACK PSN", base.DEC)
f.cc_type = ProtoField.uint8("fluet.cc.cc_type", "CC type", base.DEC, cc_type_names, 0xF0)
f.cc_flags = ProtoField.uint8("fluet.cc.cc_flags", "CC flags", base.HEX, nil, 0x0F)
f.mpr = ProtoField.uint8("fluet.cc.mpr", "MPR (maximum PSN range)", base.DEC)
f.sack_psn_offset = ProtoField.int16("fluet.cc.sack_psn_offset", "SACK PSN offset", base.DEC)
f.sack_base = ProtoField.uint32("fluet.cc.sack_base", "SACK base PSN", base.DEC)
f.sack_bitmap = ProtoField.uint64("fluet.cc.sack_bitmap", "SACK bitmap", base.HEX)
f.service_time = ProtoField.uint16("fluet.cc.nscc.service_time", "Service time (128 ns units)", base.DEC)
f.rc = ProtoField.bool("fluet.cc.nscc.rc", "RC (restore cwnd)", 8, nil, 0x80)
f.rcv_cwnd_pend = ProtoField.uint8("fluet.cc.nscc.rcv_cwnd_pend", "Receiver cwnd penalty", base.DEC, nil, 0x7F)
f.rcvd_bytes = ProtoField.uint24("fluet.cc.nscc.rcvd_bytes", "Received bytes (256 B units)", base.DEC)
f.nscc_ooo_count = ProtoField.uint16("fluet.cc.nscc.ooo_count", "Out-of-order count", base.DEC)
f.credit = ProtoField.uint24("fluet.cc.credit.credit", "Credit (256 B units)", base.DEC)
f.credit_ooo_count = ProtoField.uint16("fluet.cc.credit.ooo_count", "Out-of-order count", base.DEC)
-- NACK.
f.code = ProtoField.uint8("fluet.code", "NACK code", base.HEX, nack_code_names)
f.vendor_code = ProtoField.uint8("fluet.vendor_code", "Vendor code", base.HEX)
f.nack_psn = ProtoField.uint32("fluet.nack_psn", "NACK PSN", base.DEC)
f.max_recv_psn_plus_1 = ProtoField.uint32("fluet.max_recv_psn_plus_1", "Max received PSN + 1", base.DEC)
-- SES standard request (REQ_STD; host/uet SESRequest).
f.ses_opcode = ProtoField.uint8("fluet.ses.opcode", "Opcode", base.DEC, ses_opcode_names, 0x3F)
f.ses_version = ProtoField.uint8("fluet.ses.version", "Version", base.DEC, nil, 0xC0)
f.ses_dc = ProtoField.bool("fluet.ses.dc", "DC (delivery complete)", 8, nil, 0x20)
f.ses_ie = ProtoField.bool("fluet.ses.ie", "IE (initiator error)", 8, nil, 0x10)
f.ses_rel = ProtoField.bool("fluet.ses.rel", "Rel (relative addressing)", 8, nil, 0x08)
f.ses_hd = ProtoField.bool("fluet.ses.hd", "HD (header data present)", 8, nil, 0x04)
f.ses_eom = ProtoField.bool("fluet.ses.eom", "EOM (end of message)", 8, nil, 0x02)
f.ses_som = ProtoField.bool("fluet.ses.som", "SOM (start of message)", 8, nil, 0x01)
f.ses_message_id = ProtoField.uint16("fluet.ses.message_id", "Message ID", base.DEC)
f.ses_index_generation = ProtoField.uint8("fluet.ses.index_generation", "Index generation", base.DEC)
f.ses_job_id = ProtoField.uint24("fluet.ses.job_id", "Job ID", base.DEC)
f.ses_pid_on_fep = ProtoField.uint16("fluet.ses.pid_on_fep", "PIDonFEP", base.DEC, nil, 0x0FFF)
f.ses_resource_index = ProtoField.uint16("fluet.ses.resource_index", "Resource index", base.DEC, nil, 0x0FFF)
f.ses_buffer_offset = ProtoField.uint64("fluet.ses.buffer_offset", "Buffer offset", base.DEC)
f.ses_initiator = ProtoField.uint32("fluet.ses.initiator", "Initiator", base.HEX)
f.ses_mem_key_match_bits = ProtoField.uint64("fluet.ses.mem_key_match_bits", "Memory key/match bits", base.HEX)
f.ses_header_data = ProtoField.uint64("fluet.ses.header_data", "Header data", base.HEX)
f.ses_payload_length = ProtoField.uint32("fluet.ses.payload_length", "Payload length", base.DEC, nil, 0x3FFF)
f.ses_message_offset = ProtoField.uint32("fluet.ses.message_offset", "Message offset", base.DEC)
f.ses_request_length = ProtoField.uint32("fluet.ses.request_length", "Request length", base.DEC)
-- SES response (RESP; host/uet SESResponse).
f.resp_list = ProtoField.uint8("fluet.ses.resp.list", "List", base.DEC, nil, 0xC0)
f.resp_opcode = ProtoField.uint8("fluet.ses.resp.opcode", "Opcode", base.DEC, ses_resp_opcode_names, 0x3F)
f.resp_version = ProtoField.uint8("fluet.ses.resp.version", "Version", base.DEC, nil, 0xC0)
f.resp_return_code = ProtoField.uint8("fluet.ses.resp.return_code", "Return code", base.DEC, ses_return_code_names, 0x3F)
f.resp_message_id = ProtoField.uint16("fluet.ses.resp.message_id", "Message ID", base.DEC)
f.resp_index_generation = ProtoField.uint8("fluet.ses.resp.index_generation", "Index generation", base.DEC)
f.resp_job_id = ProtoField.uint24("fluet.ses.resp.job_id", "Job ID", base.DEC)
f.resp_modified_length = ProtoField.uint32("fluet.ses.resp.modified_length", "Modified length", base.DEC)

local e_short = ProtoExpert.new("fluet.short", "Shorter than its PDS header",
	expert.group.MALFORMED, expert.severity.ERROR)
local e_unknown_type = ProtoExpert.new("fluet.unknown_type", "PDS type not defined by UE 1.0.1",
	expert.group.MALFORMED, expert.severity.ERROR)
local e_unsupported = ProtoExpert.new("fluet.unsupported_type", "PDS type not decoded by host/uet",
	expert.group.UNDECODED, expert.severity.NOTE)
local e_cc_type = ProtoExpert.new("fluet.cc_type_unknown", "ACK_CC cc_type is neither NSCC nor CREDIT",
	expert.group.MALFORMED, expert.severity.ERROR)
local e_reserved = ProtoExpert.new("fluet.reserved", "Reserved bits set (ignored)",
	expert.group.PROTOCOL, expert.severity.WARN)
local e_ses_short = ProtoExpert.new("fluet.ses.short", "Shorter than its SES header",
	expert.group.MALFORMED, expert.severity.ERROR)
local e_ses_resp_opcode = ProtoExpert.new("fluet.ses.resp_opcode",
	"RESP opcode is not DEFAULT_RESPONSE, RESPONSE or NO_RESPONSE",
	expert.group.PROTOCOL, expert.severity.WARN)
p_uet.experts = { e_short, e_unknown_type, e_unsupported, e_cc_type, e_reserved, e_ses_short, e_ses_resp_opcode }

local data_dissector = Dissector.get("data")
-- Lua 5.2 (Debian 12's Wireshark) has bit32; Lua 5.3+ dropped it for the
-- native operators, which 5.2 cannot parse: compile those from a string.
local band, rshift
if bit32 then
	band, rshift = bit32.band, bit32.rshift
else
	band = load("return function(a, b) return a & b end")()
	rshift = load("return function(a, n) return a >> n end")()
end
local TWO32 = 4294967296

local function mod32(v) return v % TWO32 end

local function bytes_text(units)
	return string.format(" (%d bytes mod 4 GiB)", units * 256)
end

-- The dpdcid slot: DPDCID, or with SYN use_rsv_pdc | reserved | psn_offset.
local function add_dpdcid_slot(tree, tvb, syn, psn)
	local r = tvb(10, 2)
	if not syn then
		tree:add(f.dpdcid, r)
		return
	end
	tree:add(f.use_rsv_pdc, r)
	tree:add(f.psn_offset, r)
	tree:add(f.start_psn, r, mod32(psn - band(r:uint(), 0x0FFF))):set_generated()
	if band(r:uint(), 0x7000) ~= 0 then
		tree:add_proto_expert_info(e_reserved, "Reserved bits of the SYN dpdcid slot set")
	end
end

local function dissect_request(tvb, tree, ty, flags)
	local psn = tvb(4, 4):uint()
	tree:add(f.clear_psn_offset, tvb(2, 2))
	tree:add(f.clear_psn, tvb(2, 2), mod32(psn + tvb(2, 2):int())):set_generated()
	tree:add(f.psn, tvb(4, 4))
	tree:add(f.spdcid, tvb(8, 2))
	add_dpdcid_slot(tree, tvb, band(flags, FLAG_SYN) ~= 0, psn)
	if ty == 13 or ty == 14 then
		tree:add(f.ccc_id, tvb(12, 1))
		tree:add(f.credit_target, tvb(13, 3)):append_text(bytes_text(tvb(13, 3):uint()))
	end
	return string.format("PSN=%u SPDCID=%u", psn, tvb(8, 2):uint())
end

local function dissect_ack(tvb, tree, ty, flags)
	local cack = tvb(4, 4):uint()
	if band(flags, FLAG_PROBE) ~= 0 then
		tree:add(f.probe_opaque, tvb(2, 2))
	else
		tree:add(f.ack_psn_offset, tvb(2, 2))
		tree:add(f.ack_psn, tvb(2, 2), mod32(cack + tvb(2, 2):int())):set_generated()
	end
	tree:add(f.cack_psn, tvb(4, 4))
	tree:add(f.spdcid, tvb(8, 2))
	tree:add(f.dpdcid, tvb(10, 2))
	local info = string.format("CACK_PSN=%u", cack)
	if ty ~= 8 then
		return info
	end
	local ext = tree:add(tvb(12, 20), "ACK_CC extension")
	local cc = rshift(tvb(12, 1):uint(), 4)
	ext:add(f.cc_type, tvb(12, 1))
	ext:add(f.cc_flags, tvb(12, 1))
	ext:add(f.mpr, tvb(13, 1))
	ext:add(f.sack_psn_offset, tvb(14, 2))
	ext:add(f.sack_base, tvb(14, 2), mod32(cack + tvb(14, 2):int())):set_generated()
	ext:add(f.sack_bitmap, tvb(16, 8))
	local st = ext:add(tvb(24, 8), "cc_state")
	if cc == 0 then
		st:append_text(": NSCC")
		local t = tvb(24, 2):uint()
		st:add(f.service_time, tvb(24, 2)):append_text(string.format(" (%d ns)", t * 128))
		st:add(f.rc, tvb(26, 1))
		st:add(f.rcv_cwnd_pend, tvb(26, 1))
		st:add(f.rcvd_bytes, tvb(27, 3)):append_text(bytes_text(tvb(27, 3):uint()))
		st:add(f.nscc_ooo_count, tvb(30, 2))
		info = info .. " NSCC"
	elseif cc == 1 then
		st:append_text(": CREDIT")
		st:add(f.credit, tvb(24, 3)):append_text(bytes_text(tvb(24, 3):uint()))
		st:add(f.credit_ooo_count, tvb(30, 2))
		if tvb(27, 3):uint() ~= 0 then
			st:add_proto_expert_info(e_reserved, "Reserved bits of the CREDIT cc_state set")
		end
		info = info .. " CREDIT"
	else
		st:add_proto_expert_info(e_cc_type, string.format("cc_type %d is neither NSCC (0) nor CREDIT (1)", cc))
	end
	return info
end

local function dissect_nack(tvb, tree)
	tree:add(f.code, tvb(2, 1))
	tree:add(f.vendor_code, tvb(3, 1))
	tree:add(f.nack_psn, tvb(4, 4))
	tree:add(f.spdcid, tvb(8, 2))
	tree:add(f.dpdcid, tvb(10, 2))
	tree:add(f.max_recv_psn_plus_1, tvb(12, 4))
	local code = tvb(2, 1):uint()
	return string.format("%s NACK_PSN=%u", nack_code_names[code] or string.format("0x%02x", code), tvb(4, 4):uint())
end

local function dissect_ctrl(tvb, tree, flags, ct)
	local psn = tvb(4, 4):uint()
	tree:add(f.probe_opaque, tvb(2, 2))
	tree:add(f.psn, tvb(4, 4))
	tree:add(f.spdcid, tvb(8, 2))
	add_dpdcid_slot(tree, tvb, band(flags, FLAG_SYN) ~= 0, psn)
	tree:add(f.payload, tvb(12, 4))
	return string.format("%s PSN=%u", ctrl_type_names[ct] or string.format("0x%x", ct), psn)
end

-- The SES standard request at off (44 bytes; host/uet DecodeSESRequest):
-- packet-uet.c's dissect_ses_std_req. SOM selects header_data or
-- payload_length and message_offset for the 8 bytes at 32.
local function dissect_ses_std(tvb, tree, off)
	local function r(o, n) return tvb(off + o, n) end
	local st = tree:add(r(0, 44), "SES standard request (REQ_STD)")
	local op = band(r(0, 1):uint(), 0x3F)
	local som = band(r(1, 1):uint(), 0x01) ~= 0
	st:add(f.ses_opcode, r(0, 1))
	st:add(f.ses_version, r(1, 1))
	st:add(f.ses_dc, r(1, 1))
	st:add(f.ses_ie, r(1, 1))
	st:add(f.ses_rel, r(1, 1))
	st:add(f.ses_hd, r(1, 1))
	st:add(f.ses_eom, r(1, 1))
	st:add(f.ses_som, r(1, 1))
	st:add(f.ses_message_id, r(2, 2))
	st:add(f.ses_index_generation, r(4, 1))
	st:add(f.ses_job_id, r(5, 3))
	st:add(f.ses_pid_on_fep, r(8, 2))
	st:add(f.ses_resource_index, r(10, 2))
	local bo = st:add(f.ses_buffer_offset, r(12, 8))
	st:add(f.ses_initiator, r(20, 4))
	local mk = st:add(f.ses_mem_key_match_bits, r(24, 8))
	-- Deferrable sends carry a restart token in these slots (packet-uet.c).
	if op == 0x08 or op == 0x0B then
		bo:append_text(" (restart token)")
	elseif op == 0x0C then
		mk:append_text(" (restart token)")
	end
	local rsvd = band(r(0, 1):uint(), 0xC0) ~= 0 or band(r(8, 1):uint(), 0xF0) ~= 0 or
		band(r(10, 1):uint(), 0xF0) ~= 0
	if som then
		st:add(f.ses_header_data, r(32, 8))
	else
		st:add(f.ses_payload_length, r(32, 4))
		st:add(f.ses_message_offset, r(36, 4))
		rsvd = rsvd or band(r(32, 4):uint(), 0xFFFFC000) ~= 0
	end
	st:add(f.ses_request_length, r(40, 4))
	if rsvd then
		st:add_proto_expert_info(e_reserved, "Reserved bits of the SES standard request set")
	end
	return string.format("%s MSG=%u", ses_opcode_names[op] or string.format("0x%02x", op), r(2, 2):uint())
end

-- The SES response at off (12 bytes; host/uet DecodeSESResponse):
-- packet-uet.c's dissect_ses_resp, which stops at an opcode a RESP does not
-- carry; this one flags it and goes on.
local function dissect_ses_resp(tvb, tree, off)
	local function r(o, n) return tvb(off + o, n) end
	local st = tree:add(r(0, 12), "SES response (RESP)")
	local op = band(r(0, 1):uint(), 0x3F)
	local rc = band(r(1, 1):uint(), 0x3F)
	st:add(f.resp_list, r(0, 1))
	local opi = st:add(f.resp_opcode, r(0, 1))
	if op ~= 0 and op ~= 1 and op ~= 3 then
		opi:add_proto_expert_info(e_ses_resp_opcode, string.format(
			"RESP opcode %s: a RESP carries DEFAULT_RESPONSE, RESPONSE or NO_RESPONSE",
			ses_resp_opcode_names[op] or string.format("0x%02x", op)))
	end
	st:add(f.resp_version, r(1, 1))
	st:add(f.resp_return_code, r(1, 1))
	st:add(f.resp_message_id, r(2, 2))
	st:add(f.resp_index_generation, r(4, 1))
	st:add(f.resp_job_id, r(5, 3))
	st:add(f.resp_modified_length, r(8, 4))
	return string.format("%s %s MSG=%u", ses_resp_opcode_names[op] or string.format("0x%02x", op),
		ses_return_code_names[rc] or string.format("0x%02x", rc), r(2, 2):uint())
end

function p_uet.dissector(tvb, pinfo, tree)
	local len = tvb:len()
	pinfo.cols.protocol = "UET"
	local t = tree:add(p_uet, tvb())
	if len < 2 then
		t:add_proto_expert_info(e_short, string.format("%d bytes, the PDS prologue needs 2", len))
		return len
	end
	local pro = tvb(0, 2)
	local v = pro:uint()
	local ty, nh, flags = rshift(v, 11), band(rshift(v, 7), 0x0F), band(v, 0x7F)
	local name = type_names[ty] or string.format("type %d", ty)
	t:append_text(", " .. name)
	pinfo.cols.info = name
	t:add(f.type, pro)
	if ty == 11 then
		t:add(f.ctrl_type, pro)
	else
		t:add(f.next_header, pro)
	end
	if not type_names[ty] then
		t:add_proto_expert_info(e_unknown_type, string.format("type %d (defined: 1..14)", ty))
		return len
	end
	if unsupported[ty] then
		t:add_proto_expert_info(e_unsupported, name .. " is not decoded by host/uet")
		if len > 2 then
			data_dissector:call(tvb(2):tvb(), pinfo, tree)
		end
		return len
	end
	local fl = t:add(f.flags, pro)
	local rsvd
	if ty == 7 or ty == 8 then
		fl:add(f.m, pro)
		fl:add(f.retx, pro)
		fl:add(f.probe, pro)
		fl:add(f.req, pro)
		rsvd = RSVD_ACK
	elseif ty == 10 then
		fl:add(f.m, pro)
		fl:add(f.retx, pro)
		fl:add(f.nt, pro)
		rsvd = RSVD_NACK
	elseif ty == 11 then
		fl:add(f.is_rod, pro)
		fl:add(f.retx, pro)
		fl:add(f.ar, pro)
		fl:add(f.syn, pro)
		rsvd = RSVD_CTRL
	else
		fl:add(f.retx, pro)
		fl:add(f.ar, pro)
		fl:add(f.syn, pro)
		rsvd = RSVD_REQUEST
	end
	if band(flags, rsvd) ~= 0 then
		fl:add_proto_expert_info(e_reserved, string.format("Reserved flag bits 0x%02x set", band(flags, rsvd)))
	end
	local need = header_len[ty]
	if len < need then
		t:add_proto_expert_info(e_short, string.format("%d bytes, %s needs %d", len, name, need))
		return len
	end
	t:set_len(need)
	local info
	if ty == 7 or ty == 8 then
		info = dissect_ack(tvb, t, ty, flags)
	elseif ty == 10 then
		info = dissect_nack(tvb, t)
	elseif ty == 11 then
		info = dissect_ctrl(tvb, t, flags, nh)
	else
		info = dissect_request(tvb, t, ty, flags)
	end
	local col = name .. " " .. info
	-- The SES header after a request, ACK, ACK_CC or NACK (not CTRL, whose
	-- next-header bits are its control type), as packet-uet.c's dissect_ses.
	local sl = ty ~= 11 and ses_len[nh]
	if sl then
		if len < need + sl then
			t:add_proto_expert_info(e_ses_short, string.format("%d bytes after the PDS header, SES %s needs %d",
				len - need, ses_name[nh], sl))
		else
			local sinfo
			if nh == NH_REQ_STD then
				sinfo = dissect_ses_std(tvb, t, need)
			else
				sinfo = dissect_ses_resp(tvb, t, need)
			end
			col = string.format("%s, %s %s", col, ses_name[nh], sinfo)
			need = need + sl
			t:set_len(need)
		end
	end
	pinfo.cols.info = col
	if len > need then
		data_dissector:call(tvb(need):tvb(), pinfo, tree)
	end
	return len
end

DissectorTable.get("udp.port"):add(UDP_PORT, p_uet)
