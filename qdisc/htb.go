package qdisc

import (
	"errors"
	"fmt"
	"math"
	"os"

	tc "github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The HTB tree of a port:
//
//	1:     root qdisc, default class = the port's default class
//	1:1    the port: rate = ceil = port speed
//	1:1N   one leaf per traffic class N, each with a bfifo 1N: below it
//
// The enqueue program picks the leaf by setting skb->priority to 1:1N. A
// class with flow queues (ClassConfig.FlowQueues) is an inner class
// instead, with a leaf 1:(N+1)BB and its bfifo (N+1)BB: per flow bucket BB
// (both hex), and the program picks the flow's leaf (bpf/port_flowq.h).
const (
	htbMajor      = 1
	htbPortMinor  = 1
	htbLeafMinor0 = 0x10
	// priorityBase is TC_H_MAKE(1:, 0x10): skb->priority for class 0.
	priorityBase = htbMajor<<16 | htbLeafMinor0

	ethMTUBytes = 1514
	// The leaf fifos never drop: the enqueue program enforces the class
	// limit, and a drop it did not see would break its accounting.
	leafFifoLimitBytes = 1 << 31
	htbQuantumBytes    = 10 * ethMTUBytes
	// Strict classes (and trim classes, Config.StrictPriority) are served
	// first because HTB serves the classes borrowing from the port by
	// priority, lower prio first; every class has a token guarantee
	// (leafRates), and the non-strict ones share the rest equally by
	// DRR.
	htbPrioStrict = 0
	htbPrioNormal = 1
)

func leafClassID(c int) uint32 { return core.BuildHandle(htbMajor, uint32(htbLeafMinor0+c)) }

// flowQueueMinor is the minor of class c's flow queue b, as the enqueue
// program makes it (flowq_minor).
func flowQueueMinor(c, b int) uint32 { return uint32(c+1)<<8 | uint32(b) }

// flowQuantumBytes is a flow queue's DRR quantum: a frame's worth a turn,
// as a NIC serves its queues a packet at a time.
const flowQuantumBytes = ethMTUBytes

// defaultLeafMinor is the HTB default class's minor: class c's leaf, or
// its first flow queue.
func defaultLeafMinor(cfg *Config) uint32 {
	c := int(cfg.DefaultClass)
	if cfg.Classes[c].FlowQueues > 0 {
		return flowQueueMinor(c, 0)
	}
	return uint32(htbLeafMinor0 + c)
}

// leafFifoLimit is a leaf's bfifo limit. A shaped virtual-queue port's
// programs never see HTB's dequeue: its virtual queue only models HTB's,
// which falls behind when the CPU is busy (a lag of 358 KB on a 2 MB class
// was measured with a core kept busy). Its fifo is the class's buffer, a
// quarter more for that lag, and a burst: a real switch's buffer, which
// drops (counted in the root qdisc's drops) rather than grow unseen.
func leafFifoLimit(cfg *Config, c int, shaped bool) uint32 {
	if !shaped {
		return leafFifoLimitBytes
	}
	l := uint64(cfg.Classes[c].LimitBytes)
	return uint32(min(l+l/4+uint64(burstBytes(uint64(cfg.Rate)))+ethMTUBytes, leafFifoLimitBytes))
}

func leafFifo(ifindex uint32, c int, limit uint32) *tc.Object {
	return fifoUnder(ifindex, uint32(htbLeafMinor0+c), limit)
}

// fifoUnder is the bfifo of the HTB leaf 1:minor, with handle minor:.
func fifoUnder(ifindex uint32, minor uint32, limit uint32) *tc.Object {
	return &tc.Object{
		Msg:       tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: core.BuildHandle(minor, 0), Parent: core.BuildHandle(htbMajor, minor)},
		Attribute: tc.Attribute{Kind: "bfifo", Bfifo: &tc.FifoOpt{Limit: limit}},
	}
}

// flowQueueClass is class c's flow queue b: the class's guarantee split
// among its queues, the port's ceil, the class's priority and a frame's
// quantum.
func flowQueueClass(ifindex uint32, cfg *Config, c, b int, rate uint64) *tc.Object {
	o := leafClass(ifindex, cfg, c, rate)
	o.Parent = leafClassID(c)
	o.Handle = core.BuildHandle(htbMajor, flowQueueMinor(c, b))
	share := max(rate/uint64(cfg.Classes[c].FlowQueues), 8)
	o.Htb.Parms.Rate, o.Htb.Rate64 = rateSpec(share)
	o.Htb.Parms.Buffer = core.XmitTime(share/8, burstBytes(share))
	o.Htb.Parms.Quantum = flowQuantumBytes
	return o
}

// rateSpec fills a tc rate in bytes/s, with the 64-bit attribute when it
// does not fit in 32 bits.
func rateSpec(bitsPerSec uint64) (tc.RateSpec, *uint64) {
	bytes := bitsPerSec / 8
	rs := tc.RateSpec{Linklayer: 1 /* TC_LINKLAYER_ETHERNET */}
	if bytes >= math.MaxUint32 {
		rs.Rate = math.MaxUint32
		return rs, &bytes
	}
	rs.Rate = uint32(bytes)
	return rs, nil
}

