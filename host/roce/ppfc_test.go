package roce

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// PPFC vectors, laid out by hand from the format in ppfc.go; their ICRCs
// were computed independently with Python's zlib.crc32 over the masked
// headers (IPv4: ID 0, DF; TOS, TTL, checksum, UDP checksum and BTH byte 4
// all ones), as roce-wire.md §ICRC describes.
const (
	// ppfcVector4 is a stop for 10.0.18.1 (IPv4-mapped), congestion port
	// 7, 1000 µs, PSN 0x102, from the switch 10.0.17.254:49153 to the
	// source 10.0.17.1:4791: the UDP payload without its ICRC.
	ppfcVector4 = "8100ffff" + "20000000" + "00000102" + // BTH: 0x81, P_Key, P, DestQP 0, PSN
		"00000000000000000000ffff0a001201" + // Congested Destination IP
		"0000" + "0007" + "0000" + "03e8" // Flags|PT stop, port, reserved, pause
	ppfcVector4ICRCWire = "0805433b" // zlib 0x3b430508

	// ppfcVector6 is a resume for 2001:db8::2, port 0x102, pause 0, PSN
	// 0xabcdef, from [2001:db8::fe]:49153 to [2001:db8::1]:4791.
	ppfcVector6 = "8100ffff" + "20000000" + "00abcdef" +
		"20010db8000000000000000000000002" + "0001" + "0102" + "0000" + "0000"
	ppfcVector6ICRCWire = "8dbeb920" // zlib 0x20b9be8d
)

var (
	ppfcSwitch4 = netip.MustParseAddrPort("10.0.17.254:49153")
	ppfcSource4 = netip.MustParseAddrPort("10.0.17.1:4791")
	ppfcSwitch6 = netip.MustParseAddrPort("[2001:db8::fe]:49153")
	ppfcSource6 = netip.MustParseAddrPort("[2001:db8::1]:4791")
)

func TestPPFCVectors(t *testing.T) {
	for _, c := range []struct {
		name     string
		p        PPFC
		src, dst netip.AddrPort
		hex      string
		icrc     string
	}{
		{"ipv4-stop", PPFC{Dest: netip.MustParseAddr("10.0.18.1"), Action: PPFCStop, Port: 7, Pause: 1000 * time.Microsecond, PSN: 0x102},
			ppfcSwitch4, ppfcSource4, ppfcVector4, ppfcVector4ICRCWire},
		{"ipv6-resume", PPFC{Dest: netip.MustParseAddr("2001:db8::2"), Action: PPFCResume, Port: 0x102, PSN: 0xabcdef},
			ppfcSwitch6, ppfcSource6, ppfcVector6, ppfcVector6ICRCWire},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := append(mustHex(t, c.hex), mustHex(t, c.icrc)...)
			if len(want) != PPFCLen || PPFCLen != 40 {
				t.Fatalf("vector %d bytes, PPFCLen %d: want 40", len(want), PPFCLen)
			}
			b := make([]byte, 64)
			n, err := BuildPPFC(b, c.src, c.dst, &c.p)
			if err != nil || n != PPFCLen {
				t.Fatalf("BuildPPFC = %d, %v", n, err)
			}
			if !bytes.Equal(b[:n], want) {
				t.Fatalf("BuildPPFC\n %x\nwant\n %x", b[:n], want)
			}
			if !VerifyICRC(c.src, c.dst, want) {
				t.Error("the vector's ICRC does not verify")
			}
			var got PPFC
			if err := ParsePPFC(want, &got); err != nil || got != c.p {
				t.Fatalf("ParsePPFC = %+v, %v; want %+v", got, err, c.p)
			}
			// The generic parser takes it too (the agent dispatches after
			// it): a CNP-sized header with P set, 8 bytes left over.
			var h Header
			rest, err := Parse(want, &h)
			if err != nil || !h.BTH.IsPPFC() || h.BTH.DestQP != 0 || h.BTH.PSN != c.p.PSN || len(rest) != 8 {
				t.Fatalf("Parse = %+v, %d bytes left, %v", h.BTH, len(rest), err)
			}
		})
	}
}

