package bpf

import (
	"strings"
	"testing"
)

type cSide struct {
	Packets   uint64
	UnknownQp uint64
	Hist      [2]uint64
	Tid       uint32 // not a counter
	_         uint64
}

type goSide struct {
	Packets   uint64
	UnknownQP uint64
	Hist      [2]uint64
	Own       string
}

func TestSumInto(t *testing.T) {
	per := []cSide{{Packets: 1, UnknownQp: 2, Hist: [2]uint64{3, 4}}, {Packets: 10, UnknownQp: 20, Hist: [2]uint64{30, 40}}}
	got := goSide{Own: "kept"}
	if err := sumInto(&got, per); err != nil {
		t.Fatal(err)
	}
	if want := (goSide{Packets: 11, UnknownQP: 22, Hist: [2]uint64{33, 44}, Own: "kept"}); got != want {
		t.Errorf("sum %+v, want %+v", got, want)
	}

	type missing struct{ Packets uint64 }
	err := sumInto(&missing{}, per)
	if err == nil || !strings.Contains(err.Error(), "UnknownQp") {
		t.Errorf("a counter dst lacks: %v, want an error naming it", err)
	}
	type wrongType struct {
		Packets   uint32
		UnknownQP uint64
		Hist      [2]uint64
	}
	if err := sumInto(&wrongType{}, per); err == nil {
		t.Error("a field of another type was accepted")
	}
	if err := sumInto(goSide{}, per); err == nil {
		t.Error("a struct, not a pointer, was accepted")
	}
}
