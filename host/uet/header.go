package uet

import "fmt"

// Prologue (UE 1.0.1 §3.5.10.1): type (5) | next header or control type (4)
// | flags (7), big-endian; packet-uet.c's masks 0xf800, 0x0780, 0x007f.
const (
	prologueTypeShift = 11
	prologueNHShift   = 7
	prologueNHMask    = 0xF
	prologueFlagsMask = 0x7F
)

// Flag bits in the prologue's low byte. Their meaning depends on the type
// (packet-uet.c's UET_PDS_*_FLAGS_* and hf masks; xdp2's pds.h bitfields).
const (
	FlagM     = 0x20 // ACK, NACK: ECN-CE seen on the (N)ACKed packet (ECN echo)
	FlagIsROD = 0x20 // CTRL: the PDC is ROD (xdp2 rsvd_isrod; packet-uet.c counts it reserved)
	FlagRetx  = 0x10 // every form: a retransmission
	FlagAR    = 0x08 // requests, CTRL: ACK request
	FlagProbe = 0x08 // ACK: P, the answer to a CTRL probe
	FlagNT    = 0x08 // NACK: NACK type, set for a RUDI NACK
	FlagSYN   = 0x04 // requests, CTRL: the PDC is being established
	// FlagAckReq masks the 2-bit req field of an ACK (AckReq).
	FlagAckReq      = 0x06
	flagAckReqShift = 1

	// Reserved flag bits per form: written as zero, ignored when read.
	// packet-uet.c: rsvd_rud_rod 0x63, rsvd_ack 0x41, rsvd_nack 0x47,
	// rsvd_ctl 0x63 (of which 0x20 is isROD here).
	reservedRequestFlags = 0x63
	reservedAckFlags     = 0x41
	reservedNackFlags    = 0x47
	reservedCtrlFlags    = 0x43
)

// SYN form of the 16-bit dpdcid slot (requests and CTRL with FlagSYN):
// use_rsv_pdc (1) | reserved (3) | psn_offset (12). packet-uet.c: masks
// 0x80 on the first byte, 0x70 reserved, 0x0fff.
const (
	synUseRsvPDC = 0x8000
	// PSNOffsetMask keeps the 12 bits of a SYN packet's psn_offset.
	PSNOffsetMask = 0x0FFF
	// RcvCwndPendMask keeps the 7 bits of an NSCC rcv_cwnd_pend.
	RcvCwndPendMask = 0x7F
)

// Field offsets from the start of the PDS header.
const (
	offPSNOffset = 2 // clear_psn_offset, ack_psn_offset/probe_opaque, probe_opaque; NACK: code
	offPSN       = 4 // psn, cack_psn, nack_psn
	offSPDCID    = 8
	offDPDCID    = 10 // or the SYN slot
	offReqCC     = 12 // ccc_id (8) | credit_target (24)
	offPayload   = 12 // NACK and CTRL 32-bit payload

	offNackVendor = 3

	offCCType     = 12 // cc_type (4) | cc_flags (4)
	offMPR        = 13
	offSACKOffset = 14
	offSACKBitmap = 16
	offCCState    = 24
	// NSCC cc_state (UE 1.0.1; uet.md; xdp2): service_time (16) | rc (1) |
	// rcv_cwnd_pend (7) | rcvd_bytes (24) | ooo_count (16).
	offServiceTime = offCCState
	offRCPend      = offCCState + 2
	offRcvdBytes   = offCCState + 3
	offOOOCount    = offCCState + 6
	// CREDIT cc_state: credit (24) | reserved (24) | ooo_count (16).
	offCredit = offCCState

	ccRC = 0x80
)

