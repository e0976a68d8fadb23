package cm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// genFlow is a generated flow in short: who sends to whom, what starts
// it (trigger 0: Start) and what it activates.
type genFlow struct {
	src, dst                    int
	trigger, sendDone, recvDone int
}

func genFlows(m *Matrix) []genFlow {
	out := make([]genFlow, len(m.Conns))
	for i, c := range m.Conns {
		out[i] = genFlow{c.Src, c.Dst, c.Trigger, c.SendDone, c.RecvDone}
	}
	return out
}

func mustGenerate(tb testing.TB, g Gen) *Matrix {
	tb.Helper()
	m, err := Generate(g)
	if err != nil {
		tb.Fatalf("Generate(%+v): %v", g, err)
	}
	return m
}

// Hand-computed matrices, flow by flow, from the scripts' loops with
// the hosts in order (Seed 0).
func TestGenerateSmall(t *testing.T) {
	const size = 100
	for _, tc := range []struct {
		name  string
		g     Gen
		flows []genFlow
	}{{
		// gen_allreduce.py: chain s is s→s+1→…, 2·3−1 = 5 hops; trigger
		// k is flow k's send_done and starts flow k+1 of the chain.
		name: "ring g=3",
		g:    Gen{Kind: "allreduce-ring", Nodes: 3},
		flows: []genFlow{
			{0, 1, 0, 1, 0}, {1, 2, 1, 2, 0}, {2, 0, 2, 3, 0}, {0, 1, 3, 4, 0}, {1, 2, 4, 0, 0},
			{1, 2, 0, 5, 0}, {2, 0, 5, 6, 0}, {0, 1, 6, 7, 0}, {1, 2, 7, 8, 0}, {2, 0, 8, 0, 0},
			{2, 0, 0, 9, 0}, {0, 1, 9, 10, 0}, {1, 2, 10, 11, 0}, {2, 0, 11, 12, 0}, {0, 1, 12, 0, 0},
		},
	}, {
		// Two groups, {0,1} then {2,3}; ids and trigger ids run on.
		name: "ring g=2 of 4",
		g:    Gen{Kind: "allreduce-ring", Nodes: 4, Group: 2},
		flows: []genFlow{
			{0, 1, 0, 1, 0}, {1, 0, 1, 2, 0}, {0, 1, 2, 0, 0},
			{1, 0, 0, 3, 0}, {0, 1, 3, 4, 0}, {1, 0, 4, 0, 0},
			{2, 3, 0, 5, 0}, {3, 2, 5, 6, 0}, {2, 3, 6, 0, 0},
			{3, 2, 0, 7, 0}, {2, 3, 7, 8, 0}, {3, 2, 8, 0, 0},
		},
	}, {
		// gen_serial_alltoall.py: s sends to s+1 then s+2.
		name: "alltoall g=3",
		g:    Gen{Kind: "alltoall", Nodes: 3},
		flows: []genFlow{
			{0, 1, 0, 1, 0}, {0, 2, 1, 0, 0},
			{1, 2, 0, 2, 0}, {1, 0, 2, 0, 0},
			{2, 0, 0, 3, 0}, {2, 1, 3, 0, 0},
		},
	}, {
		// gen_allreduce_butterfly.py: stage 0 pairs (0,1), (2,3), each
		// flow's receive activating a trigger; stage 1 pairs (0,2),
		// (1,3), each flow started by its sender's stage-0 receive:
		// 0 received on flow 2 (trigger 2), 1 on flow 1, 2 on flow 4,
		// 3 on flow 3.
		name: "butterfly g=4",
		g:    Gen{Kind: "allreduce-butterfly", Nodes: 4},
		flows: []genFlow{
			{0, 1, 0, 0, 1}, {1, 0, 0, 0, 2}, {2, 3, 0, 0, 3}, {3, 2, 0, 0, 4},
			{0, 2, 2, 0, 0}, {2, 0, 4, 0, 0}, {1, 3, 1, 0, 0}, {3, 1, 3, 0, 0},
		},
	}, {
		// Fixed points repaired by swapping with the next: 0↔1, 2↔3,
		// then 4's swap wraps to place 0: 0→4, 4→1.
		name: "permutation of 5",
		g:    Gen{Kind: "permutation", Nodes: 5},
		flows: []genFlow{
			{0, 4, 0, 0, 0}, {1, 0, 0, 0, 0}, {2, 3, 0, 0, 0}, {3, 2, 0, 0, 0}, {4, 1, 0, 0, 0},
		},
	}, {
		name:  "permutation 3 flows of 4",
		g:     Gen{Kind: "permutation", Nodes: 4, Group: 3},
		flows: []genFlow{{0, 1, 0, 0, 0}, {1, 0, 0, 0, 0}, {2, 3, 0, 0, 0}},
	}, {
		name:  "incast 3 of 5",
		g:     Gen{Kind: "incast", Nodes: 5, Group: 3},
		flows: []genFlow{{1, 0, 0, 0, 0}, {2, 0, 0, 0, 0}, {3, 0, 0, 0, 0}},
	}, {
		name:  "incast all of 4",
		g:     Gen{Kind: "incast", Nodes: 4},
		flows: []genFlow{{1, 0, 0, 0, 0}, {2, 0, 0, 0, 0}, {3, 0, 0, 0, 0}},
	}, {
		// gen_outcast_incast.py 8 3 3: 1 only incasts; 2 and 3 each
		// also send to two hosts of their own from 4 up.
		name: "outcast-incast 3×3 of 8",
		g:    Gen{Kind: "outcast-incast", Nodes: 8, Group: 3, Fanout: 3},
		flows: []genFlow{
			{1, 0, 0, 0, 0},
			{2, 0, 0, 0, 0}, {2, 4, 0, 0, 0}, {2, 5, 0, 0, 0},
			{3, 0, 0, 0, 0}, {3, 6, 0, 0, 0}, {3, 7, 0, 0, 0},
		},
	}, {
		// Fanout 0: 1 + (7−3)/2 = 3 fit, the same matrix.
		name: "outcast-incast fanout 0",
		g:    Gen{Kind: "outcast-incast", Nodes: 8, Group: 3},
		flows: []genFlow{
			{1, 0, 0, 0, 0},
			{2, 0, 0, 0, 0}, {2, 4, 0, 0, 0}, {2, 5, 0, 0, 0},
			{3, 0, 0, 0, 0}, {3, 6, 0, 0, 0}, {3, 7, 0, 0, 0},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.g.Size = size
			m := mustGenerate(t, tc.g)
			if m.Nodes != tc.g.Nodes {
				t.Errorf("Nodes %d, want %d", m.Nodes, tc.g.Nodes)
			}
			if got := genFlows(m); !slices.Equal(got, tc.flows) {
				t.Errorf("flows\n got %v\nwant %v", got, tc.flows)
			}
			// Every trigger the flows name is a oneshot, ids 1.. in order.
			var want []Trigger
			for _, f := range tc.flows {
				if id := max(f.sendDone, f.recvDone); id != 0 {
					want = append(want, Trigger{ID: id, Kind: Oneshot})
				}
			}
			slices.SortFunc(want, func(a, b Trigger) int { return a.ID - b.ID })
			if !slices.Equal(m.Triggers, want) {
				t.Errorf("triggers %v, want %v", m.Triggers, want)
			}
			for i, c := range m.Conns {
				if c.ID != i+1 || c.Size != size || c.Start != 0 || c.HasPrio || c.Line != 0 {
					t.Errorf("connection %d: %+v: want id %d, size %d, start 0, no prio, no line", i+1, c, i+1, size)
				}
			}
			if err := m.Check(); err != nil {
				t.Errorf("Check: %v", err)
			}
		})
	}
}

