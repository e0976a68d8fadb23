package pktio

import "fmt"

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

func (p SendPath) String() string {
	switch p {
	case SendAuto:
		return "auto"
	case SendRaw:
		return "raw"
	}
	return fmt.Sprintf("SendPath(%d)", int(p))
}

// ParseSendPath parses "auto" or "raw".
func ParseSendPath(s string) (SendPath, error) {
	switch s {
	case "auto", "":
		return SendAuto, nil
	case "raw":
		return SendRaw, nil
	}
	return 0, fmt.Errorf("pktio: send path %q: want auto or raw", s)
}