// Request is the header of RUD_REQ, ROD_REQ, RUD_CC_REQ and ROD_CC_REQ
// (UE 1.0.1 §3.5.10.3): 12 bytes, 16 with req_cc_state.
//
// With SYN set the receiver has no PDC yet, and the dpdcid slot carries
// UseRsvPDC and PSNOffset instead of DPDCID; Encode writes whichever the SYN
// flag selects and ignores the other.
type Request struct {
	Type       Type       // TypeRUDReq, TypeRODReq, TypeRUDCCReq or TypeRODCCReq
	NextHeader NextHeader // the SES header that follows
	Retx       bool       // a retransmission
	AR         bool       // ACK request: acknowledge at once
	SYN        bool       // PDC establishment: the SYN form of the dpdcid slot
	// ClearPSNOffset: every PSN up to ClearPSN() = PSN + ClearPSNOffset may be
	// cleared at the receiver. Signed, as packet-uet.c reads it.
	ClearPSNOffset int16
	PSN            uint32
	SPDCID         uint16 // source PDC ID
	DPDCID         uint16 // destination PDC ID; not with SYN
	UseRsvPDC      bool   // SYN only: use a reserved PDC
	PSNOffset      uint16 // SYN only, 12 bits: PSN − the PDC's start PSN
	CCCID          uint8  // *_CC_REQ only: the congestion control context
	CreditTarget   Credit // *_CC_REQ only: 24 bits, cumulative
}

// Len returns the header length for r.Type (12 or 16), or 0 if r.Type is
// not a request type.
func (r *Request) Len() int {
	if !r.Type.IsRequest() {
		return 0
	}
	return r.Type.HeaderLen()
}

// ClearPSN returns PSN + ClearPSNOffset (mod 2^32).
func (r *Request) ClearPSN() uint32 { return r.PSN + uint32(int32(r.ClearPSNOffset)) }

// StartPSN returns the PDC's start PSN a SYN request announces, PSN −
// PSNOffset (mod 2^32).
func (r *Request) StartPSN() uint32 { return r.PSN - uint32(r.PSNOffset&PSNOffsetMask) }

// Encode writes r (Len() bytes) into b and returns the number of bytes
// written, or 0 if b is too short or r.Type is not a request type. Fields
// wider than their wire field are truncated (Validate reports them),
// reserved bits are written as zero.
func (r *Request) Encode(b []byte) int {
	n := r.Len()
	if n == 0 || len(b) < n {
		return 0
	}
	b = b[:n]
	f := flagIf(r.Retx, FlagRetx) | flagIf(r.AR, FlagAR) | flagIf(r.SYN, FlagSYN)
	putPrologue(b, r.Type, uint8(r.NextHeader), f)
	be.PutUint16(b[offPSNOffset:], uint16(r.ClearPSNOffset))
	be.PutUint32(b[offPSN:], r.PSN)
	be.PutUint16(b[offSPDCID:], r.SPDCID)
	be.PutUint16(b[offDPDCID:], dpdcidSlot(r.SYN, r.DPDCID, r.UseRsvPDC, r.PSNOffset))
	if n == RequestCCLen {
		be.PutUint32(b[offReqCC:], uint32(r.CCCID)<<24|uint32(r.CreditTarget)&Units24Mask)
	}
	return n
}

func (r *Request) decode(b []byte, t Type, nh, f uint8) {
	*r = Request{
		Type:           t,
		NextHeader:     NextHeader(nh),
		Retx:           f&FlagRetx != 0,
		AR:             f&FlagAR != 0,
		SYN:            f&FlagSYN != 0,
		ClearPSNOffset: int16(be.Uint16(b[offPSNOffset:])),
		PSN:            be.Uint32(b[offPSN:]),
		SPDCID:         be.Uint16(b[offSPDCID:]),
	}
	r.DPDCID, r.UseRsvPDC, r.PSNOffset = readDPDCIDSlot(r.SYN, be.Uint16(b[offDPDCID:]))
	if t.HasReqCC() {
		w := be.Uint32(b[offReqCC:])
		r.CCCID = uint8(w >> 24)
		r.CreditTarget = Credit(w & Units24Mask)
	}
}

// Validate reports the first field of r that Encode would truncate or
// ignore: a type that is not a request, a field wider than its wire field,
// a field of the form r.SYN or r.Type does not select.
func (r *Request) Validate() error {
	if !r.Type.IsRequest() {
		return fmt.Errorf("uet: %w: type %s is not a request (RUD_REQ, ROD_REQ, RUD_CC_REQ, ROD_CC_REQ)", ErrField, r.Type)
	}
	if err := checkNibble("next_header", uint8(r.NextHeader)); err != nil {
		return err
	}
	if err := checkDPDCIDSlot(r.SYN, r.DPDCID, r.UseRsvPDC, r.PSNOffset); err != nil {
		return err
	}
	if r.Type.HasReqCC() {
		return checkUnits24("credit_target", uint32(r.CreditTarget))
	}
	if r.CCCID != 0 || r.CreditTarget != 0 {
		return fmt.Errorf("uet: %w: ccc_id %d, credit_target %d on a %s: only *_CC_REQ carries them", ErrField, r.CCCID, r.CreditTarget, r.Type)
	}
	return nil
}

