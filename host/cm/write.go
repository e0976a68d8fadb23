package cm

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"time"
)

// WriteTo writes m in the format htsim's reader takes, with the words
// in the order htsim's generators write them; Parse reads it back. The
// Triggers header is written when m has triggers.
func (m *Matrix) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	b := bufio.NewWriter(cw)
	fmt.Fprintf(b, "Nodes %d\nConnections %d\n", m.Nodes, len(m.Conns))
	if len(m.Triggers) > 0 {
		fmt.Fprintf(b, "Triggers %d\n", len(m.Triggers))
	}
	for _, c := range m.Conns {
		line := strconv.Itoa(c.Src) + "->" + strconv.Itoa(c.Dst)
		if c.ID != 0 {
			line += " id " + strconv.Itoa(c.ID)
		}
		if c.Trigger != 0 {
			line += " trigger " + strconv.Itoa(c.Trigger)
		} else {
			line += " start " + strconv.FormatInt(int64(c.Start/time.Microsecond), 10)
		}
		line += " size " + strconv.FormatUint(c.Size, 10)
		if c.SendDone != 0 {
			line += " send_done_trigger " + strconv.Itoa(c.SendDone)
		}
		if c.RecvDone != 0 {
			line += " recv_done_trigger " + strconv.Itoa(c.RecvDone)
		}
		if c.HasPrio {
			line += " prio " + strconv.Itoa(c.Prio)
		}
		b.WriteString(line + "\n")
	}
	for _, t := range m.Triggers {
		fmt.Fprintf(b, "trigger id %d %v", t.ID, t.Kind)
		if t.Kind == Barrier {
			fmt.Fprintf(b, " count %d", t.Count)
		}
		b.WriteString("\n")
	}
	err := b.Flush()
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
