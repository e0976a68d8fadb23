package main

import (
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/bpf"
)

// The smoke's one trial of the ECN♯ persistent row: its first timed run
// stalled past ins_target, so its detection mark is booked as
// instantaneous. The state's count shows the decision; a run without a
// stall to explain it still fails.
func TestCheckDequeueAQMPersistentMaskedByStall(t *testing.T) {
	check := checkDequeueAQM(markNone, markSome, true)
	d := delta{dequeued: 20001, primed: 1, marked: 1, insMarks: 1, stalled: 1,
		aqm: bpf.PortAqmState{Marking: 1, Count: 1}}
	out, err := check(d)
	if err != nil {
		t.Fatalf("masked detection mark refused: %v", err)
	}
	if !strings.Contains(out, "HOST-DISTORTED") {
		t.Errorf("output %q does not say the host distorted the row", out)
	}

	d.stalled = 0
	if _, err := check(d); err == nil {
		t.Error("an instantaneous mark without a stalled run passed")
	}
	d = delta{dequeued: 20001, primed: 1, aqm: bpf.PortAqmState{Marking: 0}}
	if _, err := check(d); err == nil {
		t.Error("no persistent decision at all passed")
	}
	d = delta{dequeued: 20001, primed: 1, marked: 3, pstMarks: 3, aqm: bpf.PortAqmState{Marking: 1, Count: 3}}
	if out, err := check(d); err != nil || strings.Contains(out, "HOST-DISTORTED") {
		t.Errorf("a clean row: %q, %v", out, err)
	}
}
