package pktio

import "github.com/fabriclab/fabriclab/qdisc/enum"

// SendPath says how a RoCEConn or EntropyConn sends.
type SendPath int

const (
	// SendAuto sends runs of datagrams from one source port with UDP GSO
	// through a UDP socket bound to that port, and the rest through the
	// raw socket; GSO turns itself off for the conn if the kernel refuses
	// it.
	SendAuto SendPath = iota
	// SendRaw sends every datagram through the raw socket, as before GSO:
	// for a port on the sending host's own device, which would see a GSO
	// send as one packet, and for comparison.
	SendRaw
)

var sendPathNames = enum.Names{SendAuto: {"auto", ""}, SendRaw: {"raw"}}

func (p SendPath) String() string { return enum.String(p, sendPathNames, "SendPath") }

// ParseSendPath parses "auto" (or "") or "raw".
func ParseSendPath(s string) (SendPath, error) {
	return enum.Parse[SendPath](s, sendPathNames, "pktio: send path")
}
