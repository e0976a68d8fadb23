package roce

import "fmt"

// Opcode is the BTH OpCode byte: the top 3 bits select the transport service,
// the low 5 bits the operation (IBTA Vol. 1 §9.2.1, opcode table).
type Opcode uint8

// Transport service prefixes (top 3 bits of the opcode).
const (
	TransportRC  Opcode = 0x00 // reliable connection
	TransportUC  Opcode = 0x20 // unreliable connection
	TransportRD  Opcode = 0x40 // reliable datagram (not decoded)
	TransportUD  Opcode = 0x60 // unreliable datagram
	TransportCNP Opcode = 0x80 // CNP, Annex A17.9.3

	transportMask Opcode = 0xE0
)

// Reliable connection opcodes (IBTA Vol. 1 §9.2.1).
const (
	OpRCSendFirst          Opcode = 0x00
	OpRCSendMiddle         Opcode = 0x01
	OpRCSendLast           Opcode = 0x02
	OpRCSendLastImm        Opcode = 0x03
	OpRCSendOnly           Opcode = 0x04
	OpRCSendOnlyImm        Opcode = 0x05
	OpRCWriteFirst         Opcode = 0x06
	OpRCWriteMiddle        Opcode = 0x07
	OpRCWriteLast          Opcode = 0x08
	OpRCWriteLastImm       Opcode = 0x09
	OpRCWriteOnly          Opcode = 0x0A
	OpRCWriteOnlyImm       Opcode = 0x0B
	OpRCReadRequest        Opcode = 0x0C
	OpRCReadResponseFirst  Opcode = 0x0D
	OpRCReadResponseMiddle Opcode = 0x0E
	OpRCReadResponseLast   Opcode = 0x0F
	OpRCReadResponseOnly   Opcode = 0x10
	OpRCAck                Opcode = 0x11
	OpRCAtomicAck          Opcode = 0x12
	OpRCCompareSwap        Opcode = 0x13
	OpRCFetchAdd           Opcode = 0x14
)

// Unreliable connection opcodes: the SEND and RDMA WRITE subset of RC, with
// the UC prefix (IBTA Vol. 1 §9.2.1).
const (
	OpUCSendFirst    = TransportUC | OpRCSendFirst
	OpUCSendMiddle   = TransportUC | OpRCSendMiddle
	OpUCSendLast     = TransportUC | OpRCSendLast
	OpUCSendLastImm  = TransportUC | OpRCSendLastImm
	OpUCSendOnly     = TransportUC | OpRCSendOnly
	OpUCSendOnlyImm  = TransportUC | OpRCSendOnlyImm
	OpUCWriteFirst   = TransportUC | OpRCWriteFirst
	OpUCWriteMiddle  = TransportUC | OpRCWriteMiddle
	OpUCWriteLast    = TransportUC | OpRCWriteLast
	OpUCWriteLastImm = TransportUC | OpRCWriteLastImm
	OpUCWriteOnly    = TransportUC | OpRCWriteOnly
	OpUCWriteOnlyImm = TransportUC | OpRCWriteOnlyImm
	OpUDSendOnly     = TransportUD | OpRCSendOnly
	OpUDSendOnlyImm  = TransportUD | OpRCSendOnlyImm
	OpCNP            = TransportCNP | 0x01 // Annex A17.9.3
)

// Extension headers an opcode carries, in wire order (IBTA Vol. 1 §9.2:
// BTH, [RDETH], [DETH], [RETH], [AtomicETH], [AETH], [AtomicAckETH],
// [ImmDt], [IETH]).
type extSet uint8

const (
	extDETH extSet = 1 << iota
	extRETH
	extAtomicETH
	extAETH
	extAtomicAckETH
	extImmDt
	extCNPReserved // Annex A17.9.3: 16 reserved bytes after a CNP's BTH
)

type opInfo struct {
	name   string
	ext    extSet
	hdrLen uint8 // BTH + extension headers; 0 = unknown opcode
}

