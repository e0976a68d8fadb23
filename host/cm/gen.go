package cm

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kinds lists the kinds Generate knows, in a stable order.
var Kinds = []string{"allreduce-ring", "allreduce-butterfly", "alltoall", "permutation", "incast", "outcast-incast"}

// Gen describes a generated matrix, with the meaning of htsim's
// generator of the same kind (datacenter/connection_matrices/gen_*.py):
//
//   - allreduce-ring (gen_allreduce.py): the hosts form Nodes/Group
//     groups of Group; in each, for every member s a chain of
//     2·Group−1 flows walks the ring from s (member s+d−1 → s+d), each
//     flow starting when the previous one's sender is done.
//   - allreduce-butterfly (gen_allreduce_butterfly.py): recursive
//     doubling over log2(Group) stages; at stage d members i and i+2^d
//     (bit d of i clear) send each other one flow, and a member sends at
//     stage d+1 once its stage-d receive is complete.
//   - alltoall (gen_serial_alltoall.py): in each group every member s
//     sends to s+1, s+2, … (mod Group) one at a time, each flow starting
//     when the previous one's sender is done.
//   - permutation (gen_permutation.py): a derangement of the hosts; the
//     first Group of its pairs are the flows.
//   - incast (gen_incast.py): Group senders from hosts 1..Nodes−1 send to
//     host 0.
//   - outcast-incast (gen_outcast_incast.py): Group senders from hosts
//     1..Nodes−1 send to host 0, and every sender but the first also
//     sends to Fanout−1 hosts of its own, so one plain incast sender
//     shares host 0 with senders that also fan out.
//
// Every flow has Size bytes and an id (1, 2, … in the script's order);
// triggers are oneshots numbered in the script's order. Generate is a
// function of its Gen: Seed stands in for the script's random seed, not
// for its random stream.
type Gen struct {
	// Kind is one of Kinds.
	Kind string
	// Nodes is the hosts in the fabric (Matrix.Nodes), 2..65536.
	Nodes int
	// Group is, by kind: the collective's group size (allreduce-ring,
	// alltoall: 2..Nodes dividing Nodes; allreduce-butterfly: a power of
	// two of those); the flows (permutation: 1..Nodes); the incast degree
	// (incast: 1..Nodes−1; outcast-incast: 2..Nodes−1). 0 is Nodes for
	// the collectives and permutation, Nodes−1 for the incasts.
	Group int
	// Fanout is outcast-incast's destinations per outcast sender,
	// host 0 included (the script's conns2); every other destination is a
	// host no other flow touches. 0 is as many as fit. Other kinds: 0.
	Fanout int
	// Size is each flow's bytes, 1..2^31−1 (htsim reads it with stoi).
	Size uint64
	// Seed 0 keeps the hosts in order: groups of consecutive hosts,
	// what the scripts' locality option is after. Otherwise the hosts
	// (for the incasts, hosts 1..Nodes−1; host 0 stays the destination)
	// are shuffled by math/rand/v2's PCG seeded (Seed, Seed), for every
	// kind, where the scripts shuffle with Python's Mersenne Twister (and
	// the butterfly and outcast-incast ones not at all): we do not
	// reproduce Python's stream, so a seed gives another order than the
	// script's.
	Seed uint64
	// Spread spaces the starts of the flows that start at a time, not on
	// a trigger: every flow of permutation and incast, and the first of
	// every chain (a stage-0 flow of allreduce-butterfly) of the
	// collectives. Each starts at a whole microsecond drawn uniformly from
	// [0, Spread], in matrix order, as the scripts' extrastarttime says
	// (gen_permutation.py gives every flow the same start instead;
	// gen_allreduce.py documents it and starts every chain at 0), from
	// the PCG above, seeded (0, 0) when Seed is 0. 0: all start at 0. A
	// collective's chains in step are a knife edge, and a spread is how
	// to push them off it on both sides (docs/collectives.md).
	// outcast-incast: 0.
	Spread time.Duration
}

// GenError is a Gen field Generate refuses: its name, its value and
// what it must be.
type GenError struct {
	// Kind is the Gen's kind; "" when Field is "kind".
	Kind string
	// Field is "kind", "nodes", "group", "fanout", "size" or "spread".
	Field string
	// Value is as the Gen holds it.
	Value string
	// Must is what would be accepted.
	Must string
}

func (e *GenError) Error() string {
	s := "cm: gen"
	if e.Kind != "" {
		s += " " + e.Kind
	}
	return fmt.Sprintf("%s: %s %s: %s", s, e.Field, e.Value, e.Must)
}

