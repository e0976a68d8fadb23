package rccc

import (
	"math"
	"time"

	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// Never is what NextEvent returns when the pacer has nothing to grant.
const Never = time.Duration(math.MaxInt64)

// SourceState is where a source stands at its pacer.
type SourceState uint8

const (
	// SourceSatisfied: granted its target (and the slow pulls it may
	// have): nothing to grant until its target rises.
	SourceSatisfied SourceState = iota
	// SourceActive: its target is ahead of its credit; in the round
	// robin of grants (htsim _active_senders).
	SourceActive
	// SourceSlowPull: target met; granted unrequested credit while no
	// source is active (htsim _idle_senders).
	SourceSlowPull
)

var sourceStateNames = enum.Names{SourceSatisfied: {"satisfied"}, SourceActive: {"active"}, SourceSlowPull: {"slow_pull"}}

func (s SourceState) String() string { return enum.String(s, sourceStateNames, "SourceState") }

// MarshalText writes the state's name (JSON).
func (s SourceState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name.
func (s *SourceState) UnmarshalText(b []byte) error {
	return enum.Unmarshal(s, b, sourceStateNames, "rccc: source state")
}

// Grant is one credit grant the pacer issued: what the receiver sends to
// the source, in a CTRL CREDIT (payload) and in every later ACK_CC (the
// CREDIT cc_state's credit).
type Grant[K comparable] struct {
	Key K
	// Credit is the source's cumulative credit after the grant, as the
	// wire carries it.
	Credit uet.Credit
	// Bytes is what the grant added: at most GrantBytes (SlowPullBytes for
	// a slow pull), a multiple of 256.
	Bytes    int
	SlowPull bool
	// At is the grant's time on the pacer's schedule: at most the now of
	// the Advance that issued it, earlier if Advance came late (CatchUp).
	At time.Duration
}

// SourceStats are one source's counters at the pacer. Byte counts run
// from the source's registration, unwrapped.
type SourceStats struct {
	State SourceState `json:"state"`
	// TargetBytes is the highest cumulative target the source asked for;
	// GrantedBytes the cumulative credit granted, slow pulls included.
	TargetBytes   uint64 `json:"target_bytes"`
	GrantedBytes  uint64 `json:"granted_bytes"`
	Grants        uint64 `json:"grants"` // slow pulls included
	SlowPulls     uint64 `json:"slow_pulls"`
	SlowPullBytes uint64 `json:"slow_pull_bytes"`
	Targets       uint64 `json:"targets"`       // OnTarget calls
	StaleTargets  uint64 `json:"stale_targets"` // not ahead of the highest target: ignored
}

// SourceInfo is a source as Sources lists it.
type SourceInfo[K comparable] struct {
	Key K `json:"key"`
	SourceStats
}

// PacerStats are a pacer's counters and current sizes.
type PacerStats struct {
	Sources  int `json:"sources"`   // registered now
	Active   int `json:"active"`    // SourceActive now
	SlowPull int `json:"slow_pull"` // SourceSlowPull now

	Grants        uint64 `json:"grants"` // slow pulls included
	GrantedBytes  uint64 `json:"granted_bytes"`
	SlowPulls     uint64 `json:"slow_pulls"`
	SlowPullBytes uint64 `json:"slow_pull_bytes"`
	Targets       uint64 `json:"targets"`
	StaleTargets  uint64 `json:"stale_targets"`
	Removed       uint64 `json:"removed"`
	// CaughtUp counts grants issued after their time on the schedule
	// (Advance came late, within CatchUp); Lost is the schedule's time
	// dropped because Advance came later than CatchUp allows.
	CaughtUp uint64        `json:"caught_up"`
	Lost     time.Duration `json:"lost_ns"`
}

// source is one sender CCC at the pacer (htsim UecSink's pull state).
type source[K comparable] struct {
	key K
	// target and granted are cumulative 256-byte units, unwrapped, from
	// 0 at registration (htsim _highest_pull_target, _latest_pull).
	target, granted uint64
	state           SourceState
	prev, next      *source[K] // in the active or slow-pull queue
	stats           SourceStats
}

// queue is a FIFO of sources linked through their prev and next: no
// allocation to move a source in or out.
type queue[K comparable] struct {
	head, tail *source[K]
	n          int
}

func (q *queue[K]) push(s *source[K]) {
	s.prev, s.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = s
	} else {
		q.head = s
	}
	q.tail = s
	q.n++
}

func (q *queue[K]) remove(s *source[K]) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		q.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		q.tail = s.prev
	}
	s.prev, s.next = nil, nil
	q.n--
}

