package pds

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
)

// TestWiresDelayBothWays: with a wire each way (Config.Wires), a one-packet
// message completes no sooner than its data's wire plus its ACK's, in real
// time, and both endpoints count what they held.
func TestWiresDelayBothWays(t *testing.T) {
	data := pktio.Wire{Latency: 30 * time.Millisecond, NsPerByte: 5000, Overhead: pktio.WireOverhead4} // ~5 ms a KB
	ack := pktio.Wire{Latency: 20 * time.Millisecond, NsPerByte: 5000, Overhead: pktio.WireOverhead4}
	pa, pb := pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB})
	ca, cb := DefaultConfig(), DefaultConfig()
	ca.Conn, ca.Verify, ca.Wires = pa, true, map[netip.Addr]pktio.Wire{addrB.Addr(): ack}
	cb.Conn, cb.Verify, cb.Wires = pb, true, map[netip.Addr]pktio.Wire{addrA.Addr(): data}
	ca.RTO, cb.RTO = time.Second, time.Second // past the wires: no resend
	ca.IdleTimeout, cb.IdleTimeout = 2*time.Second, 2*time.Second
	ca.ProbeTimeout, cb.ProbeTimeout = 500*time.Millisecond, 500*time.Millisecond
	a, err := New(ca)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cb)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	t0 := time.Now()
	s, err := a.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 1000, Messages: 1, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("not done in 5 s: a %+v b %+v", a.Counters(), b.Counters())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	el := time.Since(t0)
	// The data packet carries the request's headers besides its 1000
	// bytes; the ACK is some tens of bytes: at least 1000 and 0 bytes.
	least := data.Delay(1000) + ack.Delay(0)
	ctA, ctB := a.Counters(), b.Counters()
	t.Logf("done after %v (wires at least %v); a %d held (max %d), b %d held (max %d)", el, least, ctA.WireDelayed, ctA.WireMaxHeld, ctB.WireDelayed, ctB.WireMaxHeld)
	if el < least || el > least+500*time.Millisecond {
		t.Errorf("done after %v: want the wires' %v (at most 500 ms more)", el, least)
	}
	if ctB.WireDelayed == 0 || ctA.WireDelayed == 0 || ctA.WireDropped+ctB.WireDropped != 0 {
		t.Errorf("wire counters: a %d held %d dropped, b %d held %d dropped: want some held each way, none dropped",
			ctA.WireDelayed, ctA.WireDropped, ctB.WireDelayed, ctB.WireDropped)
	}
	if ctA.Retransmits != 0 || ctB.Duplicates != 0 {
		t.Errorf("resent %d, duplicates %d: want none", ctA.Retransmits, ctB.Duplicates)
	}
}

func TestWiresRefused(t *testing.T) {
	pa, _ := pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB})
	defer pa.Close()
	c := DefaultConfig()
	c.Conn = pa
	c.Wires = map[netip.Addr]pktio.Wire{addrB.Addr(): {Latency: -time.Second}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "wires[198.18.0.2]: wire latency") {
		t.Errorf("negative latency: %v", err)
	}
	c.Wires = map[netip.Addr]pktio.Wire{addrB.Addr(): {Latency: time.Millisecond}}
	c.Clock = engine.NewFakeClock(0)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "fake clock") {
		t.Errorf("fake clock: %v", err)
	}
}