// burstBytes lets a class send 100 µs of its rate at once: HTB's timer
// fires late by about that on a busy host, and the burst earns the time
// back. No more, and no floor in frames: the bucket fills while the port
// is idle and what it holds leaves at once when packets come, faster than
// the port's rate. A floor of four 1514-byte frames let a 3.125 Mbit/s
// port send 6 KB at once after every idle spell: a 128-KiB UET flow alone
// on a leaf-spine took 0.974 × its ideal, 1.021 × without (5 % of the
// flow; docs/collectives.md).
func burstBytes(bitsPerSec uint64) uint32 {
	return uint32(bitsPerSec / 8 / 10000)
}

func htbClass(ifindex uint32, parent, handle uint32, rate, ceil uint64, prio uint32) *tc.Object {
	r, r64 := rateSpec(rate)
	c, c64 := rateSpec(ceil)
	return &tc.Object{
		Msg: tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: handle, Parent: parent},
		Attribute: tc.Attribute{
			Kind: "htb",
			Htb: &tc.Htb{
				Parms: &tc.HtbOpt{
					Rate:    r,
					Ceil:    c,
					Buffer:  core.XmitTime(rate/8, burstBytes(rate)),
					Cbuffer: core.XmitTime(ceil/8, burstBytes(ceil)),
					Quantum: htbQuantumBytes,
					Prio:    prio,
				},
				Rate64: r64,
				Ceil64: c64,
			},
		},
	}
}

// portClass is the port's HTB class: bps its rate and ceil.
func portClass(ifindex uint32, bps uint64) *tc.Object {
	return htbClass(ifindex, core.BuildHandle(htbMajor, 0), core.BuildHandle(htbMajor, htbPortMinor), bps, bps, 0)
}

// leafClass is class c's HTB class under the port's: rate its rate, the
// port's its ceil, strict classes served first.
func leafClass(ifindex uint32, cfg *Config, c int, rate uint64) *tc.Object {
	prio := uint32(htbPrioNormal)
	if cfg.StrictPriority(ClassID(c)) {
		prio = htbPrioStrict
	}
	return htbClass(ifindex, core.BuildHandle(htbMajor, htbPortMinor), leafClassID(c), rate, uint64(cfg.Rate), prio)
}

// leafRates gives every class a token guarantee, so that all of them
// borrow the port's rate and none sends on its own: HTB then serves the
// borrowers by priority, strict classes first, and a strict class's
// packet waits for the one being sent, as a switch's does (strict
// priority does not pre-empt). With the rest of the port guaranteed to
// the strict classes, as before, an ACK, CNP or trimmed header under
// that rate left at once, beside the data packet the port was still
// sending: every control packet's round trip was a residual
// serialisation short of a switch's, and htsim's (docs/collectives.md).
//
// The guarantee is HTB's least, a byte a second: a class whose own
// tokens are not in debt sends "green", beside the frame on the wire,
// and a packet puts it in debt for its size over that rate. At the old
// rate/1000 (at least 8 kbit/s) an 88-byte ACK's debt was paid back
// 88 ms later at timescale 32, and every class went green about that
// often; now the debt is HTB's cap (60 s) after any packet.
func leafRates(*Config) [NumClasses]uint64 {
	var r [NumClasses]uint64
	for i := range r {
		r[i] = leafTokenBitsPerSec
	}
	return r
}

// leafTokenBitsPerSec is every class's own HTB rate: one byte a second,
// the least tc's rate (bytes a second) can say.
const leafTokenBitsPerSec = 8

func openTC(ns netns.NsHandle) (*tc.Tc, error) {
	if err := core.InitializeClock(); err != nil && !core.IsClockInitialized() {
		return nil, fmt.Errorf("tc clock: %w", err)
	}
	fd := 0
	if ns.IsOpen() {
		fd = int(ns)
	}
	t, err := tc.Open(&tc.Config{NetNS: fd})
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink: %w", err)
	}
	return t, nil
}

// installHTB replaces the root qdisc of the device with the port's HTB
// tree; shaped: a virtual-queue port's (leafFifoLimit).
func installHTB(ns netns.NsHandle, ifindex uint32, cfg *Config, shaped bool) error {
	t, err := openTC(ns)
	if err != nil {
		return err
	}
	defer t.Close()
	root := &tc.Object{
		Msg: tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: core.BuildHandle(htbMajor, 0), Parent: tc.HandleRoot},
		Attribute: tc.Attribute{
			Kind: "htb",
			Htb: &tc.Htb{Init: &tc.HtbGlob{
				Version:      3,
				Rate2Quantum: 10,
				Defcls:       defaultLeafMinor(cfg),
			}},
		},
	}
	if err := t.Qdisc().Replace(root); err != nil {
		return fmt.Errorf("install htb root qdisc: %w", err)
	}
	classes, fifos := htbTree(ifindex, cfg, shaped)
	for _, o := range classes {
		if err := t.Class().Add(o); err != nil {
			return fmt.Errorf("add htb class %s: %w", handleText(o.Handle), err)
		}
	}
	for _, o := range fifos {
		if err := t.Qdisc().Add(o); err != nil {
			return fmt.Errorf("add fifo under %s: %w", handleText(o.Parent), err)
		}
	}
	return nil
}