func (q *queue[K]) pop() *source[K] {
	s := q.head
	q.remove(s)
	return s
}

// Pacer is RCCC's credit pacer at one receiving NIC (htsim UecPullPacer
// and the pull side of UecSink): the sources sending to the NIC register
// with their cumulative credit targets, and the pacer grants GrantBytes at
// a time, round robin among the sources whose target is ahead of their
// credit, never past the target, at PacerRateFactor × LinkRate. While no
// source lacks credit, sources whose target was met get slow pulls of
// unrequested credit, round robin, up to SlowPullMaxBytes each.
//
// The rate is a schedule, as htsim's pacer event: a grant of b bytes takes
// b / rate of the pacer's time, and the next grant may leave when it has
// passed; a pacer with nothing to grant is idle and grants at once when a
// target arrives. It is a pure state machine: methods take now, a
// monotonic time since an arbitrary epoch (an earlier now is taken as the
// latest one seen); NextEvent says when Advance has a grant to issue.
// Sources are keyed by K, a key the caller chooses (a CCC's identity). Not
// safe for concurrent use.
type Pacer[K comparable] struct {
	p         Params
	nsPerUnit float64 // pacer time per 256-byte unit
	grant     uint64  // units
	slow      uint64  // units
	slowMax   uint64  // units

	sources map[K]*source[K]
	active  queue[K]
	slowQ   queue[K]
	next    time.Duration // when the next grant may leave
	now     time.Duration
	stats   PacerStats
}

// NewPacer returns the pacer of a receiving NIC, idle at now. It panics if
// p.Validate fails; validate configuration first.
func NewPacer[K comparable](p Params, now time.Duration) *Pacer[K] {
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return &Pacer[K]{
		p:         p,
		nsPerUnit: uet.ByteUnit * 8e9 / (p.PacerRateFactor * float64(p.LinkRate)),
		grant:     uint64(p.GrantBytes / uet.ByteUnit),
		slow:      uint64(p.SlowPullBytes / uet.ByteUnit),
		slowMax:   uint64(p.SlowPullMaxBytes / uet.ByteUnit),
		sources:   make(map[K]*source[K]),
		next:      now,
		now:       now,
	}
}

// Params returns the parameters the pacer was made with.
func (p *Pacer[K]) Params() Params { return p.p }

func (p *Pacer[K]) advance(now time.Duration) time.Duration {
	if now < p.now {
		now = p.now
	}
	p.now = now
	return now
}

// idle reports whether the pacer has nothing to grant.
func (p *Pacer[K]) idle() bool { return p.active.n == 0 && p.slowQ.n == 0 }

// enqueue puts s in q as state. A pacer idle until now starts its
// schedule at now: idle time is not made up.
func (p *Pacer[K]) enqueue(now time.Duration, q *queue[K], s *source[K], state SourceState) {
	if p.idle() {
		p.next = max(p.next, now)
	}
	s.state = state
	q.push(s)
}

// OnTarget takes a source's cumulative credit target received at now, 24
// bits of 256-byte units as a request carries it (*_CC_REQ credit_target,
// CTRL CREDIT_REQ payload; htsim UecSink::handlePullTarget). A key seen
// for the first time registers a source with target and credit 0, as the
// sender's counts start. A target ahead of the highest one seen raises it
// (an older or equal one is ignored); a source whose target is then ahead
// of its credit joins the round robin, and one whose target ate into its
// slow-pull credit may get slow pulls again.
func (p *Pacer[K]) OnTarget(now time.Duration, key K, target uet.Credit) {
	now = p.advance(now)
	s := p.sources[key]
	if s == nil {
		s = &source[K]{key: key}
		p.sources[key] = s
	}
	s.stats.Targets++
	p.stats.Targets++
	d := Ahead(s.target, target)
	if d <= 0 {
		s.stats.StaleTargets++
		p.stats.StaleTargets++
		return
	}
	s.target += uint64(d)
	switch {
	case s.state == SourceActive:
	case s.target > s.granted:
		if s.state == SourceSlowPull {
			p.slowQ.remove(s)
		}
		p.enqueue(now, &p.active, s, SourceActive)
	case s.state == SourceSatisfied && s.granted-s.target < p.slowMax:
		p.enqueue(now, &p.slowQ, s, SourceSlowPull)
	}
}