// Ack is the header of ACK (12 bytes) and ACK_CC (32 bytes) (UE 1.0.1
// §3.5.12). With Probe set the ACK answers a CTRL probe and its first
// field is the probe's ProbeOpaque instead of AckPSNOffset (uet.md, xdp2's
// union; packet-uet.c shows an ACK PSN whatever the flag).
type Ack struct {
	Type       Type // TypeAck or TypeAckCC
	NextHeader NextHeader
	M          bool   // ECN echo: the acknowledged packet was CE-marked
	Retx       bool   // a retransmitted ACK
	Probe      bool   // P: answers a CTRL probe
	Req        AckReq // 2 bits: clear or close request
	// AckPSNOffset: the PSN this ACK is for is AckPSN() = CACKPSN +
	// AckPSNOffset (signed, as packet-uet.c reads it). Not with Probe.
	AckPSNOffset int16
	ProbeOpaque  uint16 // Probe only: echoes the CTRL probe's probe_opaque
	CACKPSN      uint32 // cumulative ACK PSN: all PSNs up to it arrived
	SPDCID       uint16
	DPDCID       uint16
	CC           AckCC // ACK_CC only
}

// AckCC is the 20-byte extension of an ACK_CC.
type AckCC struct {
	CCType  CCType // 4 bits: which of NSCC and Credit is valid
	CCFlags uint8  // 4 bits; UE 1.0.1 defines none (xdp2: reserved), carried as is
	MPR     uint8  // maximum PSN range
	// SACKPSNOffset: the SACK bitmap's base PSN is SACKBase() = CACKPSN +
	// SACKPSNOffset. Signed as the Linux ultraeth RFC writes it (s16);
	// packet-uet.c shows the same 16 bits unsigned.
	SACKPSNOffset int16
	SACKBitmap    uint64      // bit i (LSB first): PSN SACKBase()+i arrived
	NSCC          NSCCState   // CCType == CCNSCC only
	Credit        CreditState // CCType == CCCredit only
}

// NSCCState is the cc_state of an ACK_CC with cc_type NSCC (UE 1.0.1
// §3.6.13; uet.md).
type NSCCState struct {
	ServiceTime ServiceTime // 16 bits, 128 ns units
	RC          bool        // restore cwnd: the destination's penalty is over
	RcvCwndPend uint8       // 7 bits: destination flow-control penalty
	RcvdBytes   RcvdBytes   // 24 bits, cumulative, 256-byte units
	OOOCount    uint16      // packets the target holds above its cumulative PSN (htsim's _out_of_order_count)
}

// CreditState is the cc_state of an ACK_CC with cc_type CREDIT: credit (24)
// | reserved (24) | ooo_count (16).
type CreditState struct {
	Credit   Credit // 24 bits, cumulative, 256-byte units
	OOOCount uint16
}

// Len returns the header length for a.Type (12 or 32), or 0 if a.Type is
// not ACK or ACK_CC.
func (a *Ack) Len() int {
	switch a.Type {
	case TypeAck:
		return AckLen
	case TypeAckCC:
		return AckCCLen
	}
	return 0
}

// AckPSN returns CACKPSN + AckPSNOffset (mod 2^32); meaningless with Probe.
func (a *Ack) AckPSN() uint32 { return a.CACKPSN + uint32(int32(a.AckPSNOffset)) }

// SACKBase returns CACKPSN + CC.SACKPSNOffset (mod 2^32), the PSN of bit 0
// of CC.SACKBitmap.
func (a *Ack) SACKBase() uint32 { return a.CACKPSN + uint32(int32(a.CC.SACKPSNOffset)) }