// opTable is indexed by every possible opcode byte.
var opTable = func() (t [1 << 8]opInfo) {
	def := func(op Opcode, name string, ext extSet) {
		t[op] = opInfo{name: name, ext: ext, hdrLen: uint8(headerLen(ext))}
	}
	// RC and UC share the SEND/WRITE rows (IBTA Vol. 1 §9.2.1).
	for _, tr := range []struct {
		prefix Opcode
		name   string
	}{{TransportRC, "RC_"}, {TransportUC, "UC_"}} {
		p, n := tr.prefix, tr.name
		def(p|OpRCSendFirst, n+"SEND_FIRST", 0)
		def(p|OpRCSendMiddle, n+"SEND_MIDDLE", 0)
		def(p|OpRCSendLast, n+"SEND_LAST", 0)
		def(p|OpRCSendLastImm, n+"SEND_LAST_WITH_IMMEDIATE", extImmDt)
		def(p|OpRCSendOnly, n+"SEND_ONLY", 0)
		def(p|OpRCSendOnlyImm, n+"SEND_ONLY_WITH_IMMEDIATE", extImmDt)
		def(p|OpRCWriteFirst, n+"RDMA_WRITE_FIRST", extRETH)
		def(p|OpRCWriteMiddle, n+"RDMA_WRITE_MIDDLE", 0)
		def(p|OpRCWriteLast, n+"RDMA_WRITE_LAST", 0)
		def(p|OpRCWriteLastImm, n+"RDMA_WRITE_LAST_WITH_IMMEDIATE", extImmDt)
		def(p|OpRCWriteOnly, n+"RDMA_WRITE_ONLY", extRETH)
		def(p|OpRCWriteOnlyImm, n+"RDMA_WRITE_ONLY_WITH_IMMEDIATE", extRETH|extImmDt)
	}
	def(OpRCReadRequest, "RC_RDMA_READ_REQUEST", extRETH)
	def(OpRCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", extAETH)
	def(OpRCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 0)
	def(OpRCReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", extAETH)
	def(OpRCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", extAETH)
	def(OpRCAck, "RC_ACKNOWLEDGE", extAETH)
	def(OpRCAtomicAck, "RC_ATOMIC_ACKNOWLEDGE", extAETH|extAtomicAckETH)
	def(OpRCCompareSwap, "RC_COMPARE_SWAP", extAtomicETH)
	def(OpRCFetchAdd, "RC_FETCH_ADD", extAtomicETH)
	// UD carries a DETH on every packet (IBTA Vol. 1 §9.3.2).
	def(OpUDSendOnly, "UD_SEND_ONLY", extDETH)
	def(OpUDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", extDETH|extImmDt)
	def(OpCNP, "CNP", extCNPReserved)
	return t
}()

// extLens are the extension headers' lengths, which headerLen adds to
// the BTH's.
var extLens = [...]struct {
	ext extSet
	len int
}{
	{extDETH, DETHLen}, {extRETH, RETHLen}, {extAtomicETH, AtomicETHLen}, {extAETH, AETHLen},
	{extAtomicAckETH, AtomicAckETHLen}, {extImmDt, ImmDtLen}, {extCNPReserved, CNPReservedLen},
}

func headerLen(ext extSet) int {
	n := BTHLen
	for _, e := range extLens {
		if ext&e.ext != 0 {
			n += e.len
		}
	}
	return n
}

// String returns the opcode's name in the style "RC_RDMA_WRITE_FIRST",
// "CNP", or "0x3f" for an unknown opcode.
func (o Opcode) String() string {
	if n := opTable[o].name; n != "" {
		return n
	}
	return fmt.Sprintf("0x%02x", uint8(o))
}

// Known reports whether this package can encode and decode the opcode.
func (o Opcode) Known() bool { return opTable[o].hdrLen != 0 }

// Transport returns the transport service prefix (TransportRC, …).
func (o Opcode) Transport() Opcode { return o & transportMask }

// HasRETH reports whether the opcode carries an RDMA Extended Transport
// Header (RDMA WRITE FIRST/ONLY, READ REQUEST; IBTA Vol. 1 §9.3.3).
func (o Opcode) HasRETH() bool { return opTable[o].ext&extRETH != 0 }

// HasAETH reports whether the opcode carries an ACK Extended Transport
// Header (ACKNOWLEDGE, ATOMIC ACKNOWLEDGE, READ RESPONSE FIRST/LAST/ONLY;
// IBTA Vol. 1 §9.3.5).
func (o Opcode) HasAETH() bool { return opTable[o].ext&extAETH != 0 }

// HasImm reports whether the opcode carries Immediate Data (the
// *_WITH_IMMEDIATE opcodes; IBTA Vol. 1 §9.3.7).
func (o Opcode) HasImm() bool { return opTable[o].ext&extImmDt != 0 }

// HasDETH reports whether the opcode carries a Datagram Extended Transport
// Header (UD; IBTA Vol. 1 §9.3.2).
func (o Opcode) HasDETH() bool { return opTable[o].ext&extDETH != 0 }

// HasAtomicETH reports whether the opcode carries an Atomic Extended
// Transport Header (COMPARE_SWAP, FETCH_ADD; IBTA Vol. 1 §9.3.4).
func (o Opcode) HasAtomicETH() bool { return opTable[o].ext&extAtomicETH != 0 }

// HasAtomicAckETH reports whether the opcode carries an Atomic ACK Extended
// Transport Header (ATOMIC ACKNOWLEDGE; IBTA Vol. 1 §9.3.6).
func (o Opcode) HasAtomicAckETH() bool { return opTable[o].ext&extAtomicAckETH != 0 }

// HeaderLen returns the length of the BTH plus the extension headers the
// opcode carries (for CNP: 12 + 16 reserved bytes), or 0 for an unknown
// opcode.
func (o Opcode) HeaderLen() int { return int(opTable[o].hdrLen) }