// Remove forgets the source of key (its CCC is gone): it gets no more
// grants. A later OnTarget with the key registers a new source from 0.
func (p *Pacer[K]) Remove(key K) {
	s := p.sources[key]
	if s == nil {
		return
	}
	switch s.state {
	case SourceActive:
		p.active.remove(s)
	case SourceSlowPull:
		p.slowQ.remove(s)
	}
	delete(p.sources, key)
	p.stats.Removed++
}

// NextEvent is when Advance next has a grant to issue (at or before the
// last now: at once), or Never.
func (p *Pacer[K]) NextEvent() time.Duration {
	if p.idle() {
		return Never
	}
	return p.next
}

// Advance issues the grants due by now and appends them to out (htsim
// UecPullPacer::doNextEvent): the head of the active sources gets
// min(GrantBytes, target − credit) and goes to the back, or, its target
// met, to the slow-pull queue; with no active source the head of the
// slow-pull queue gets min(SlowPullBytes, room below SlowPullMaxBytes).
// Each grant moves the schedule on by its bytes at the pacer rate. An
// Advance later than NextEvent issues the grants of up to CatchUp of the
// schedule at once and drops the rest of the lateness. out is reused: in
// the steady state nothing is allocated.
func (p *Pacer[K]) Advance(now time.Duration, out []Grant[K]) []Grant[K] {
	now = p.advance(now)
	for !p.idle() && p.next <= now {
		at := p.next
		if lo := now - p.p.CatchUp; at < lo {
			p.stats.Lost += lo - at
			at = lo
		}
		if at < now {
			p.stats.CaughtUp++
		}
		var s *source[K]
		var units uint64
		slow := p.active.n == 0
		if !slow {
			s = p.active.pop()
			units = min(p.grant, s.target-s.granted)
			s.granted += units
			switch {
			case s.target > s.granted:
				p.active.push(s)
			case p.slowMax > 0:
				s.state = SourceSlowPull
				p.slowQ.push(s)
			default:
				s.state = SourceSatisfied
			}
		} else {
			s = p.slowQ.pop()
			units = min(p.slow, p.slowMax-(s.granted-s.target))
			s.granted += units
			if s.granted-s.target < p.slowMax {
				p.slowQ.push(s)
			} else {
				s.state = SourceSatisfied
			}
		}
		bytes := units * uet.ByteUnit
		s.stats.Grants++
		p.stats.Grants++
		p.stats.GrantedBytes += bytes
		if slow {
			s.stats.SlowPulls++
			s.stats.SlowPullBytes += bytes
			p.stats.SlowPulls++
			p.stats.SlowPullBytes += bytes
		}
		p.next = at + time.Duration(math.Ceil(float64(units)*p.nsPerUnit))
		out = append(out, Grant[K]{Key: s.key, Credit: uet.Credit(s.granted & uet.Units24Mask),
			Bytes: int(bytes), SlowPull: slow, At: at})
	}
	return out
}

// Granted returns the cumulative credit granted to the source of key, as
// the wire carries it: what every ACK_CC to it carries, and what a CTRL
// CREDIT answers a CREDIT_REQ with. ok is false for an unknown key.
func (p *Pacer[K]) Granted(key K) (credit uet.Credit, ok bool) {
	s := p.sources[key]
	if s == nil {
		return 0, false
	}
	return uet.Credit(s.granted & uet.Units24Mask), true
}

// Source returns the counters of the source of key.
func (p *Pacer[K]) Source(key K) (SourceStats, bool) {
	s := p.sources[key]
	if s == nil {
		return SourceStats{}, false
	}
	return s.info(), true
}

func (s *source[K]) info() SourceStats {
	st := s.stats
	st.State = s.state
	st.TargetBytes = s.target * uet.ByteUnit
	st.GrantedBytes = s.granted * uet.ByteUnit
	return st
}

// AppendSources appends every registered source's counters to dst, in no
// particular order.
func (p *Pacer[K]) AppendSources(dst []SourceInfo[K]) []SourceInfo[K] {
	for k, s := range p.sources {
		dst = append(dst, SourceInfo[K]{Key: k, SourceStats: s.info()})
	}
	return dst
}

// Stats returns the pacer's counters.
func (p *Pacer[K]) Stats() PacerStats {
	st := p.stats
	st.Sources = len(p.sources)
	st.Active = p.active.n
	st.SlowPull = p.slowQ.n
	return st
}
