package engine

import (
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// maxPacerSlack bounds the credit a late wakeup may claim.
const maxPacerSlack = 500 * time.Microsecond

// Bucket is a token bucket in bytes: a pure state machine fed "now", like
// quic-go's pacer. It holds depth bytes (a burst of packets), plus what the
// timer's lateness owes: the loop asked to wake at wakeAt and a timerfd
// wakes 25–50 µs late, longer than a 4-packet burst lasts at 1 Gbit/s, so
// dropping that credit would pace below the rate.
type Bucket struct {
	tokens float64
	at     time.Duration // last refill
	wakeAt time.Duration // when the owner asked to run again; 0 = not waiting
}

// NewBucket returns a bucket holding tokens bytes at now.
func NewBucket(now time.Duration, tokens float64) Bucket {
	return Bucket{tokens: tokens, at: now}
}

// Refill adds the credit earned since the last refill at rate bytes/s.
func (b *Bucket) Refill(now time.Duration, rate, depth float64) {
	b.refill(now, rate, depth, maxPacerSlack)
}

// refill is Refill with the most lateness credit, slack.
func (b *Bucket) refill(now time.Duration, rate, depth float64, slack time.Duration) {
	if b.wakeAt > 0 && now > b.wakeAt {
		depth += rate * min(now-b.wakeAt, slack).Seconds()
	}
	// Credit already granted (a late wakeup's, spent over several passes
	// of the loop) is kept.
	b.tokens = min(b.tokens+rate*(now-b.at).Seconds(), max(depth, b.tokens))
	b.at = now
	b.wakeAt = 0
}

// Ready reports whether a packet may go; it may overdraw by one packet.
func (b *Bucket) Ready() bool { return b.tokens > 0 }

// Spend takes bytes from the bucket.
func (b *Bucket) Spend(bytes int) { b.tokens -= float64(bytes) }

// Tokens is the credit in bytes (negative: overdrawn).
func (b *Bucket) Tokens() float64 { return b.tokens }

// maxBurstWait bounds how long the pacer waits to send a whole burst.
const maxBurstWait = 200 * time.Microsecond

// Wait returns when a whole burst (depth) is due: fewer wakeups, and the
// lateness credit keeps the average at the rate. At a low rate, where a
// burst takes longer than maxBurstWait to earn, it returns when the next
// packet may go: a flow near its minimum rate must not hold a packet back
// for several packet times (its ACK timeout runs meanwhile).
func (b *Bucket) Wait(now time.Duration, rate, depth float64) time.Duration {
	need := depth - b.tokens
	if need/rate > maxBurstWait.Seconds() {
		need = max(-b.tokens, 0) + 1
	}
	b.wakeAt = now + time.Duration(need/rate*1e9) + 1
	return b.wakeAt
}

// PortLimit is the NIC's serializer: all flows of an engine share its rate
// (Config.PortRate), as a NIC's queue pairs share the port whatever their
// own rates.
type PortLimit struct {
	b       Bucket
	rate    float64 // bytes per second
	depth   float64
	catchUp time.Duration
	// held: the transmit loop keeps the port for the flows queued for it
	// (sched); refused: Ready said no since the loop last cleared it, so
	// the flow asking waits for the port.
	held, refused bool
	// turnSent: what the flow being asked sent in its turn before the
	// port ran dry (TurnSent); spent: the packets charged since the
	// engine began asking it.
	turnSent, spent int
}

// NewPortLimit returns a full port limiter of rate and burst depth bytes,
// whose loop may catch up on at most catchUp of lateness (0: the pacer's
// 500 µs).
func NewPortLimit(now time.Duration, rate units.Rate, depth int, catchUp time.Duration) *PortLimit {
	if catchUp <= 0 {
		catchUp = maxPacerSlack
	}
	return &PortLimit{b: NewBucket(now, float64(depth)), rate: rate.BytesPerSecond(), depth: float64(depth), catchUp: catchUp}
}

// Refill adds the credit earned by now.
func (p *PortLimit) Refill(now time.Duration) { p.b.refill(now, p.rate, p.depth, p.catchUp) }

// Ready reports whether the port takes another packet now. A flow told no
// is queued for the port: the transmit loop asks it again when the port
// has credit and its turn has come, so its Fill need not return the
// port's wake as its deadline.
func (p *PortLimit) Ready() bool {
	if p.held || !p.b.Ready() {
		p.refused = true
		return false
	}
	return true
}

// TurnSent is how many packets the flow being asked has sent in its turn
// at the port already: the port ran dry in the middle of it, and the
// engine asks again for the rest. A flow that sends a burst a turn counts
// these against it, so that every turn is one burst.
func (p *PortLimit) TurnSent() int { return p.turnSent }

// Spend charges a packet of wire bytes to the port.
func (p *PortLimit) Spend(wire int) {
	p.b.Spend(wire)
	p.spent++
}

// NextWake is when the port has a burst's credit again, or
// maxBurstWait's if a burst takes longer to earn. Not the next packet's
// (Bucket.Wait's fallback for a slow flow): a port that many QPs keep
// busy then woke the loop for every packet, 22 µs apart at 400 Mbit/s,
// and each wakeup's timer and send cost more than the packet (issue 28's
// scale rows: 100 QPs took 1.5 × one QP's CPU a packet, 0.9 × with this).
func (p *PortLimit) NextWake(now time.Duration) time.Duration {
	if p.b.wakeAt == 0 {
		// The credit of a burst or of maxBurstWait, from an overdraft
		// of up to a packet: never the next packet's alone.
		need := min(p.depth, p.rate*maxBurstWait.Seconds()) - min(p.b.tokens, 0)
		p.b.wakeAt = now + time.Duration(need/p.rate*1e9) + 1
	}
	return p.b.wakeAt
}

// Skip moves the refill point to now without adding credit: time the owner
// spent unpaced earns nothing.
func (b *Bucket) Skip(now time.Duration) { b.at = now }

// CancelWake forgets the wakeup the owner asked for: a pause is not timer
// lateness, so it earns no catch-up credit.
func (b *Bucket) CancelWake() { b.wakeAt = 0 }
