//go:build linux

package pktio

import (
	"bytes"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/qdisc/ethfeat"
)

// groSplit is fillGRO's split of one read.
func groSplit(data []byte, gsoSize int) [][]byte {
	var segs [][]byte
	for {
		var seg []byte
		seg, data = nextGROSegment(data, gsoSize)
		segs = append(segs, seg)
		if len(data) == 0 {
			return segs
		}
	}
}

func TestNextGROSegment(t *testing.T) {
	for _, c := range []struct {
		n, gso int
		want   []int
	}{
		{250, 100, []int{100, 100, 50}}, // a run: full datagrams, a short last one
		{200, 100, []int{100, 100}},
		{100, 100, []int{100}},
		{70, 0, []int{70}}, // no UDP_GRO cmsg: one datagram
		{70, -1, []int{70}},
		{0, 0, []int{0}}, // an empty datagram
		{0, 100, []int{0}},
	} {
		var got []int
		for _, s := range groSplit(make([]byte, c.n), c.gso) {
			got = append(got, len(s))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("split %d bytes by %d: %v, want %v", c.n, c.gso, got, c.want)
		}
	}
}

// FuzzGROSplit: whatever the read and the size the kernel reports, the
// split ends, loses and reorders nothing, and cuts only at gsoSize.
func FuzzGROSplit(f *testing.F) {
	f.Add(make([]byte, 250), 100)
	f.Add([]byte{}, 0)
	f.Add(make([]byte, 65535), 1)
	f.Fuzz(func(t *testing.T, data []byte, gsoSize int) {
		segs := groSplit(data, gsoSize)
		if got := bytes.Join(segs, nil); !bytes.Equal(got, data) {
			t.Fatalf("segments join to %d bytes, read was %d", len(got), len(data))
		}
		for i, s := range segs {
			if gsoSize > 0 && len(s) > gsoSize || i < len(segs)-1 && len(s) != gsoSize {
				t.Fatalf("segment %d of %d: %d bytes, gso_size %d", i, len(segs), len(s), gsoSize)
			}
		}
	})
}

// TestUDPGRORead sends a UDP GSO run over lo with tx-udp-segmentation on,
// so it reaches the socket as one sk_buff, as a run a device coalesced
// does: a GRO conn hands out its datagrams one by one, marked Coalesced,
// across ReadBatch calls, and a lone datagram as before.
func TestUDPGRORead(t *testing.T) {
	ns := newTestNetns(t, 0)
	if err := ns.do(func() error {
		_, err := ethfeat.Set("lo", map[string]bool{"tx-udp-segmentation": true})
		return err
	}); err != nil {
		t.Fatalf("lo tx-udp-segmentation on: %v", err)
	}
	srv := ns.listen(t, families[0].server, UDPOptions{GRO: true})
	readDeadline(t, srv)
	run := make([]byte, 250) // 100 + 100 + 50
	for i := range run {
		run[i] = byte(i)
	}
	lone := bytes.Repeat([]byte{0xab}, 70)
	if err := ns.do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{198, 18, 0, 2}}); err != nil {
			return err
		}
		to := &unix.SockaddrInet4{Port: 4791, Addr: [4]byte{198, 18, 0, 1}}
		if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, 100); err != nil {
			return err
		}
		if err := unix.Sendto(fd, run, 0, to); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, 0); err != nil {
			return err
		}
		return unix.Sendto(fd, lone, 0, to)
	}); err != nil {
		t.Fatalf("send: %v", err)
	}

	// Two buffers, the second too short for a full datagram: the run's
	// first two, the second cut.
	got := readMsgs(2, 200)
	got[1].Buffers[0] = got[1].Buffers[0][:60]
	n, err := srv.ReadBatch(got)
	if err != nil || n != 2 {
		t.Fatalf("first read: %d datagrams, %v; want 2", n, err)
	}
	if got[0].N != 100 || got[0].Truncated || !got[0].Coalesced || !bytes.Equal(got[0].Buffers[0][:100], run[:100]) {
		t.Errorf("datagram 1: N %d Truncated %v Coalesced %v; want run[0:100], coalesced", got[0].N, got[0].Truncated, got[0].Coalesced)
	}
	if got[1].N != 60 || !got[1].Truncated || !got[1].Coalesced || !bytes.Equal(got[1].Buffers[0], run[100:160]) {
		t.Errorf("datagram 2: N %d Truncated %v Coalesced %v; want run[100:160], truncated, coalesced", got[1].N, got[1].Truncated, got[1].Coalesced)
	}
	if got[0].Addr.Addr().String() != testAddr4B || got[1].Addr != got[0].Addr || got[0].RxTime.IsZero() {
		t.Errorf("source %v / %v, rx time %v: want %s, one time", got[0].Addr, got[1].Addr, got[0].RxTime, testAddr4B)
	}
	// The rest of what the one recvmmsg read: the run's last datagram and
	// the lone one.
	got = readMsgs(2, 200)
	if n, err = srv.ReadBatch(got); err != nil || n != 2 {
		t.Fatalf("second read: %d datagrams, %v; want the run's last and the lone one", n, err)
	}
	if got[0].N != 50 || !got[0].Coalesced || !bytes.Equal(got[0].Buffers[0][:50], run[200:]) {
		t.Errorf("datagram 3: N %d Coalesced %v; want run[200:250], coalesced", got[0].N, got[0].Coalesced)
	}
	if got[1].N != 70 || got[1].Coalesced || !bytes.Equal(got[1].Buffers[0][:70], lone) {
		t.Errorf("datagram 4: N %d Coalesced %v; want the lone 70 bytes, not coalesced", got[1].N, got[1].Coalesced)
	}
	st := srv.Stats()
	// Bytes as stored: the cut datagram counts its 60.
	if st.DatagramsReceived != 4 || st.BytesReceived != 280 || st.GROReads != 1 || st.GROSegments != 3 || st.Truncated != 1 {
		t.Errorf("stats %+v: want 4 datagrams, 280 bytes stored, 1 GRO read of 3, 1 truncated", st)
	}
}

// TestUDPGROClose: a GRO conn's buffers are its own mapping, unmapped at
// Close: a read blocked in them ends with net.ErrClosed, and so does every
// read after, never a touch of the unmapped pages; Close twice is safe.
func TestUDPGROClose(t *testing.T) {
	ns := newTestNetns(t, 0)
	srv := ns.listen(t, families[0].server, UDPOptions{GRO: true})
	if srv.gro == nil || len(srv.gro.area) != srv.batch*groBufBytes {
		t.Fatalf("GRO area %d bytes, want %d", len(srv.gro.area), srv.batch*groBufBytes)
	}
	done := make(chan error, 1)
	go func() {
		_, err := srv.ReadBatch(readMsgs(4, 200))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // the read blocks in recvmmsg
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("blocked read: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read blocked at Close did not end")
	}
	if srv.gro.area != nil || srv.gro.bufs != nil {
		t.Error("the GRO buffers are still mapped after Close")
	}
	if _, err := srv.ReadBatch(readMsgs(4, 200)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after Close: %v, want net.ErrClosed", err)
	}
	_ = srv.Close()
}
