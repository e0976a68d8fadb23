package roce

import (
	"encoding/hex"
	"strings"
	"testing"
)

// Test vectors from /work/shared/reference/roce-wire.md §ICRC.
const (
	// vector1IP is a CNP captured from a ConnectX-4 Lx: IPv4 header through
	// the 16 reserved bytes, without the ICRC.
	vector1IP = "45c2003c718c4000401191610a0011010a001201 000012b700280000 " +
		"8100ffff4000011800000000 00000000000000000000000000000000"
	vector1ICRC     = 0x2a00fd82
	vector1ICRCWire = "82fd002a"

	// vector2Pkt is a UC SEND_ONLY with PadCnt 2, IPv4 header through ICRC.
	vector2Pkt = "45010040047840004011b4d5c0a80007c0a80007 c00012b7002caca2 " +
		"2460ffff000000d300cf1710 4630818be28935d90e9a95505401be885e500000 78f353f3"
	vector2ICRCWire = "78f353f3"

	// vector6IP is an IPv6 RC SEND_ONLY (TC 0x6a, flow label 0x12345, hop
	// limit 64, UDP checksum 0xbeef, FECN and a reserved bit set in BTH byte
	// 4, 14-byte payload + 2 pad) without its ICRC. vector6ICRC was computed
	// independently with Python's zlib.crc32 over the masked bytes.
	vector6IP = "66a123450028114020010db800000000000000000000000120010db8000000000000000000000002" +
		"c00012b70028beef" + "04a0ffff81000abc80123456" + "68656c6c6f20726f6365207636210000"
	vector6ICRC = 0x541e2c75

	ipv4HdrTest = 20
	udpHdrTest  = 8
	ipv6HdrTest = 40
)

func mustHex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		tb.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}
