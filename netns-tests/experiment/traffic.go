//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/stats"
)

const (
	dialTimeout = 3 * time.Second // the host's, not the fabric's
	// shortTimeout is the fabric's: a short flow that takes longer failed.
	shortTimeout = 2 * time.Second
)

// runScheme configures class 3 for s, starts the long flows, lets them
// leave slow start, then measures: the backlog every sampleEvery, the class
// counters and TCP_INFO at the window's edges, and the short flows started
// inside it; then, the long flows still running, the incast rounds
// (incastPhase). It stops the long flows and waits for the queue to drain.
// A host-lost meter (host/hostlost) runs from the long flows' start to
// their stop: the port's idle and held-back time in class 3, and with
// -transport roce the agents' held time.
func (e *experiment) runScheme(ctx context.Context, s Scheme, sizes [][]int, gaps [][]time.Duration, incast [][]int) (res Result, err error) {
	o := e.o
	cc, err := s.classConfig("roce")
	if err != nil {
		return Result{}, err
	}
	cfg := e.cfg
	cfg.Classes[class] = cc
	if err := e.port.Configure(cfg.Slowed(o.timescale)); err != nil {
		return Result{}, fmt.Errorf("configure class %d: %w", class, err)
	}
	if err := e.drain(ctx); err != nil {
		return Result{}, err
	}

	m, err := hostlost.NewMeter(hostlost.MeterConfig{})
	if err != nil {
		return Result{}, err
	}
	stopFeed, err := lab.MeterPort(m, "bottleneck", e.port, class)
	if err != nil {
		return Result{}, err
	}
	// On an early return: the feed before the meter, the meter before the
	// agents go.
	defer func() {
		err = errors.Join(err, stopFeed())
		m.Stop()
		err = errors.Join(err, e.stopRoCE())
	}()
	if o.transport == transportRoCE {
		if err := e.startRoCE(m, e.roceInflight); err != nil {
			return Result{}, err
		}
	}

	// Everything of this scheme stops when it returns, or on any error.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := m.Start(); err != nil {
		return Result{}, err
	}
	lf, err := e.startLongFlows(sctx, o.perScheme()+10*time.Second)
	if err != nil {
		return Result{}, err
	}
	defer lf.stop()

	sleepCtx(sctx, o.wire(o.warmup))
	if err := sctx.Err(); err != nil {
		return Result{}, errors.Join(err, lf.firstErr())
	}
	w := &window{SampleEvery: o.sampleEvery, LongSenders: lf.senderNames(), Timescale: o.timescale}
	st, err := e.port.Stats()
	if err != nil {
		return Result{}, err
	}
	w.Start, w.StartT, w.StartMono = st.Classes[class], st.Time, hostlost.Now()
	if w.LongA, err = lf.info(); err != nil {
		return Result{}, err
	}
	end := w.StartT.Add(o.wire(o.measure))

	var meas group
	meas.cancel = cancel
	// On an early return the sampler and the short flows stop with sctx
	// and are waited for (a second Wait is harmless).
	defer func() {
		cancel()
		_ = meas.Wait()
	}()
	meas.Go(func() error {
		var err error
		w.Backlog, err = e.sampleBacklog(sctx, end)
		return err
	})
	spans := make([][]flowSpan, len(e.lab.Senders))
	var failedMu sync.Mutex
	for i, node := range e.lab.Senders {
		meas.Go(func() error {
			var f []flowSpan
			var failed int
			if e.roce != nil {
				f, failed = e.roceShortFlows(sctx, i, end, sizes[i], gaps[i])
			} else {
				f, failed = e.shortFlows(sctx, node, end, sizes[i], gaps[i])
			}
			spans[i] = f
			failedMu.Lock()
			w.ShortFailed += failed
			failedMu.Unlock()
			return nil
		})
	}
	sleepCtx(sctx, time.Until(end))
	if err := sctx.Err(); err != nil {
		cancel()
		return Result{}, errors.Join(err, meas.Wait(), lf.firstErr())
	}
	st, err = e.port.Stats()
	if err != nil {
		return Result{}, err
	}
	w.End, w.EndT, w.EndMono = st.Classes[class], st.Time, hostlost.Now()
	if w.LongB, err = lf.info(); err != nil {
		return Result{}, err
	}
	// The short flows still in flight finish (bounded by shortTimeout).
	if err := meas.Wait(); err != nil {
		return Result{}, err
	}
	if err := lf.firstErr(); err != nil {
		return Result{}, err
	}
	var rounds []flowSpan
	if len(incast) > 0 {
		if w.Incast, rounds, err = e.incastPhase(sctx, incast); err != nil {
			return Result{}, fmt.Errorf("incast: %w", err)
		}
	}
	lf.stop()
	// The traffic's end: the port's feed first, so that the meter has
	// every idle period.
	if err := stopFeed(); err != nil {
		return Result{}, fmt.Errorf("host-lost meter: %w", err)
	}
	host := m.Stop()
	w.Host = &host
	w.Starved = host.StarvedBetween(w.StartMono, w.EndMono)
	for _, f := range spans {
		fcts, starved := make([]time.Duration, len(f)), make([]time.Duration, len(f))
		for j, sp := range f {
			fcts[j], starved[j] = sp.FCT, host.StarvedBetween(sp.From, sp.To)
		}
		w.FCTs, w.FCTStarved = append(w.FCTs, fcts), append(w.FCTStarved, starved)
	}
	if len(rounds) > 0 {
		qct, starved := make([]time.Duration, len(rounds)), make([]time.Duration, len(rounds))
		for j, r := range rounds {
			qct[j], starved[j] = r.FCT, host.StarvedBetween(r.From, r.To)
		}
		w.Incast.QCTNetUs = stats.Summarize(netUs(qct, starved, o.timescale))
	}
	if err := e.drain(ctx); err != nil {
		return Result{}, err
	}
	return buildResult(s, o.rate, w), nil
}

