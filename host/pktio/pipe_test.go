package pktio

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mkMsgs returns n write messages to dst, each of three buffers (header,
// payload, trailer) whose bytes identify the datagram, with TOS from tos.
func mkMsgs(n int, dst netip.AddrPort, size int, tos func(i int) uint8) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		d := make([]byte, size)
		for j := range d {
			d[j] = byte(i*7 + j)
		}
		h, t := min(12, size), max(size-4, min(12, size))
		msgs[i] = Message{Buffers: [][]byte{d[:h], d[h:t], d[t:]}, Addr: dst, TOS: tos(i)}
	}
	return msgs
}

// readMsgs returns n read messages with buffers of size bytes.
func readMsgs(n, size int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, size)}
	}
	return msgs
}

func concat(bufs [][]byte) []byte { return bytes.Join(bufs, nil) }

// readN reads exactly n datagrams from c (several ReadBatch calls if need be).
func readN(tb testing.TB, c Conn, n, size int) []Message {
	tb.Helper()
	out := readMsgs(n, size)
	got := 0
	for got < n {
		k, err := c.ReadBatch(out[got:])
		if err != nil {
			tb.Fatalf("ReadBatch after %d of %d datagrams: %v", got, n, err)
		}
		got += k
	}
	return out
}

func tosPattern(i int) uint8 { return []uint8{0x6A, 0xC2, 0x00, 0x6B}[i%4] }

