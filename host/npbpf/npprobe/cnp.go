package npprobe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/fabriclab/fabriclab/host/roce"
)

// CNPSpec is what the CNP answering a data packet must carry
// (roce-wire.md §CNP): it goes from the QP's local address and source port
// to its peer's address and UDP 4791, DSCP << 2 | ECT(0), with the data
// packet's Ethernet addresses swapped.
type CNPSpec struct {
	Local, Peer netip.Addr
	SrcPort     uint16
	PeerQPN     uint32
	PKey        uint16
	DSCP        uint8
	// DataSrc and DataDst are the data packet's Ethernet source and
	// destination.
	DataSrc, DataDst net.HardwareAddr
}

const (
	ecnECT0 = 2
	cnpTTL  = 64
)

// Frame builds the CNP frame with gopacket and host/roce: an oracle that
// shares no code with the BPF program. IPv4: ID 0, DF, TTL 64, UDP
// checksum 0 (as rxe sends); IPv6: flow label 0, hop limit 64, UDP
// checksum computed (RFC 8200 forbids 0).
func (s CNPSpec) Frame() ([]byte, error) {
	local, peer := s.Local.Unmap(), s.Peer.Unmap()
	payload := make([]byte, roce.PacketLen(roce.OpCNP, 0))
	h := roce.CNPHeader(s.PeerQPN, s.PKey)
	if roce.Build(payload, &h, nil) != len(payload) {
		return nil, errors.New("npprobe: roce.Build CNP failed")
	}
	roce.SealICRC(netip.AddrPortFrom(local, s.SrcPort), netip.AddrPortFrom(peer, roce.UDPPort), payload)

	eth := &layers.Ethernet{SrcMAC: s.DataDst, DstMAC: s.DataSrc}
	udp := &layers.UDP{SrcPort: layers.UDPPort(s.SrcPort), DstPort: roce.UDPPort}
	var ip gopacket.SerializableLayer
	tos := s.DSCP<<2 | ecnECT0
	if local.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, TOS: tos, Flags: layers.IPv4DontFragment, TTL: cnpTTL,
			Protocol: layers.IPProtocolUDP, SrcIP: local.AsSlice(), DstIP: peer.AsSlice()}
		_ = udp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, TrafficClass: tos, NextHeader: layers.IPProtocolUDP, HopLimit: cnpTTL,
			SrcIP: local.AsSlice(), DstIP: peer.AsSlice()}
		_ = udp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, gopacket.Payload(payload)); err != nil {
		return nil, fmt.Errorf("npprobe: serialize CNP: %w", err)
	}
	b := buf.Bytes()
	if local.Is4() {
		b[ethLen+ipv4MinLen+6], b[ethLen+ipv4MinLen+7] = 0, 0
	}
	return b, nil
}

// CheckCNP compares frame with the CNP s describes, byte for byte, and
// checks its ICRC with host/roce. The error says what differs.
func CheckCNP(frame []byte, s CNPSpec) error {
	want, err := s.Frame()
	if err != nil {
		return err
	}
	p, ok := Decode(Frame{Data: frame})
	if !ok {
		return fmt.Errorf("not a RoCEv2 frame: %x", frame)
	}
	if !roce.VerifyICRC(p.Src, p.Dst, p.UDPPayload) {
		return fmt.Errorf("ICRC does not verify: %x", frame)
	}
	if icrc, err := roce.ICRCFromIP(frame[ethLen:]); err != nil || icrc != binary.LittleEndian.Uint32(frame[len(frame)-roce.ICRCLen:]) {
		return fmt.Errorf("roce.ICRCFromIP: %#x, %v", icrc, err)
	}
	if !bytes.Equal(frame, want) {
		return fmt.Errorf("CNP differs from the reference\n got %x\nwant %x", frame, want)
	}
	return nil
}