// The counts, hand-computed from the scripts' headers (ring:
// conns·(2g−1) flows, conns·(2g−2) triggers; alltoall: conns·(g−1),
// conns·(g−2); butterfly: conns·log2 g, conns·(log2 g − 1)), in order
// and shuffled.
func TestGenerateCounts(t *testing.T) {
	for _, tc := range []struct {
		g               Gen
		conns, triggers int
	}{
		{Gen{Kind: "allreduce-ring", Nodes: 64, Group: 8}, 64 * 15, 64 * 14},
		{Gen{Kind: "allreduce-ring", Nodes: 64, Group: 2}, 64 * 3, 64 * 2},
		{Gen{Kind: "allreduce-ring", Nodes: 48}, 48 * 95, 48 * 94},
		{Gen{Kind: "allreduce-butterfly", Nodes: 64, Group: 16}, 64 * 4, 64 * 3},
		{Gen{Kind: "allreduce-butterfly", Nodes: 96, Group: 2}, 96, 0},
		{Gen{Kind: "allreduce-butterfly", Nodes: 128}, 128 * 7, 128 * 6},
		{Gen{Kind: "alltoall", Nodes: 64, Group: 16}, 64 * 15, 64 * 14},
		{Gen{Kind: "alltoall", Nodes: 64, Group: 2}, 64, 0},
		{Gen{Kind: "alltoall", Nodes: 30, Group: 5}, 30 * 4, 30 * 3},
		{Gen{Kind: "permutation", Nodes: 64}, 64, 0},
		{Gen{Kind: "permutation", Nodes: 64, Group: 10}, 10, 0},
		{Gen{Kind: "incast", Nodes: 64}, 63, 0},
		{Gen{Kind: "incast", Nodes: 64, Group: 16}, 16, 0},
		// 1 + (63−8)/7 = 8 destinations per outcast sender: 8 + 7·7.
		{Gen{Kind: "outcast-incast", Nodes: 64, Group: 8}, 57, 0},
		{Gen{Kind: "outcast-incast", Nodes: 64, Group: 8, Fanout: 2}, 15, 0},
		{Gen{Kind: "outcast-incast", Nodes: 3}, 2, 0},
	} {
		for _, seed := range []uint64{0, 1, 0xdecaf} {
			g := tc.g
			g.Size, g.Seed = 4096, seed
			m := mustGenerate(t, g)
			if len(m.Conns) != tc.conns || len(m.Triggers) != tc.triggers {
				t.Errorf("%+v: %d flows, %d triggers; want %d, %d", g, len(m.Conns), len(m.Triggers), tc.conns, tc.triggers)
			}
		}
	}
}