// Encode writes a (Len() bytes) into b and returns the number of bytes
// written, or 0 if b is too short or a.Type is not ACK or ACK_CC. It writes
// ProbeOpaque with Probe and AckPSNOffset without; for ACK_CC the cc_state
// CC.CCType selects (an unknown cc_type gets an all-zero cc_state). Fields
// wider than their wire field are truncated (Validate reports them),
// reserved bits are written as zero.
func (a *Ack) Encode(b []byte) int {
	n := a.Len()
	if n == 0 || len(b) < n {
		return 0
	}
	b = b[:n]
	f := uint8(a.Req)<<flagAckReqShift&FlagAckReq |
		flagIf(a.M, FlagM) | flagIf(a.Retx, FlagRetx) | flagIf(a.Probe, FlagProbe)
	putPrologue(b, a.Type, uint8(a.NextHeader), f)
	first := uint16(a.AckPSNOffset)
	if a.Probe {
		first = a.ProbeOpaque
	}
	be.PutUint16(b[offPSNOffset:], first)
	be.PutUint32(b[offPSN:], a.CACKPSN)
	be.PutUint16(b[offSPDCID:], a.SPDCID)
	be.PutUint16(b[offDPDCID:], a.DPDCID)
	if n == AckCCLen {
		a.CC.encode(b)
	}
	return n
}

func (c *AckCC) encode(b []byte) {
	b[offCCType] = uint8(c.CCType)<<4 | c.CCFlags&0xF
	b[offMPR] = c.MPR
	be.PutUint16(b[offSACKOffset:], uint16(c.SACKPSNOffset))
	be.PutUint64(b[offSACKBitmap:], c.SACKBitmap)
	clear(b[offCCState:AckCCLen])
	switch c.CCType {
	case CCNSCC:
		s := &c.NSCC
		be.PutUint16(b[offServiceTime:], uint16(s.ServiceTime))
		b[offRCPend] = s.RcvCwndPend&RcvCwndPendMask | flagIf(s.RC, ccRC)
		put24(b[offRcvdBytes:], uint32(s.RcvdBytes))
		be.PutUint16(b[offOOOCount:], s.OOOCount)
	case CCCredit:
		put24(b[offCredit:], uint32(c.Credit.Credit))
		be.PutUint16(b[offOOOCount:], c.Credit.OOOCount) // reserved 24 bits stay 0
	}
}

func (a *Ack) decode(b []byte, t Type, nh, f uint8) {
	*a = Ack{
		Type:       t,
		NextHeader: NextHeader(nh),
		M:          f&FlagM != 0,
		Retx:       f&FlagRetx != 0,
		Probe:      f&FlagProbe != 0,
		Req:        AckReq(f & FlagAckReq >> flagAckReqShift),
		CACKPSN:    be.Uint32(b[offPSN:]),
		SPDCID:     be.Uint16(b[offSPDCID:]),
		DPDCID:     be.Uint16(b[offDPDCID:]),
	}
	if first := be.Uint16(b[offPSNOffset:]); a.Probe {
		a.ProbeOpaque = first
	} else {
		a.AckPSNOffset = int16(first)
	}
	if t != TypeAckCC {
		return
	}
	c := &a.CC
	c.CCType = CCType(b[offCCType] >> 4)
	c.CCFlags = b[offCCType] & 0xF
	c.MPR = b[offMPR]
	c.SACKPSNOffset = int16(be.Uint16(b[offSACKOffset:]))
	c.SACKBitmap = be.Uint64(b[offSACKBitmap:])
	switch c.CCType {
	case CCNSCC:
		c.NSCC = NSCCState{
			ServiceTime: ServiceTime(be.Uint16(b[offServiceTime:])),
			RC:          b[offRCPend]&ccRC != 0,
			RcvCwndPend: b[offRCPend] & RcvCwndPendMask,
			RcvdBytes:   RcvdBytes(get24(b[offRcvdBytes:])),
			OOOCount:    be.Uint16(b[offOOOCount:]),
		}
	case CCCredit:
		c.Credit = CreditState{
			Credit:   Credit(get24(b[offCredit:])),
			OOOCount: be.Uint16(b[offOOOCount:]),
		}
	}
}