const (
	minGenNodes = 2
	maxGenNodes = 1 << 16
	// maxGenSize: htsim reads a flow's size with stoi.
	maxGenSize = math.MaxInt32
	// maxGenSpread: htsim reads a start with stof, and a float holds
	// every whole microsecond only up to 2^24.
	maxGenSpread = (1 << 24) * time.Microsecond
)

// Generate returns the matrix g describes, or a *GenError for each
// field out of range (joined).
func Generate(g Gen) (*Matrix, error) {
	group, fanout, err := g.resolve()
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(g.Seed, g.Seed))
	shuffle := func(s []int) []int {
		if g.Seed != 0 {
			rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		}
		return s
	}
	// starts draws n starts, after the shuffles as the scripts draw.
	starts := func(n int) []time.Duration {
		s := make([]time.Duration, n)
		if g.Spread > 0 {
			us := uint64(g.Spread / time.Microsecond)
			for i := range s {
				s[i] = time.Duration(rng.Uint64N(us+1)) * time.Microsecond
			}
		}
		return s
	}
	// stagger spreads the starts of a collective's untriggered flows.
	stagger := func(m *Matrix) *Matrix {
		var first []int
		for i, c := range m.Conns {
			if c.Trigger == 0 {
				first = append(first, i)
			}
		}
		for k, st := range starts(len(first)) {
			m.Conns[first[k]].Start = st
		}
		return m
	}
	switch g.Kind {
	case "allreduce-ring":
		return stagger(genRing(shuffle(hostRange(0, g.Nodes)), group, g.Size)), nil
	case "allreduce-butterfly":
		return stagger(genButterfly(shuffle(hostRange(0, g.Nodes)), group, g.Size)), nil
	case "alltoall":
		return stagger(genAlltoall(shuffle(hostRange(0, g.Nodes)), group, g.Size)), nil
	case "permutation":
		srcs := shuffle(hostRange(0, g.Nodes))
		dsts := shuffle(hostRange(0, g.Nodes))
		return genPermutation(srcs, dsts, starts(group), g.Size), nil
	case "incast":
		// Host 0 is the destination, as in the script; only the
		// senders are drawn.
		senders := shuffle(hostRange(1, g.Nodes))[:group]
		return genIncast(g.Nodes, senders, starts(group), g.Size), nil
	case "outcast-incast":
		return genOutcastIncast(g.Nodes, shuffle(hostRange(1, g.Nodes)), group, fanout, g.Size), nil
	}
	panic("cm: gen: resolve passed kind " + g.Kind)
}

// hostRange returns lo, lo+1, …, hi−1.
func hostRange(lo, hi int) []int {
	h := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		h = append(h, i)
	}
	return h
}

