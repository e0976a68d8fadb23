package roce

import "testing"

type opcodeCase struct {
	op                      Opcode
	name                    string
	hdrLen                  int
	reth, aeth, imm, deth   bool
	atomicETH, atomicAckETH bool
}

// opcodeCases lists every opcode the package knows, with the extension
// headers roce-wire.md and IBTA Vol. 1 §9.2–9.3 give it.
var opcodeCases = []opcodeCase{
	{op: OpRCSendFirst, name: "RC_SEND_FIRST", hdrLen: 12},
	{op: OpRCSendMiddle, name: "RC_SEND_MIDDLE", hdrLen: 12},
	{op: OpRCSendLast, name: "RC_SEND_LAST", hdrLen: 12},
	{op: OpRCSendLastImm, name: "RC_SEND_LAST_WITH_IMMEDIATE", hdrLen: 16, imm: true},
	{op: OpRCSendOnly, name: "RC_SEND_ONLY", hdrLen: 12},
	{op: OpRCSendOnlyImm, name: "RC_SEND_ONLY_WITH_IMMEDIATE", hdrLen: 16, imm: true},
	{op: OpRCWriteFirst, name: "RC_RDMA_WRITE_FIRST", hdrLen: 28, reth: true},
	{op: OpRCWriteMiddle, name: "RC_RDMA_WRITE_MIDDLE", hdrLen: 12},
	{op: OpRCWriteLast, name: "RC_RDMA_WRITE_LAST", hdrLen: 12},
	{op: OpRCWriteLastImm, name: "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", hdrLen: 16, imm: true},
	{op: OpRCWriteOnly, name: "RC_RDMA_WRITE_ONLY", hdrLen: 28, reth: true},
	{op: OpRCWriteOnlyImm, name: "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", hdrLen: 32, reth: true, imm: true},
	{op: OpRCReadRequest, name: "RC_RDMA_READ_REQUEST", hdrLen: 28, reth: true},
	{op: OpRCReadResponseFirst, name: "RC_RDMA_READ_RESPONSE_FIRST", hdrLen: 16, aeth: true},
	{op: OpRCReadResponseMiddle, name: "RC_RDMA_READ_RESPONSE_MIDDLE", hdrLen: 12},
	{op: OpRCReadResponseLast, name: "RC_RDMA_READ_RESPONSE_LAST", hdrLen: 16, aeth: true},
	{op: OpRCReadResponseOnly, name: "RC_RDMA_READ_RESPONSE_ONLY", hdrLen: 16, aeth: true},
	{op: OpRCAck, name: "RC_ACKNOWLEDGE", hdrLen: 16, aeth: true},
	{op: OpRCAtomicAck, name: "RC_ATOMIC_ACKNOWLEDGE", hdrLen: 24, aeth: true, atomicAckETH: true},
	{op: OpRCCompareSwap, name: "RC_COMPARE_SWAP", hdrLen: 40, atomicETH: true},
	{op: OpRCFetchAdd, name: "RC_FETCH_ADD", hdrLen: 40, atomicETH: true},
	{op: OpUCSendFirst, name: "UC_SEND_FIRST", hdrLen: 12},
	{op: OpUCSendMiddle, name: "UC_SEND_MIDDLE", hdrLen: 12},
	{op: OpUCSendLast, name: "UC_SEND_LAST", hdrLen: 12},
	{op: OpUCSendLastImm, name: "UC_SEND_LAST_WITH_IMMEDIATE", hdrLen: 16, imm: true},
	{op: OpUCSendOnly, name: "UC_SEND_ONLY", hdrLen: 12},
	{op: OpUCSendOnlyImm, name: "UC_SEND_ONLY_WITH_IMMEDIATE", hdrLen: 16, imm: true},
	{op: OpUCWriteFirst, name: "UC_RDMA_WRITE_FIRST", hdrLen: 28, reth: true},
	{op: OpUCWriteMiddle, name: "UC_RDMA_WRITE_MIDDLE", hdrLen: 12},
	{op: OpUCWriteLast, name: "UC_RDMA_WRITE_LAST", hdrLen: 12},
	{op: OpUCWriteLastImm, name: "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", hdrLen: 16, imm: true},
	{op: OpUCWriteOnly, name: "UC_RDMA_WRITE_ONLY", hdrLen: 28, reth: true},
	{op: OpUCWriteOnlyImm, name: "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", hdrLen: 32, reth: true, imm: true},
	{op: OpUDSendOnly, name: "UD_SEND_ONLY", hdrLen: 20, deth: true},
	{op: OpUDSendOnlyImm, name: "UD_SEND_ONLY_WITH_IMMEDIATE", hdrLen: 24, deth: true, imm: true},
	{op: OpCNP, name: "CNP", hdrLen: 28},
}