// genTriggerUse checks that every trigger is activated by exactly one
// flow and starts exactly one, and returns trigger id → started flow.
func genTriggerUse(tb testing.TB, m *Matrix) map[int]int {
	tb.Helper()
	activated, started := map[int]int{}, map[int]int{}
	target := map[int]int{}
	for i, c := range m.Conns {
		for _, t := range []int{c.SendDone, c.RecvDone} {
			if t != 0 {
				activated[t]++
			}
		}
		if c.Trigger != 0 {
			started[c.Trigger]++
			target[c.Trigger] = i
		}
	}
	for _, tr := range m.Triggers {
		if activated[tr.ID] != 1 || started[tr.ID] != 1 {
			tb.Errorf("trigger %d: activated by %d flows, starts %d; want 1 and 1", tr.ID, activated[tr.ID], started[tr.ID])
		}
	}
	if len(activated) != len(m.Triggers) || len(started) != len(m.Triggers) {
		tb.Errorf("%d triggers defined, %d activated, %d start flows", len(m.Triggers), len(activated), len(started))
	}
	return target
}

// Each ring chain starts at 0, runs 2g−1 flows, each from the previous
// one's receiver to the next member of the group, and every trigger is
// used once each way; each host sends and receives 2g−1 flows.
func TestGenerateRingChains(t *testing.T) {
	for _, g := range []Gen{
		{Kind: "allreduce-ring", Nodes: 12, Group: 6, Size: 1},
		{Kind: "allreduce-ring", Nodes: 12, Group: 4, Size: 1, Seed: 7},
		{Kind: "allreduce-ring", Nodes: 9, Group: 3, Size: 1, Seed: 99},
	} {
		m := mustGenerate(t, g)
		next := genTriggerUse(t, m)
		chains := 0
		sends, recvs := map[int]int{}, map[int]int{}
		for i, c := range m.Conns {
			sends[c.Src]++
			recvs[c.Dst]++
			if c.Trigger != 0 {
				continue
			}
			chains++
			n := 1
			hops := []int{c.Src, c.Dst}
			for j := i; m.Conns[j].SendDone != 0; n++ {
				k := next[m.Conns[j].SendDone]
				if m.Conns[k].Src != m.Conns[j].Dst {
					t.Errorf("%+v: flow %d (%d→%d) follows flow %d (%d→%d)", g, k+1, m.Conns[k].Src, m.Conns[k].Dst, j+1, m.Conns[j].Src, m.Conns[j].Dst)
				}
				hops = append(hops, m.Conns[k].Dst)
				j = k
			}
			if n != 2*g.Group-1 {
				t.Errorf("%+v: chain from flow %d has %d flows, want %d", g, i+1, n, 2*g.Group-1)
			}
			// A ring: hop h and h+g are the same member, and the first g
			// hops are g distinct hosts.
			for h := g.Group; h < len(hops); h++ {
				if hops[h] != hops[h-g.Group] {
					t.Errorf("%+v: chain from flow %d visits %v: not a ring of %d", g, i+1, hops, g.Group)
					break
				}
			}
			if s := slices.Compact(slices.Sorted(slices.Values(hops[:g.Group]))); len(s) != g.Group {
				t.Errorf("%+v: chain from flow %d visits %v: repeats before %d hops", g, i+1, hops, g.Group)
			}
		}
		if chains != g.Nodes {
			t.Errorf("%+v: %d chains, want one per host (%d)", g, chains, g.Nodes)
		}
		for h := range g.Nodes {
			if sends[h] != 2*g.Group-1 || recvs[h] != 2*g.Group-1 {
				t.Errorf("%+v: host %d sends %d, receives %d; want %d each", g, h, sends[h], recvs[h], 2*g.Group-1)
			}
		}
	}
}