// resolve checks g and returns its group and fanout with 0 resolved.
func (g Gen) resolve() (group, fanout int, err error) {
	if !slices.Contains(Kinds, g.Kind) {
		return 0, 0, &GenError{Field: "kind", Value: strconv.Quote(g.Kind), Must: "must be one of " + strings.Join(Kinds, ", ")}
	}
	var errs []error
	bad := func(field string, value any, must string, args ...any) {
		errs = append(errs, &GenError{Kind: g.Kind, Field: field, Value: fmt.Sprint(value), Must: fmt.Sprintf(must, args...)})
	}
	if g.Size < 1 || g.Size > maxGenSize {
		bad("size", g.Size, "must be 1..%d bytes (htsim reads it with stoi)", maxGenSize)
	}
	switch g.Kind {
	case "outcast-incast":
		if g.Spread != 0 {
			bad("spread", g.Spread, "must be 0: %s starts its flows at 0", g.Kind)
		}
	default:
		if g.Spread < 0 || g.Spread > maxGenSpread || g.Spread%time.Microsecond != 0 {
			bad("spread", g.Spread, "must be whole microseconds, 0..%v (htsim reads a start as a float)", maxGenSpread)
		}
	}
	if g.Kind != "outcast-incast" && g.Fanout != 0 {
		bad("fanout", g.Fanout, "must be 0: only outcast-incast has a fan-out")
	}
	minNodes := minGenNodes
	if g.Kind == "outcast-incast" {
		minNodes = 3 // an incast sender that is not the first
	}
	if g.Nodes < minNodes || g.Nodes > maxGenNodes {
		bad("nodes", g.Nodes, "must be %d..%d", minNodes, maxGenNodes)
		return 0, 0, errors.Join(errs...)
	}
	n := g.Nodes
	group = g.Group
	value := strconv.Itoa(group)
	if group == 0 {
		group = n
		if g.Kind == "incast" || g.Kind == "outcast-incast" {
			group = n - 1
		}
		value = fmt.Sprintf("0 (= %d)", group)
	}
	switch g.Kind {
	case "allreduce-ring", "alltoall":
		if group < 2 || group > n || n%group != 0 {
			bad("group", value, "must divide nodes %d (2..%d)", n, n)
		}
	case "allreduce-butterfly":
		if group < 2 || group > n || n%group != 0 || group&(group-1) != 0 {
			var ok []string
			for p := 2; p <= n && n%p == 0; p *= 2 {
				ok = append(ok, strconv.Itoa(p))
			}
			if len(ok) == 0 {
				ok = []string{"none: nodes is odd"}
			}
			bad("group", value, "must be a power of two dividing nodes %d (%s)", n, strings.Join(ok, ", "))
		}
	case "permutation":
		if group < 1 || group > n {
			bad("group", value, "must be 1..%d flows (0: nodes)", n)
		}
	case "incast":
		if group < 1 || group > n-1 {
			bad("group", value, "must be 1..%d senders (0: nodes−1)", n-1)
		}
	case "outcast-incast":
		if group < 2 || group > n-1 {
			bad("group", value, "must be 2..%d senders (0: nodes−1)", n-1)
			break
		}
		// Hosts 0..group are the incast; each of the group−1 outcast
		// senders needs fanout−1 more.
		most := 1 + (n-1-group)/(group-1)
		fanout = g.Fanout
		if fanout == 0 {
			fanout = most
		}
		if fanout < 1 || fanout > most {
			bad("fanout", g.Fanout, "must be 1..%d with group %d and nodes %d (0: as many as fit)", most, group, n)
		}
	}
	if len(errs) > 0 {
		return 0, 0, errors.Join(errs...)
	}
	// Parse and Check refuse a matrix of more than maxConns.
	if conns, _ := genCounts(g.Kind, n, group, fanout); conns > maxConns {
		bad("group", value, "must keep the flows at most %d: %s over %d nodes with group %d is %d", maxConns, g.Kind, n, group, conns)
		return 0, 0, errors.Join(errs...)
	}
	return group, fanout, nil
}

// genCounts returns the flows and triggers a valid Gen generates.
func genCounts(kind string, nodes, group, fanout int) (conns, triggers int) {
	switch kind {
	case "allreduce-ring":
		return nodes * (2*group - 1), nodes * (2*group - 2)
	case "allreduce-butterfly":
		stages := bits.TrailingZeros(uint(group))
		return nodes * stages, nodes * (stages - 1)
	case "alltoall":
		return nodes * (group - 1), nodes * (group - 2)
	case "permutation", "incast":
		return group, 0
	case "outcast-incast":
		return group + (group-1)*(fanout-1), 0
	}
	return 0, 0
}

// genBuilder appends flows with ids 1, 2, … and oneshot triggers with
// ids 1, 2, …, in the scripts' order.
type genBuilder struct {
	m    *Matrix
	size uint64
}

func newGenBuilder(nodes, conns, triggers int, size uint64) *genBuilder {
	return &genBuilder{m: &Matrix{Nodes: nodes, Conns: make([]Conn, 0, conns), Triggers: make([]Trigger, 0, triggers)}, size: size}
}

// flow appends a flow that starts at 0 and returns its index.
func (b *genBuilder) flow(src, dst int) int {
	b.m.Conns = append(b.m.Conns, Conn{Src: src, Dst: dst, ID: len(b.m.Conns) + 1, Size: b.size})
	return len(b.m.Conns) - 1
}

func (b *genBuilder) oneshot() int {
	id := len(b.m.Triggers) + 1
	b.m.Triggers = append(b.m.Triggers, Trigger{ID: id, Kind: Oneshot})
	return id
}

// chain appends flows src(d)→dst(d) for d = 1..n, each after the
// previous one's sender is done.
func (b *genBuilder) chain(n int, pair func(d int) (src, dst int)) {
	prev := -1
	for d := 1; d <= n; d++ {
		i := b.flow(pair(d))
		if prev >= 0 {
			t := b.oneshot()
			b.m.Conns[prev].SendDone = t
			b.m.Conns[i].Trigger = t
		}
		prev = i
	}
}

