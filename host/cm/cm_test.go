package cm

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// ring3 is htsim's gen_allreduce.py output shape for one chain plus a
// barrier and a multishot: written out by hand.
const ring3 = `# hand-written
Nodes 4
Connections 7
Triggers 3
0->1 id 1 start 0 size 1000 send_done_trigger 1
1->2 id 2 trigger 1 size 1000 send_done_trigger 2
2->0 id 3 start 5.9 size 1000 send_done_trigger 2
0->3 id 4 trigger 2 size 500 recv_done_trigger 3
1->3 id 5 trigger 2 size 500 recv_done_trigger 3
3->0 id 6 trigger 3 size 100 prio 3
3->1 id 7 trigger 3 size 100
trigger id 1 oneshot
trigger id 2 barrier count 2
trigger id 3 multishot
`

func TestParse(t *testing.T) {
	m, err := Parse(strings.NewReader(ring3))
	if err != nil {
		t.Fatal(err)
	}
	if m.Nodes != 4 || len(m.Conns) != 7 || len(m.Triggers) != 3 {
		t.Fatalf("nodes %d, conns %d, triggers %d", m.Nodes, len(m.Conns), len(m.Triggers))
	}
	want := Conn{Line: 7, Src: 2, Dst: 0, ID: 3, Start: 5 * time.Microsecond, Size: 1000, SendDone: 2}
	if m.Conns[2] != want {
		t.Errorf("line 7: %+v, want %+v (start truncated to whole µs, as htsim's (uint32_t))", m.Conns[2], want)
	}
	if c := m.Conns[5]; !c.HasPrio || c.Prio != 3 || c.Trigger != 3 {
		t.Errorf("line 10: %+v", c)
	}
	if tr := m.Triggers[1]; tr != (Trigger{Line: 13, ID: 2, Kind: Barrier, Count: 2}) {
		t.Errorf("barrier: %+v", tr)
	}
}