// Validate reports the first field of a that Encode would truncate or
// ignore: a type other than ACK and ACK_CC, a field wider than its wire
// field, a field of the form Probe, Type or CC.CCType does not select.
func (a *Ack) Validate() error {
	if a.Type != TypeAck && a.Type != TypeAckCC {
		return fmt.Errorf("uet: %w: type %s is not ACK or ACK_CC", ErrField, a.Type)
	}
	if err := checkNibble("next_header", uint8(a.NextHeader)); err != nil {
		return err
	}
	if err := checkBits(bitField{"req", uint64(a.Req), 2}); err != nil {
		return err
	}
	if a.Probe && a.AckPSNOffset != 0 {
		return fmt.Errorf("uet: %w: ack_psn_offset %d on a probe ACK: the field carries probe_opaque", ErrField, a.AckPSNOffset)
	}
	if !a.Probe && a.ProbeOpaque != 0 {
		return fmt.Errorf("uet: %w: probe_opaque %#x without the probe flag: the field carries ack_psn_offset", ErrField, a.ProbeOpaque)
	}
	if a.Type == TypeAck {
		if a.CC != (AckCC{}) {
			return fmt.Errorf("uet: %w: ACK with CC fields set: only ACK_CC carries them", ErrField)
		}
		return nil
	}
	c := &a.CC
	if err := checkNibble("cc_flags", c.CCFlags); err != nil {
		return err
	}
	switch c.CCType {
	case CCNSCC:
		if err := checkBits(bitField{"rcv_cwnd_pend", uint64(c.NSCC.RcvCwndPend), 7}); err != nil {
			return err
		}
		if err := checkUnits24("rcvd_bytes", uint32(c.NSCC.RcvdBytes)); err != nil {
			return err
		}
		if c.Credit != (CreditState{}) {
			return fmt.Errorf("uet: %w: CREDIT cc_state set on an NSCC ACK_CC", ErrField)
		}
	case CCCredit:
		if err := checkUnits24("credit", uint32(c.Credit.Credit)); err != nil {
			return err
		}
		if c.NSCC != (NSCCState{}) {
			return fmt.Errorf("uet: %w: NSCC cc_state set on a CREDIT ACK_CC", ErrField)
		}
	default:
		return fmt.Errorf("uet: %w: cc_type %d, want 0 (NSCC) or 1 (CREDIT)", ErrField, c.CCType)
	}
	return nil
}

// Nack is the header of a NACK (16 bytes; UE 1.0.1 §3.5.12.8).
type Nack struct {
	NextHeader NextHeader
	M          bool // ECN echo
	Retx       bool
	NT         bool // NACK type: a RUDI NACK (NackPSN is the pkt_id, PDC IDs 0)
	Code       NackCode
	VendorCode uint8
	NackPSN    uint32 // the NACKed PSN (RUDI: pkt_id)
	SPDCID     uint16
	DPDCID     uint16
	// MaxRecvPSNPlus1 is the 32-bit payload: the highest PSN the receiver
	// has seen, plus one (packet-uet.c's "max_recv_psn_plus_1").
	MaxRecvPSNPlus1 uint32
}

// Len returns NackLen.
func (n *Nack) Len() int { return NackLen }

// Encode writes n (NackLen bytes) into b and returns NackLen, or 0 if b is
// too short. Reserved bits are written as zero.
func (n *Nack) Encode(b []byte) int {
	if len(b) < NackLen {
		return 0
	}
	b = b[:NackLen]
	f := flagIf(n.M, FlagM) | flagIf(n.Retx, FlagRetx) | flagIf(n.NT, FlagNT)
	putPrologue(b, TypeNack, uint8(n.NextHeader), f)
	b[offPSNOffset] = uint8(n.Code)
	b[offNackVendor] = n.VendorCode
	be.PutUint32(b[offPSN:], n.NackPSN)
	be.PutUint16(b[offSPDCID:], n.SPDCID)
	be.PutUint16(b[offDPDCID:], n.DPDCID)
	be.PutUint32(b[offPayload:], n.MaxRecvPSNPlus1)
	return NackLen
}

func (n *Nack) decode(b []byte, nh, f uint8) {
	*n = Nack{
		NextHeader:      NextHeader(nh),
		M:               f&FlagM != 0,
		Retx:            f&FlagRetx != 0,
		NT:              f&FlagNT != 0,
		Code:            NackCode(b[offPSNOffset]),
		VendorCode:      b[offNackVendor],
		NackPSN:         be.Uint32(b[offPSN:]),
		SPDCID:          be.Uint16(b[offSPDCID:]),
		DPDCID:          be.Uint16(b[offDPDCID:]),
		MaxRecvPSNPlus1: be.Uint32(b[offPayload:]),
	}
}

