package rccc_test

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// A closed loop of N senders, one receiver and the switch port in front of
// it (the last hop), as a discrete-event simulation with a fake clock:
//
//	sender i ──link (its rate, prop)──▶ last-hop port (rate, FIFO) ──▶ receiver
//	    ▲                                                                │
//	    └──────── ACK (per packet) and CTRL CREDIT (per grant): back ────┘
//
// Each sender has an endless backlog, sends while RCCC's credit allows,
// and puts its credit target in every packet; the receiver feeds the
// targets to its pacer, sends a CTRL CREDIT per grant and an ACK_CC per
// packet carrying the cumulative credit. The return path has a random
// jitter, so ACKs and credits overtake each other and some cumulative
// values arrive stale.
type loopConfig struct {
	rate       units.Rate    // last hop and receiver
	senderRate units.Rate    // each sender's link
	n          int           // senders
	prop       time.Duration // sender to last hop
	back       time.Duration // receiver to sender, plus jitter
	jitter     time.Duration
	p          rccc.Params
	run        time.Duration
	measure    time.Duration // throughput and Jain from here
}

type loopResult struct {
	delivered     []float64 // bytes per sender after measure
	utilization   float64   // delivered / (rate × window)
	jain          float64
	queueMax      float64 // bytes ahead of an arriving packet, whole run
	queueMaxAfter float64 // the same from measure on
	queueEnd      float64
	creditedBurst float64 // max over intervals of credited arrivals − pacer rate × interval
	allBurst      float64 // the same for every arrival after measure
	specBytes     uint64
	senders       []rccc.SenderStats
	pacer         rccc.PacerStats
}

type evKind uint8

const (
	evWake      evKind = iota // a sender's link is free
	evArrive                  // a packet reaches the last hop
	evDeliver                 // a packet reaches the receiver
	evPacer                   // the pacer's next grant
	evAck                     // an ACK_CC reaches a sender
	evCredit                  // a CTRL CREDIT reaches a sender
	evCreditReq               // a CTRL CREDIT_REQ reaches the receiver
)

