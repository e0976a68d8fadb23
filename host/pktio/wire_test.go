package pktio

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestWireDelay(t *testing.T) {
	// Four hops at 50 Mbit/s (160 ns a byte each) and 2 µs of links: a
	// 4068-byte payload's 4110 bytes take 2.6304 ms plus the links.
	w := Wire{Latency: 2 * time.Microsecond, NsPerByte: 4 * 160, Overhead: WireOverhead4}
	if got, want := w.Delay(4068), 2*time.Microsecond+2630400*time.Nanosecond; got != want {
		t.Fatalf("Delay(4068) = %v, want %v", got, want)
	}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := w.Slowed(16); s.Latency != 32*time.Microsecond || s.NsPerByte != 16*640 || s.Overhead != w.Overhead || s.Delay(4068) != 16*w.Delay(4068) {
		t.Errorf("Slowed(16) = %+v, delay %v: want 16 × %v", s, s.Delay(4068), w.Delay(4068))
	}
	for _, c := range []struct {
		w    Wire
		want string
	}{
		{Wire{Latency: -1}, "latency"},
		{Wire{Latency: MaxWireDelay + 1}, "latency"},
		{Wire{NsPerByte: -1}, "ns_per_byte"},
		{Wire{NsPerByte: 1e6}, "ns_per_byte"}, // 65 s for the largest datagram
		{Wire{Overhead: -1}, "overhead"},
	} {
		if err := c.w.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want one naming %s", c.w, err, c.want)
		}
	}
}

// delayPipe returns a pipe whose b end reads through a DelayConn with
// wires.
func delayPipe(t *testing.T, wires map[netip.Addr]Wire, maxHeld int) (a *PipeConn, b *DelayConn) {
	t.Helper()
	a, pb := NewPipe(PipeOptions{})
	b, err := NewDelayConn(pb, wires, 2048, 8, maxHeld, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}

func send(t *testing.T, c Conn, dst netip.AddrPort, sizes ...int) {
	t.Helper()
	msgs := make([]Message, len(sizes))
	for i, n := range sizes {
		buf := make([]byte, n)
		buf[0] = byte(i)
		msgs[i] = Message{Buffers: [][]byte{buf}, Addr: dst}
	}
	if _, err := c.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
}

func TestDelayConnHoldsForTheWire(t *testing.T) {
	const lat = 40 * time.Millisecond
	// 1,000 bytes take 20 ms more than 100 on this wire.
	w := Wire{Latency: lat, NsPerByte: 20e6 / 900, Overhead: 0}
	a, b := delayPipe(t, map[netip.Addr]Wire{DefaultPipeA.Addr(): w}, 0)
	t0 := time.Now()
	// A large datagram, then a small one: the small one's wire is 20 ms
	// shorter, but it must not overtake.
	send(t, a, DefaultPipeB, 1000, 100)
	in := readMsgs(4, 2048)
	var got []Message
	for len(got) < 2 {
		n, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in[:n] {
			m.Buffers = [][]byte{append([]byte(nil), m.Buffers[0][:m.N]...)}
			got = append(got, m)
		}
	}
	el := time.Since(t0)
	if want := w.Delay(1000); el < want {
		t.Fatalf("both read after %v, before the large one's wire %v", el, want)
	}
	if got[0].N != 1000 || got[1].N != 100 || got[0].Buffers[0][0] != 0 || got[1].Buffers[0][0] != 1 {
		t.Fatalf("read %d then %d bytes (ids %d, %d): want the wire's order, 1000 then 100", got[0].N, got[1].N, got[0].Buffers[0][0], got[1].Buffers[0][0])
	}
	if got[0].Addr != DefaultPipeA {
		t.Errorf("from %v, want %v", got[0].Addr, DefaultPipeA)
	}
	// RxTime is the wire's delivery: the read time plus the wire.
	if d := got[0].RxTime.Sub(t0); d < w.Delay(1000) || d > w.Delay(1000)+el {
		t.Errorf("RxTime %v after the send, want the wire's %v", d, w.Delay(1000))
	}
	if !got[1].RxTime.Equal(got[0].RxTime) {
		t.Errorf("the small one's RxTime %v, want the large one's %v (held behind it)", got[1].RxTime, got[0].RxTime)
	}
	st := b.Stats()
	if st.Delayed != 2 || st.Passed != 0 || st.Dropped != 0 || st.Held != 0 || st.MaxHeld != 2 {
		t.Errorf("stats %+v: want 2 delayed, none held now, 2 at most", st)
	}
}

func TestDelayConnPassesOtherSources(t *testing.T) {
	other := netip.MustParseAddr("198.18.9.9")
	a, b := delayPipe(t, map[netip.Addr]Wire{other: {Latency: time.Hour / 1000}}, 0)
	send(t, a, DefaultPipeB, 64)
	in := readMsgs(1, 2048)
	t0 := time.Now()
	if n, err := b.ReadBatch(in); n != 1 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	if el := time.Since(t0); el > time.Second {
		t.Fatalf("a source without a wire took %v", el)
	}
	if st := b.Stats(); st.Passed != 1 || st.Delayed != 0 {
		t.Errorf("stats %+v: want 1 passed", st)
	}
}

func TestDelayConnBoundsWhatItHolds(t *testing.T) {
	a, b := delayPipe(t, map[netip.Addr]Wire{DefaultPipeA.Addr(): {Latency: 50 * time.Millisecond}}, 3)
	send(t, a, DefaultPipeB, 64, 64, 64, 64, 64)
	in := readMsgs(8, 2048)
	got := 0
	for got < 3 {
		n, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if st := b.Stats(); st.Dropped != 2 || st.Delayed != 3 || st.MaxHeld != 3 {
		t.Errorf("stats %+v: want 3 delayed and 2 dropped past 3 held", st)
	}
}

func TestDelayConnCloseUnblocks(t *testing.T) {
	a, b := delayPipe(t, map[netip.Addr]Wire{DefaultPipeA.Addr(): {Latency: time.Hour / 1000}}, 0)
	send(t, a, DefaultPipeB, 64) // held for 3.6 s
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(readMsgs(1, 2048))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("ReadBatch still blocked 2 s after Close")
	}
	if _, err := b.ReadBatch(readMsgs(1, 2048)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a later ReadBatch: %v, want net.ErrClosed", err)
	}
}

func TestNewDelayConnRefuses(t *testing.T) {
	_, pb := NewPipe(PipeOptions{})
	defer pb.Close()
	for _, c := range []struct {
		wires           map[netip.Addr]Wire
		size, batch, mx int
		want            string
	}{
		{nil, 0, 8, 0, "max datagram"},
		{nil, 2048, 0, 0, "batch"},
		{nil, 2048, 8, -1, "max held"},
		{map[netip.Addr]Wire{DefaultPipeA.Addr(): {Latency: -1}}, 2048, 8, 0, "198.18.0.1: wire latency"},
	} {
		if _, err := NewDelayConn(pb, c.wires, c.size, c.batch, c.mx, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want one naming %q", c, err, c.want)
		}
	}
}
