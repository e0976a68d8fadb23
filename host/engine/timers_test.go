package engine

import (
	"testing"
	"time"
)

type timedItem struct {
	name string
	Deadline
}

// TestTimers: earliest first, a later Set moves an item, Never and Remove
// take it out, PopDue stops at now.
func TestTimers(t *testing.T) {
	var tm Timers[*timedItem]
	a, b, c := &timedItem{name: "a"}, &timedItem{name: "b"}, &timedItem{name: "c"}
	if tm.Next() != Never {
		t.Fatalf("empty: Next %v", tm.Next())
	}
	tm.Set(a, 30)
	tm.Set(b, 10)
	tm.Set(c, 20)
	tm.Set(b, 40) // moves b after a
	tm.Remove(c)
	tm.Remove(c) // not there: nothing
	if tm.Len() != 2 || tm.Next() != 30 {
		t.Fatalf("Len %d Next %v, want 2 and 30", tm.Len(), tm.Next())
	}
	if _, ok := tm.PopDue(29); ok {
		t.Fatal("PopDue(29) took an item due at 30")
	}
	var got []string
	for now := time.Duration(30); ; now += 10 {
		x, ok := tm.PopDue(now)
		if !ok {
			break
		}
		got = append(got, x.name)
	}
	tm.Set(c, 5)
	tm.Set(c, Never)
	if len(got) != 2 || got[0] != "a" || got[1] != "b" || tm.Len() != 0 {
		t.Errorf("popped %v, %d left; want [a b], 0", got, tm.Len())
	}
}
