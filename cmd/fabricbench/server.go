//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
)

// server is a measurement's server process in a namespace: iperf3 -s -1,
// or a roceperf child.
type server struct {
	cmd *exec.Cmd
	// out is its stderr, and its stdout unless the caller set one; read
	// it once done is closed.
	out  bytes.Buffer
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// startServer starts cmd (made in node b) and waits until a socket
// listens on port there; what names it in errors. A server that does not
// come up is stopped.
func startServer(ctx context.Context, b *lab.Node, cmd *exec.Cmd, port int, what string) (*server, error) {
	s := &server{cmd: cmd, done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = &s.out
	}
	cmd.Stderr = &s.out
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", what, err)
	}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	if err := waitListening(ctx, b, port, s.done); err != nil {
		s.stop()
		if errors.Is(err, errExited) {
			err = fmt.Errorf("%w: %v", err, s.err)
		}
		return nil, fmt.Errorf("%s: %w (output: %s)", what, err, s.output())
	}
	return s, nil
}

// iperfServer starts a one-off iperf3 server (-s -1: it exits after its
// one test) on b's address and port, pinned to cpu (-A) unless cpu is
// negative; affinity is the same pinning for the client.
func iperfServer(ctx context.Context, b *lab.Node, port, cpu int) (srv *server, affinity []string, err error) {
	if cpu >= 0 {
		affinity = []string{"-A", strconv.Itoa(cpu)}
	}
	args := append([]string{"-s", "-1", "-B", addrB.Addr().String(), "-p", strconv.Itoa(port)}, affinity...)
	srv, err = startServer(ctx, b, b.Command(ctx, "iperf3", args...), port, "iperf3 server")
	return srv, affinity, err
}

// runClient runs a measurement's client command in node a to its end:
// its stdout, its stderr and Output's error.
func runClient(ctx context.Context, a *lab.Node, name string, args ...string) (out []byte, stderr string, err error) {
	cli := a.Command(ctx, name, args...)
	cli.WaitDelay = 2 * time.Second
	var eb bytes.Buffer
	cli.Stderr = &eb
	out, err = cli.Output()
	return out, eb.String(), err
}

// iperfHead is what every iperf3 -J report says: why the test failed.
type iperfHead struct {
	Error string `json:"error"`
}

func (h *iperfHead) iperfError() string { return h.Error }

// runIperf runs one iperf3 test a -> b: a one-off server in b and a JSON
// client in a, with opts (the test's own client options) and seconds. It
// reads the client's report into rep, a struct that embeds iperfHead and
// the parts of the report wanted.
func runIperf(ctx context.Context, a, b *lab.Node, port, seconds, cpu int, opts []string, rep interface{ iperfError() string }) error {
	rctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+20)*time.Second)
	defer cancel()

	srv, affinity, err := iperfServer(rctx, b, port, cpu)
	if err != nil {
		return err
	}
	defer srv.finish(3 * time.Second)

	args := append([]string{"-c", addrB.Addr().String(), "-p", strconv.Itoa(port)}, opts...)
	args = append(args, "-t", strconv.Itoa(seconds), "-J")
	out, stderr, runErr := runClient(rctx, a, "iperf3", append(args, affinity...)...)
	if err := json.Unmarshal(out, rep); err != nil {
		if runErr != nil {
			return fmt.Errorf("iperf3 client: %w (stderr: %s)", runErr, strings.TrimSpace(stderr))
		}
		return fmt.Errorf("iperf3 client output: %w", err)
	}
	if e := rep.iperfError(); e != "" {
		return fmt.Errorf("iperf3 client: %s", e)
	}
	if runErr != nil {
		return fmt.Errorf("iperf3 client: %w", runErr)
	}
	return nil
}

// exited waits up to grace for the server to end by itself (a one-off
// server ends after its one test).
func (s *server) exited(grace time.Duration) bool {
	select {
	case <-s.done:
		return true
	case <-time.After(grace):
		return false
	}
}

// stop ends the server: SIGTERM first (a child writes its profile), a
// kill 5 s later.
func (s *server) stop() { stopChild(s.cmd.Process, s.done) }

// finish lets a one-off server end by itself within grace, else stops it.
func (s *server) finish(grace time.Duration) {
	if !s.exited(grace) {
		s.stop()
	}
}

// failed is the server's exit error unless it exited 0; call once done.
func (s *server) failed() error {
	var ee *exec.ExitError
	if s.err == nil || errors.As(s.err, &ee) && ee.ExitCode() == 0 {
		return nil
	}
	return fmt.Errorf("%v (output: %s)", s.err, s.output())
}

// output is what the server printed, trimmed; call once done.
func (s *server) output() string { return strings.TrimSpace(s.out.String()) }

// pairLab builds the measurements' two-namespace lab: a ⇄ b over one
// veth pair (mtu 0: the default). Tear it down with closeLab.
func pairLab(mtu int) (*lab.Lab, error) {
	return lab.Build(lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "a"}, {Name: "b"}},
		Links: []lab.LinkSpec{{A: lab.Endpoint{Node: "a", Dev: devA, Addr: addrA}, B: lab.Endpoint{Node: "b", Dev: devB, Addr: addrB}, MTU: mtu}},
	})
}

// closeLab tears a measurement's lab down, and says so when that fails.
func closeLab(l *lab.Lab) {
	if err := l.Close(); err != nil {
		progress("closing lab: %v", err)
	}
}