// randomPPFC returns a PPFC with every field random in its wire range.
func randomPPFC(r *rand.Rand) PPFC {
	var a [16]byte
	for i := range a {
		a[i] = byte(r.Uint32())
	}
	dest := netip.AddrFrom16(a)
	if r.IntN(2) == 0 {
		dest = netip.AddrFrom4([4]byte(a[:4]))
	}
	return PPFC{
		Dest:   dest,
		Action: PPFCAction(r.IntN(4)),
		Port:   uint16(r.Uint32()),
		Pause:  time.Duration(r.IntN(0x10000)) * time.Microsecond,
		PSN:    r.Uint32() & PSNMask,
	}
}

func TestPPFCRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		p := randomPPFC(r)
		prefix := []byte{0xAA, 0xBB}
		b, err := AppendPPFC(prefix, &p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 2+PPFCLen || b[0] != 0xAA || b[1] != 0xBB {
			t.Fatalf("AppendPPFC: %d bytes %x", len(b), b)
		}
		pkt := b[2:]
		if !bytes.Equal(pkt[PPFCLen-ICRCLen:], make([]byte, ICRCLen)) {
			t.Fatalf("ICRC placeholder %x, want zero", pkt[PPFCLen-ICRCLen:])
		}
		var got PPFC
		if err := ParsePPFC(pkt, &got); err != nil || got != p {
			t.Fatalf("round trip: %+v, %v; want %+v", got, err, p)
		}
	}
	// IPv4-mapped in, 4-byte address out; sub-µs pause truncated.
	p := PPFC{Dest: netip.MustParseAddr("::ffff:10.0.18.1"), Pause: 1500 * time.Nanosecond}
	b, _ := AppendPPFC(nil, &p)
	var got PPFC
	if err := ParsePPFC(b, &got); err != nil || got.Dest != netip.MustParseAddr("10.0.18.1") || got.Pause != time.Microsecond {
		t.Errorf("mapped destination, 1.5 µs: got %+v, %v", got, err)
	}
	// The deprecated IPv4-compatible form stays the IPv6 address it is.
	compat := bytes.Clone(b)
	compat[ppfcOffDest+10], compat[ppfcOffDest+11] = 0, 0
	if err := ParsePPFC(compat, &got); err != nil || got.Dest != netip.MustParseAddr("::10.0.18.1") {
		t.Errorf("::a.b.c.d: got %v, %v", got.Dest, err)
	}
}

// TestParsePPFCIgnores: fields that carry nothing for the source may be
// anything.
func TestParsePPFCIgnores(t *testing.T) {
	canon := append(mustHex(t, ppfcVector4), mustHex(t, ppfcVector4ICRCWire)...)
	var want PPFC
	if err := ParsePPFC(canon, &want); err != nil {
		t.Fatal(err)
	}
	b := bytes.Clone(canon)
	b[1] = 0xF0                 // SE, M, PadCnt 3 (TVer 0)
	b[2], b[3] = 0x12, 0x34     // P_Key
	b[4] = 0xFF                 // F, B, P, RSV5
	b[5], b[6], b[7] = 1, 2, 3  // DestQP
	b[8] = 0xFF                 // AckReq and reserved
	b[ppfcOffFlagsPT] = 0xFF    // Flags
	b[ppfcOffFlagsPT+1] = 0xFC  // Flags, PT 0
	b[ppfcOffReserved] = 0xAB   // Reserved
	b[ppfcOffReserved+1] = 0xCD //
	b[PPFCLen-1] ^= 0xFF        // ICRC: not ParsePPFC's to check
	var got PPFC
	if err := ParsePPFC(b, &got); err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
}

