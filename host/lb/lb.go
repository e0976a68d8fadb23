package lb

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Balancer chooses the entropy value (EV, the UDP source port) of each
// packet a sender sends and learns from what the receiver says about the
// packets it sent (htsim UecMultipath: nextEntropy, processEv). It is a
// pure state machine: every method takes now, a monotonic time since an
// arbitrary epoch, and nothing owns a timer or a goroutine. Not safe for
// concurrent use.
type Balancer interface {
	// Next returns the EV of the next packet, one of EVs().
	Next(now time.Duration) uint16
	// Feedback reports what came back for a packet sent with ev: the ACK
	// it triggered (PathGood, or PathECN when its M flag echoed CE), a
	// NACK of a packet trimmed in the fabric (PathNack), or its
	// retransmission timeout (PathTimeout). An ev outside EVs() is counted
	// (Stats.Foreign) and otherwise ignored, except that a timeout still
	// freezes REPS (htsim reports timeouts with no EV).
	Feedback(now time.Duration, ev uint16, f PathFeedback)
	// EVs is the balancer's set of EVs.
	EVs() EVRange
	// Stats returns the counters.
	Stats() Stats
}

var (
	_ Balancer = (*Oblivious)(nil)
	_ Balancer = (*Bitmap)(nil)
	_ Balancer = (*REPS)(nil)
	_ Balancer = (*Mixed)(nil)
)

// PathFeedback is what the network said about one packet's path (htsim
// UecMultipath::PathFeedback).
type PathFeedback uint8

const (
	PathGood    PathFeedback = iota // ACKed, not CE-marked
	PathECN                         // ACKed with the M flag: CE-marked on the way
	PathNack                        // NACKed: trimmed in the fabric (not at the last hop)
	PathTimeout                     // retransmission timeout

	numFeedback = iota
)

var feedbackNames = [numFeedback]string{"good", "ecn", "nack", "timeout"}

func (f PathFeedback) String() string {
	if int(f) < len(feedbackNames) {
		return feedbackNames[f]
	}
	return fmt.Sprintf("PathFeedback(%d)", uint8(f))
}

// AckFeedback is the feedback of an ACK whose M (ECN echo) flag is ecn.
func AckFeedback(ecn bool) PathFeedback {
	if ecn {
		return PathECN
	}
	return PathGood
}

// EVRange is a contiguous set of EVs: First .. First+Count−1.
type EVRange struct {
	First uint16
	Count int
}

// Contains reports whether ev is in the range.
func (r EVRange) Contains(ev uint16) bool {
	_, ok := r.index(ev)
	return ok
}

// Last is the range's last EV.
func (r EVRange) Last() uint16 { return r.First + uint16(r.Count-1) }

func (r EVRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last()) }

func (r EVRange) index(ev uint16) (int, bool) {
	i := int(ev) - int(r.First)
	return i, i >= 0 && i < r.Count
}

func (r EVRange) ev(i int) uint16 { return r.First + uint16(i) }

// Stats are a balancer's counters.
type Stats struct {
	Packets  uint64 // EVs handed out by Next
	Recycled uint64 // of them reused from a clean ACK (REPS, Mixed)
	Explored uint64 // of them drawn at random (REPS, htsim's exploration)
	// Skipped counts the penalised EVs Bitmap passed over; Decays the
	// penalty points taken off on the way (one per Next at most).
	Skipped uint64
	Decays  uint64
	// Feedback counts the feedback taken, by PathFeedback.
	Feedback [numFeedback]uint64
	Foreign  uint64 // feedback for an EV outside EVs(), ignored
	Freezes  uint64 // REPS: times it entered freezing mode
	Thaws    uint64 // REPS: times it left it
	Overflow uint64 // clean EVs dropped: REPS' buffer overwrote a fresh one, Mixed's list was full
}

// Kind names a balancer: the values of the CLI's --lb.
type Kind uint8

const (
	KindOblivious Kind = iota + 1 // spray over every EV, no feedback (htsim UecMpOblivious)
	KindBitmap                    // per-EV penalties (htsim UecMpBitmap)
	KindREPS                      // recycle clean EVs (htsim UecMpReps)
	KindMixed                     // REPS' recycling first, else Bitmap (htsim UecMpMixed, its default)
)

// Kinds lists every kind in flag order.
var Kinds = []Kind{KindOblivious, KindBitmap, KindREPS, KindMixed}

var kindNames = map[Kind]string{
	KindOblivious: "oblivious",
	KindBitmap:    "bitmap",
	KindREPS:      "reps",
	KindMixed:     "mixed",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind reads a --lb value: oblivious, bitmap, reps or mixed (any
// case).
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if strings.EqualFold(s, k.String()) {
			return k, nil
		}
	}
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = k.String()
	}
	return 0, fmt.Errorf("lb: load balancer %q: must be one of %s", s, strings.Join(names, ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) {
	if _, ok := kindNames[k]; !ok {
		return nil, fmt.Errorf("lb: unknown load balancer kind %d", uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler (flag.TextVar).
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// New returns a balancer of kind k. p must be valid (Params.Validate).
// rng draws every random choice; nil seeds one at random. Give each
// balancer its own rng (a PCG with a seed) for a reproducible run.
func New(k Kind, p Params, rng *rand.Rand) (Balancer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	switch k {
	case KindOblivious:
		return NewOblivious(p, rng)
	case KindBitmap:
		return NewBitmap(p, rng)
	case KindREPS:
		return NewREPS(p, rng)
	case KindMixed:
		return NewMixed(p, rng)
	}
	return nil, fmt.Errorf("lb: unknown load balancer kind %d", uint8(k))
}

// setup validates p, fills a nil rng and draws the balancer's EVs: an
// aligned block of p.EVs in the port range (htsim's _path_random, the
// random upper bits fixed at startup).
func setup(p Params, rng *rand.Rand) (EVRange, *rand.Rand, error) {
	if err := p.Validate(); err != nil {
		return EVRange{}, nil, err
	}
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	block := rng.IntN(p.Ports / p.EVs)
	return EVRange{First: p.FirstPort + uint16(block*p.EVs), Count: p.EVs}, rng, nil
}

// count books feedback f for ev in st and returns ev's index in r, ok
// false if it is foreign.
func count(st *Stats, r EVRange, ev uint16, f PathFeedback) (int, bool) {
	if f < numFeedback {
		st.Feedback[f]++
	}
	i, ok := r.index(ev)
	if !ok {
		st.Foreign++
	}
	return i, ok
}
