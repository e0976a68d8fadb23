//go:build linux

package labfile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// TestDepartureMarksReachNP: a departure AQM (TCN here; CoDel and ECN♯
// alike) marks CE in the port's dequeue program at its peer's ingress,
// which is the receiver's own device when the receiver is the port's
// peer. The kernel NP on that device must see those marks: the port's
// dequeue goes first in the chain and the NP last. Before, the NP ran
// first and saw none: 97.5 % of the packets marked, 0 CNPs, the queue at
// its 2 MB limit (1.35 MB mean). The run is lossless either way.
func TestDepartureMarksReachNP(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, "6.6") // TCX: the kernel NP
	f, err := Parse("departure.yaml", []byte(`name: departure
duration: 3s
nodes:
  - {name: s1, kind: host}
  - {name: s2, kind: host}
  - {name: sw, kind: switch}
  - {name: r, kind: host}
links:
  - {a: s1, b: sw}
  - {a: s2, b: sw}
  - {a: sw, b: r, rate: 200mbit}
ports:
  - {port: sw:r, tc: ["3:tcn:ins=1ms,limit=2mb"]}
flows:
  - {name: f1, from: s1, to: r, mtu: 1024}
  - {name: f2, from: s2, to: r, mtu: 1024}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, f, RunOptions{OutDir: "-"})
	if res == nil {
		t.Fatalf("Run: %v", err)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, fr := range res.Flows {
		t.Logf("%s: %.1f Mbit/s, np_cnp_sent %d, rp_cnp_handled %d", fr.Name, fr.GoodputBps/1e6, fr.CNPSent, fr.CNPHandled)
		if fr.CNPSent == 0 || fr.CNPHandled == 0 {
			t.Errorf("%s: %d CNPs sent, %d handled: the NP saw none of the port's departure marks", fr.Name, fr.CNPSent, fr.CNPHandled)
		}
	}
	// The class's 2 MB holds every burst: lossless, at the port, in the
	// host's queues and sockets, and no resend.
	t.Logf("host-lost: %s", res.HostLost.line())
	if n := res.Lost(); n != 0 {
		t.Errorf("%d packets lost (ports, host queues, sockets, resends): want 0; %s", n, strings.Join(res.LostBy(), "; "))
	}
	for _, p := range res.Ports {
		t.Logf("port %s: %.2f%% marked, queue p50 %.0f B p99 %.0f B, %d dropped", p.Name, 100*p.MarkedFraction, p.QueueP50Bytes, p.QueueP99Bytes, p.DroppedPackets)
		// Marked at most half the packets, the queue below half its
		// buffer: DCQCN reacted (unheard, 97 % and the buffer full).
		if p.CEMarked == 0 || p.MarkedFraction > 0.5 || p.QueueP99Bytes > 1<<20 {
			t.Errorf("port %s: %d marks (%.1f%%), queue p99 %.0f B: want marks, at most half the packets, p99 below 1 MiB", p.Name, p.CEMarked, 100*p.MarkedFraction, p.QueueP99Bytes)
		}
	}
}