// Alltoall and butterfly use their triggers as the ring does: once each
// way. An alltoall flow waits for its sender's previous send; a
// butterfly flow for its sender's receive of the stage before. In a
// seeded alltoall each group's members send to one another exactly
// once.
func TestGenerateTriggersOnce(t *testing.T) {
	for _, g := range []Gen{
		{Kind: "alltoall", Nodes: 12, Group: 4, Size: 1, Seed: 3},
		{Kind: "allreduce-butterfly", Nodes: 16, Group: 8, Size: 1, Seed: 3},
		{Kind: "allreduce-butterfly", Nodes: 16, Group: 16, Size: 1},
	} {
		m := mustGenerate(t, g)
		target := genTriggerUse(t, m)
		for _, c := range m.Conns {
			if c.SendDone == 0 && c.RecvDone == 0 {
				continue
			}
			next := m.Conns[target[max(c.SendDone, c.RecvDone)]]
			switch {
			case g.Kind == "alltoall" && (c.SendDone == 0 || next.Src != c.Src):
				t.Errorf("%+v: flow %d (%d→%d) starts after flow %d (%d→%d): want the same sender's send_done", g, next.ID, next.Src, next.Dst, c.ID, c.Src, c.Dst)
			case g.Kind == "allreduce-butterfly" && (c.RecvDone == 0 || next.Src != c.Dst):
				t.Errorf("%+v: flow %d (%d→%d) starts after flow %d (%d→%d): want its sender's recv_done", g, next.ID, next.Src, next.Dst, c.ID, c.Src, c.Dst)
			}
		}
		if g.Kind == "alltoall" {
			pairs := map[[2]int]int{}
			for _, c := range m.Conns {
				pairs[[2]int{c.Src, c.Dst}]++
			}
			if len(pairs) != len(m.Conns) || len(m.Conns) != g.Nodes*(g.Group-1) {
				t.Errorf("%+v: %d distinct pairs of %d flows", g, len(pairs), len(m.Conns))
			}
		}
	}
}

// In order, a butterfly over g = 8 pairs member x with x xor 2^d at
// stage d: each ordered pair once, within the group.
func TestGenerateButterflyPartners(t *testing.T) {
	m := mustGenerate(t, Gen{Kind: "allreduce-butterfly", Nodes: 16, Group: 8, Size: 1})
	pairs := map[[2]int]int{}
	for _, c := range m.Conns {
		if x := c.Src ^ c.Dst; c.Src/8 != c.Dst/8 || (x != 1 && x != 2 && x != 4) {
			t.Errorf("flow %d: %d→%d: not butterfly partners in a group of 8", c.ID, c.Src, c.Dst)
		}
		pairs[[2]int{c.Src, c.Dst}]++
	}
	if len(pairs) != 16*3 {
		t.Errorf("%d distinct ordered pairs, want 16·3", len(pairs))
	}
}

