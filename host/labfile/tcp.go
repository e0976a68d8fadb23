//go:build linux

package labfile

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/tcpflow"
)

// A tcp flow is one kernel connection (host/tcpflow): its time is from
// the connection's first write to the server's count of what it read, for
// a sized flow its FCT.

// TCPPlan is a tcp flow's connection.
type TCPPlan struct {
	Server netip.AddrPort
	Bind   netip.Addr
	// CC is the congestion control as the file names it (dctcp maps to
	// the run's registration where the kernel has none).
	CC   string
	DSCP int
	// Size, or Duration for a timed flow.
	Size       uint64
	Duration   time.Duration
	WriteBytes int
}

// Conn is the connection as tcpflow runs it: cc is the kernel's name of
// the congestion control and size, the instance's.
func (tp *TCPPlan) Conn(cc string, size uint64) tcpflow.Conn {
	return tcpflow.Conn{Server: tp.Server, Bind: tp.Bind, CC: cc, DSCP: tp.DSCP,
		Size: size, Duration: tp.Duration, WriteBytes: tp.WriteBytes}
}

// resolveTCP maps every tcp flow's congestion control to the kernel's
// name (tcpflow.CCs: dctcp is the BPF DCTCP, registered for the run,
// where the kernel has none; closed by teardown).
func (r *runner) resolveTCP() error {
	r.tcpCC = map[string]string{}
	for _, fp := range r.p.Flows {
		if fp.TCP == nil {
			continue
		}
		cc := fp.TCP.CC
		if _, done := r.tcpCC[cc]; done {
			continue
		}
		name, registered, err := r.tcpCCs.Resolve(cc)
		if err != nil {
			return fmt.Errorf("flow %s: %w", fp.Flow.Name, err)
		}
		if registered {
			r.log.Info("tcp: BPF DCTCP registered", "name", name)
		}
		r.tcpCC[cc] = name
	}
	return nil
}

// listenTCP opens a tcp server on node at addr with the congestion
// control cc (the receiver's ACKs follow it: DCTCP's ECE echo).
func listenTCP(node *lab.Node, addr netip.AddrPort, cc string) (*tcpflow.Server, error) {
	return tcpflow.Listen(node.Do, addr, cc)
}

// runTCP runs one tcp flow from node with the kernel congestion control
// cc; progress counts the bytes written as they go.
func runTCP(ctx context.Context, node *lab.Node, tp *TCPPlan, cc string, size uint64, progress *atomic.Uint64) (tcpflow.Report, error) {
	return tcpflow.Run(ctx, node.Do, tp.Conn(cc, size), progress)
}
