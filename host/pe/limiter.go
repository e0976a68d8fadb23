package pe

import (
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// PortLimiter limits the tunnel with a switch port on the PE's WAN device
// (after the encapsulation there): its rate is the tunnel's, and its queue
// is the PE's buffer, whose marking (outer header, copied inside by the
// egress PE) reaches the senders end to end when the PE itself congests.
type PortLimiter struct{ Port *qdisc.Port }

var _ Limiter = PortLimiter{}

// SetRate changes the port's rate live (qdisc.Port.SetRate: the maps and
// one HTB class); queues and counters are kept.
func (l PortLimiter) SetRate(r units.Rate) error { return l.Port.SetRate(r) }