// Validate reports a NextHeader wider than 4 bits. Unknown NACK codes are
// valid: the field is 8 bits and vendors use the experimental ones.
func (n *Nack) Validate() error { return checkNibble("next_header", uint8(n.NextHeader)) }

// Ctrl is the header of a control packet, CTRL (16 bytes; UE 1.0.1
// §3.5.16). Its control type sits in the prologue's next-header bits. With
// SYN the dpdcid slot has the SYN form of a request (uet.md, xdp2's union;
// packet-uet.c shows a raw dpdcid whatever the flag).
type Ctrl struct {
	CtrlType    CtrlType // 4 bits
	IsROD       bool     // the PDC is ROD (NOOP and NEGOTIATION)
	Retx        bool
	AR          bool // ACK request
	SYN         bool
	ProbeOpaque uint16 // PROBE: echoed in the probe ACK
	PSN         uint32
	SPDCID      uint16
	DPDCID      uint16 // not with SYN
	UseRsvPDC   bool   // SYN only
	PSNOffset   uint16 // SYN only, 12 bits
	// Payload is the 32-bit control payload; its meaning depends on
	// CtrlType (packet-uet.c: CREDIT "credit allocation", CREDIT_REQ
	// "credit request", CLEAR_* "clear sequence number", PROBE "SACK
	// bitmap base PSN").
	Payload uint32
}

// Len returns CtrlLen.
func (c *Ctrl) Len() int { return CtrlLen }

// StartPSN returns PSN − PSNOffset (mod 2^32): the start PSN a SYN control
// packet announces.
func (c *Ctrl) StartPSN() uint32 { return c.PSN - uint32(c.PSNOffset&PSNOffsetMask) }

// Encode writes c (CtrlLen bytes) into b and returns CtrlLen, or 0 if b is
// too short. Fields wider than their wire field are truncated (Validate
// reports them), reserved bits are written as zero.
func (c *Ctrl) Encode(b []byte) int {
	if len(b) < CtrlLen {
		return 0
	}
	b = b[:CtrlLen]
	f := flagIf(c.IsROD, FlagIsROD) | flagIf(c.Retx, FlagRetx) | flagIf(c.AR, FlagAR) | flagIf(c.SYN, FlagSYN)
	putPrologue(b, TypeCtrl, uint8(c.CtrlType), f)
	be.PutUint16(b[offPSNOffset:], c.ProbeOpaque)
	be.PutUint32(b[offPSN:], c.PSN)
	be.PutUint16(b[offSPDCID:], c.SPDCID)
	be.PutUint16(b[offDPDCID:], dpdcidSlot(c.SYN, c.DPDCID, c.UseRsvPDC, c.PSNOffset))
	be.PutUint32(b[offPayload:], c.Payload)
	return CtrlLen
}

func (c *Ctrl) decode(b []byte, ct, f uint8) {
	*c = Ctrl{
		CtrlType:    CtrlType(ct),
		IsROD:       f&FlagIsROD != 0,
		Retx:        f&FlagRetx != 0,
		AR:          f&FlagAR != 0,
		SYN:         f&FlagSYN != 0,
		ProbeOpaque: be.Uint16(b[offPSNOffset:]),
		PSN:         be.Uint32(b[offPSN:]),
		SPDCID:      be.Uint16(b[offSPDCID:]),
		Payload:     be.Uint32(b[offPayload:]),
	}
	c.DPDCID, c.UseRsvPDC, c.PSNOffset = readDPDCIDSlot(c.SYN, be.Uint16(b[offDPDCID:]))
}

// Validate reports the first field of c that Encode would truncate or
// ignore. Control types UE 1.0.1 does not define are valid (4 bits).
func (c *Ctrl) Validate() error {
	if err := checkNibble("ctrl_type", uint8(c.CtrlType)); err != nil {
		return err
	}
	return checkDPDCIDSlot(c.SYN, c.DPDCID, c.UseRsvPDC, c.PSNOffset)
}

// Header is one decoded PDS header: Type says which of the forms is valid
// (Request for the four request types, Ack for ACK and ACK_CC, Nack, Ctrl);
// DecodeHeader zeroes the others. For Request and Ack the form's own Type
// equals Header.Type.
type Header struct {
	Type    Type
	Request Request
	Ack     Ack
	Nack    Nack
	Ctrl    Ctrl
}

