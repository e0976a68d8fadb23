//go:build linux

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/npbpf/npprobe"
	"github.com/fabriclab/fabriclab/host/pktio"
	rocewire "github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ReactionRow is the CNP reaction time: CE arrival at the notification
// point (NP) until the reaction point (RP) cuts Rc, over every CNP of one
// run, in µs of the clock both agents share.
type ReactionRow struct {
	Config string `json:"config"`
	// Reaction is CE arrival at the NP → the rate cut at the RP.
	Reaction Percentiles `json:"reaction_us"`
	// NP is CE arrival → CNP built and handed to sendmmsg (includes the
	// hold of a CNP held back by min_time_between_cnps).
	NP Percentiles `json:"np_us"`
	// Return is CNP handed to sendmmsg → the cut: the CNP's send system
	// call, the veth, the RP's wake-up and its receive loop.
	Return Percentiles `json:"return_us"`
	// The three distributions are over the same events: every CNP that
	// cut Rc. Held is how many of them were held back by
	// min_time_between_cnps (their trigger CE came less than N after the
	// previous CNP): their NP component includes that hold.
	Held uint64 `json:"held_cnps"`
	// NPHeld is the NP component of the held CNPs alone: N plus the
	// transmit loop's wake-up, which sends them.
	NPHeld Percentiles `json:"np_held_us"`
	// Immediate is Reaction over the CNPs not held by N (their trigger CE
	// came N or more after the previous CNP): the loop's own latency,
	// without the coalescing the user set.
	Immediate Percentiles `json:"reaction_not_held_us"`
	// Sync, with the RP's CNP intake in the kernel: the cut (the CNP's
	// arrival on a's device, from when every pacing decision uses the cut
	// Rc) until the QP read it from the kernel's count (its next pacing
	// pass, or its receive loop reading the CNP).
	Sync Percentiles `json:"sync_us"`
	// Counts of what happened.
	CEReceived  uint64 `json:"ce_received"`
	CNPSent     uint64 `json:"cnp_sent"`
	CNPHandled  uint64 `json:"cnp_handled"`
	Cuts        uint64 `json:"cuts"`
	NoCut       uint64 `json:"cnp_without_cut"` // Rc at Rmin already
	Unmatched   uint64 `json:"unmatched_cnp"`   // a CNP handled with none sent before it
	PortMarked  uint64 `json:"port_ce_marked"`
	PortDropped uint64 `json:"port_dropped"`
	// AckedGbps is the sender's acknowledged payload rate over the run: the
	// loop kept the port busy.
	AckedGbps float64 `json:"acked_gbps"`
	Seconds   float64 `json:"seconds"`
	Events    int     `json:"events"`
}

// Percentiles of one latency distribution, in µs.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// percentiles are us's nearest-rank percentiles (host/lab/stats).
func percentiles(us []float64) Percentiles {
	d := stats.Summarize(us)
	return Percentiles{N: d.N, P50: d.P50, P90: d.P90, P99: d.P99, Max: d.Max}
}

func (p Percentiles) String() string {
	if p.N == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s µs", fmtUs(p.P50), fmtUs(p.P90), fmtUs(p.P99), fmtUs(p.Max))
}

