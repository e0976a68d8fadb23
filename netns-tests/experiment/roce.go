//go:build linux

package main

// The RoCEv2 transport of the experiment (issue 12 §3, seed 002 §3.5 and
// §5.4 "ECN♯ + DCQCN"): the same lab, the same schemes, with RC queue
// pairs of the host agent under DCQCN instead of TCP flows. Long flows are
// QPs that post 64 KiB WRITEs until stopped; a short flow is one WRITE of
// 3-60 KB on a queue pair of its own, timed from the post to its ACK (a
// NIC's completion); an incast round posts one WRITE on each of a set of
// queue pairs at once.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/rpbpf"
)

const (
	roceMTU      = 1024     // payload per packet: frames under the links' 1500
	roceLongMsg  = 64 << 10 // a long flow's WRITEs
	roceMaxBurst = 2        // packets the pacer sends back to back
	// roceAckTimeout is IB local ACK timeout 16 (268 ms): a lossless run
	// resends nothing, and a sender starved of CPU must not either.
	roceAckTimeout = 4096 * time.Nanosecond << 16
)

// roceHost is a node's agent: UDP 4791, the kernel RP on its devices.
type roceHost struct {
	node *lab.Node
	addr netip.Addr
	a    *agent.Agent
	conn *pktio.RoCEConn
	rp   *rpbpf.RP
}

// roceLab is the agents of a RoCE run and the DCQCN they run.
type roceLab struct {
	senders []*roceHost
	recv    *roceHost
	params  dcqcn.Params
	// inflight bounds a QP's unacknowledged bytes to Rc times this:
	// the base RTT plus the port's K_tail drain time.
	inflight time.Duration
}

func newRoCEHost(n *lab.Node, addr netip.Addr) (*roceHost, error) {
	h := &roceHost{node: n, addr: addr}
	err := n.Do(func() (err error) {
		if h.conn, err = pktio.ListenRoCE(netip.AddrPortFrom(netip.IPv4Unspecified(), roce.UDPPort), pktio.RoCEOptions{}); err != nil {
			return err
		}
		devs, err := npbpf.LocalDevices(netip.Addr{})
		if err != nil {
			return err
		}
		h.rp, err = rpbpf.Attach(netns.None(), devs)
		return err
	})
	if err == nil {
		h.a, err = agent.New(agent.Config{Conn: h.conn, RPOffload: h.rp})
	}
	if err != nil {
		h.close()
		return nil, fmt.Errorf("agent in %s: %w", n.Name, err)
	}
	return h, nil
}

func (h *roceHost) close() error {
	var errs []error
	if h.a != nil {
		errs = append(errs, h.a.Close())
	} else if h.conn != nil {
		errs = append(errs, h.conn.Close())
	}
	if h.rp != nil {
		errs = append(errs, h.rp.Close())
	}
	return errors.Join(errs...)
}

// endpoint is where the host's QP q receives.
func (h *roceHost) endpoint(q *agent.QP) agent.Endpoint {
	ep := q.Endpoint()
	ep.Addr = netip.AddrPortFrom(h.addr, h.conn.LocalAddr().Port())
	return ep
}

// setupRoCE starts an agent in every sender and in the receiver.
func (e *experiment) setupRoCE(inflight time.Duration) error {
	// The RoCE tests' profile: the paper's, its timers scaled to RTTs of
	// milliseconds.
	p := dcqcn.LabParams(e.o.rate)
	if err := p.Validate(); err != nil {
		return err
	}
	rl := &roceLab{params: p, inflight: inflight}
	e.roce = rl
	var err error
	if rl.recv, err = newRoCEHost(e.lab.Receiver, e.lab.ReceiverAddr); err != nil {
		return err
	}
	for i, n := range e.lab.Senders {
		h, err := newRoCEHost(n, e.lab.SenderAddrs[i])
		if err != nil {
			return err
		}
		rl.senders = append(rl.senders, h)
	}
	return nil
}

func (rl *roceLab) close() error {
	var errs []error
	for _, h := range append(rl.senders, rl.recv) {
		if h != nil {
			errs = append(errs, h.close())
		}
	}
	return errors.Join(errs...)
}

// qpPair is one connected RC queue pair from sender i to the receiver:
// the sender's QP under DCQCN, the receiver's its notification point.
type qpPair struct {
	s, r *agent.QP
}

func (rl *roceLab) pair(i int) (*qpPair, error) {
	h := rl.senders[i]
	scfg := agent.DefaultQPConfig()
	scfg.MTU = roceMTU
	scfg.CC = agent.CCDCQCN
	scfg.DCQCN = rl.params
	scfg.CNPPeriod, scfg.CNPDSCP = rl.params.MinTimeBetweenCNPs, rl.params.CNPDSCP
	scfg.MaxBurst = roceMaxBurst
	scfg.InflightTime = rl.inflight
	scfg.AckTimeout = roceAckTimeout
	rcfg := scfg
	rcfg.CC = agent.CCNone
	s, err := h.a.CreateQP(scfg)
	if err != nil {
		return nil, err
	}
	r, err := rl.recv.a.CreateQP(rcfg)
	if err != nil {
		s.Destroy()
		return nil, err
	}
	sep, rep := h.endpoint(s), rl.recv.endpoint(r)
	if err := errors.Join(s.Connect(sep.Addr, rep), r.Connect(rep.Addr, sep)); err != nil {
		s.Destroy()
		r.Destroy()
		return nil, err
	}
	return &qpPair{s, r}, nil
}

func (p *qpPair) destroy() {
	p.s.Destroy()
	p.r.Destroy()
}

// message posts one WRITE of n bytes and waits (at most timeout) for its
// acknowledgement: the flow completion time.
func (p *qpPair) message(ctx context.Context, n int, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	if err := p.s.Start(agent.Stream{Op: agent.OpWrite, MessageBytes: n, Messages: 1}); err != nil {
		return 0, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.s.Done():
		if err := p.s.Err(); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	case <-t.C:
		return 0, fmt.Errorf("message of %d bytes not acknowledged within %v", n, timeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// roceLong are the long flows of one scheme run.
type roceLong struct {
	pairs   []*qpPair
	senders []string
}

func (e *experiment) startRoCELong() (*roceLong, error) {
	lf := &roceLong{}
	for i, n := range e.lab.Senders {
		for range e.o.longPerSender {
			p, err := e.roce.pair(i)
			if err != nil {
				lf.stop()
				return nil, fmt.Errorf("long flow from %s: %w", n.Name, err)
			}
			lf.pairs, lf.senders = append(lf.pairs, p), append(lf.senders, n.Name)
			if err := p.s.Start(agent.Stream{Op: agent.OpWrite, MessageBytes: roceLongMsg}); err != nil {
				lf.stop()
				return nil, fmt.Errorf("long flow from %s: %w", n.Name, err)
			}
		}
	}
	return lf, nil
}

// info is what the tool reads of each long flow: the payload acknowledged
// so far (the QP's in-order acknowledged packets, all full at 64 KiB
// messages), its counters, and whether it failed.
func (lf *roceLong) info() []tcpSnap {
	out := make([]tcpSnap, len(lf.pairs))
	now := time.Now()
	for i, p := range lf.pairs {
		acked, _ := p.s.Progress()
		c := p.s.Counters()
		out[i] = tcpSnap{At: now, BytesAcked: acked * roceMTU, TotalRetrans: c.RetransmitPackets, ECN: true, Congestion: "dcqcn"}
		if cc, ok := p.s.CC(); ok {
			out[i].Rc = uint64(cc.Rc)
		}
	}
	return out
}

// err is the first long flow's error.
func (lf *roceLong) err() error {
	for i, p := range lf.pairs {
		if err := p.s.Err(); err != nil {
			return fmt.Errorf("long flow %d from %s: %w", i+1, lf.senders[i], err)
		}
	}
	return nil
}

// stop ends the streams and frees the queue pairs: what is still unsent
// is dropped with them, not sent into the next scheme.
func (lf *roceLong) stop() {
	for _, p := range lf.pairs {
		p.destroy()
	}
	lf.pairs = nil
}

// roceShortFlows is shortFlows for RoCE: node i's short messages one at a
// time until end, each on a queue pair of its own.
func (e *experiment) roceShortFlows(ctx context.Context, i int, end time.Time, sizes []int, gaps []time.Duration) ([]time.Duration, int) {
	var fcts []time.Duration
	failed := 0
	for k := range sizes {
		sleepCtx(ctx, gaps[k])
		if ctx.Err() != nil || !time.Now().Before(end) {
			break
		}
		p, err := e.roce.pair(i)
		if err != nil {
			failed++
			continue
		}
		fct, err := p.message(ctx, sizes[k], shortTimeout)
		p.destroy()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failed++
			continue
		}
		fcts = append(fcts, fct)
	}
	return fcts, failed
}

// roceQueryRound is queryRound for RoCE: a queue pair per query, connected
// first, then every WRITE posted at once.
func (e *experiment) roceQueryRound(ctx context.Context, sizes []int) ([]time.Duration, int, error) {
	pairs := make([]*qpPair, len(sizes))
	defer func() {
		for _, p := range pairs {
			if p != nil {
				p.destroy()
			}
		}
	}()
	for i := range sizes {
		p, err := e.roce.pair(i % len(e.lab.Senders))
		if err != nil {
			return nil, 0, fmt.Errorf("incast query %d: %w", i, err)
		}
		pairs[i] = p
	}
	fcts := make([]time.Duration, len(sizes))
	errs := make([]error, len(sizes))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, n := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fcts[i], errs[i] = pairs[i].message(ctx, n, shortTimeout)
		}()
	}
	close(start)
	wg.Wait()
	var out []time.Duration
	failed := 0
	for i := range sizes {
		if errs[i] != nil {
			failed++
			continue
		}
		out = append(out, fcts[i])
	}
	return out, failed, nil
}