type event struct {
	at     time.Duration
	seq    uint64
	kind   evKind
	sender int
	size   int
	value  uet.Credit // credit or target
	spec   bool       // sent on speculative credit
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// burstMeter tracks max over intervals [t1, t2] of the bytes arriving in
// them less rate × (t2 − t1): the σ of a (σ, ρ) arrival curve.
type burstMeter struct {
	bytesPerNs float64
	cum        float64 // bytes so far
	minBefore  float64 // min over past arrivals j of cum before j − ρ·t_j
	started    bool
	max        float64
}

func (m *burstMeter) add(at time.Duration, b int) {
	t := float64(at) * m.bytesPerNs
	before := m.cum - t
	if !m.started || before < m.minBefore {
		m.minBefore, m.started = before, true
	}
	m.cum += float64(b)
	m.max = max(m.max, m.cum-t-m.minBefore)
}

func runLoop(tb testing.TB, c loopConfig) loopResult {
	tb.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	mtu := c.p.MTUBytes
	ser := func(r units.Rate, b int) time.Duration { return time.Duration(float64(b) * 8e9 / float64(r)) }
	pc := rccc.NewPacer[int](c.p, 0)
	senders := make([]*rccc.Sender, c.n)
	linkFree := make([]time.Duration, c.n)
	waking := make([]bool, c.n)
	var q events
	var seq uint64
	push := func(e event) {
		seq++
		e.seq = seq
		heap.Push(&q, e)
	}
	returnDelay := func() time.Duration { return c.back + time.Duration(rng.Int64N(int64(c.jitter)+1)) }
	pacerAt := rccc.Never // the evPacer scheduled, if any
	schedulePacer := func() {
		if e := pc.NextEvent(); e < pacerAt {
			pacerAt = e
			push(event{at: e, kind: evPacer})
		}
	}
	const backlog = 1 << 50
	send := func(i int, now time.Duration) {
		s := senders[i]
		for s.CanSend() && linkFree[i] <= now {
			spec := s.Speculating()
			s.OnTransmit(now, mtu)
			tgt := s.Target(cc.CreditDemand{Backlog: backlog})
			linkFree[i] = now + ser(c.senderRate, mtu)
			push(event{at: linkFree[i] + c.prop, kind: evArrive, sender: i, size: mtu, value: uet.Credit(tgt), spec: spec})
		}
		if s.CanSend() && !waking[i] {
			waking[i] = true
			push(event{at: linkFree[i], kind: evWake, sender: i})
		}
	}
	for i := range senders {
		senders[i] = rccc.NewSender(c.p, 0)
		if c.p.SpeculativeBytes == 0 {
			// Nothing to spend: ask with CTRL CREDIT_REQ.
			push(event{at: c.prop, kind: evCreditReq, sender: i,
				value: uet.Credit(senders[i].Target(cc.CreditDemand{Backlog: backlog}))})
		} else {
			send(i, 0)
		}
	}
	r := loopResult{delivered: make([]float64, c.n)}
	rho := c.p.PacerRateFactor * float64(c.rate) / 8e9 // bytes per ns
	credited := burstMeter{bytesPerNs: rho}
	all := burstMeter{bytesPerNs: rho}
	var lastDepart time.Duration
	queue := func(now time.Duration) float64 {
		if lastDepart <= now {
			return 0
		}
		return float64(lastDepart-now) * float64(c.rate) / 8e9
	}
	var grants []rccc.Grant[int]
	for q.Len() > 0 {
		e := heap.Pop(&q).(event)
		now := e.at
		if now > c.run {
			break
		}
		switch e.kind {
		case evWake:
			waking[e.sender] = false
			send(e.sender, now)
		case evArrive:
			qb := queue(now)
			r.queueMax = max(r.queueMax, qb)
			if now >= c.measure {
				r.queueMaxAfter = max(r.queueMaxAfter, qb)
				all.add(now, e.size)
			}
			if !e.spec {
				credited.add(now, e.size)
			} else {
				r.specBytes += uint64(e.size)
			}
			lastDepart = max(now, lastDepart) + ser(c.rate, e.size)
			e.kind, e.at = evDeliver, lastDepart
			push(e)
		case evDeliver:
			if now >= c.measure {
				r.delivered[e.sender] += float64(e.size)
			}
			pc.OnTarget(now, e.sender, e.value)
			credit, _ := pc.Granted(e.sender)
			push(event{at: now + returnDelay(), kind: evAck, sender: e.sender, value: credit})
			schedulePacer()
		case evCreditReq:
			pc.OnTarget(now, e.sender, e.value)
			schedulePacer()
		case evPacer:
			if now != pacerAt {
				continue // superseded by an earlier one
			}
			pacerAt = rccc.Never
			grants = pc.Advance(now, grants[:0])
			for _, g := range grants {
				push(event{at: now + returnDelay(), kind: evCredit, sender: g.Key, value: g.Credit})
			}
			schedulePacer()
		case evAck:
			senders[e.sender].OnAck(now)
			senders[e.sender].OnCredit(now, uint32(e.value))
			send(e.sender, now)
		case evCredit:
			senders[e.sender].OnCredit(now, uint32(e.value))
			send(e.sender, now)
		}
	}
	var sum float64
	for _, d := range r.delivered {
		sum += d
	}
	r.utilization = sum / ((c.run - c.measure).Seconds() * float64(c.rate) / 8)
	r.jain = stats.Jain(r.delivered)
	r.queueEnd = queue(c.run)
	r.creditedBurst, r.allBurst = credited.max, all.max
	for _, s := range senders {
		r.senders = append(r.senders, s.Stats())
	}
	r.pacer = pc.Stats()
	return r
}

// RCCC keeps the last hop's queue bounded. Once the senders' first round
// is over, arrivals never exceed the pacer's rate (0.99 × line rate) by
// more than one grant plus the credit the return path's jitter bunches
// (r'·J; with no jitter, one grant), so the port, which serves at the full
// line rate, never holds more than that. From the start add a packet's
// overdraft per sender: a sender sends while any credit is left (htsim
// can_send_RCCC), so a grant that is not a whole number of packets (a
// target of MaxWnd = 15 000 B is 59 units) lets it send up to MTU − 1
// bytes more; the debt is carried, not repaid to the pacer's schedule.
// Speculative credit (MaxWnd per sender at start, htsim's default) is the
// exception RCCC makes on purpose: N·MaxWnd once, which then drains at the
// 1 % of the line rate the pacer leaves.
func TestClosedLoop(t *testing.T) {
	lab := labParams(t)
	noSpec := lab
	noSpec.SpeculativeBytes = 0
	tests := []struct {
		name string
		c    loopConfig
		spec bool
	}{
		{"lab: one flow", loopConfig{rate: units.Gbit, senderRate: units.Gbit, n: 1,
			prop: 20 * us, back: 25 * us, jitter: 30 * us, p: lab, run: 200 * time.Millisecond, measure: 10 * time.Millisecond}, true},
		{"lab: 8 → 1 at 1 Gbit/s, no speculative credit", loopConfig{rate: units.Gbit, senderRate: units.Gbit, n: 8,
			prop: 20 * us, back: 25 * us, jitter: 30 * us, p: noSpec, run: 200 * time.Millisecond, measure: 10 * time.Millisecond}, false},
		{"lab: 8 → 1, senders at 10 Gbit/s, no jitter: one grant", loopConfig{rate: units.Gbit, senderRate: 10 * units.Gbit, n: 8,
			prop: 20 * us, back: 25 * us, jitter: 0, p: noSpec, run: 200 * time.Millisecond, measure: 10 * time.Millisecond}, false},
		{"lab: 32 → 1, speculative credit", loopConfig{rate: units.Gbit, senderRate: units.Gbit, n: 32,
			prop: 20 * us, back: 25 * us, jitter: 30 * us, p: lab, run: 1200 * time.Millisecond, measure: 10 * time.Millisecond}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			r := runLoop(t, c)
			// One grant, plus the credit the return path's jitter bunches.
			bound := float64(c.p.GrantBytes) + c.p.PacerRateFactor*float64(c.rate)/8e9*float64(c.jitter)
			// From the start: plus a packet's overdraft per sender (a
			// sender sends while any credit is left; htsim can_send_RCCC).
			startBound := bound + float64(c.n*(c.p.MTUBytes-1))
			var stale, dup uint64
			for _, s := range r.senders {
				stale += s.StaleCredits
				dup += s.DuplicateCredits
			}
			t.Logf("utilization %.4f of the line rate, Jain %.5f; arrivals' burst above the pacer rate: after %v %.0f B (bound %.0f B = grant + r'·jitter), credited ones from the start %.0f B (bound %.0f B: + N·(MTU − 1))",
				r.utilization, r.jain, c.measure, r.allBurst, bound, r.creditedBurst, startBound)
			t.Logf("queue max %.0f B (after %v %.0f B, at the end %.0f B); speculative bytes %d; %d grants; credits stale %d, duplicate %d",
				r.queueMax, c.measure, r.queueMaxAfter, r.queueEnd, r.specBytes, r.pacer.Grants, stale, dup)
			if r.creditedBurst > startBound {
				t.Errorf("credited arrivals exceed the pacer rate by %.0f B, want ≤ %.0f", r.creditedBurst, startBound)
			}
			if r.utilization < 0.98 || r.utilization > c.p.PacerRateFactor+0.001 && !tc.spec {
				t.Errorf("utilization %.4f, want 0.98..0.99 (the pacer's rate)", r.utilization)
			}
			if r.jain < 0.99 {
				t.Errorf("Jain %.4f < 0.99 (delivered %v)", r.jain, r.delivered)
			}
			if tc.spec && stale == 0 {
				// With few senders an ACK's credit is never older than a
				// grant that overtakes it (a sender's data arrive right
				// after its grant); the queue of the speculative run
				// mixes them.
				t.Error("no stale credit: the jitter reordered nothing")
			}
			if !tc.spec {
				if r.queueMax > startBound || r.queueMaxAfter > bound {
					t.Errorf("queue reached %.0f B, after %v %.0f B; want ≤ %.0f and %.0f", r.queueMax, c.measure, r.queueMaxAfter, startBound, bound)
				}
				if r.allBurst > bound {
					t.Errorf("arrivals after %v exceed the pacer rate by %.0f B, want ≤ %.0f", c.measure, r.allBurst, bound)
				}
				return
			}
			// Every sender sends ⌈MaxWnd / MTU⌉ packets on speculation,
			// the pacer's 1 % drains them in spec / (0.01 × rate).
			perSender := (c.p.SpeculativeBytes + c.p.MTUBytes - 1) / c.p.MTUBytes * c.p.MTUBytes
			if want := uint64(c.n * perSender); r.specBytes != want {
				t.Errorf("speculative bytes %d, want %d", r.specBytes, want)
			}
			if r.queueMax > float64(r.specBytes)+startBound {
				t.Errorf("queue reached %.0f B, want ≤ speculative %d + %.0f", r.queueMax, r.specBytes, startBound)
			}
			drain := time.Duration(float64(r.specBytes) / ((1 - c.p.PacerRateFactor) * float64(c.rate) / 8e9))
			t.Logf("speculative burst %d B drains in %v at 1 %% of the line rate", r.specBytes, drain)
			if r.queueEnd > bound {
				t.Errorf("queue %.0f B at the end (%v after a drain time of %v), want ≤ %.0f", r.queueEnd, c.run, drain, bound)
			}
		})
	}
}
