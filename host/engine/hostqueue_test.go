package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/pktio"
)

// roomQueue is a HostQueue whose room the test sets.
type roomQueue struct{ room atomic.Int64 }

func (q *roomQueue) Room() int { return int(q.room.Load()) }

// greedyFlow sends as many packets as it is offered, n in all, and
// records the most it was offered at once.
type greedyFlow struct {
	mu      sync.Mutex
	n       int
	offered []int
}

func (f *greedyFlow) Fill(now time.Duration, out []Packet, _ *PortLimit) (int, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offered = append(f.offered, len(out))
	k := min(len(out), f.n)
	for i := range k {
		out[i].N = 1
		out[i].Addr = pktio.DefaultPipeB
	}
	f.n -= k
	if f.n == 0 {
		return k, Never
	}
	return k, now
}

// TestHostQueue: a batch is cut to the host queue's room (in MaxPacket
// packets, one at least), and a full queue holds the transmit loop until
// it has room again.
func TestHostQueue(t *testing.T) {
	a, b := pktio.NewPipe(pktio.PipeOptions{Depth: 4096})
	defer b.Close()
	q := &roomQueue{}
	e, err := New(Config{Conn: a, MaxPacket: 100, BatchSize: 64, HostQueue: q}, nopRx{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	f := &greedyFlow{n: 1000}
	e.AddFlow(f)
	e.Start()
	time.Sleep(20 * time.Millisecond)
	f.mu.Lock()
	sent := 1000 - f.n
	f.mu.Unlock()
	if sent != 0 || e.Stats().HostQueueWaits == 0 {
		t.Fatalf("full host queue: %d packets sent, %d waits; want none sent, waits counted", sent, e.Stats().HostQueueWaits)
	}
	q.room.Store(350) // 3 packets of 100 bytes
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		done := f.n == 0
		f.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flow did not finish once the queue had room")
		}
		e.Kick()
		time.Sleep(time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.offered {
		if o > 3 {
			t.Fatalf("offered %d packets at once with room for 3", o)
		}
	}
}
