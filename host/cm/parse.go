package cm

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxLine bounds a line's length: htsim's generators write under 120
// bytes; a longer line is not a matrix.
const maxLine = 4096

// maxConns bounds the connections a file may declare (htsim's largest
// shipped matrices hold 8,192 nodes' incasts and permutations).
const maxConns = 1 << 20

// Parse reads a connection matrix as htsim's reader does, then Checks
// it. Where htsim is silent or aborts it is strict: an unknown word, a
// number that is not one whole, a count that does not match, a node out
// of range, msg, failure lines and what Check refuses are errors that
// name the line.
func Parse(r io.Reader) (*Matrix, error) {
	m := &Matrix{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxLine)
	declConns, declTriggers := -1, 0
	var seenNodes bool
	header := true
	line := 0
	for sc.Scan() {
		line++
		tok := strings.Fields(sc.Text())
		if len(tok) == 0 || strings.HasPrefix(tok[0], "#") {
			continue
		}
		if header {
			n := 0
			switch tok[0] {
			case "Nodes", "Connections", "Triggers", "Failures":
				if len(tok) != 2 {
					return nil, &Error{Line: line, Word: tok[0], Msg: "wants one number"}
				}
				var err error
				if n, err = atoi(line, tok[1], 0, maxConns); err != nil {
					return nil, err
				}
			}
			switch tok[0] {
			case "Nodes":
				if n < 1 {
					return nil, &Error{Line: line, Word: tok[1], Msg: "Nodes must be at least 1"}
				}
				m.Nodes, seenNodes = n, true
				continue
			case "Connections":
				declConns = n
				continue
			case "Triggers":
				declTriggers = n
				continue
			case "Failures":
				if n != 0 {
					return nil, &Error{Line: line, Word: "Failures", Msg: "link and switch failures are not supported: a failure changes the fabric mid-run, which the lab does not model"}
				}
				continue
			}
			header = false
			if !seenNodes {
				return nil, &Error{Line: line, Msg: "the header has no Nodes line"}
			}
			if declConns < 0 {
				return nil, &Error{Line: line, Msg: "the header has no Connections line"}
			}
		}
		switch {
		case strings.Contains(tok[0], "->"):
			c, err := parseConn(line, tok, m.Nodes)
			if err != nil {
				return nil, err
			}
			if len(m.Conns) >= declConns {
				return nil, &Error{Line: line, Msg: fmt.Sprintf("more connections than the %d the header declares", declConns)}
			}
			m.Conns = append(m.Conns, c)
		case tok[0] == "trigger":
			t, err := parseTrigger(line, tok)
			if err != nil {
				return nil, err
			}
			m.Triggers = append(m.Triggers, t)
		case tok[0] == "failure":
			return nil, &Error{Line: line, Word: "failure", Msg: "link and switch failures are not supported: a failure changes the fabric mid-run, which the lab does not model"}
		default:
			return nil, &Error{Line: line, Word: tok[0], Msg: "unknown word: want SRC->DST, trigger, or a header line (Nodes, Connections, Triggers)"}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{Line: line + 1, Msg: err.Error()}
	}
	if !seenNodes {
		return nil, &Error{Msg: "no Nodes line"}
	}
	if declConns < 0 {
		return nil, &Error{Msg: "no Connections line"}
	}
	if len(m.Conns) != declConns {
		return nil, &Error{Msg: fmt.Sprintf("the header declares %d connections, the file has %d", declConns, len(m.Conns))}
	}
	if len(m.Triggers) != declTriggers {
		return nil, &Error{Msg: fmt.Sprintf("the header declares %d triggers, the file has %d trigger lines", declTriggers, len(m.Triggers))}
	}
	if err := m.Check(); err != nil {
		return nil, err
	}
	return m, nil
}

// parseConn reads SRC->DST and its words.
func parseConn(line int, tok []string, nodes int) (Conn, error) {
	c := Conn{Line: line}
	src, dst, _ := strings.Cut(tok[0], "->")
	var err error
	if c.Src, err = atoi(line, src, 0, nodes-1); err != nil {
		return c, err
	}
	if c.Dst, err = atoi(line, dst, 0, nodes-1); err != nil {
		return c, err
	}
	if c.Src == c.Dst {
		return c, &Error{Line: line, Word: tok[0], Msg: "a flow from a node to itself"}
	}
	seen := map[string]bool{}
	var hasStart, hasSize bool
	for i := 1; i < len(tok); i++ {
		w := tok[i]
		if w == "msg" {
			return c, &Error{Line: line, Word: w, Msg: "messages on a reused connection are not supported: give each message its own line (its own connection)"}
		}
		switch w {
		case "start", "size", "id", "trigger", "send_done_trigger", "recv_done_trigger", "prio":
		default:
			return c, &Error{Line: line, Word: w, Msg: "unknown word: want start, trigger, size, id, send_done_trigger, recv_done_trigger or prio"}
		}
		if seen[w] {
			return c, &Error{Line: line, Word: w, Msg: "given twice"}
		}
		seen[w] = true
		if i+1 >= len(tok) {
			return c, &Error{Line: line, Word: w, Msg: "wants a value"}
		}
		i++
		v := tok[i]
		switch w {
		case "start":
			// htsim: stof, then timeFromUs((uint32_t)start).
			us, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(us) || us < 0 || us > math.MaxUint32 {
				return c, &Error{Line: line, Word: v, Msg: "start wants microseconds, 0..4294967295"}
			}
			c.Start = time.Duration(uint32(us)) * time.Microsecond
			hasStart = true
		case "size":
			n, err := atoi(line, v, 1, math.MaxInt32)
			if err != nil {
				return c, err
			}
			c.Size = uint64(n)
			hasSize = true
		case "id", "trigger", "send_done_trigger", "recv_done_trigger":
			// Ids from 1: 0 stands for none.
			id := map[string]*int{"id": &c.ID, "trigger": &c.Trigger, "send_done_trigger": &c.SendDone, "recv_done_trigger": &c.RecvDone}[w]
			if *id, err = atoi(line, v, 1, math.MaxInt32); err != nil {
				return c, err
			}
		case "prio":
			if c.Prio, err = atoi(line, v, 0, math.MaxInt32); err != nil {
				return c, err
			}
			c.HasPrio = true
		}
	}
	switch {
	case hasStart && c.Trigger != 0:
		return c, &Error{Line: line, Msg: "both a start time and a trigger: give one"}
	case !hasStart && c.Trigger == 0:
		return c, &Error{Line: line, Msg: "no start method: give start US or trigger K"}
	case !hasSize:
		return c, &Error{Line: line, Msg: "no size (htsim's unbounded flow has no completion to time)"}
	case c.Trigger != 0 && c.ID == 0:
		return c, &Error{Line: line, Msg: "a triggered flow needs an id (htsim asserts one)"}
	}
	return c, nil
}

// parseTrigger reads a trigger definition line.
func parseTrigger(line int, tok []string) (Trigger, error) {
	t := Trigger{Line: line}
	hasCount := false
	for i := 1; i < len(tok); i++ {
		w := tok[i]
		switch w {
		case "id", "count":
			if i+1 >= len(tok) {
				return t, &Error{Line: line, Word: w, Msg: "wants a value"}
			}
			i++
			n, err := atoi(line, tok[i], 1, math.MaxInt32)
			if err != nil {
				return t, err
			}
			if w == "id" {
				t.ID = n
			} else {
				t.Count, hasCount = n, true
			}
		case "oneshot", "multishot", "barrier":
			if t.Kind != 0 {
				return t, &Error{Line: line, Word: w, Msg: "a second kind: give one of oneshot, multishot, barrier"}
			}
			t.Kind = map[string]Kind{"oneshot": Oneshot, "multishot": Multishot, "barrier": Barrier}[w]
		default:
			return t, &Error{Line: line, Word: w, Msg: "unknown word: want id, oneshot, multishot, barrier or count"}
		}
	}
	switch {
	case t.ID == 0:
		return t, &Error{Line: line, Msg: "a trigger with no id"}
	case t.Kind == 0:
		return t, &Error{Line: line, Msg: "a trigger with no kind: give oneshot, multishot or barrier"}
	case t.Kind == Barrier && !hasCount:
		return t, &Error{Line: line, Msg: "a barrier needs count N (N ≥ 1)"}
	}
	return t, nil
}

// atoi reads a whole decimal number in [lo, hi].
func atoi(line int, s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, &Error{Line: line, Word: s, Msg: fmt.Sprintf("want a whole number %d..%d", lo, hi)}
	}
	return n, nil
}