// checkRoundTrip checks that got (read) carries sent (written) from src.
func checkRoundTrip(tb testing.TB, sent, got []Message, src netip.AddrPort) {
	tb.Helper()
	for i := range sent {
		want := concat(sent[i].Buffers)
		g := got[i]
		if g.N != len(want) || !bytes.Equal(g.Buffers[0][:g.N], want) {
			tb.Errorf("datagram %d: got %d bytes %x…, want %d bytes %x…", i, g.N, head(g.Buffers[0][:g.N]), len(want), head(want))
		}
		if g.Addr != src {
			tb.Errorf("datagram %d: source %s, want %s", i, g.Addr, src)
		}
		if !g.Addr.Addr().Is4() && src.Addr().Is4() {
			tb.Errorf("datagram %d: source %s is not a plain 4-byte address", i, g.Addr)
		}
		if g.TOS != sent[i].TOS {
			tb.Errorf("datagram %d: TOS %#02x, want %#02x", i, g.TOS, sent[i].TOS)
		}
		if g.Truncated {
			tb.Errorf("datagram %d: truncated", i)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

func TestPipeRoundTrip(t *testing.T) {
	a, b := NewPipe(PipeOptions{})
	defer a.Close()
	defer b.Close()
	if a.LocalAddr() != DefaultPipeA || b.LocalAddr() != DefaultPipeB {
		t.Fatalf("addresses %s, %s; want defaults %s, %s", a.LocalAddr(), b.LocalAddr(), DefaultPipeA, DefaultPipeB)
	}
	for _, dir := range []struct {
		name     string
		from, to *PipeConn
	}{{"a→b", a, b}, {"b→a", b, a}} {
		sent := mkMsgs(32, dir.to.LocalAddr(), 1024, tosPattern)
		n, err := dir.from.WriteBatch(sent)
		if n != len(sent) || err != nil {
			t.Fatalf("%s: WriteBatch = %d, %v; want %d, nil", dir.name, n, err, len(sent))
		}
		got := readN(t, dir.to, len(sent), 2048)
		checkRoundTrip(t, sent, got, dir.from.LocalAddr())
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.DatagramsSent != 32 || sa.DatagramsReceived != 32 || sb.DatagramsSent != 32 || sb.DatagramsReceived != 32 {
		t.Errorf("stats a %+v, b %+v; want 32 sent and received each", sa, sb)
	}
	if sa.BytesSent != 32*1024 || sb.BytesReceived != 32*1024 || sa.Dropped() != 0 {
		t.Errorf("stats a %+v, b %+v; want 32 KiB each way, no drops", sa, sb)
	}
}

func TestPipeReadBatchPartial(t *testing.T) {
	a, b := NewPipe(PipeOptions{})
	sent := mkMsgs(5, b.LocalAddr(), 100, tosPattern)
	if _, err := a.WriteBatch(sent); err != nil {
		t.Fatal(err)
	}
	// A batch larger than what is queued returns what is queued, no more.
	got := readMsgs(16, 200)
	n, err := b.ReadBatch(got)
	if n != 5 || err != nil {
		t.Fatalf("ReadBatch = %d, %v; want 5, nil", n, err)
	}
	checkRoundTrip(t, sent, got[:n], a.LocalAddr())
	// A smaller batch leaves the rest queued.
	if _, err := a.WriteBatch(sent); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ReadBatch(got[:2]); n != 2 || err != nil {
		t.Fatalf("ReadBatch = %d, %v; want 2, nil", n, err)
	}
	if n, err := b.ReadBatch(got[2:]); n != 3 || err != nil {
		t.Fatalf("ReadBatch = %d, %v; want 3, nil", n, err)
	}
	checkRoundTrip(t, sent, got[:5], a.LocalAddr())
	if _, err := b.ReadBatch([]Message{{}}); err == nil {
		t.Errorf("ReadBatch of a message without a buffer: no error")
	}
}

func TestPipeFilterMarkAndDrop(t *testing.T) {
	var mu sync.Mutex
	var seen []netip.AddrPort
	a, b := NewPipe(PipeOptions{
		Filter: func(from netip.AddrPort, m *Message) bool {
			mu.Lock()
			seen = append(seen, from, m.Addr)
			mu.Unlock()
			id := m.Buffers[0][0] // mkMsgs: byte 0 is 7*i
			switch id / 7 % 3 {
			case 0:
				m.TOS |= 3 // CE
			case 1:
				return true
			}
			return false
		},
	})
	sent := mkMsgs(9, b.LocalAddr(), 64, func(int) uint8 { return 0x6A })
	if n, err := a.WriteBatch(sent); n != 9 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readN(t, b, 6, 64)
	for k, i := range []int{0, 2, 3, 5, 6, 8} {
		want := uint8(0x6A)
		if i%3 == 0 {
			want = 0x6B
		}
		if got[k].TOS != want || got[k].Buffers[0][0] != byte(7*i) {
			t.Errorf("read %d: datagram %d TOS %#x, want datagram %d TOS %#x", k, got[k].Buffers[0][0]/7, got[k].TOS, i, want)
		}
	}
	if s := a.Stats(); s.FilterDropped != 3 || s.DatagramsSent != 9 {
		t.Errorf("stats %+v; want 9 sent, 3 FilterDropped", s)
	}
	if s := b.Stats(); s.DatagramsReceived != 6 {
		t.Errorf("stats %+v; want 6 received", s)
	}
	if len(seen) != 18 || seen[0] != a.LocalAddr() || seen[1] != b.LocalAddr() {
		t.Errorf("filter saw (from, to) %v; want 9 × (%s, %s)", seen[:min(len(seen), 4)], a.LocalAddr(), b.LocalAddr())
	}
}

func TestPipeTailDrop(t *testing.T) {
	a, b := NewPipe(PipeOptions{Depth: 8})
	sent := mkMsgs(20, b.LocalAddr(), 100, tosPattern)
	if n, err := a.WriteBatch(sent); n != 20 || err != nil {
		t.Fatalf("WriteBatch = %d, %v; want 20, nil (drops are silent)", n, err)
	}
	got := readMsgs(20, 100)
	n, err := b.ReadBatch(got)
	if n != 8 || err != nil {
		t.Fatalf("ReadBatch = %d, %v; want the 8 queued", n, err)
	}
	checkRoundTrip(t, sent[:8], got[:8], a.LocalAddr()) // tail drop keeps the head
	if s := a.Stats(); s.QueueFullDropped != 12 || s.Dropped() != 12 {
		t.Errorf("stats %+v; want QueueFullDropped 12", s)
	}
}

func TestPipeTruncated(t *testing.T) {
	a, b := NewPipe(PipeOptions{})
	if _, err := a.WriteBatch(mkMsgs(1, b.LocalAddr(), 1000, tosPattern)); err != nil {
		t.Fatal(err)
	}
	got := readMsgs(1, 100)
	if n, err := b.ReadBatch(got); n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	if !got[0].Truncated || got[0].N != 100 {
		t.Errorf("got N %d Truncated %v; want 100, true", got[0].N, got[0].Truncated)
	}
	if s := b.Stats(); s.Truncated != 1 {
		t.Errorf("Truncated = %d, want 1", s.Truncated)
	}
}

func TestPipeWriteErrors(t *testing.T) {
	a, b := NewPipe(PipeOptions{MaxDatagramBytes: 1500})
	msgs := mkMsgs(3, b.LocalAddr(), 1500, tosPattern)
	msgs[1] = mkMsgs(1, b.LocalAddr(), 1501, tosPattern)[0]
	n, err := a.WriteBatch(msgs)
	if n != 1 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("WriteBatch = %d, %v; want 1, EMSGSIZE", n, err)
	}
	t.Logf("error: %v", err)
	msgs[1].Addr = netip.AddrPort{}
	if n, err := a.WriteBatch(msgs); n != 1 || err == nil {
		t.Errorf("WriteBatch without a destination = %d, %v; want 1, error", n, err)
	}
	// Not addressed to the peer: lost, like a datagram to an unknown host.
	stray := mkMsgs(1, netip.MustParseAddrPort("198.18.0.3:4791"), 10, tosPattern)
	if n, err := a.WriteBatch(stray); n != 1 || err != nil {
		t.Errorf("WriteBatch to a stranger = %d, %v; want 1, nil", n, err)
	}
	if s := a.Stats(); s.SendErrors != 2 || s.NoRouteDropped != 1 {
		t.Errorf("stats %+v; want 2 SendErrors, 1 NoRouteDropped", s)
	}
	// Default limit: the largest UDP payload.
	a4, b4 := NewPipe(PipeOptions{})
	if n, err := a4.WriteBatch(mkMsgs(1, b4.LocalAddr(), 65508, tosPattern)); n != 0 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Errorf("65508-byte IPv4 datagram: %d, %v; want EMSGSIZE", n, err)
	}
	if n, err := a4.WriteBatch(mkMsgs(1, b4.LocalAddr(), 65507, tosPattern)); n != 1 || err != nil {
		t.Errorf("65507-byte IPv4 datagram: %d, %v; want sent", n, err)
	}
}

func TestPipeIPv6(t *testing.T) {
	a, b := NewPipe(PipeOptions{
		A: netip.MustParseAddrPort("[2001:db8::1]:4791"),
		B: netip.MustParseAddrPort("[2001:db8::2]:49152"),
	})
	sent := mkMsgs(4, b.LocalAddr(), 300, tosPattern)
	if _, err := a.WriteBatch(sent); err != nil {
		t.Fatal(err)
	}
	checkRoundTrip(t, sent, readN(t, b, 4, 512), a.LocalAddr())
}

func TestPipeClose(t *testing.T) {
	a, b := NewPipe(PipeOptions{})
	errc := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(readMsgs(4, 64))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("blocked ReadBatch returned %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock ReadBatch")
	}
	if err := b.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close = %v, want net.ErrClosed", err)
	}
	if _, err := b.WriteBatch(mkMsgs(1, a.LocalAddr(), 10, tosPattern)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteBatch on a closed end = %v, want net.ErrClosed", err)
	}
	// The peer's writes to the closed end are lost, as to a closed UDP port.
	if n, err := a.WriteBatch(mkMsgs(3, b.LocalAddr(), 10, tosPattern)); n != 3 || err != nil {
		t.Errorf("WriteBatch to a closed peer = %d, %v; want 3, nil", n, err)
	}
	if s := a.Stats(); s.PeerClosedDropped != 3 {
		t.Errorf("PeerClosedDropped = %d, want 3", s.PeerClosedDropped)
	}
}