// A permutation has no fixed point and, with every host (Group 0),
// every host sends once and receives once; seeded starts lie in
// [0, Spread] in whole microseconds.
func TestGeneratePermutation(t *testing.T) {
	for nodes := 2; nodes <= 40; nodes++ {
		for _, seed := range []uint64{0, 1, 2, 1234567} {
			g := Gen{Kind: "permutation", Nodes: nodes, Size: 1, Seed: seed, Spread: 50 * time.Microsecond}
			m := mustGenerate(t, g)
			srcs, dsts := map[int]bool{}, map[int]bool{}
			for _, c := range m.Conns {
				if c.Src == c.Dst {
					t.Errorf("%+v: %d sends to itself", g, c.Src)
				}
				if c.Start < 0 || c.Start > g.Spread || c.Start%time.Microsecond != 0 {
					t.Errorf("%+v: start %v", g, c.Start)
				}
				srcs[c.Src], dsts[c.Dst] = true, true
			}
			if len(m.Conns) != nodes || len(srcs) != nodes || len(dsts) != nodes {
				t.Errorf("%+v: %d flows from %d hosts to %d: not a permutation", g, len(m.Conns), len(srcs), len(dsts))
			}
		}
	}
}

// A collective's spread moves its chains' first flows (a butterfly's
// first stage), each to a whole microsecond in [0, Spread], and no
// triggered flow; the chains are as without it.
func TestGenerateCollectiveSpread(t *testing.T) {
	for _, kind := range []string{"allreduce-ring", "allreduce-butterfly", "alltoall"} {
		g := Gen{Kind: kind, Nodes: 8, Size: 1000, Spread: 12 * time.Millisecond}
		m, plain := mustGenerate(t, g), mustGenerate(t, Gen{Kind: kind, Nodes: 8, Size: 1000})
		starts := map[time.Duration]bool{}
		untriggered := 0
		for i, c := range m.Conns {
			p := plain.Conns[i]
			p.Start = c.Start
			if c != p {
				t.Errorf("%s flow %d: %+v, want %+v but for its start", kind, i, c, plain.Conns[i])
			}
			if c.Trigger != 0 {
				if c.Start != 0 {
					t.Errorf("%s flow %d: triggered, start %v", kind, i, c.Start)
				}
				continue
			}
			untriggered++
			if c.Start < 0 || c.Start > g.Spread || c.Start%time.Microsecond != 0 {
				t.Errorf("%s flow %d: start %v, want whole µs in [0, %v]", kind, i, c.Start, g.Spread)
			}
			starts[c.Start] = true
		}
		if untriggered < 4 || len(starts) < untriggered/2 {
			t.Errorf("%s: %d distinct starts over %d untriggered flows: not spread", kind, len(starts), untriggered)
		}
	}
}

// A seeded incast draws its senders from hosts 1.. and its starts over
// the whole of [0, Spread].
func TestGenerateIncastSeeded(t *testing.T) {
	g := Gen{Kind: "incast", Nodes: 64, Group: 40, Size: 1, Seed: 5, Spread: 3 * time.Microsecond}
	m := mustGenerate(t, g)
	senders := map[int]bool{}
	var starts []time.Duration
	for _, c := range m.Conns {
		if c.Dst != 0 || c.Src == 0 {
			t.Errorf("flow %d→%d: want a sender other than 0 to 0", c.Src, c.Dst)
		}
		senders[c.Src] = true
		starts = append(starts, c.Start)
	}
	if len(senders) != 40 {
		t.Errorf("%d distinct senders, want 40", len(senders))
	}
	slices.Sort(starts)
	if got := slices.Compact(starts); !slices.Equal(got, []time.Duration{0, time.Microsecond, 2 * time.Microsecond, 3 * time.Microsecond}) {
		t.Errorf("starts %v: want each of 0..3 µs", got)
	}
	// In order the senders are 1..40; a seed picks others.
	inOrder := true
	for i, c := range m.Conns {
		inOrder = inOrder && c.Src == i+1
	}
	if inOrder {
		t.Error("seed 5 kept the senders in order")
	}
}