// NextHeader returns the next header of the form h.Type selects: which SES
// header follows the PDS header (DecodeSESRequest for NextHeaderReqStd,
// DecodeSESResponse for NextHeaderRsp). It is NextHeaderNone for CTRL,
// whose prologue bits carry a CtrlType, and for types this package does not
// decode.
func (h *Header) NextHeader() NextHeader {
	switch h.Type.info().fam {
	case famRequest:
		return h.Request.NextHeader
	case famAck:
		return h.Ack.NextHeader
	case famNack:
		return h.Nack.NextHeader
	}
	return NextHeaderNone
}

// Len returns the encoded length of the form h.Type selects, or 0 if this
// package does not encode h.Type or the form's own Type differs.
func (h *Header) Len() int {
	switch h.Type.info().fam {
	case famRequest:
		if h.Request.Type == h.Type {
			return h.Request.Len()
		}
	case famAck:
		if h.Ack.Type == h.Type {
			return h.Ack.Len()
		}
	case famNack:
		return NackLen
	case famCtrl:
		return CtrlLen
	}
	return 0
}

// Encode writes the form h.Type selects into b and returns its length, or
// 0 if b is too short, h.Type is not encoded by this package or the form's
// own Type differs from h.Type.
func (h *Header) Encode(b []byte) int {
	switch h.Type.info().fam {
	case famRequest:
		if h.Request.Type == h.Type {
			return h.Request.Encode(b)
		}
	case famAck:
		if h.Ack.Type == h.Type {
			return h.Ack.Encode(b)
		}
	case famNack:
		return h.Nack.Encode(b)
	case famCtrl:
		return h.Ctrl.Encode(b)
	}
	return 0
}

// Validate reports why Encode would not write h as it stands: a type this
// package does not encode, a form whose Type differs from h.Type, or the
// form's own Validate error.
func (h *Header) Validate() error {
	switch h.Type.info().fam {
	case famRequest:
		if h.Request.Type != h.Type {
			return fmt.Errorf("uet: %w: Request.Type %s, Header.Type %s", ErrField, h.Request.Type, h.Type)
		}
		return h.Request.Validate()
	case famAck:
		if h.Ack.Type != h.Type {
			return fmt.Errorf("uet: %w: Ack.Type %s, Header.Type %s", ErrField, h.Ack.Type, h.Type)
		}
		return h.Ack.Validate()
	case famNack:
		return h.Nack.Validate()
	case famCtrl:
		return h.Ctrl.Validate()
	case famUnsupported:
		return fmt.Errorf("uet: %w: %s", ErrUnsupportedType, h.Type)
	}
	return fmt.Errorf("uet: %w: type %d", ErrUnknownType, h.Type)
}

// DecodeHeader parses the PDS header at the start of b into h and returns
// its length. It rejects a b shorter than the header its type needs
// (ErrTruncated), a type UE 1.0.1 does not define (ErrUnknownType), a
// defined type this package does not decode (ErrUnsupportedType) and an
// ACK_CC with a cc_type other than NSCC and CREDIT (ErrCCType). Reserved
// bits — of the flags, of the SYN slot, of the CREDIT cc_state — are
// ignored. Next-header, control-type and NACK-code values are not checked:
// every 4- or 8-bit value decodes. h is left as it was on error.
func DecodeHeader(b []byte, h *Header) (int, error) {
	if len(b) < PrologueLen {
		return 0, fmt.Errorf("uet: %w: %d bytes, the PDS prologue needs %d", ErrTruncated, len(b), PrologueLen)
	}
	p := be.Uint16(b)
	t := Type(p >> prologueTypeShift)
	nh := uint8(p>>prologueNHShift) & prologueNHMask
	f := uint8(p) & prologueFlagsMask
	info := t.info()
	switch info.fam {
	case famNone:
		return 0, fmt.Errorf("uet: %w: type %d (defined: 1..14)", ErrUnknownType, uint8(t))
	case famUnsupported:
		return 0, fmt.Errorf("uet: %w: %s (type %d)", ErrUnsupportedType, t, uint8(t))
	}
	n := int(info.hdrLen)
	if len(b) < n {
		return 0, fmt.Errorf("uet: %w: %d bytes, %s needs %d", ErrTruncated, len(b), t, n)
	}
	b = b[:n]
	if t == TypeAckCC {
		if cc := CCType(b[offCCType] >> 4); cc != CCNSCC && cc != CCCredit {
			return 0, fmt.Errorf("uet: %w: cc_type %d, want 0 (NSCC) or 1 (CREDIT)", ErrCCType, uint8(cc))
		}
	}
	*h = Header{Type: t}
	switch info.fam {
	case famRequest:
		h.Request.decode(b, t, nh, f)
	case famAck:
		h.Ack.decode(b, t, nh, f)
	case famNack:
		h.Nack.decode(b, nh, f)
	case famCtrl:
		h.Ctrl.decode(b, nh, f)
	}
	return n, nil
}