// TestPipeCloseKeepsPeerQueue checks the open end still reads what the
// closed end sent before it closed.
func TestPipeCloseKeepsPeerQueue(t *testing.T) {
	a, b := NewPipe(PipeOptions{})
	sent := mkMsgs(3, a.LocalAddr(), 10, tosPattern)
	if _, err := b.WriteBatch(sent); err != nil {
		t.Fatal(err)
	}
	b.Close()
	checkRoundTrip(t, sent, readN(t, a, 3, 64), b.LocalAddr())
}

func TestPipeConcurrentWriters(t *testing.T) {
	const writers, perWriter, batch = 4, 1000, 10
	a, b := NewPipe(PipeOptions{Depth: 256})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			msgs := make([]Message, batch)
			for i := 0; i < perWriter; i += batch {
				for j := range msgs {
					msgs[j] = Message{Buffers: [][]byte{{byte(w)}, fmt.Appendf(nil, "%06d", i+j)}, Addr: b.LocalAddr(), TOS: uint8(w)}
				}
				for sent := 0; sent < batch; {
					// Wait for room rather than lose datagrams to tail drop
					// (room for every writer's batch: they check at once).
					if len(b.in) > cap(b.in)-writers*batch {
						time.Sleep(time.Microsecond)
						continue
					}
					n, err := a.WriteBatch(msgs[sent:])
					if err != nil {
						t.Error(err)
						return
					}
					sent += n
				}
			}
		})
	}
	// The other direction at the same time, for the race detector.
	wg.Go(func() {
		msgs := mkMsgs(perWriter, a.LocalAddr(), 20, tosPattern)
		for i := 0; i < len(msgs); {
			if len(a.in) > cap(a.in)-batch {
				time.Sleep(time.Microsecond)
				continue
			}
			if _, err := b.WriteBatch(msgs[i : i+batch]); err != nil {
				t.Error(err)
				return
			}
			i += batch
		}
	})
	wg.Go(func() {
		got := readMsgs(perWriter, 64)
		for n := 0; n < perWriter; {
			k, err := a.ReadBatch(got[n:])
			if err != nil {
				t.Error(err)
				return
			}
			n += k
		}
	})
	next := make([]int, writers)
	got := readMsgs(32, 64)
	total := 0
	for total < writers*perWriter {
		n, err := b.ReadBatch(got)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range got[:n] {
			w := int(m.Buffers[0][0])
			var seq int
			fmt.Sscanf(string(m.Buffers[0][1:m.N]), "%d", &seq)
			if m.TOS != uint8(w) || seq != next[w] {
				t.Fatalf("writer %d: got datagram %d (TOS %d), want %d in order", w, seq, m.TOS, next[w])
			}
			next[w]++
		}
		total += n
	}
	wg.Wait()
	if s := a.Stats(); s.Dropped() != 0 || s.DatagramsSent != writers*perWriter {
		t.Errorf("stats %+v", s)
	}
}

