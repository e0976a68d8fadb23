// Package npprobe measures a notification point on the wire: a tap on the
// NP's device (Tap: AF_PACKET with kernel timestamps) sees the CE-marked
// RoCEv2 data arrive and the CNPs leave, a Sender sends the data with the
// RoCEv2 codec, and Analyze pairs what the tap saw: CE in → CNP out latency
// and the spacing of each QP's CNPs. The netns tests and the bench share it.
//
// Where the stamps come from (Linux): an arriving frame is stamped when the
// device hands it to the stack (netif_rx, before any TC program), a leaving
// one when it is handed to the driver (dev_queue_xmit_nit, after the TC
// egress programs), both CLOCK_REALTIME. On a veth pair that is the wire.
package npprobe

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"time"

	"github.com/fabriclab/fabriclab/host/roce"
)

// Frame is one frame the tap saw.
type Frame struct {
	At   time.Time
	Out  bool // leaving the device (PACKET_OUTGOING), else arriving
	Data []byte
}

// Packet is a decoded RoCEv2 frame.
type Packet struct {
	At       time.Time
	Out      bool
	Src, Dst netip.AddrPort
	TOS      uint8 // IPv4 TOS / IPv6 traffic class
	BTH      roce.BTH
	// UDPPayload is the BTH through the ICRC.
	UDPPayload []byte
	Frame      []byte
}

// CE reports whether the packet arrived with ECN = CE.
func (p *Packet) CE() bool { return p.TOS&3 == 3 }

// IsCNP reports whether the packet is a CNP.
func (p *Packet) IsCNP() bool { return p.BTH.Opcode == roce.OpCNP }

const (
	ethLen      = 14
	etherIPv4   = 0x0800
	etherIPv6   = 0x86dd
	ipv4MinLen  = 20
	ipv6Len     = 40
	udpLen      = 8
	ipProtoUDP  = 17
	ipv4IHLMask = 0x0f
)

// Decode parses an untagged Ethernet / IPv4 or IPv6 / UDP 4791 / BTH frame.
func Decode(f Frame) (Packet, bool) {
	b := f.Data
	p := Packet{At: f.At, Out: f.Out, Frame: b}
	if len(b) < ethLen {
		return p, false
	}
	var l4 []byte
	switch binary.BigEndian.Uint16(b[12:]) {
	case etherIPv4:
		ip := b[ethLen:]
		if len(ip) < ipv4MinLen || ip[9] != ipProtoUDP {
			return p, false
		}
		ihl := int(ip[0]&ipv4IHLMask) * 4
		if ihl < ipv4MinLen || len(ip) < ihl+udpLen {
			return p, false
		}
		src, _ := netip.AddrFromSlice(ip[12:16])
		dst, _ := netip.AddrFromSlice(ip[16:20])
		p.TOS = ip[1]
		l4 = ip[ihl:]
		p.Src, p.Dst = netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4)), netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:]))
	case etherIPv6:
		ip := b[ethLen:]
		if len(ip) < ipv6Len+udpLen || ip[6] != ipProtoUDP {
			return p, false
		}
		src, _ := netip.AddrFromSlice(ip[8:24])
		dst, _ := netip.AddrFromSlice(ip[24:40])
		p.TOS = ip[0]<<4 | ip[1]>>4
		l4 = ip[ipv6Len:]
		p.Src, p.Dst = netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4)), netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:]))
	default:
		return p, false
	}
	if p.Dst.Port() != roce.UDPPort {
		return p, false
	}
	ulen := int(binary.BigEndian.Uint16(l4[4:]))
	if ulen < udpLen || ulen > len(l4) {
		return p, false
	}
	p.UDPPayload = l4[udpLen:ulen]
	var h roce.Header
	if _, err := roce.Parse(p.UDPPayload, &h); err != nil {
		return p, false
	}
	p.BTH = h.BTH
	return p, true
}

// Result is what Analyze found.
type Result struct {
	// CEIn counts the CE-marked packets that arrived for the QPs analysed,
	// CNPOut the CNPs that left for them.
	CEIn, CNPOut int
	// Latency holds, for each CNP, the time from the last CE packet of its
	// QP that arrived before it to the CNP leaving. It is the NP's reaction
	// time when every CE gets its own CNP (CEs spaced by more than N); with
	// coalescing, a held-back CNP's entry includes the hold.
	Latency []time.Duration
	// Spacing holds, per QP (the local QPN), the time between consecutive
	// CNPs leaving.
	Spacing map[uint32][]time.Duration
	// Unmatched counts CNPs with no CE of their QP before them.
	Unmatched int
}

// MinSpacing is the smallest spacing over all QPs, and false if no QP sent
// two CNPs.
func (r *Result) MinSpacing() (time.Duration, bool) {
	var m time.Duration
	ok := false
	for _, s := range r.Spacing {
		for _, d := range s {
			if !ok || d < m {
				m, ok = d, true
			}
		}
	}
	return m, ok
}

// Analyze pairs the arriving CE packets with the leaving CNPs. peerOf maps
// each analysed QP's local QPN (the data's DestQP) to its peer QPN (the
// CNP's DestQP); other packets are ignored. Packets are taken in time
// order.
func Analyze(pkts []Packet, peerOf map[uint32]uint32) Result {
	localOf := make(map[uint32]uint32, len(peerOf))
	for l, p := range peerOf {
		localOf[p] = l
	}
	sorted := slices.Clone(pkts)
	slices.SortStableFunc(sorted, func(a, b Packet) int { return a.At.Compare(b.At) })
	r := Result{Spacing: map[uint32][]time.Duration{}}
	lastCE := map[uint32]time.Time{}
	lastCNP := map[uint32]time.Time{}
	for i := range sorted {
		p := &sorted[i]
		switch {
		case !p.Out && p.CE() && !p.IsCNP():
			if _, ok := peerOf[p.BTH.DestQP]; ok {
				r.CEIn++
				lastCE[p.BTH.DestQP] = p.At
			}
		case p.Out && p.IsCNP():
			local, ok := localOf[p.BTH.DestQP]
			if !ok {
				continue
			}
			r.CNPOut++
			if ce, ok := lastCE[local]; ok {
				r.Latency = append(r.Latency, p.At.Sub(ce))
			} else {
				r.Unmatched++
			}
			if prev, ok := lastCNP[local]; ok {
				r.Spacing[local] = append(r.Spacing[local], p.At.Sub(prev))
			}
			lastCNP[local] = p.At
		}
	}
	return r
}

// Percentile is the nearest-rank p-quantile (0 < p <= 1) of ds, 0 if empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