func TestOpcodeValues(t *testing.T) {
	// The numeric values of roce-wire.md §Opcodes.
	for _, c := range []struct {
		op   Opcode
		want uint8
	}{
		{OpRCSendFirst, 0x00}, {OpRCSendOnly, 0x04}, {OpRCWriteFirst, 0x06},
		{OpRCWriteOnlyImm, 0x0B}, {OpRCReadRequest, 0x0C}, {OpRCReadResponseFirst, 0x0D},
		{OpRCReadResponseOnly, 0x10}, {OpRCAck, 0x11}, {OpRCAtomicAck, 0x12},
		{OpRCCompareSwap, 0x13}, {OpRCFetchAdd, 0x14}, {OpUCSendFirst, 0x20},
		{OpUCSendOnly, 0x24}, {OpUCWriteOnlyImm, 0x2B}, {OpUDSendOnly, 0x64},
		{OpUDSendOnlyImm, 0x65}, {OpCNP, 0x81},
	} {
		if uint8(c.op) != c.want {
			t.Errorf("%s = %#02x, want %#02x", c.op, uint8(c.op), c.want)
		}
	}
}

func TestOpcodeTable(t *testing.T) {
	known := map[Opcode]bool{}
	for _, c := range opcodeCases {
		known[c.op] = true
		if got := c.op.String(); got != c.name {
			t.Errorf("%#02x.String() = %q, want %q", uint8(c.op), got, c.name)
		}
		if !c.op.Known() {
			t.Errorf("%s not Known", c.name)
		}
		if got := c.op.HeaderLen(); got != c.hdrLen {
			t.Errorf("%s.HeaderLen() = %d, want %d", c.name, got, c.hdrLen)
		}
		for _, f := range []struct {
			what      string
			got, want bool
		}{
			{"HasRETH", c.op.HasRETH(), c.reth},
			{"HasAETH", c.op.HasAETH(), c.aeth},
			{"HasImm", c.op.HasImm(), c.imm},
			{"HasDETH", c.op.HasDETH(), c.deth},
			{"HasAtomicETH", c.op.HasAtomicETH(), c.atomicETH},
			{"HasAtomicAckETH", c.op.HasAtomicAckETH(), c.atomicAckETH},
		} {
			if f.got != f.want {
				t.Errorf("%s.%s() = %v, want %v", c.name, f.what, f.got, f.want)
			}
		}
		h := Header{BTH: BTH{Opcode: c.op}}
		if h.Len() != c.hdrLen {
			t.Errorf("Header{%s}.Len() = %d, want %d", c.name, h.Len(), c.hdrLen)
		}
	}
	for i := range 256 {
		op := Opcode(i)
		if known[op] {
			continue
		}
		if op.Known() || op.HeaderLen() != 0 || op.HasRETH() || op.HasAETH() || op.HasImm() {
			t.Errorf("unknown opcode %#02x: Known %v HeaderLen %d", i, op.Known(), op.HeaderLen())
		}
	}
	if got := Opcode(0x3f).String(); got != "0x3f" {
		t.Errorf("Opcode(0x3f).String() = %q, want 0x3f", got)
	}
	if got := Opcode(0x05 | TransportRD).String(); got != "0x45" {
		t.Errorf("Opcode(0x45).String() = %q", got)
	}
	if OpUCWriteOnly.Transport() != TransportUC || OpCNP.Transport() != TransportCNP {
		t.Error("Transport prefix")
	}
}