// Parse decodes a whole UDP payload (PDS header | payload) into h and
// returns the payload after the header: a subslice of udpPayload whose
// capacity ends with it (possibly empty). It rejects what DecodeHeader
// rejects.
func Parse(udpPayload []byte, h *Header) (payload []byte, err error) {
	n, err := DecodeHeader(udpPayload, h)
	if err != nil {
		return nil, err
	}
	end := len(udpPayload)
	return udpPayload[n:end:end], nil
}

// Build writes a whole UDP payload into b: h's PDS header, then payload
// (for requests the SES header and data; UE 1.0.1 packets carry no pad or
// trailer at this layer). It returns the total length, or 0 if b is too
// short or h does not encode (Header.Len is 0). The UDP and IP headers are
// host/pktio's: UDP destination port Port, source port the EV.
func Build(b []byte, h *Header, payload []byte) int {
	n := h.Len()
	if n == 0 || len(b) < n+len(payload) {
		return 0
	}
	h.Encode(b)
	return n + copy(b[n:], payload)
}

func putPrologue(b []byte, t Type, nh, flags uint8) {
	be.PutUint16(b, uint16(t)<<prologueTypeShift|
		uint16(nh&prologueNHMask)<<prologueNHShift|
		uint16(flags&prologueFlagsMask))
}

// dpdcidSlot returns the 16 bits of the dpdcid slot: DPDCID, or with SYN
// use_rsv_pdc | 000 | psn_offset.
func dpdcidSlot(syn bool, dpdcid uint16, useRsv bool, psnOffset uint16) uint16 {
	if !syn {
		return dpdcid
	}
	v := psnOffset & PSNOffsetMask
	if useRsv {
		v |= synUseRsvPDC
	}
	return v
}

func readDPDCIDSlot(syn bool, v uint16) (dpdcid uint16, useRsv bool, psnOffset uint16) {
	if !syn {
		return v, false, 0
	}
	return 0, v&synUseRsvPDC != 0, v & PSNOffsetMask
}

func checkDPDCIDSlot(syn bool, dpdcid uint16, useRsv bool, psnOffset uint16) error {
	if syn {
		if dpdcid != 0 {
			return fmt.Errorf("uet: %w: dpdcid %d with SYN: the slot carries use_rsv_pdc and psn_offset", ErrField, dpdcid)
		}
		return checkBits(bitField{"psn_offset", uint64(psnOffset), 12})
	}
	if useRsv || psnOffset != 0 {
		return fmt.Errorf("uet: %w: use_rsv_pdc %t, psn_offset %d without SYN: the slot carries dpdcid", ErrField, useRsv, psnOffset)
	}
	return nil
}

func checkNibble(field string, v uint8) error {
	return checkBits(bitField{field, uint64(v), 4})
}

// bitField is a header field's value and its width on the wire.
type bitField struct {
	name string
	v    uint64
	bits uint
}

// checkBits reports the first of fields wider than its wire field, which
// Encode would truncate.
func checkBits(fields ...bitField) error {
	for _, f := range fields {
		if most := uint64(1)<<f.bits - 1; f.v > most {
			return fmt.Errorf("uet: %w: %s %d, at most %d (%d bits)", ErrField, f.name, f.v, most, f.bits)
		}
	}
	return nil
}

// flagIf is flag if on, else 0: one bit of a flags byte.
func flagIf(on bool, flag uint8) uint8 {
	if on {
		return flag
	}
	return 0
}

func checkUnits24(field string, v uint32) error {
	if v > Units24Mask {
		return fmt.Errorf("uet: %w: %s %d, at most %d (24 bits of 256-byte units)", ErrField, field, v, Units24Mask)
	}
	return nil
}

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}