// TestPipeAllocs checks the steady state allocates nothing per datagram.
func TestPipeAllocs(t *testing.T) {
	a, b := NewPipe(PipeOptions{})
	sent := mkMsgs(64, b.LocalAddr(), 1024, tosPattern)
	got := readMsgs(64, 2048)
	run := func() {
		if _, err := a.WriteBatch(sent); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(sent); {
			k, err := b.ReadBatch(got[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
	}
	allocs := testing.AllocsPerRun(100, run)
	t.Logf("pipe: %.3f allocs per 64-datagram write+read, %.4f per datagram", allocs, allocs/64)
	if allocs > 1 && !raceEnabled {
		t.Errorf("%.1f allocs per 64-datagram batch, want 0", allocs)
	}

	// With a filter: pooled scratch messages, still ~0.
	fa, fb := NewPipe(PipeOptions{Filter: func(_ netip.AddrPort, m *Message) bool { m.TOS |= 3; return false }})
	a, b = fa, fb
	sent = mkMsgs(64, b.LocalAddr(), 1024, tosPattern)
	allocs = testing.AllocsPerRun(100, run)
	t.Logf("pipe with filter: %.3f allocs per 64-datagram write+read", allocs)
	if allocs > 2 && !raceEnabled {
		t.Errorf("filtered: %.1f allocs per 64-datagram batch, want ~0", allocs)
	}
}

// BenchmarkPipe moves 1024-byte datagrams in batches of 64 from a writer
// goroutine to a reader; one op is one datagram.
func BenchmarkPipe(b *testing.B) {
	const batch = 64
	pa, pb := NewPipe(PipeOptions{})
	sent := mkMsgs(batch, pb.LocalAddr(), 1024, func(int) uint8 { return 0x6A })
	got := readMsgs(batch, 2048)
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; n < b.N; {
			if len(pb.in) > cap(pb.in)-batch { // flow control: no tail drop
				time.Sleep(10 * time.Microsecond)
				continue
			}
			k := min(batch, b.N-n)
			if _, err := pa.WriteBatch(sent[:k]); err != nil {
				b.Error(err)
				return
			}
			n += k
		}
	}()
	for n := 0; n < b.N; {
		k, err := pb.ReadBatch(got)
		if err != nil {
			b.Fatal(err)
		}
		n += k
	}
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pps")
}

// TestRandomLoss: no loss at 0, every datagram at 1, about p of them
// between, the same on every run of a seed, and Dropped counts them.
func TestRandomLoss(t *testing.T) {
	var m Message
	count := func(l *RandomLoss, n int) int {
		k := 0
		for range n {
			if l.Filter(DefaultPipeA, &m) {
				k++
			}
		}
		return k
	}
	if k := count(NewRandomLoss(0, 1, 2), 1000); k != 0 {
		t.Errorf("p 0 dropped %d of 1000", k)
	}
	if k := count(NewRandomLoss(1, 1, 2), 1000); k != 1000 {
		t.Errorf("p 1 dropped %d of 1000", k)
	}
	l := NewRandomLoss(0.01, 3, 4)
	k := count(l, 100_000)
	if k < 900 || k > 1100 || l.Dropped() != k {
		t.Errorf("p 0.01 dropped %d of 100000 (Dropped %d): want about 1000", k, l.Dropped())
	}
	if again := count(NewRandomLoss(0.01, 3, 4), 100_000); again != k {
		t.Errorf("the same seed dropped %d, then %d", k, again)
	}
}
