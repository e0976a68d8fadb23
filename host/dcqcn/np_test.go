package dcqcn

import (
	"slices"
	"testing"
	"time"
)

// runNP feeds CE-marked packets at the given times and polls the NP at
// every due time it reports, like the caller's scheduler; it returns the
// CNP send times up to end (exclusive).
func runNP(n *NP, ces []time.Duration, end time.Duration) []time.Duration {
	var sent []time.Duration
	poll := func(upTo time.Duration) {
		for {
			due, pending := n.Next()
			if !pending || due > upTo || due >= end {
				return
			}
			if n.Poll(due) {
				sent = append(sent, due)
			}
		}
	}
	for _, at := range ces {
		poll(at)
		if n.OnCE(at) {
			sent = append(sent, at)
		}
	}
	poll(end)
	return sent
}

func every(step, end time.Duration) []time.Duration {
	var ts []time.Duration
	for t := time.Duration(0); t < end; t += step {
		ts = append(ts, t)
	}
	return ts
}

// dcqcn.md §NP: continuous CE for 1 ms with N = 50 µs gives exactly 20 CNPs
// at 0, 50, …, 950 µs.
func TestNPContinuousCE(t *testing.T) {
	var want []time.Duration
	for i := range 20 {
		want = append(want, time.Duration(i)*50*usec)
	}
	tests := []struct {
		name string
		gap  time.Duration
	}{
		{"a CE every 1 µs", usec},
		{"every 1500 B packet at 10 Gbit/s", 1200 * time.Nanosecond},
		{"every 1024 B packet at 10 Gbit/s", 819 * time.Nanosecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := NewNP(50 * usec)
			ces := every(tc.gap, time.Millisecond)
			got := runNP(n, ces, time.Millisecond)
			if !slices.Equal(got, want) {
				t.Errorf("CNPs at %v\nwant %v", got, want)
			}
			st := n.Stats()
			if st.CNPsSent != 20 || st.CEPackets != uint64(len(ces)) {
				t.Errorf("stats = %+v, want 20 CNPs, %d CE", st, len(ces))
			}
			// The last CE (at 999 µs or so) leaves one CNP pending, due at
			// 1 ms: outside the 1 ms window.
			if due, pending := n.Next(); !pending || due != time.Millisecond {
				t.Errorf("Next = %v, %v; want 1ms, pending", due, pending)
			}
		})
	}
}

func TestNPTwoQPs(t *testing.T) {
	a, b := NewNP(50*usec), NewNP(50*usec)
	var sa, sb int
	for now := time.Duration(0); now < time.Millisecond; now += 500 * time.Nanosecond {
		if a.Poll(now) {
			sa++
		}
		if b.Poll(now) {
			sb++
		}
		// The CE-marked packets of the two QPs interleave.
		if now%usec == 0 {
			if a.OnCE(now) {
				sa++
			}
		} else if b.OnCE(now) {
			sb++
		}
	}
	if sa != 20 || sb != 20 {
		t.Errorf("CNPs per QP = %d, %d; want 20 each", sa, sb)
	}
}

func TestNPGap(t *testing.T) {
	n := NewNP(50 * usec)
	steps := []struct {
		at       time.Duration
		ce, want bool
	}{
		{0, true, true},
		{10 * usec, true, false}, // pending, due at 50 µs
		{49 * usec, false, false},
		{50 * usec, false, true}, // the pending CNP
		{60 * usec, false, false},
		{200 * usec, true, true}, // gap > N: at once
		{201 * usec, true, false},
		{260 * usec, true, true}, // the pending one was due at 250; this CE sends it
		{261 * usec, false, false},
	}
	for _, s := range steps {
		var got bool
		if s.ce {
			got = n.OnCE(s.at)
		} else {
			got = n.Poll(s.at)
		}
		if got != s.want {
			t.Errorf("%v (CE %v): send = %v, want %v", s.at, s.ce, got, s.want)
		}
	}
	if st := n.Stats(); st.CNPsSent != 4 || st.CEPackets != 5 {
		t.Errorf("stats = %+v, want 4 CNPs, 5 CE", st)
	}
	if _, pending := n.Next(); pending {
		t.Error("a CNP is still pending")
	}
}

func TestNPNoCoalescing(t *testing.T) {
	n := NewNP(0)
	for i := range 10 {
		if !n.OnCE(time.Duration(i)) {
			t.Fatalf("CE %d: no CNP with N = 0", i)
		}
	}
}
