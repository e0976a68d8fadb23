package agent

import "time"

// maxPacerSlack bounds the credit a late wakeup may claim.
const maxPacerSlack = 500 * time.Microsecond

// bucket is a token bucket in bytes: a pure state machine fed "now", like
// quic-go's pacer. It holds depth bytes (MaxBurst packets), plus what the
// timer's lateness owes: the loop asked to wake at wakeAt and a timerfd
// wakes 25–50 µs late, longer than a 4-packet burst lasts at 1 Gbit/s, so
// dropping that credit would pace below the rate.
type bucket struct {
	tokens float64
	at     time.Duration // last refill
	wakeAt time.Duration // when the owner asked to run again; 0 = not waiting
}

// refill adds the credit earned since the last refill at rate bytes/s.
func (b *bucket) refill(now time.Duration, rate, depth float64) {
	if b.wakeAt > 0 && now > b.wakeAt {
		depth += rate * min(now-b.wakeAt, maxPacerSlack).Seconds()
	}
	// Credit already granted (a late wakeup's, spent over several passes
	// of the loop) is kept.
	b.tokens = min(b.tokens+rate*(now-b.at).Seconds(), max(depth, b.tokens))
	b.at = now
	b.wakeAt = 0
}

// ready reports whether a packet may go; it may overdraw by one packet.
func (b *bucket) ready() bool { return b.tokens > 0 }

func (b *bucket) spend(bytes int) { b.tokens -= float64(bytes) }

// maxBurstWait bounds how long the pacer waits to send a whole burst.
const maxBurstWait = 200 * time.Microsecond

// wait returns when a whole burst (depth) is due: fewer wakeups, and the
// lateness credit keeps the average at the rate. At a low rate, where a
// burst takes longer than maxBurstWait to earn, it returns when the next
// packet may go: a QP near Rmin must not hold a packet back for several
// packet times (its ACK timeout runs meanwhile).
func (b *bucket) wait(now time.Duration, rate, depth float64) time.Duration {
	need := depth - b.tokens
	if need/rate > maxBurstWait.Seconds() {
		need = max(-b.tokens, 0) + 1
	}
	b.wakeAt = now + time.Duration(need/rate*1e9) + 1
	return b.wakeAt
}

// portLimit is the NIC's serializer: all QPs of an agent share its rate
// (Config.PortRate), as a NIC's QPs share the port whatever their Rc.
type portLimit struct {
	b     bucket
	rate  float64 // bytes per second
	depth float64
}

// nextWake is when the port has a burst's credit again.
func (p *portLimit) nextWake(now time.Duration) time.Duration {
	if p.b.wakeAt == 0 {
		p.b.wait(now, p.rate, p.depth)
	}
	return p.b.wakeAt
}
