//go:build linux

package main

import (
	"encoding/binary"

	"github.com/fabriclab/fabriclab/host/roce"
)

// Packet of the per-packet benchmark: Ethernet + IPv4 (1000 bytes in the IP
// total length) + UDP to the RoCEv2 port, DSCP 26 (the RoCE class), ECT(0).
const (
	benchIPLen    = 1000
	benchDSCP     = 26
	benchECT0     = 2
	ethHdrLen     = 14
	ipv4HdrLen    = 20
	udpHdrLen     = 8
	benchFrameLen = ethHdrLen + benchIPLen // skb->len at TC egress, what the backlog grows by
)

// craftPacket builds the benchmark frame with a valid IPv4 header checksum.
// The UDP checksum is left 0 (allowed over IPv4); no program reads it.
func craftPacket() []byte {
	b := make([]byte, benchFrameLen)
	copy(b[0:6], []byte{2, 0, 0, 0, 0, 2})  // dst MAC
	copy(b[6:12], []byte{2, 0, 0, 0, 0, 1}) // src MAC
	binary.BigEndian.PutUint16(b[12:], 0x0800)

	ip := b[ethHdrLen : ethHdrLen+ipv4HdrLen]
	ip[0] = 0x45
	ip[1] = benchDSCP<<2 | benchECT0
	binary.BigEndian.PutUint16(ip[2:], benchIPLen)
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8] = 64
	ip[9] = 17 // UDP
	copy(ip[12:16], []byte{198, 18, 0, 1})
	copy(ip[16:20], []byte{198, 18, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))

	udp := b[ethHdrLen+ipv4HdrLen:]
	binary.BigEndian.PutUint16(udp[0:], roce.UDPPort)
	binary.BigEndian.PutUint16(udp[2:], roce.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], benchIPLen-ipv4HdrLen)
	for i := udpHdrLen; i < len(udp); i++ {
		udp[i] = 0xab
	}
	return b
}

func ipv4Checksum(hdr []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(hdr); i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(binary.BigEndian.Uint16(hdr[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
