//go:build linux

package tcpflow_test

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/tcpflow"
)

func TestCheckCC(t *testing.T) {
	for name, ok := range map[string]bool{"dctcp": true, "cubic": true, "bpf_dctcp": true, "fl-x1": true,
		"": false, "Cubic": false, "a/b": false, "sixteen_chars_xx": false} {
		if err := tcpflow.CheckCC(name); (err == nil) != ok {
			t.Errorf("CheckCC(%q) = %v", name, err)
		}
	}
}

// TestRun: a sized and a timed flow between two namespaces; the server's
// counts equal the clients'; a refused connection and an unknown
// congestion control are errors that say so.
func TestRun(t *testing.T) {
	labtest.RequireRoot(t)
	l := lab.BuildT(t, lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "a"}, {Name: "b"}},
		Links: []lab.LinkSpec{{
			A: lab.Endpoint{Node: "a", Dev: "eth0", Addr: netip.MustParsePrefix("198.18.30.1/24")},
			B: lab.Endpoint{Node: "b", Dev: "eth0", Addr: netip.MustParsePrefix("198.18.30.2/24")},
		}},
	})
	var ccs tcpflow.CCs
	t.Cleanup(func() { _ = ccs.Close() })
	cc, _, err := ccs.Resolve(tcpflow.DCTCP)
	if err != nil {
		t.Fatal(err)
	}
	if again, registered, err := ccs.Resolve(tcpflow.DCTCP); err != nil || again != cc || registered {
		t.Errorf("a second Resolve: %s, %v, %v; want %s from the first", again, registered, err, cc)
	}
	if _, _, err := ccs.Resolve("nosuchcc"); err == nil || !strings.Contains(err.Error(), "available:") {
		t.Errorf("Resolve(nosuchcc): %v", err)
	}
	addr := netip.MustParseAddrPort("198.18.30.2:18517")
	srv, err := tcpflow.Listen(l.Node("b").Do, addr, cc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); srv.Close() })

	var progress atomic.Uint64
	rep, err := tcpflow.Run(ctx, l.Node("a").Do, tcpflow.Conn{Server: addr, CC: cc, Size: 3<<20 + 17, WriteBytes: 64 << 10}, &progress)
	if err != nil || rep.Sent != 3<<20+17 || rep.Delivered != rep.Sent || progress.Load() != rep.Sent || rep.Elapsed <= 0 || rep.CC != cc {
		t.Fatalf("sized flow: %+v, progress %d, %v", rep, progress.Load(), err)
	}
	timed, err := tcpflow.Run(ctx, l.Node("a").Do, tcpflow.Conn{Server: addr, CC: "cubic", Duration: 200 * time.Millisecond}, nil)
	if err != nil || timed.Delivered == 0 || timed.Delivered != timed.Sent || timed.Elapsed < 200*time.Millisecond || timed.Elapsed > 5*time.Second {
		t.Fatalf("timed flow: %+v, %v", timed, err)
	}
	srv.Wait()
	if got, want := srv.Received(), rep.Delivered+timed.Delivered; got != want || srv.Accepted() != 2 || srv.Open() != 0 {
		t.Errorf("the server read %d bytes in %d connections (%d open); the clients delivered %d in 2", got, srv.Accepted(), srv.Open(), want)
	}
	if _, err := tcpflow.Run(ctx, l.Node("a").Do, tcpflow.Conn{Server: netip.MustParseAddrPort("198.18.30.2:18599"), CC: cc, Size: 1}, nil); err == nil ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a flow to no server: %v", err)
	}
	srv.Shutdown()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve after Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Serve still accepting 5 s after Shutdown")
	}
}
