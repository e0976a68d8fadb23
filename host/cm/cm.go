// Package cm reads, checks, writes and schedules htsim's connection
// matrices (.cm files: ultraethernet/uet-htsim, datacenter/
// connection_matrix.cpp), the way htsim's experiments describe traffic:
// flows that start at a time or when a trigger fires, and triggers that
// fire when flows finish sending or receiving.
//
// The format, as htsim's reader takes it:
//
//	Nodes N
//	Connections C
//	Triggers T            (optional; the trigger lines' count)
//	SRC->DST [id I] start US | trigger K  size BYTES
//	         [send_done_trigger K] [recv_done_trigger K] [prio P]
//	trigger id K oneshot|multishot|barrier [count N]
//
// A start is in microseconds (htsim's timeFromUs of the value truncated
// to an integer). A oneshot trigger starts all its flows at its first
// activation, a multishot one its next flow (in file order) at each, a
// barrier all of them at its count-th. A flow that names a trigger as
// send_done_trigger activates it when every byte it sent is
// acknowledged, as recv_done_trigger when its receiver has every byte.
// Where htsim would abort mid-run (a oneshot activated twice, a barrier
// past its count, a flow that never starts) Parse refuses the file with
// the line; msg (connection reuse) and failure lines are refused too.
package cm

import (
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// Matrix is a connection matrix.
type Matrix struct {
	// Nodes is the host count; every Conn's Src and Dst is below it.
	Nodes int
	// Conns are the connections in file order (a multishot trigger
	// starts its flows in this order).
	Conns []Conn
	// Triggers are the trigger definitions in file order.
	Triggers []Trigger
}

// Conn is one connection (flow).
type Conn struct {
	// Line is the connection's line in its file, 0 if generated.
	Line     int
	Src, Dst int
	// ID is the flow id, 0 if none (a triggered flow needs one).
	ID int
	// Start is when the flow starts; it applies when Trigger is 0.
	Start time.Duration
	// Trigger is the trigger that starts the flow, 0 if it starts at
	// Start.
	Trigger int
	// Size is the flow's size in bytes.
	Size uint64
	// SendDone and RecvDone are the triggers the flow activates when
	// its sender is done (every byte acknowledged) and when its
	// receiver has every byte, 0 if none.
	SendDone, RecvDone int
	// Prio is the flow's priority and HasPrio whether the line gave
	// one. htsim_uec reads it and does not apply it; nor does the lab.
	Prio    int
	HasPrio bool
}

// Kind is a trigger's kind.
type Kind int

// The trigger kinds (htsim's trigger.h).
const (
	// Oneshot starts all its flows at its first activation.
	Oneshot Kind = iota + 1
	// Multishot starts its next flow at each activation.
	Multishot
	// Barrier starts all its flows at its Count-th activation.
	Barrier
)

// kindNames are the kinds as .cm files spell them.
var kindNames = enum.Names{Oneshot: {"oneshot"}, Multishot: {"multishot"}, Barrier: {"barrier"}}

func (k Kind) String() string { return enum.String(k, kindNames, "Kind") }

// Trigger is one trigger definition.
type Trigger struct {
	// Line is the definition's line, 0 if generated.
	Line int
	ID   int
	Kind Kind
	// Count is a barrier's activations before it fires.
	Count int
}

// Error is a matrix's fault: the line (0 for the file as a whole), the
// word at fault if one is, and what is wrong.
type Error struct {
	Line int
	Word string
	Msg  string
}

func (e *Error) Error() string {
	s := "cm: "
	if e.Line > 0 {
		s += fmt.Sprintf("line %d: ", e.Line)
	}
	if e.Word != "" {
		s += fmt.Sprintf("%q: ", e.Word)
	}
	return s + e.Msg
}