func TestParsePPFCErrors(t *testing.T) {
	good := append(mustHex(t, ppfcVector4), mustHex(t, ppfcVector4ICRCWire)...)
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, c := range []struct {
		name string
		b    []byte
		want error
		text string
	}{
		{"empty", nil, ErrTruncated, "roce: PPFC: truncated packet: 0 bytes, BTH needs 12"},
		{"short BTH", good[:11], ErrTruncated, ""},
		{"BTH only", good[:BTHLen], ErrTruncated, "roce: PPFC: truncated packet: 12 bytes, BTH, extension and ICRC need 40"},
		{"no ICRC", good[:PPFCLen-ICRCLen], ErrTruncated, ""},
		{"one short", good[:PPFCLen-1], ErrTruncated, ""},
		{"trailing", append(bytes.Clone(good), 0, 0, 0, 0, 0, 0, 0, 0), ErrLength,
			"roce: PPFC: wrong packet length: 48 bytes, a PPFC notification is 40"},
		{"ACK opcode", mod(func(b []byte) []byte { b[0] = byte(OpRCAck); return b }), ErrNotPPFC,
			"roce: not a PPFC notification: opcode RC_ACKNOWLEDGE, want 0x81"},
		{"P clear", mod(func(b []byte) []byte { b[4] = 0x40; return b }), ErrNotPPFC,
			"roce: not a PPFC notification: opcode 0x81 with the P bit clear (a CNP)"},
		{"TVer 1", mod(func(b []byte) []byte { b[1] = 1; return b }), ErrVersion, "roce: PPFC: unsupported BTH transport version: TVer 1, want 0"},
		{"CNP vector", append(mustHex(t, vector1IP)[ipv4HdrTest+udpHdrTest:], mustHex(t, vector1ICRCWire)...), ErrNotPPFC, ""},
	} {
		var p PPFC
		err := ParsePPFC(c.b, &p)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if c.text != "" && err.Error() != c.text {
			t.Errorf("%s: error %q, want %q", c.name, err, c.text)
		}
	}
}

func TestAppendPPFCErrors(t *testing.T) {
	ok := PPFC{Dest: netip.MustParseAddr("10.0.18.1")}
	for _, c := range []struct {
		mod  func(*PPFC)
		want string
	}{
		{func(p *PPFC) { p.Dest = netip.Addr{} }, "roce: PPFC: no congested destination address"},
		{func(p *PPFC) { p.Action = 4 }, "roce: PPFC: PT 4: must be 0..3"},
		{func(p *PPFC) { p.Pause = -time.Microsecond }, "roce: PPFC: pause duration -1µs: must be 0..65.535ms"},
		{func(p *PPFC) { p.Pause = MaxPPFCPause + time.Microsecond }, "roce: PPFC: pause duration 65.536ms: must be 0..65.535ms"},
		{func(p *PPFC) { p.PSN = 1 << 24 }, "roce: PPFC: psn 0x1000000: must be 0..0xffffff"},
	} {
		p := ok
		c.mod(&p)
		b, err := AppendPPFC([]byte{1}, &p)
		if err == nil || err.Error() != c.want || len(b) != 1 {
			t.Errorf("got %d bytes, %v; want 1, %q", len(b), err, c.want)
		}
		if n, err := BuildPPFC(make([]byte, PPFCLen), ppfcSwitch4, ppfcSource4, &p); n != 0 || err == nil {
			t.Errorf("BuildPPFC = %d, %v; want 0 and %q", n, err, c.want)
		}
	}
	if n, err := BuildPPFC(make([]byte, PPFCLen-1), ppfcSwitch4, ppfcSource4, &ok); n != 0 || err == nil {
		t.Errorf("BuildPPFC into 39 bytes = %d, %v", n, err)
	}
	if MaxPPFCPause != 65535*time.Microsecond {
		t.Errorf("MaxPPFCPause %v, want 65.535ms (16 bits of µs)", MaxPPFCPause)
	}
}

func TestPPFCActionString(t *testing.T) {
	for a, want := range map[PPFCAction]string{PPFCStop: "stop", PPFCResume: "resume", PPFCAlarm: "alarm", PPFCHold: "hold", 9: "PT(9)"} {
		if got := a.String(); got != want {
			t.Errorf("%d: %q, want %q", uint8(a), got, want)
		}
	}
}