func TestParseErrors(t *testing.T) {
	head := "Nodes 4\nConnections 1\n"
	for _, tc := range []struct{ in, want string }{
		{head + "0->1 start 0 size 10 color red\n", `line 3: "color": unknown word`},
		{head + "0->4 start 0 size 10\n", `line 3: "4": want a whole number 0..3`},
		{head + "0->0 start 0 size 10\n", `line 3: "0->0": a flow from a node to itself`},
		{head + "0->1 size 10\n", "line 3: no start method"},
		{head + "0->1 start 0\n", "line 3: no size"},
		{head + "0->1 start -1 size 10\n", `line 3: "-1": start wants microseconds`},
		{head + "0->1 start 0 size 0\n", `line 3: "0": want a whole number 1..2147483647`},
		{head + "0->1 start 0 size 12abc\n", `"12abc": want a whole number`},
		{head + "0->1 start 0 size 10 size 11\n", `"size": given twice`},
		{head + "0->1 start 0 size\n", `"size": wants a value`},
		{head + "0->1 id 1 msg start 0 size 10\n", `line 3: "msg": messages on a reused connection are not supported`},
		{head + "Triggers 1\n0->1 id 1 start 0 trigger 1 size 10\ntrigger id 1 oneshot\n", "line 4: both a start time and a trigger"},
		{head + "Triggers 1\n0->1 trigger 1 size 10\ntrigger id 1 oneshot\n", "line 4: a triggered flow needs an id"},
		{head + "0->1 start 0 size 10\n0->2 start 0 size 10\n", "line 4: more connections than the 1 the header declares"},
		{"Nodes 4\nConnections 2\n0->1 start 0 size 10\n", "the header declares 2 connections, the file has 1"},
		{head + "Triggers 2\n0->1 id 1 start 0 size 10 send_done_trigger 1\ntrigger id 1 oneshot\n", "the header declares 2 triggers, the file has 1"},
		{head + "Failures 1\n", `line 3: "Failures": link and switch failures are not supported`},
		{head + "0->1 start 0 size 10\nfailure switch_type TOR\n", `line 4: "failure"`},
		{head + "0->1 start 0 size 10\nflow 0 1\n", `line 4: "flow": unknown word`},
		{head + "0->1 id 1 start 0 size 10 send_done_trigger 9\n", `line 3: "send_done_trigger": connection 1 names trigger 9, which no trigger line defines`},
		{"Connections 1\n0->1 start 0 size 10\n", "line 2: the header has no Nodes line"},
		{head + "Triggers 1\n0->1 start 0 size 10\ntrigger id 1\n", "line 5: a trigger with no kind"},
		{head + "Triggers 1\n0->1 start 0 size 10\ntrigger oneshot\n", "line 5: a trigger with no id"},
		{head + "Triggers 1\n0->1 start 0 size 10\ntrigger id 1 barrier\n", "line 5: a barrier needs count N"},
		{head + "Triggers 1\n0->1 start 0 size 10\ntrigger id 1 oneshot barrier\n", `line 5: "barrier": a second kind`},
	} {
		_, err := Parse(strings.NewReader(tc.in))
		var ce *Error
		if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

// TestCheck: what htsim aborts on mid-run, and flows that never start,
// are refused with their lines.
func TestCheck(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// Two flows activate a oneshot: htsim asserts on the second.
		{`Nodes 3
Connections 3
Triggers 1
0->1 id 1 start 0 size 10 send_done_trigger 1
1->2 id 2 start 0 size 10 send_done_trigger 1
2->0 id 3 trigger 1 size 10
trigger id 1 oneshot
`, "line 7: oneshot trigger 1 is activated by 2 flows (line 4, line 5)"},
		// A barrier of 3 with 2 activators never fires.
		{`Nodes 3
Connections 3
Triggers 1
0->1 id 1 start 0 size 10 send_done_trigger 1
1->2 id 2 start 0 size 10 send_done_trigger 1
2->0 id 3 trigger 1 size 10
trigger id 1 barrier count 3
`, "line 7: barrier 1 waits for 3 activations, 2 flows activate it"},
		// A cycle: each flow waits for the other.
		{`Nodes 2
Connections 2
Triggers 2
0->1 id 1 trigger 1 size 10 send_done_trigger 2
1->0 id 2 trigger 2 size 10 send_done_trigger 1
trigger id 1 oneshot
trigger id 2 oneshot
`, "line 4: connection 1 (id 1) never starts"},
		// A multishot with one activation and two targets.
		{`Nodes 3
Connections 3
Triggers 1
0->1 id 1 start 0 size 10 send_done_trigger 1
1->2 id 2 trigger 1 size 10
2->0 id 3 trigger 1 size 10
trigger id 1 multishot
`, "line 6: connection 3 (id 3) never starts"},
		{`Nodes 2
Connections 2
0->1 id 1 start 0 size 10
1->0 id 1 start 0 size 10
`, "line 4: flow id 1 also on connection 1 at line 3"},
		{`Nodes 2
Connections 1
Triggers 1
0->1 id 1 start 0 size 10 send_done_trigger 1
trigger id 1 oneshot
`, "line 5: trigger 1 fires with no flow to start"},
		{`Nodes 3
Connections 2
Triggers 2
0->1 id 1 start 0 size 10 send_done_trigger 1
1->2 id 2 trigger 1 size 10
trigger id 1 oneshot
trigger id 1 oneshot
`, "line 7: trigger 1 defined again (first at line 6)"},
	} {
		_, err := Parse(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestScheduler steps the triggers of ring3 by hand.
func TestScheduler(t *testing.T) {
	m, err := Parse(strings.NewReader(ring3))
	if err != nil {
		t.Fatal(err)
	}
	s := NewScheduler(m)
	if got := s.Timed(); !slices.Equal(got, []int{0, 2}) {
		t.Fatalf("timed %v, want [0 2]", got)
	}
	step := func(what string, f func(int) ([]int, error), i int, want ...int) {
		t.Helper()
		got, err := f(i)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s %d: start %v (err %v), want %v", what, i, got, err, want)
		}
	}
	step("recv done", s.RecvDone, 0)       // no recv trigger
	step("send done", s.SendDone, 0, 1)    // oneshot 1 → flow 2
	step("send done", s.SendDone, 2)       // barrier 2: 1 of 2
	step("recv done", s.RecvDone, 1)       // none
	step("send done", s.SendDone, 1, 3, 4) // barrier 2: 2 of 2 → flows 4, 5
	step("recv done", s.RecvDone, 4, 5)    // multishot 3 → its first target, flow 6
	step("recv done", s.RecvDone, 3, 6)    // → flow 7
	if _, err := s.SendDone(1); err == nil {
		t.Error("a sender done twice: want an error")
	}
}

// TestBarrierExactlyN: a barrier fires at its N-th activation, not
// before; the N+1-th is an error (htsim aborts).
func TestBarrierExactlyN(t *testing.T) {
	for n := 1; n <= 5; n++ {
		m := &Matrix{Nodes: n + 1, Triggers: []Trigger{{ID: 7, Kind: Barrier, Count: n}}}
		for i := range n {
			m.Conns = append(m.Conns, Conn{Src: i, Dst: n, ID: i + 1, Size: 1, SendDone: 7})
		}
		m.Conns = append(m.Conns, Conn{Src: n, Dst: 0, ID: n + 1, Size: 1, Trigger: 7})
		if err := m.Check(); err != nil {
			t.Fatal(err)
		}
		s := NewScheduler(m)
		for i := range n {
			got, err := s.SendDone(i)
			if err != nil {
				t.Fatal(err)
			}
			if fired := len(got) > 0; fired != (i == n-1) {
				t.Fatalf("barrier of %d: activation %d started %v", n, i+1, got)
			}
		}
		if _, err := s.activate(7); err == nil {
			t.Errorf("barrier of %d activated %d times: want an error", n, n+1)
		}
	}
}

// TestReplay: ring3 with every flow taking its size in µs to send and
// half of that to receive.
func TestReplay(t *testing.T) {
	m, err := Parse(strings.NewReader(ring3))
	if err != nil {
		t.Fatal(err)
	}
	us := time.Microsecond
	start, end, err := m.Replay(func(i int) (time.Duration, time.Duration) {
		d := time.Duration(m.Conns[i].Size) * us
		return d, d / 2
	})
	if err != nil {
		t.Fatal(err)
	}
	// 1: 0..1000; 3: 5..1005; 2 starts at 1000 (oneshot), ends 2000;
	// barrier fires at 2000 → 4, 5 start, receive at 2250 (4 first in
	// connection order → 6, then 5 → 7), send done 2500.
	wantStart := []time.Duration{0, 1000 * us, 5 * us, 2000 * us, 2000 * us, 2250 * us, 2250 * us}
	wantEnd := []time.Duration{1000 * us, 2000 * us, 1005 * us, 2500 * us, 2500 * us, 2350 * us, 2350 * us}
	if !slices.Equal(start, wantStart) || !slices.Equal(end, wantEnd) {
		t.Errorf("start %v\nend %v\nwant %v\n%v", start, end, wantStart, wantEnd)
	}
}

func TestGroups(t *testing.T) {
	m, err := Parse(strings.NewReader(ring3 + ""))
	if err != nil {
		t.Fatal(err)
	}
	if g := m.Groups(); len(g) != 1 || len(g[0]) != 7 {
		t.Errorf("ring3 groups %v: want one of 7", g)
	}
	in := "Nodes 4\nConnections 3\n0->3 start 0 size 1\n1->3 start 0 size 1\n2->3 start 0 size 1\n"
	m, err = Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if g := m.Groups(); len(g) != 3 {
		t.Errorf("incast groups %v: want 3 of one", g)
	}
}

func TestWriteRoundTrip(t *testing.T) {
	m, err := Parse(strings.NewReader(ring3))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	n, err := m.WriteTo(&b)
	if err != nil || n != int64(b.Len()) {
		t.Fatal(n, err)
	}
	want := `Nodes 4
Connections 7
Triggers 3
0->1 id 1 start 0 size 1000 send_done_trigger 1
1->2 id 2 trigger 1 size 1000 send_done_trigger 2
2->0 id 3 start 5 size 1000 send_done_trigger 2
0->3 id 4 trigger 2 size 500 recv_done_trigger 3
1->3 id 5 trigger 2 size 500 recv_done_trigger 3
3->0 id 6 trigger 3 size 100 prio 3
3->1 id 7 trigger 3 size 100
trigger id 1 oneshot
trigger id 2 barrier count 2
trigger id 3 multishot
`
	if b.String() != want {
		t.Errorf("wrote\n%s\nwant\n%s", b.String(), want)
	}
	back, err := Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !sameMatrix(m, back) {
		t.Errorf("round trip differs")
	}
}

// sameMatrix compares two matrices but for their lines.
func sameMatrix(a, b *Matrix) bool {
	if a.Nodes != b.Nodes || len(a.Conns) != len(b.Conns) || len(a.Triggers) != len(b.Triggers) {
		return false
	}
	for i := range a.Conns {
		x, y := a.Conns[i], b.Conns[i]
		x.Line, y.Line = 0, 0
		if x != y {
			return false
		}
	}
	for i := range a.Triggers {
		x, y := a.Triggers[i], b.Triggers[i]
		x.Line, y.Line = 0, 0
		if x != y {
			return false
		}
	}
	return true
}

// FuzzParse: any input is a matrix or an *Error, never a panic; a
// matrix writes and reads back the same.
func FuzzParse(f *testing.F) {
	f.Add(ring3)
	f.Add("Nodes 2\nConnections 1\n0->1 start 0 size 10\n")
	f.Add("Nodes 3\nConnections 2\nTriggers 1\n0->1 id 1 start 0 size 9 recv_done_trigger 1\n1->2 id 2 trigger 1 size 9\ntrigger id 1 barrier count 1\n")
	f.Fuzz(func(t *testing.T, in string) {
		m, err := Parse(strings.NewReader(in))
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		var b bytes.Buffer
		if _, err := m.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		back, err := Parse(&b)
		if err != nil {
			t.Fatalf("written back %q: %v", b.String(), err)
		}
		if !sameMatrix(m, back) {
			t.Fatalf("round trip of %q differs", in)
		}
	})
}