// htbTree is the port's HTB classes under the root qdisc (the port's,
// then each traffic class's with its flow queues), parents first, and
// the bfifos of its leaves; shaped: a virtual-queue port's
// (leafFifoLimit).
func htbTree(ifindex uint32, cfg *Config, shaped bool) (classes, fifos []*tc.Object) {
	classes = append(classes, portClass(ifindex, uint64(cfg.Rate)))
	rates := leafRates(cfg)
	for c := range NumClasses {
		classes = append(classes, leafClass(ifindex, cfg, c, rates[c]))
		limit := leafFifoLimit(cfg, c, shaped)
		for b := range cfg.Classes[c].FlowQueues {
			classes = append(classes, flowQueueClass(ifindex, cfg, c, b, rates[c]))
			fifos = append(fifos, fifoUnder(ifindex, flowQueueMinor(c, b), limit))
		}
		if cfg.Classes[c].FlowQueues == 0 {
			fifos = append(fifos, leafFifo(ifindex, c, limit))
		}
	}
	return classes, fifos
}

// handleText is a tc handle as tc prints it, major:minor in hex.
func handleText(h uint32) string { return fmt.Sprintf("%x:%x", h>>16, h&0xffff) }

// setPortClassRate changes the port class's rate and ceil alone.
func setPortClassRate(t *tc.Tc, ifindex uint32, bps uint64) error {
	if err := t.Class().Replace(portClass(ifindex, bps)); err != nil {
		return fmt.Errorf("change htb port class: %w", err)
	}
	return nil
}

// updateHTB changes the rates and priorities in place, keeping the queues.
func updateHTB(ns netns.NsHandle, ifindex uint32, cfg *Config, shaped bool) error {
	t, err := openTC(ns)
	if err != nil {
		return err
	}
	defer t.Close()
	classes, fifos := htbTree(ifindex, cfg, shaped)
	for _, o := range classes {
		if err := t.Class().Replace(o); err != nil {
			return fmt.Errorf("change htb class %s: %w", handleText(o.Handle), err)
		}
	}
	if !shaped {
		return nil
	}
	// A shaped port's fifos follow the class limits (the same kind:
	// changed in place, their packets kept).
	for _, o := range fifos {
		if err := t.Qdisc().Replace(o); err != nil {
			return fmt.Errorf("change fifo under %s: %w", handleText(o.Parent), err)
		}
	}
	return nil
}

// removeHTB deletes the root qdisc; the kernel puts the default one back.
func removeHTB(ns netns.NsHandle, ifindex uint32) error {
	t, err := openTC(ns)
	if err != nil {
		return err
	}
	defer t.Close()
	root := &tc.Object{Msg: tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: core.BuildHandle(htbMajor, 0), Parent: tc.HandleRoot},
		Attribute: tc.Attribute{Kind: "htb", Htb: &tc.Htb{Init: &tc.HtbGlob{Version: 3}}}}
	if err := t.Qdisc().Delete(root); err != nil && !isGone(err) {
		return fmt.Errorf("remove htb root qdisc: %w", err)
	}
	return nil
}

// QdiscCounters are the kernel's own counters of the root qdisc.
type QdiscCounters struct {
	Kind           string `json:"kind"`
	SentBytes      uint64 `json:"sent_bytes"`
	SentPackets    uint64 `json:"sent_packets"`
	Drops          uint64 `json:"drops"`
	Overlimits     uint64 `json:"overlimits"`
	BacklogBytes   uint64 `json:"backlog_bytes"`
	BacklogPackets uint64 `json:"backlog_packets"`
}

func readRootQdisc(ns netns.NsHandle, ifindex uint32) (QdiscCounters, error) {
	var q QdiscCounters
	t, err := openTC(ns)
	if err != nil {
		return q, err
	}
	defer t.Close()
	all, err := t.Qdisc().Get()
	if err != nil {
		return q, fmt.Errorf("list qdiscs: %w", err)
	}
	var leafDrops uint64
	for _, o := range all {
		if o.Ifindex != ifindex {
			continue
		}
		if o.Parent == tc.HandleRoot {
			q.Kind = o.Kind
			if o.Stats != nil {
				q.SentBytes, q.SentPackets = o.Stats.Bytes, uint64(o.Stats.Packets)
				q.Drops, q.Overlimits = uint64(o.Stats.Drops), uint64(o.Stats.Overlimits)
				q.BacklogBytes, q.BacklogPackets = uint64(o.Stats.Backlog), uint64(o.Stats.Qlen)
			}
		} else if o.Kind == "bfifo" && o.Stats != nil {
			leafDrops += uint64(o.Stats.Drops)
		}
	}
	// HTB's own drop counter does not include its leaves'.
	q.Drops += leafDrops
	return q, nil
}

func isGone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL)
}