func fmtUs(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// reactionOpts set up the CNP reaction run.
type reactionOpts struct {
	seconds  time.Duration
	portRate units.Rate     // the shaped port in front of the NP
	stepK    units.ByteSize // step marking threshold of the RoCE class
	// lineRate is the RP's line rate (it starts there): above portRate so
	// the queue builds and crosses K.
	lineRate  units.Rate
	cnpPeriod time.Duration // NP min_time_between_cnps
	mtu       int
	// kernelNP runs the NP in eBPF on b's device (host/npbpf); CE and
	// CNP times are then the kernel's timestamps of a tap on that device.
	kernelNP bool
	// kernelRP takes the CNPs on a's device (host/rpbpf): the cut is at
	// the CNP's arrival there.
	kernelRP bool
}

func (o reactionOpts) String() string {
	where, rpWhere := "agent", "agent"
	if o.kernelNP {
		where = "kernel"
	}
	if o.kernelRP {
		rpWhere = "kernel"
	}
	return fmt.Sprintf("port %s step K=%s, RP (CNPs taken by the %s) paper profile at line %s (max_burst %d), NP (%s) N=%s, MTU %d",
		o.portRate, o.stepK, rpWhere, o.lineRate, agent.DefaultQPConfig().MaxBurst, where, units.FormatDuration(o.cnpPeriod), o.mtu)
}

// epochClock is the agents' clock with a known epoch, so that kernel
// timestamps (wall time) map onto it.
type epochClock struct{ epoch time.Time }

func (c epochClock) Now() time.Duration { return time.Since(c.epoch) }

// eventLog collects the agents' trace events. Both agents call it from
// their loops, so it only appends under a lock.
type eventLog struct {
	mu  sync.Mutex
	evs []agent.Event
}

func (l *eventLog) trace(e agent.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

// runReaction runs one DCQCN loop a → b through a shaped port on a's veth
// end with step marking, both agents in this process on one clock, and
// matches the trace events.
//
// Matching: each CNP the NP sends is charged to its trigger, the first CE
// the NP received since its previous CNP (later CEs before that CNP are
// covered by it). CNPs reach the RP in order on one uncongested path (b's
// egress has no port), so the k-th CNP handled is the k-th sent. A handled
// CNP with RcAfter < RcBefore is a cut: reaction = cut − trigger CE. A CNP
// arriving at Rmin does not cut and is counted apart.
func runReaction(ctx context.Context, a, b *lab.Node, o reactionOpts) (row ReactionRow, err error) {
	row.Config = o.String()
	cfg := qdisc.DefaultConfig(o.portRate)
	roce := &cfg.Classes[qdisc.ClassRoCE]
	roce.ECN = qdisc.ECNStep
	roce.MinThBytes = o.stepK
	roce.MaxThBytes = 0
	roce.MaxP = 0
	port, err := qdisc.Attach(cfg, qdisc.AttachOptions{
		Dev: devA, Netns: a.NetnsName, PeerDev: devB, PeerNetns: b.NetnsName,
	})
	if err != nil {
		return row, fmt.Errorf("attach port: %w", err)
	}
	defer func() {
		if cerr := port.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("detach port: %w", cerr)
		}
	}()

	clock := epochClock{epoch: time.Now()}
	log := &eventLog{evs: make([]agent.Event, 0, 1<<20)}
	mode := func(kernel bool) agent.Offload {
		if kernel {
			return agent.OffloadKernel
		}
		return agent.OffloadAgent
	}
	// Each port sits on its node's own device, before the device cuts a
	// GSO send: it would see one as a single packet.
	open := func(n *lab.Node, addr netip.Addr, dev string, np, rp agent.Offload) (*agent.Host, error) {
		var h *agent.Host
		err := n.Do(func() (err error) {
			h, err = agent.OpenHost(agent.HostConfig{
				Addr: netip.AddrPortFrom(addr, rocewire.UDPPort), Port: pktio.RoCEOptions{SendPath: pktio.SendRaw},
				NP: np, RP: rp, Devices: []string{dev}, Agent: agent.Config{Clock: clock, Trace: log.trace},
			})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("host in %s: %w", n.Name, err)
		}
		return h, nil
	}
	ha, err := open(a, addrA.Addr(), devA, agent.OffloadAgent, mode(o.kernelRP))
	if err != nil {
		return row, err
	}
	defer ha.Close()
	hb, err := open(b, addrB.Addr(), devB, mode(o.kernelNP), agent.OffloadAgent)
	if err != nil {
		return row, err
	}
	defer hb.Close()
	var tap *npprobe.Tap
	if o.kernelNP {
		err := b.Do(func() (err error) {
			tap, err = npprobe.OpenTap(devB, npprobe.TapOptions{})
			return err
		})
		if err != nil {
			return row, fmt.Errorf("tap on %s: %w", devB, err)
		}
		defer tap.Close()
	}
	rp, np := ha.Agent, hb.Agent

	qcA := agent.DefaultQPConfig()
	qcA.MTU = o.mtu
	qcA.CC = agent.CCDCQCN
	// Paper profile: rate_reduce_monitor_period 0, so every CNP cuts when
	// it arrives (mlx5's deferred cut would add up to 4 µs of grid).
	qcA.DCQCN = dcqcn.PaperParams(o.lineRate)
	qcA.NP = false
	qcB := agent.DefaultQPConfig()
	qcB.MTU = o.mtu
	qcB.CNPPeriod = o.cnpPeriod
	qcB.BufferBytes = 4 << 20
	qa, err := rp.CreateQP(qcA)
	if err != nil {
		return row, err
	}
	qb, err := np.CreateQP(qcB)
	if err != nil {
		return row, err
	}
	ea, eb := qa.Endpoint(), qb.Endpoint()
	ea.Addr = netip.AddrPortFrom(addrA.Addr(), rocewire.UDPPort)
	eb.Addr = netip.AddrPortFrom(addrB.Addr(), rocewire.UDPPort)
	if err := qa.Connect(ea.Addr, eb); err != nil {
		return row, err
	}
	if err := qb.Connect(eb.Addr, ea); err != nil {
		return row, err
	}
	if err := qa.Start(agent.Stream{Op: agent.OpWrite, MessageBytes: 64 << 10}); err != nil {
		return row, err
	}
	t0 := time.Now()
	c0 := qa.Counters()
	select {
	case <-ctx.Done():
	case <-time.After(o.seconds):
	case <-qa.Done():
	}
	c1, t1 := qa.Counters(), time.Now()
	qa.Stop()
	select {
	case <-qa.Done():
	case <-time.After(5 * time.Second):
	}
	if err := qa.Err(); err != nil {
		return row, fmt.Errorf("sender qp: %w", err)
	}
	// Let the last CNPs land before the trace is read.
	time.Sleep(20 * time.Millisecond)
	row.Seconds = t1.Sub(t0).Seconds()
	row.AckedGbps = float64(c1.AckedBytes-c0.AckedBytes) * 8 / row.Seconds / 1e9
	if st, err := port.Stats(); err == nil {
		tot := st.Total()
		row.PortMarked = tot.CEMarkedECT0 + tot.CEMarkedECT1
		row.PortDropped = tot.DroppedLimitPackets + tot.DroppedWREDPackets
	}

	log.mu.Lock()
	evs := slices.Clone(log.evs)
	log.mu.Unlock()
	if tap != nil {
		evs = kernelEvents(evs, tap.Packets(), clock.epoch, qb.QPN(), qa.QPN())
	}
	matchReaction(&row, evs, qb.QPN(), qa.QPN(), o.cnpPeriod)
	if ctx.Err() != nil {
		return row, ctx.Err()
	}
	if row.Reaction.N == 0 {
		return row, errors.New("no CE → CNP → cut event measured (is the port marking? see port_ce_marked)")
	}
	return row, nil
}

// kernelEvents replaces the NP agent's CE and CNP events with what the tap
// on its device saw: CE-marked data for npQPN arriving, CNPs to rpQPN
// leaving, at their kernel timestamps on the agents' clock (wall time
// since epoch: no clock steps here), merged with the RP's events in time
// order (a CNP leaves b microseconds before a handles it).
func kernelEvents(evs []agent.Event, pkts []npprobe.Packet, epoch time.Time, npQPN, rpQPN uint32) []agent.Event {
	var out []agent.Event
	for _, e := range evs {
		if e.QPN == npQPN && (e.Kind == agent.EventCEReceived || e.Kind == agent.EventCNPSent) {
			continue // the agent saw the CE after the kernel answered it
		}
		out = append(out, e)
	}
	for _, p := range pkts {
		at := p.At.Sub(epoch)
		switch {
		case !p.Out && p.CE() && !p.IsCNP() && p.BTH.DestQP == npQPN:
			out = append(out, agent.Event{Kind: agent.EventCEReceived, QPN: npQPN, At: at})
		case p.Out && p.IsCNP() && p.BTH.DestQP == rpQPN:
			out = append(out, agent.Event{Kind: agent.EventCNPSent, QPN: npQPN, At: at})
		}
	}
	slices.SortStableFunc(out, func(a, b agent.Event) int { return cmp.Compare(a.At, b.At) })
	return out
}

// matchReaction fills the distributions from the events of one NP QP and
// its RP QP.
func matchReaction(row *ReactionRow, evs []agent.Event, npQPN, rpQPN uint32, period time.Duration) {
	row.Events = len(evs)
	// The log is in the order the trace calls took its lock, which is
	// causal: a CE is traced before the CNP it triggers is built, a CNP
	// before its sendmmsg and so before the RP can handle it. At is not
	// monotonic in that order (a CE carries its receive batch's time,
	// read before the batch's CEs and CNPs are traced), so the log is not
	// sorted by it.
	type inflight struct {
		ce, sent time.Duration
		held     bool
	}
	var fifo []inflight
	var reaction, immediate, npPart, npHeld, ret, sync []float64
	trigger := time.Duration(-1) // first CE since the last CNP
	lastSent := time.Duration(-1)
	for _, e := range evs {
		switch {
		case e.Kind == agent.EventCEReceived && e.QPN == npQPN:
			row.CEReceived++
			if trigger < 0 {
				trigger = e.At
			}
		case e.Kind == agent.EventCNPSent && e.QPN == npQPN:
			row.CNPSent++
			if trigger < 0 {
				// Cannot happen in the agent (a CNP answers a CE); keep
				// the FIFO aligned anyway.
				fifo = append(fifo, inflight{ce: -1, sent: e.At})
				continue
			}
			held := lastSent >= 0 && trigger-lastSent < period
			fifo = append(fifo, inflight{ce: trigger, sent: e.At, held: held})
			trigger = -1
			lastSent = e.At
		case e.Kind == agent.EventCNPHandled && e.QPN == rpQPN:
			row.CNPHandled++
			if len(fifo) == 0 {
				row.Unmatched++
				continue
			}
			f := fifo[0]
			fifo = fifo[1:]
			if e.RcAfter >= e.RcBefore {
				row.NoCut++
				continue
			}
			row.Cuts++
			if f.ce < 0 {
				continue
			}
			reaction = append(reaction, us(e.At-f.ce))
			npPart = append(npPart, us(f.sent-f.ce))
			ret = append(ret, us(e.At-f.sent))
			if e.Kernel {
				sync = append(sync, us(e.Synced-e.At))
			}
			if f.held {
				row.Held++
				npHeld = append(npHeld, us(f.sent-f.ce))
			} else {
				immediate = append(immediate, us(e.At-f.ce))
			}
		}
	}
	row.Reaction = percentiles(reaction)
	row.NP = percentiles(npPart)
	row.NPHeld = percentiles(npHeld)
	row.Return = percentiles(ret)
	row.Sync = percentiles(sync)
	row.Immediate = percentiles(immediate)
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }
