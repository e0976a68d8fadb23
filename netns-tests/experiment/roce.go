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
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/netns-tests/internal/rocelab"
)

// roceLongMsg is a long flow's WRITE size.
const roceLongMsg = 64 << 10

// startRoCE starts an agent in every sender and in the receiver for one
// scheme's run, their held time logged to m, under the RoCE tests'
// profile: the paper's DCQCN, its timers scaled to RTTs of milliseconds,
// on the fabric at -rate, slowed by -timescale. inflight is the fabric's
// in-flight time of a QP.
func (e *experiment) startRoCE(m *hostlost.Meter, inflight time.Duration) error {
	hs, err := rocelab.New(e.lab.Senders, e.lab.SenderAddrs, e.lab.Receiver, e.lab.ReceiverAddr, dcqcn.LabParams(e.o.rate), inflight,
		rocelab.Options{Timescale: e.o.timescale, Held: e.heldLog(m)})
	if err != nil {
		return err
	}
	e.roce = hs
	return nil
}

// heldLog gives each agent its held-time log. A sender's packets reach
// the port its delay link later; the receiver's replies go back at once
// and release the next packets of every sender, which reach the port
// the least delay later.
func (e *experiment) heldLog(m *hostlost.Meter) func(i int) *hostlost.Log {
	delays := e.o.wireDelays()
	return func(i int) *hostlost.Log {
		if i < 0 {
			return m.HeldVia(slices.Min(delays))
		}
		return m.HeldVia(delays[i])
	}
}

// stopRoCE closes the scheme's agents.
func (e *experiment) stopRoCE() error {
	if e.roce == nil {
		return nil
	}
	err := e.roce.Close()
	e.roce = nil
	if err != nil {
		return fmt.Errorf("close the agents: %w", err)
	}
	return nil
}

// roceLong are the long flows of one scheme run.
type roceLong struct {
	pairs   []*rocelab.Pair
	senders []string
}

func (e *experiment) startRoCELong() (*roceLong, error) {
	lf := &roceLong{}
	for i, n := range e.lab.Senders {
		for range e.o.longPerSender {
			p, err := e.roce.Pair(i)
			if err != nil {
				lf.stop()
				return nil, fmt.Errorf("long flow from %s: %w", n.Name, err)
			}
			lf.pairs, lf.senders = append(lf.pairs, p), append(lf.senders, n.Name)
			if err := p.S.Start(agent.Stream{Op: agent.OpWrite, MessageBytes: roceLongMsg}); err != nil {
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
		acked, _ := p.S.Progress()
		c := p.S.Counters()
		out[i] = tcpSnap{At: now, BytesAcked: acked * rocelab.MTU, TotalRetrans: c.RetransmitPackets, ECN: true, Congestion: "dcqcn"}
		if cc, ok := p.S.CC(); ok {
			out[i].Rc = uint64(cc.Rc)
		}
	}
	return out
}

// err is the first long flow's error.
func (lf *roceLong) err() error {
	for i, p := range lf.pairs {
		if err := p.S.Err(); err != nil {
			return fmt.Errorf("long flow %d from %s: %w", i+1, lf.senders[i], err)
		}
	}
	return nil
}

// stop ends the streams and frees the queue pairs: what is still unsent
// is dropped with them, not sent into the next scheme.
func (lf *roceLong) stop() {
	for _, p := range lf.pairs {
		p.Destroy()
	}
	lf.pairs = nil
}

// roceShortFlows is shortFlows for RoCE: node i's short messages one at a
// time until end, each on a queue pair of its own.
func (e *experiment) roceShortFlows(ctx context.Context, i int, end time.Time, sizes []int, gaps []time.Duration) ([]flowSpan, int) {
	var fcts []flowSpan
	failed := 0
	for k := range sizes {
		sleepCtx(ctx, e.o.wire(gaps[k]))
		if ctx.Err() != nil || !time.Now().Before(end) {
			break
		}
		p, err := e.roce.Pair(i)
		if err != nil {
			failed++
			continue
		}
		from := hostlost.Now()
		fct, err := p.Message(ctx, sizes[k], e.o.wire(shortTimeout))
		p.Destroy()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failed++
			continue
		}
		fcts = append(fcts, flowSpan{FCT: fct, From: from, To: hostlost.Now()})
	}
	return fcts, failed
}

// roceQueryRound is queryRound for RoCE: a queue pair per query, connected
// first, then every WRITE posted at once.
func (e *experiment) roceQueryRound(ctx context.Context, sizes []int) ([]time.Duration, int, error) {
	pairs := make([]*rocelab.Pair, len(sizes))
	defer func() {
		for _, p := range pairs {
			if p != nil {
				p.Destroy()
			}
		}
	}()
	for i := range sizes {
		p, err := e.roce.Pair(i % len(e.lab.Senders))
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
			fcts[i], errs[i] = pairs[i].Message(ctx, n, e.o.wire(shortTimeout))
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