// A seeded outcast-incast keeps host 0 as the destination and gives
// each outcast destination to one flow only.
func TestGenerateOutcastIncastSeeded(t *testing.T) {
	g := Gen{Kind: "outcast-incast", Nodes: 32, Group: 5, Fanout: 4, Size: 1, Seed: 11}
	m := mustGenerate(t, g)
	incast, others := map[int]bool{}, map[int]int{}
	for _, c := range m.Conns {
		if c.Dst == 0 {
			incast[c.Src] = true
		} else {
			others[c.Dst]++
		}
	}
	if len(incast) != 5 || len(others) != 4*3 {
		t.Errorf("%d incast senders, %d outcast destinations; want 5, 12", len(incast), len(others))
	}
	for h, n := range others {
		if n != 1 || incast[h] {
			t.Errorf("host %d: %d outcast flows to it, incast sender %v", h, n, incast[h])
		}
	}
}

// Generate is a function of its Gen; the seed changes the order.
func TestGenerateDeterministic(t *testing.T) {
	for _, kind := range Kinds {
		g := Gen{Kind: kind, Nodes: 16, Size: 10, Seed: 42}
		if kind == "allreduce-ring" || kind == "alltoall" || kind == "allreduce-butterfly" {
			g.Group = 4
		}
		if kind != "outcast-incast" {
			g.Spread = 100 * time.Microsecond
		}
		a, b := mustGenerate(t, g), mustGenerate(t, g)
		if !genSame(a, b) {
			t.Errorf("%s: two runs differ", kind)
		}
		g.Seed = 43
		if genSame(a, mustGenerate(t, g)) {
			t.Errorf("%s: seeds 42 and 43 give the same matrix", kind)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	ok := func(kind string) Gen { return Gen{Kind: kind, Nodes: 8, Size: 1000} }
	with := func(g Gen, f func(*Gen)) Gen { f(&g); return g }
	for _, tc := range []struct {
		g    Gen
		want string
	}{
		{Gen{Kind: "ring", Nodes: 8, Size: 1}, `cm: gen: kind "ring": must be one of allreduce-ring, allreduce-butterfly, alltoall, permutation, incast, outcast-incast`},
		{with(ok("allreduce-ring"), func(g *Gen) { g.Group = 3 }), "cm: gen allreduce-ring: group 3: must divide nodes 8 (2..8)"},
		{with(ok("allreduce-ring"), func(g *Gen) { g.Group = 1 }), "cm: gen allreduce-ring: group 1: must divide nodes 8 (2..8)"},
		{with(ok("alltoall"), func(g *Gen) { g.Group = 16 }), "cm: gen alltoall: group 16: must divide nodes 8 (2..8)"},
		{with(ok("allreduce-ring"), func(g *Gen) { g.Nodes = 1 }), "cm: gen allreduce-ring: nodes 1: must be 2..65536"},
		{with(ok("permutation"), func(g *Gen) { g.Nodes = 65537 }), "cm: gen permutation: nodes 65537: must be 2..65536"},
		{with(ok("outcast-incast"), func(g *Gen) { g.Nodes = 2 }), "cm: gen outcast-incast: nodes 2: must be 3..65536"},
		{with(ok("incast"), func(g *Gen) { g.Size = 0 }), "cm: gen incast: size 0: must be 1..2147483647 bytes (htsim reads it with stoi)"},
		{with(ok("incast"), func(g *Gen) { g.Size = 1 << 31 }), "cm: gen incast: size 2147483648: must be 1..2147483647 bytes (htsim reads it with stoi)"},
		{with(ok("allreduce-butterfly"), func(g *Gen) { g.Nodes = 12 }), "cm: gen allreduce-butterfly: group 0 (= 12): must be a power of two dividing nodes 12 (2, 4)"},
		{with(ok("allreduce-butterfly"), func(g *Gen) { g.Group = 6; g.Nodes = 12 }), "cm: gen allreduce-butterfly: group 6: must be a power of two dividing nodes 12 (2, 4)"},
		{with(ok("allreduce-butterfly"), func(g *Gen) { g.Nodes = 9; g.Group = 3 }), "cm: gen allreduce-butterfly: group 3: must be a power of two dividing nodes 9 (none: nodes is odd)"},
		{with(ok("permutation"), func(g *Gen) { g.Group = 9 }), "cm: gen permutation: group 9: must be 1..8 flows (0: nodes)"},
		{with(ok("incast"), func(g *Gen) { g.Group = 8 }), "cm: gen incast: group 8: must be 1..7 senders (0: nodes−1)"},
		{with(ok("outcast-incast"), func(g *Gen) { g.Group = 1 }), "cm: gen outcast-incast: group 1: must be 2..7 senders (0: nodes−1)"},
		// 1 + (7−3)/2 = 3 destinations fit per outcast sender.
		{with(ok("outcast-incast"), func(g *Gen) { g.Group = 3; g.Fanout = 4 }), "cm: gen outcast-incast: fanout 4: must be 1..3 with group 3 and nodes 8 (0: as many as fit)"},
		{with(ok("alltoall"), func(g *Gen) { g.Fanout = 2 }), "cm: gen alltoall: fanout 2: must be 0: only outcast-incast has a fan-out"},
		{with(ok("incast"), func(g *Gen) { g.Spread = 1500 * time.Nanosecond }), "cm: gen incast: spread 1.5µs: must be whole microseconds, 0..16.777216s (htsim reads a start as a float)"},
		{with(ok("permutation"), func(g *Gen) { g.Spread = 17 * time.Second }), "cm: gen permutation: spread 17s: must be whole microseconds, 0..16.777216s (htsim reads a start as a float)"},
		{with(ok("incast"), func(g *Gen) { g.Spread = -time.Microsecond }), "cm: gen incast: spread -1µs: must be whole microseconds, 0..16.777216s (htsim reads a start as a float)"},
		{with(ok("allreduce-ring"), func(g *Gen) { g.Spread = 2500 * time.Nanosecond }), "cm: gen allreduce-ring: spread 2.5µs: must be whole microseconds, 0..16.777216s (htsim reads a start as a float)"},
		{with(ok("outcast-incast"), func(g *Gen) { g.Spread = time.Millisecond }), "cm: gen outcast-incast: spread 1ms: must be 0: outcast-incast starts its flows at 0"},
		// 65536·(2·16−1) = 2031616 flows.
		{Gen{Kind: "allreduce-ring", Nodes: 65536, Group: 16, Size: 1}, "cm: gen allreduce-ring: group 16: must keep the flows at most 1048576: allreduce-ring over 65536 nodes with group 16 is 2031616"},
		// Every field's refusal, joined.
		{Gen{Kind: "alltoall", Nodes: 8, Group: 3, Fanout: 1, Spread: 17 * time.Second}, "cm: gen alltoall: size 0: must be 1..2147483647 bytes (htsim reads it with stoi)\n" +
			"cm: gen alltoall: spread 17s: must be whole microseconds, 0..16.777216s (htsim reads a start as a float)\n" +
			"cm: gen alltoall: fanout 1: must be 0: only outcast-incast has a fan-out\n" +
			"cm: gen alltoall: group 3: must divide nodes 8 (2..8)"},
	} {
		m, err := Generate(tc.g)
		if err == nil {
			t.Errorf("%+v: no error, %d flows", tc.g, len(m.Conns))
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.g, err, tc.want)
		}
		var ge *GenError
		if !errors.As(err, &ge) || ge.Field == "" {
			t.Errorf("%+v: %v is not a *GenError", tc.g, err)
		}
	}
}

// genSame compares two matrices but for their lines.
func genSame(a, b *Matrix) bool {
	strip := func(m *Matrix) ([]Conn, []Trigger) {
		cs, ts := slices.Clone(m.Conns), slices.Clone(m.Triggers)
		for i := range cs {
			cs[i].Line = 0
		}
		for i := range ts {
			ts[i].Line = 0
		}
		return cs, ts
	}
	ac, at := strip(a)
	bc, bt := strip(b)
	return a.Nodes == b.Nodes && slices.Equal(ac, bc) && slices.Equal(at, bt)
}

// Generate → WriteTo → Parse gives the matrix back, and Check takes it.
func TestGenerateRoundTrip(t *testing.T) {
	var gens []Gen
	for _, seed := range []uint64{0, 77} {
		gens = append(gens,
			Gen{Kind: "allreduce-ring", Nodes: 12, Group: 4, Size: 2_000_000, Seed: seed},
			Gen{Kind: "allreduce-ring", Nodes: 8, Size: 131072, Seed: seed, Spread: 12 * time.Millisecond},
			Gen{Kind: "allreduce-butterfly", Nodes: 8, Size: 65536, Seed: seed, Spread: 5 * time.Microsecond},
			Gen{Kind: "alltoall", Nodes: 8, Size: 1 << 20, Seed: seed, Spread: 40 * time.Microsecond},
			Gen{Kind: "allreduce-ring", Nodes: 5, Size: 1, Seed: seed},
			Gen{Kind: "allreduce-butterfly", Nodes: 32, Group: 8, Size: 65536, Seed: seed},
			Gen{Kind: "allreduce-butterfly", Nodes: 4, Group: 2, Size: 65536, Seed: seed},
			Gen{Kind: "alltoall", Nodes: 16, Size: 1 << 20, Seed: seed},
			Gen{Kind: "alltoall", Nodes: 6, Group: 2, Size: 1 << 20, Seed: seed},
			Gen{Kind: "permutation", Nodes: 33, Size: 1000, Seed: seed, Spread: 20 * time.Microsecond},
			Gen{Kind: "permutation", Nodes: 2, Size: 1000, Seed: seed},
			Gen{Kind: "incast", Nodes: 64, Group: 32, Size: 1<<31 - 1, Seed: seed, Spread: 16777216 * time.Microsecond},
			Gen{Kind: "outcast-incast", Nodes: 40, Group: 6, Size: 4096, Seed: seed},
		)
	}
	for _, g := range gens {
		m := mustGenerate(t, g)
		if err := m.Check(); err != nil {
			t.Errorf("%+v: Check: %v", g, err)
			continue
		}
		var b bytes.Buffer
		if _, err := m.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		back, err := Parse(&b)
		if err != nil {
			t.Errorf("%+v: Parse of WriteTo: %v", g, err)
			continue
		}
		if !genSame(m, back) {
			t.Errorf("%+v: round trip differs", g)
		}
	}
}

// alltoall over the host order of htsim's own alltoall_serial_16n.cm
// (gen_serial_alltoall.py 16 16 16 2000000 0 <seed>: its shuffled
// order read off the first flow of each chain) writes that file byte
// for byte.
func TestGenerateAlltoallSample(t *testing.T) {
	order := []int{2, 11, 4, 8, 9, 15, 5, 7, 10, 12, 6, 3, 1, 14, 0, 13}
	m := genAlltoall(order, 16, 2000000)
	var b bytes.Buffer
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	head := "Nodes 16\nConnections 240\nTriggers 224\n" +
		"2->11 id 1 start 0 size 2000000 send_done_trigger 1\n" +
		"2->4 id 2 trigger 1 size 2000000 send_done_trigger 2\n"
	if !strings.HasPrefix(b.String(), head) {
		t.Fatalf("begins\n%s\nwant\n%s", b.String()[:len(head)], head)
	}
	const sample = "ef77da5ad5c12f8369a0de6d2e0d69de4b0bb257e106fafa82e441e757db02c9" // sha256sum alltoall_serial_16n.cm
	if sum := sha256.Sum256(b.Bytes()); hex.EncodeToString(sum[:]) != sample {
		t.Errorf("sha256 %x, want htsim's file's %s (%d bytes written, the file has 467 lines)", sum, sample, b.Len())
	}
	if n := strings.Count(b.String(), "\n"); n != 467 {
		t.Errorf("%d lines, want 467", n)
	}
}

func ExampleGenerate() {
	m, err := Generate(Gen{Kind: "alltoall", Nodes: 3, Size: 4096})
	if err != nil {
		fmt.Println(err)
		return
	}
	m.WriteTo(os.Stdout)
	// Output:
	// Nodes 3
	// Connections 6
	// Triggers 3
	// 0->1 id 1 start 0 size 4096 send_done_trigger 1
	// 0->2 id 2 trigger 1 size 4096
	// 1->2 id 3 start 0 size 4096 send_done_trigger 2
	// 1->0 id 4 trigger 2 size 4096
	// 2->0 id 5 start 0 size 4096 send_done_trigger 3
	// 2->1 id 6 trigger 3 size 4096
	// trigger id 1 oneshot
	// trigger id 2 oneshot
	// trigger id 3 oneshot
}