// genRing is gen_allreduce.py over hosts in that order. A chain has
// the script's 2g−1 flows, one more than the 2(g−1) steps of a
// textbook ring all-reduce; we keep the script's count.
func genRing(hosts []int, g int, size uint64) *Matrix {
	return genChains("allreduce-ring", hosts, g, size, 2*g-1, func(grp []int, s, d int) (int, int) {
		return grp[(s+d-1)%g], grp[(s+d)%g]
	})
}

// genAlltoall is gen_serial_alltoall.py over hosts in that order.
func genAlltoall(hosts []int, g int, size uint64) *Matrix {
	return genChains("alltoall", hosts, g, size, g-1, func(grp []int, s, d int) (int, int) {
		return grp[s], grp[(s+d)%g]
	})
}

// genChains is the scripts' serial pattern: in every group of g hosts, a
// chain of n flows from each member s, flow d from and to ends(grp, s, d).
func genChains(name string, hosts []int, g int, size uint64, n int, ends func(grp []int, s, d int) (int, int)) *Matrix {
	conns, triggers := genCounts(name, len(hosts), g, 0)
	b := newGenBuilder(len(hosts), conns, triggers, size)
	for k := 0; k < len(hosts); k += g {
		grp := hosts[k : k+g]
		for s := range g {
			b.chain(n, func(d int) (int, int) { return ends(grp, s, d) })
		}
	}
	return b.m
}

// genButterfly is gen_allreduce_butterfly.py over hosts in that order;
// g is a power of two. A stage's flow is started by the trigger its
// sender's receive of the stage before activates (recv_done, not
// send_done: the member needs the data, not the ack); the last stage
// activates none.
func genButterfly(hosts []int, g int, size uint64) *Matrix {
	conns, triggers := genCounts("allreduce-butterfly", len(hosts), g, 0)
	b := newGenBuilder(len(hosts), conns, triggers, size)
	stages := bits.TrailingZeros(uint(g))
	for k := 0; k < len(hosts); k += g {
		grp := hosts[k : k+g]
		var received []int // received[x]: the trigger x's receive of the stage before activates
		for d := range stages {
			step := 1 << d
			last := d == stages-1
			next := make([]int, g)
			for lo := range g {
				if lo&step != 0 {
					continue
				}
				hi := lo + step
				for _, e := range [2][2]int{{lo, hi}, {hi, lo}} {
					from, to := e[0], e[1]
					i := b.flow(grp[from], grp[to])
					if !last {
						next[to] = b.oneshot()
						b.m.Conns[i].RecvDone = next[to]
					}
					if received != nil {
						b.m.Conns[i].Trigger = received[from]
					}
				}
			}
			received = next
		}
	}
	return b.m
}

// genPermutation is gen_permutation.py over those orders: srcs[n] sends
// to dsts[n] after the script's repair, which swaps a fixed point's
// destination with the next one's (mod nodes). The swap leaves both
// places fixed-point free, so the result is a derangement.
func genPermutation(srcs, dsts []int, starts []time.Duration, size uint64) *Matrix {
	n := len(srcs)
	dsts = slices.Clone(dsts)
	for i := range n {
		if srcs[i] == dsts[i] {
			j := (i + 1) % n
			dsts[i], dsts[j] = dsts[j], dsts[i]
		}
	}
	b := newGenBuilder(n, len(starts), 0, size)
	for i, s := range starts {
		b.m.Conns[b.flow(srcs[i], dsts[i])].Start = s
	}
	return b.m
}

// genIncast is gen_incast.py: senders to host 0.
func genIncast(nodes int, senders []int, starts []time.Duration, size uint64) *Matrix {
	b := newGenBuilder(nodes, len(senders), 0, size)
	for i, src := range senders {
		b.m.Conns[b.flow(src, 0)].Start = starts[i]
	}
	return b.m
}

// genOutcastIncast is gen_outcast_incast.py with its hosts 1..nodes−1
// taken from others in that order: others[0..g−1] send to host 0, and
// sender i ≥ 1 then to fanout−1 hosts from others[g…], each its own.
func genOutcastIncast(nodes int, others []int, g, fanout int, size uint64) *Matrix {
	conns, _ := genCounts("outcast-incast", nodes, g, fanout)
	b := newGenBuilder(nodes, conns, 0, size)
	spare := others[g:]
	for i, src := range others[:g] {
		b.flow(src, 0)
		if i == 0 {
			continue
		}
		for range fanout - 1 {
			b.flow(src, spare[0])
			spare = spare[1:]
		}
	}
	return b.m
}
