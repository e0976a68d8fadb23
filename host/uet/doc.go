// Package uet encodes and decodes the Packet Delivery Sublayer (PDS)
// headers of the Ultra Ethernet Transport (UET), and the two Semantic
// Sublayer (SES) headers that follow them in this lab: the standard request
// (REQ_STD) and the response (RESP).
//
// UET is the Ultra Ethernet Consortium's transport for AI and HPC traffic
// (UE specification 1.0.1, chapter 3). Its PDS delivers packets over
// Packet Delivery Contexts (PDCs) in one of several modes — RUD (reliable
// unordered), ROD (reliable ordered), RUDI, UUD — and acknowledges them
// with ACK, ACK_CC and NACK; the Congestion Management Sublayer rides in
// those headers (NSCC's service time and received bytes, RCCC's credits).
// Over IP, UET is carried in UDP to destination port 4793 (Port); the UDP
// source port is the entropy value (EV) the switches' ECMP hash spreads
// over paths, so a sender chooses a path by choosing the source port. The
// UDP payload starts with the PDS header (no entropy header: that one is
// for UET directly over IP).
//
// This package works on the UDP payload; host/pktio builds the UDP/IP
// headers. It decodes into a caller-owned Header (or SESRequest,
// SESResponse) and encodes into a
// caller's buffer, and allocates nothing on its success paths (errors
// allocate: they wrap a sentinel with the field and value at fault).
// Decoding never panics on any input (see the fuzz targets).
//
// Sources: /work/shared/reference/uet.md (the field tables), checked
// against Wireshark's epan/dissectors/packet-uet.c (UE 1.0.1, Keysight) and
// xdp2's src/include/uet/pds.h. Where they differ it is said next to the
// field; see also "Differences between the sources" below.
//
// # Forms
//
// Every header starts with the 16-bit prologue: type (5) | next header or
// control type (4) | flags (7). All fields are big-endian.
//
//	form        types                     bytes  Go type
//	request     RUD_REQ, ROD_REQ          12     Request
//	request+CC  RUD_CC_REQ, ROD_CC_REQ    16     Request (CCCID, CreditTarget)
//	  SYN form: flag 0x04; the dpdcid slot is use_rsv_pdc(1)|rsvd(3)|psn_offset(12)
//	ACK         ACK                       12     Ack
//	  probe form: flag 0x08; ack_psn_offset is probe_opaque
//	ACK_CC      ACK_CC                    32     Ack with CC (AckCC)
//	  cc_type 0 NSCC:   service_time(16) rc(1) rcv_cwnd_pend(7) rcvd_bytes(24) ooo_count(16)
//	  cc_type 1 CREDIT: credit(24) reserved(24) ooo_count(16)
//	NACK        NACK                      16     Nack (Code: NackCode)
//	CTRL        CTRL                      16     Ctrl (CtrlType in the next-header bits)
//	  flag 0x20 isROD; SYN form as for requests
//
// TSS, RUDI_REQ, RUDI_RESP, UUD_REQ, ACK_CCX and NACK_CCX are named (Type)
// but not decoded: Parse returns ErrUnsupportedType.
//
// Receive with Parse (or DecodeHeader for the header alone) and switch on
// Header.Type; send with a form's Encode, or Header.Encode and Build for a
// whole UDP payload.
//
// # SES headers
//
// The PDS header's next-header bits (Header.NextHeader) say which SES header
// starts the payload Parse returns. Two are decoded here, with their own
// calls: Parse does not look past the PDS header.
//
//	next header   header    bytes  Go
//	3 REQ_STD     standard  44     SESRequest, DecodeSESRequest (SESStdLen)
//	4 RESP        response  12     SESResponse, DecodeSESResponse (SESRespLen)
//
// REQ_SMALL, REQ_MEDIUM, RESP_DATA and RESP_DATA_SMALL are named
// (NextHeader) but not decoded, nor are the extension headers (atomic,
// rendezvous) that follow REQ_STD for some opcodes. The layout is
// packet-uet.c's (dissect_ses_std_req, dissect_ses_resp), which xdp2's
// ses.h agrees with byte for byte:
//
//	REQ_STD  0  rsvd(2) opcode(6) | version(2) dc ie rel hd eom som | message_id(16)
//	         4  index_generation(8) | job_id(24)
//	         8  rsvd(4) pid_on_fep(12) | rsvd(4) resource_index(12)
//	        12  buffer_offset(64)                (DEFERRABLE_SEND/TSEND: restart token)
//	        20  initiator(32)
//	        24  mem_key_match_bits(64)           (DEFERRABLE_RTR: restart token)
//	        32  SOM:     header_data(64)
//	            not SOM: rsvd(18) payload_length(14) | message_offset(32)
//	        40  request_length(32)
//	RESP     0  list(2) opcode(6) | version(2) return_code(6) | message_id(16)
//	         4  index_generation(8) | job_id(24)
//	         8  modified_length(32)
//
// SOM, not HD, selects what the 8 bytes at 32 carry. In the medium request
// HD chooses between header_data and buffer_offset for one slot; the
// standard request gives each its own slot, and HD only says whether
// header_data is meaningful: HeaderData is carried on every SOM packet
// whatever HD says, and Validate rejects it without SOM (the slot then
// carries PayloadLength and MessageOffset). The SES decoders reject only a
// short buffer (ErrTruncated); every opcode, return code and flag
// combination decodes, a RESP whose opcode is RESPONSE_W_DATA included
// (SESRespOpcode.NoData is packet-uet.c's check). Reserved bits are
// ignored on receive and written as zero; RESP has none.
//
// # Units
//
//	field                        wire                       Go
//	service_time (NSCC)          16 bits, 128 ns units      ServiceTime, ServiceTimeOf, Duration
//	rcvd_bytes (NSCC)            24 bits, 256 B, mod 2^24   RcvdBytes, RcvdBytesOf(total), Since
//	credit (CREDIT cc_state)     24 bits, 256 B, mod 2^24   Credit, CreditOf(total), Since
//	credit_target (*_CC_REQ)     24 bits, 256 B, mod 2^24   Credit
//	clear/ack/sack psn offsets   signed 16 bits from PSN    ClearPSN, AckPSN, SACKBase
//	psn_offset (SYN)             12 bits, start = PSN − it  StartPSN
//
// rcvd_bytes, credit and credit_target are cumulative counts (uet.md's
// assumption for credit): a receiver sends RcvdBytesOf(total bytes so
// far), a sender takes cur.Since(prev) for the bytes in between; the
// rounding of the cumulative total never drifts.
//
// # What is rejected and what is ignored
//
// Rejected (error, h untouched): a buffer shorter than the prologue or the
// type's header (ErrTruncated; for SES headers, shorter than SESStdLen or
// SESRespLen); type 0 or 15–31 (ErrUnknownType); a defined
// type not decoded here (ErrUnsupportedType); an ACK_CC whose cc_type is
// neither NSCC nor CREDIT (ErrCCType), since its cc_state has no known
// layout. Ignored on receive and written as zero: the reserved flag bits
// of each form, the 3 reserved bits of the SYN slot and the 24 reserved
// bits of the CREDIT cc_state. Accepted as they are: every next-header,
// control-type, ACK req and NACK code value, and a payload after any form.
// Encoders truncate fields wider than their wire field; Validate names
// such a field, and a field of the variant the flags do not select (DPDCID
// with SYN, AckPSNOffset on a probe ACK, NSCC state on a CREDIT ACK_CC).
//
// # Differences between the sources
//
//   - NSCC rc and rcv_cwnd_pend: uet.md and xdp2 put them in byte 2 of
//     cc_state, after the 16-bit service_time, and packet-uet.c's own
//     offsets for rcvd_bytes (+3) and ooo_count (+6) agree; but
//     packet-uet.c adds rc and rcv_cwnd_pend at byte 0, so Wireshark shows
//     the top bits of service_time there. This package and uet.lua use
//     byte 2: a layout where two fields overlap cannot be encoded.
//   - ACK probe form: packet-uet.c shows an "ACK PSN" computed from the
//     first field whatever the probe flag; uet.md and xdp2 make it
//     probe_opaque, as here.
//   - CTRL: packet-uet.c shows a raw dpdcid even with SYN, counts 0x20 in
//     the reserved flags and knows control types up to 8; uet.md and xdp2
//     give CTRL the SYN form of the slot, the isROD flag and type 9
//     NEGOTIATION, as here.
//   - clear_psn_offset and ack_psn_offset are signed (packet-uet.c reads
//     them with tvb_get_ntohis); uet.md does not say. sack_psn_offset is
//     unsigned in packet-uet.c and s16 in the Linux ultraeth RFC: signed
//     here, like the other two offsets.
//   - cc_flags: uet.md names the 4 bits after cc_type, xdp2 calls them
//     reserved, packet-uet.c does not show them; carried as AckCC.CCFlags.
//   - SES restart tokens: packet-uet.c shows one 64-bit restart_token in
//     the buffer_offset slot (DEFERRABLE_SEND, DEFERRABLE_TSEND) or the
//     memory-key slot (DEFERRABLE_RTR); xdp2 splits those 64 bits into
//     initiator and target restart tokens of 32 bits at the same offsets.
//     This package keeps the 64 bits in
//     BufferOffset or MemKeyMatchBits (SESOpcode.RestartToken says which);
//     uet.lua labels them.
//   - RESP opcode: packet-uet.c stops dissecting a RESP whose opcode is not
//     DEFAULT_RESPONSE, RESPONSE or NO_RESPONSE; uet.lua flags it
//     (fluet.ses.resp_opcode) and shows the rest, as DecodeSESResponse
//     decodes it.
//   - SES names: String uses packet-uet.c's macro names without their
//     prefix (UET_SES_OPCODE_WRITE → "WRITE", UET_SES_RSP_RC_NO_MATCH →
//     "NO_MATCH"); its value strings for return codes are sentences.
//
// # Wireshark
//
// Debian 12's Wireshark 4.0 has no UET dissector (packet-uet.c is in later
// releases). uet.lua, beside this file, decodes every form above on UDP port
// 4793, and REQ_STD and RESP behind requests, ACKs and NACKs, with the field
// names of the Go structs (snake_case, "fluet." prefix: fluet.psn,
// fluet.cc.nscc.rcvd_bytes, fluet.ses.job_id, fluet.ses.resp.return_code, …;
// the prefix keeps clear of the built-in "uet" of newer Wiresharks):
//
//	tshark -X lua_script:host/uet/uet.lua -r capture.pcap -Y fluet
//	tshark -X lua_script:host/uet/uet.lua -r capture.pcap -O fluet
//
// or copy it to ~/.local/lib/wireshark/plugins/ for the GUI. The test
// TestWiresharkDissector checks every field it shows against Parse,
// DecodeSESRequest and DecodeSESResponse.
package uet
