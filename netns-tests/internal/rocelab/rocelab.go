//go:build linux

// Package rocelab runs RoCEv2 hosts in lab nodes for the experiments
// (netns-tests/experiment): an agent (host/agent) on
// UDP 4791 in each node with the kernel RP (rpbpf) on its devices, and
// connected RC queue pairs from a sender to the receiver under DCQCN,
// whose WRITEs are timed from the post to the ACK (a NIC's completion).
package rocelab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

const (
	// MTU is the payload per packet: frames under the links' 1500 (and
	// under the WAN tunnel's 1480).
	MTU = 1024
	// maxBurst is the packets the pacer sends back to back.
	maxBurst = 2
	// ackTimeout is IB local ACK timeout 16 (268 ms) on the fabric: a
	// lossless run resends nothing, and a sender starved of CPU must not
	// either.
	ackTimeout = 4096 * time.Nanosecond << 16
)

// Host is a node's agent: UDP 4791, the kernel RP on its devices.
type Host struct {
	Node  *lab.Node
	Addr  netip.Addr
	Agent *agent.Agent
	host  *agent.Host
}

// NewHost starts an agent in n, which is reached at addr; held, if not
// nil, gets the time its QPs were held (agent.Config.Held).
func NewHost(n *lab.Node, addr netip.Addr, held *hostlost.Log) (*Host, error) {
	h := &Host{Node: n, Addr: addr}
	err := n.Do(func() (err error) {
		h.host, err = agent.OpenHost(agent.HostConfig{NP: agent.OffloadAgent, RP: agent.OffloadKernel, Agent: agent.Config{Held: held}})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("agent in %s: %w", n.Name, err)
	}
	h.Agent = h.host.Agent
	return h, nil
}

// Close stops the agent and detaches the RP.
func (h *Host) Close() error { return h.host.Close() }

// endpoint is where the host's QP q receives.
func (h *Host) endpoint(q *agent.QP) agent.Endpoint {
	ep := q.Endpoint()
	ep.Addr = netip.AddrPortFrom(h.Addr, h.host.Conn.LocalAddr().Port())
	return ep
}

// Hosts are the agents of a run: senders and one receiver, and the DCQCN
// their sending QPs run.
type Hosts struct {
	Senders []*Host
	Recv    *Host
	// Params and Inflight are the fabric's (Options.Timescale slows
	// them): the DCQCN of the sending QPs, and the bound of a QP's
	// unacknowledged bytes, Rc times Inflight (agent.QPConfig.InflightTime).
	Params   dcqcn.Params
	Inflight time.Duration
	opts     Options
}

// Options are the optional settings of New.
type Options struct {
	// Timescale slows the fabric (units.Timescale): every QP's
	// configuration is slowed by it (agent.QPConfig.Slowed). Optional:
	// none.
	Timescale units.Timescale
	// Held, if not nil, gives each agent its held-time log: sender i's,
	// and the receiver's for i = -1 (hostlost.Meter.HeldVia, with the
	// delay from that host to the ports). Optional: not measured.
	Held func(i int) *hostlost.Log
}

// New starts an agent in every sender and in the receiver. On error it
// closes what it started.
func New(senders []*lab.Node, senderAddrs []netip.Addr, recv *lab.Node, recvAddr netip.Addr, p dcqcn.Params, inflight time.Duration, opts Options) (*Hosts, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := opts.Timescale.Validate(); err != nil {
		return nil, err
	}
	hs := &Hosts{Params: p, Inflight: inflight, opts: opts}
	held := func(i int) *hostlost.Log {
		if opts.Held == nil {
			return nil
		}
		return opts.Held(i)
	}
	var err error
	if hs.Recv, err = NewHost(recv, recvAddr, held(-1)); err != nil {
		return nil, err
	}
	for i, n := range senders {
		h, err := NewHost(n, senderAddrs[i], held(i))
		if err != nil {
			return nil, errors.Join(err, hs.Close())
		}
		hs.Senders = append(hs.Senders, h)
	}
	return hs, nil
}

// Close stops every agent.
func (hs *Hosts) Close() error {
	var errs []error
	for _, h := range append(hs.Senders, hs.Recv) {
		if h != nil {
			errs = append(errs, h.Close())
		}
	}
	return errors.Join(errs...)
}

// Pair is one connected RC queue pair from a sender to the receiver: the
// sender's QP under DCQCN (S), the receiver's its notification point (R).
type Pair struct {
	S, R *agent.QP
}

// Pair connects a queue pair from sender i to the receiver.
func (hs *Hosts) Pair(i int) (*Pair, error) {
	h := hs.Senders[i]
	scfg := agent.DefaultQPConfig()
	scfg.MTU = MTU
	scfg.CC = agent.CCDCQCN
	scfg.DCQCN = hs.Params
	scfg.CNPPeriod, scfg.CNPDSCP = hs.Params.MinTimeBetweenCNPs, hs.Params.CNPDSCP
	scfg.MaxBurst = maxBurst
	scfg.InflightTime = hs.Inflight
	scfg.AckTimeout = ackTimeout
	rcfg := scfg
	rcfg.CC = agent.CCNone
	scfg, rcfg = scfg.Slowed(hs.opts.Timescale), rcfg.Slowed(hs.opts.Timescale)
	s, err := h.Agent.CreateQP(scfg)
	if err != nil {
		return nil, err
	}
	r, err := hs.Recv.Agent.CreateQP(rcfg)
	if err != nil {
		s.Destroy()
		return nil, err
	}
	sep, rep := h.endpoint(s), hs.Recv.endpoint(r)
	if err := errors.Join(s.Connect(sep.Addr, rep), r.Connect(rep.Addr, sep)); err != nil {
		s.Destroy()
		r.Destroy()
		return nil, err
	}
	return &Pair{s, r}, nil
}

// Destroy frees both QPs; what is unsent is dropped with them.
func (p *Pair) Destroy() {
	p.S.Destroy()
	p.R.Destroy()
}

// Message posts one WRITE of n bytes and waits (at most timeout) for its
// acknowledgement: the flow completion time.
func (p *Pair) Message(ctx context.Context, n int, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	if err := p.S.Start(agent.Stream{Op: agent.OpWrite, MessageBytes: n, Messages: 1}); err != nil {
		return 0, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.S.Done():
		if err := p.S.Err(); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	case <-t.C:
		return 0, fmt.Errorf("message of %d bytes not acknowledged within %v", n, timeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