// flowSpan is a flow's (or an incast round's) completion time and when it
// ran, on CLOCK_MONOTONIC (hostlost.Now): the host-lost meter's clock.
type flowSpan struct {
	FCT      time.Duration
	From, To time.Duration
}

// drain waits (at most -cooldown) for class 3 to empty.
func (e *experiment) drain(ctx context.Context) error {
	deadline := time.Now().Add(e.o.cooldown)
	for {
		b, _, err := e.port.Backlog(class)
		if err != nil {
			return err
		}
		if b == 0 || !time.Now().Before(deadline) {
			return ctx.Err()
		}
		sleepCtx(ctx, 10*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// sampleBacklog reads class 3's backlog every sampleEvery (of the
// fabric's time) until end.
func (e *experiment) sampleBacklog(ctx context.Context, end time.Time) ([]uint64, error) {
	every := e.o.wire(e.o.sampleEvery)
	n := int(time.Until(end)/every) + 1
	out := make([]uint64, 0, n)
	t := time.NewTicker(every)
	defer t.Stop()
	for len(out) < n {
		select {
		case <-ctx.Done():
			return out, nil
		case now := <-t.C:
			if now.After(end) {
				return out, nil
			}
			b, _, err := e.port.Backlog(class)
			if err != nil {
				return out, err
			}
			out = append(out, b)
		}
	}
	return out, nil
}

// longFlows are the long TCP flows of one scheme: each writes as fast as
// the connection takes until stopped or until its deadline.
type longFlows struct {
	conns   []*net.TCPConn
	senders []string
	g       group
	once    sync.Once
}

func (e *experiment) startLong(ctx context.Context, life time.Duration) (*longFlows, error) {
	lf := &longFlows{}
	addr := fmt.Sprintf("%s:%d", e.lab.ReceiverAddr, longPort)
	deadline := time.Now().Add(life)
	for _, node := range e.lab.Senders {
		for range e.o.longPerSender {
			c, err := dialTCP(ctx, node, addr, e.cc, dialTimeout)
			if err != nil {
				lf.stop()
				return nil, fmt.Errorf("long flow from %s: %w", node.Name, err)
			}
			_ = c.SetWriteDeadline(deadline)
			lf.conns = append(lf.conns, c)
			lf.senders = append(lf.senders, node.Name)
		}
	}
	for i, c := range lf.conns {
		lf.g.Go(func() error {
			buf := make([]byte, 128<<10)
			for ctx.Err() == nil {
				if _, err := c.Write(buf); err != nil {
					if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
						return nil
					}
					return fmt.Errorf("long flow %d from %s: %w", i+1, lf.senders[i], err)
				}
			}
			return nil
		})
	}
	return lf, nil
}

// longSet is the long flows of a scheme run, of either transport.
type longSet interface {
	info() ([]tcpSnap, error)
	firstErr() error
	senderNames() []string
	stop()
}

// startLongFlows starts the long flows of the transport.
func (e *experiment) startLongFlows(ctx context.Context, life time.Duration) (longSet, error) {
	if e.roce != nil {
		lf, err := e.startRoCELong()
		if err != nil {
			return nil, err
		}
		return roceLongSet{lf}, nil
	}
	return e.startLong(ctx, life)
}

type roceLongSet struct{ *roceLong }

func (r roceLongSet) info() ([]tcpSnap, error) { return r.roceLong.info(), nil }
func (r roceLongSet) firstErr() error          { return r.roceLong.err() }
func (r roceLongSet) senderNames() []string    { return r.senders }

func (lf *longFlows) firstErr() error       { return lf.g.firstErr() }
func (lf *longFlows) senderNames() []string { return lf.senders }

// info reads every flow's TCP_INFO.
func (lf *longFlows) info() ([]tcpSnap, error) {
	out := make([]tcpSnap, len(lf.conns))
	for i, c := range lf.conns {
		s, err := readTCPInfo(c)
		if err != nil {
			return nil, fmt.Errorf("long flow %d from %s: %w", i+1, lf.senders[i], err)
		}
		out[i] = s
	}
	return out, nil
}

// stop resets the connections (SO_LINGER 0: what is still in the send
// buffers is dropped, not sent into the next scheme) and waits for the
// writers.
func (lf *longFlows) stop() {
	lf.once.Do(func() {
		for _, c := range lf.conns {
			_ = c.SetLinger(0)
			c.Close()
		}
		_ = lf.g.Wait()
	})
}

// firstErr is the first writer error so far, without waiting.
func (g *group) firstErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.err
}

// shortFlows runs node's short flows one at a time until end: for flow k,
// pause gaps[k] (the fabric's), connect, then time from the first write of
// sizes[k] bytes to the server's one-byte answer. It returns the FCTs
// (wall times) and the number of flows that failed.
func (e *experiment) shortFlows(ctx context.Context, node *lab.Node, end time.Time, sizes []int, gaps []time.Duration) ([]flowSpan, int) {
	addr := fmt.Sprintf("%s:%d", e.lab.ReceiverAddr, shortPort)
	var fcts []flowSpan
	failed := 0
	maxSize := 0
	for _, n := range sizes {
		maxSize = max(maxSize, n)
	}
	buf := make([]byte, 4+maxSize)
	for k := range sizes {
		sleepCtx(ctx, e.o.wire(gaps[k]))
		if ctx.Err() != nil || !time.Now().Before(end) {
			break
		}
		fct, err := shortFlow(ctx, node, addr, e.cc, buf[:4+sizes[k]], e.o.wire(shortTimeout))
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

func shortFlow(ctx context.Context, node *lab.Node, addr, cc string, req []byte, timeout time.Duration) (flowSpan, error) {
	c, err := dialTCP(ctx, node, addr, cc, dialTimeout)
	if err != nil {
		return flowSpan{}, err
	}
	defer c.Close()
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	t0, from := time.Now(), hostlost.Now()
	_ = c.SetDeadline(t0.Add(timeout))
	if _, err := c.Write(req); err != nil {
		return flowSpan{}, err
	}
	var ans [1]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		return flowSpan{}, err
	}
	return flowSpan{FCT: time.Since(t0), From: from, To: hostlost.Now()}, nil
}

// incastPhase is seed 002 §5.4's incast: with the long flows still running,
// rounds of synchronized query flows, each round sizes[k] (3-60 KB, one per
// flow, spread over the senders in turn) released at once on connections
// dialed before, the round's completion time (QCT) the time to the last
// answer. The backlog is sampled meanwhile and the class counters read at
// the phase's edges (drops, marks).
// It returns each completed round's QCT and span for the host-lost meter.
func (e *experiment) incastPhase(ctx context.Context, sizes [][]int) (IncastResult, []flowSpan, error) {
	o := e.o
	res := IncastResult{Rounds: len(sizes)}
	st0, err := e.port.Stats()
	if err != nil {
		return res, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	var backlog []uint64
	var sampErr error
	done := make(chan struct{})
	end := time.Now().Add(o.wire(time.Duration(len(sizes))*(o.incastGap+shortTimeout)) + time.Second)
	go func() {
		defer close(done)
		backlog, sampErr = e.sampleBacklog(sctx, end)
	}()
	var rounds []flowSpan
	var qct []time.Duration
	var fcts []time.Duration
	for k, round := range sizes {
		if k > 0 {
			sleepCtx(ctx, o.wire(o.incastGap))
		}
		if ctx.Err() != nil {
			break
		}
		var f []time.Duration
		var failed int
		var err error
		from := hostlost.Now()
		if e.roce != nil {
			f, failed, err = e.roceQueryRound(ctx, round)
		} else {
			f, failed, err = e.queryRound(ctx, round)
		}
		to := hostlost.Now()
		if err != nil {
			cancel()
			<-done
			return res, nil, err
		}
		res.Failed += failed
		res.Flows += len(round)
		fcts = append(fcts, f...)
		if failed == 0 && len(f) > 0 {
			qct = append(qct, slices.Max(f))
			rounds = append(rounds, flowSpan{FCT: slices.Max(f), From: from, To: to})
		}
	}
	cancel()
	<-done
	if sampErr != nil {
		return res, nil, sampErr
	}
	st1, err := e.port.Stats()
	if err != nil {
		return res, nil, err
	}
	a, b := st0.Classes[class], st1.Classes[class]
	res.Drops = sub(b.DroppedPackets(), a.DroppedPackets())
	res.CEMarks = sub(b.CEMarked(), a.CEMarked())
	res.QCTUs = stats.Summarize(fabricUs(qct, o.timescale))
	res.FCTUs = stats.Summarize(fabricUs(fcts, o.timescale))
	res.Queue = queueStats(backlog, o.rate)
	return res, rounds, nil
}

// queryRound dials one connection per query (sender i%N for query i), then
// releases every request at once and waits for all the answers. It returns
// the FCTs of the queries that completed and the number that did not.
func (e *experiment) queryRound(ctx context.Context, sizes []int) ([]time.Duration, int, error) {
	addr := fmt.Sprintf("%s:%d", e.lab.ReceiverAddr, shortPort)
	conns := make([]*net.TCPConn, len(sizes))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var dial group
	for i := range sizes {
		node := e.lab.Senders[i%len(e.lab.Senders)]
		dial.Go(func() error {
			c, err := dialTCP(ctx, node, addr, e.cc, dialTimeout)
			if err != nil {
				return fmt.Errorf("incast query %d from %s: %w", i, node.Name, err)
			}
			conns[i] = c
			return nil
		})
	}
	if err := dial.Wait(); err != nil {
		return nil, 0, err
	}
	start := make(chan struct{})
	fcts := make([]time.Duration, len(sizes))
	ok := make([]bool, len(sizes))
	var wg sync.WaitGroup
	for i, n := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := make([]byte, 4+n)
			binary.BigEndian.PutUint32(req, uint32(n))
			<-start
			t0 := time.Now()
			c := conns[i]
			_ = c.SetDeadline(t0.Add(e.o.wire(shortTimeout)))
			if _, err := c.Write(req); err != nil {
				return
			}
			var ans [1]byte
			if _, err := io.ReadFull(c, ans[:]); err != nil {
				return
			}
			fcts[i], ok[i] = time.Since(t0), true
		}()
	}
	close(start)
	wg.Wait()
	var out []time.Duration
	failed := 0
	for i := range sizes {
		if ok[i] {
			out = append(out, fcts[i])
		} else {
			failed++
		}
	}
	return out, failed, nil
}
