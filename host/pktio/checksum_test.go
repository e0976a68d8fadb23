package pktio

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// refUDP6Checksum is the RFC 1071 sum done the slow, obvious way: the whole
// pseudo-header, header and payload in one buffer, 16 bits at a time.
func refUDP6Checksum(src, dst, udpHeader, payload []byte) uint16 {
	var b bytes.Buffer
	b.Write(src)
	b.Write(dst)
	var pseudo [8]byte
	binary.BigEndian.PutUint32(pseudo[0:4], uint32(len(udpHeader)+len(payload)))
	pseudo[7] = 17
	b.Write(pseudo[:])
	b.Write(udpHeader)
	b.Write(payload)
	if b.Len()%2 == 1 {
		b.WriteByte(0)
	}
	var sum uint32
	for p := b.Bytes(); len(p) > 0; p = p[2:] {
		sum += uint32(binary.BigEndian.Uint16(p))
		sum = sum&0xFFFF + sum>>16
	}
	c := ^uint16(sum)
	if c == 0 {
		return 0xFFFF
	}
	return c
}

// splitAt cuts b into pieces at the offsets cuts names (mod len(b)+1).
func splitAt(b, cuts []byte) [][]byte {
	var out [][]byte
	rest := b
	for _, c := range cuts {
		k := int(c) % (len(rest) + 1)
		out = append(out, rest[:k])
		rest = rest[k:]
	}
	return append(out, rest)
}

// TestUDP6ChecksumKnown: two datagrams whose checksums scapy computed
// (IPv6(src="2001:db8::2", dst="2001:db8::1")/UDP(sport, dport=4791)/payload),
// with the payload cut into pieces of odd and even lengths.
func TestUDP6ChecksumKnown(t *testing.T) {
	src := []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}
	dst := []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	counting := make([]byte, 255)
	for i := range counting {
		counting[i] = byte(i)
	}
	for _, tc := range []struct {
		sport   uint16
		payload []byte
		want    uint16
	}{
		{40000, []byte("RoCEv2!\n"), 0xc870},
		{0xC123, counting, 0x0f50},
	} {
		var hdr [8]byte
		binary.BigEndian.PutUint16(hdr[0:2], tc.sport)
		binary.BigEndian.PutUint16(hdr[2:4], 4791)
		binary.BigEndian.PutUint16(hdr[4:6], uint16(8+len(tc.payload)))
		for _, split := range [][]byte{{}, {1}, {3, 2}, {7}, {0, 0, 8}, {101, 50}} {
			if got := udp6Checksum(src, dst, hdr[:], splitAt(tc.payload, split)); got != tc.want {
				t.Errorf("source port %d, split %v: %#04x, want %#04x", tc.sport, split, got, tc.want)
			}
		}
		if ref := refUDP6Checksum(src, dst, hdr[:], tc.payload); ref != tc.want {
			t.Errorf("the reference gives %#04x, scapy %#04x", ref, tc.want)
		}
	}
}

// FuzzUDP6Checksum: whatever the bytes and however the payload is cut into
// buffers (odd lengths included), udp6Checksum equals the reference, and
// the datagram with it sums to 0xFFFF as a receiver checks.
func FuzzUDP6Checksum(f *testing.F) {
	f.Add([]byte("RoCEv2"), []byte{1, 2}, uint16(40000), uint16(4791))
	f.Add(make([]byte, 1041), []byte{12, 17, 255}, uint16(0xC000), uint16(4791))
	f.Add([]byte{0xff, 0xff, 0xff}, []byte{}, uint16(0xffff), uint16(0xffff))
	f.Fuzz(func(t *testing.T, payload, cuts []byte, sport, dport uint16) {
		if len(cuts) > 16 {
			cuts = cuts[:16]
		}
		src := []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}
		dst := []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
		var hdr [8]byte
		binary.BigEndian.PutUint16(hdr[0:2], sport)
		binary.BigEndian.PutUint16(hdr[2:4], dport)
		binary.BigEndian.PutUint16(hdr[4:6], uint16(8+len(payload)))
		want := refUDP6Checksum(src, dst, hdr[:], payload)
		got := udp6Checksum(src, dst, hdr[:], splitAt(payload, cuts))
		if got != want {
			t.Fatalf("checksum %#04x, reference %#04x (payload %d bytes cut at %v)", got, want, len(payload), cuts)
		}
		binary.BigEndian.PutUint16(hdr[6:8], got)
		var s onesSum
		s.add(src)
		s.add(dst)
		var pseudo [8]byte
		binary.BigEndian.PutUint32(pseudo[0:4], uint32(8+len(payload)))
		pseudo[7] = 17
		s.add(pseudo[:])
		s.add(hdr[:])
		s.add(payload)
		if s.fold() != 0xFFFF {
			t.Fatalf("datagram with checksum %#04x sums to %#04x, want 0xffff", got, s.fold())
		}
	})
}
