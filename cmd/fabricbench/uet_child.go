//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The UET rows run host/pds endpoints in child processes as the roceperf
// rows run host/perf: the bench re-executes itself with uetChildArg. The
// endpoints carry the same payload per packet as roceperf's MTU (the UET
// MTU is the IP packet: payload + SES + PDS + UDP + IPv4 headers), NSCC
// on an ample window (the line rate of the uetBenchLinkRate, far above
// what the veth carries, so the window does not bind: the CPU does).
const (
	uetChildArg = "uet-child"
	// uetBenchLinkRate is the endpoints' line rate: no port limit to
	// speak of on a veth pair that carries a few Gbit/s.
	uetBenchLinkRate = 100 * units.Gbit
	uetBenchBaseRTT  = 200 * time.Microsecond
	uetReady         = "uet-ready"
)

// uetMTU is the UET MTU whose packets carry payload bytes, as a RoCE MTU
// of payload does.
func uetMTU(payload int) int { return payload + uet.SESStdLen + uet.RequestLen + 8 + 20 }

// uetChildConfig is a child's endpoint: at line rate rate (0:
// uetBenchLinkRate), with room for pdcs PDCs beside the default's.
func uetChildConfig(conn pktio.Conn, payload int, rate units.Rate, pdcs int, idle time.Duration) pds.Config {
	cfg := pds.DefaultConfig()
	cfg.Conn = conn
	cfg.LinkRate = uetBenchLinkRate
	if rate > 0 {
		cfg.LinkRate = rate
	}
	cfg.MTU = uetMTU(payload)
	cfg.BaseRTT = uetBenchBaseRTT
	cfg.AckBytes = max(cfg.AckBytes, cfg.MTU)
	cfg.MaxPDCs = max(cfg.MaxPDCs, pdcs+64)
	if idle > 0 {
		cfg.IdleTimeout = idle
	}
	return cfg
}

// uetChild is main for a UET child; args follow uetChildArg.
func uetChild(args []string) int {
	fs, cf := newChildFlags(uetChildArg)
	local := fs.String("local", "", "this end's address")
	payload := fs.Int("payload", 1024, "payload bytes per full packet")
	streams := fs.Int("streams", 1, "client: streams, each its own job and PDC (the scale rows)")
	maxPDCs := fs.Int("max-pdcs", 0, "room for this many PDCs beside the default's")
	var rate units.Rate
	fs.Var(&rate, "link-rate", "the endpoint's line rate (default: far above the veth's)")
	idle := fs.Duration("idle-timeout", 0, "the endpoint's PDC idle timeout (default: pds's)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if most := pds.MaxContexts - 1 - 64; *streams < 1 || *streams > most {
		fmt.Fprintf(os.Stderr, "-streams %d: must be 1..%d\n", *streams, most)
		return 2
	}
	send, ctx, done, code := childStart(*cf.sendPath, *cf.cpuprofile)
	if code != 0 {
		return code
	}
	defer done()
	la, err := netip.ParseAddr(*local)
	if err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		return 2
	}
	conn, err := pktio.ListenEntropy(netip.AddrPortFrom(la, uet.Port), pktio.RoCEOptions{SendPath: send})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ep, err := pds.New(uetChildConfig(conn, *payload, rate, max(*maxPDCs, *streams), *idle))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ep.Close()
	switch *cf.mode {
	case "server":
		fmt.Println(uetReady)
		<-ctx.Done()
		c := ep.Counters()
		_ = json.NewEncoder(os.Stdout).Encode(map[string]uint64{"messages": c.MessagesReceived, "verify_errors": c.VerifyErrors, "peak_rss_bytes": peakRSS()})
		return 0
	case "client":
		dst, err := netip.ParseAddr(*cf.server)
		if err != nil {
			fmt.Fprintln(os.Stderr, "server:", err)
			return 2
		}
		var ru0, ru1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		c0 := ep.Counters()
		t0 := time.Now()
		var res childResult
		senders := make([]*pds.Sender, 0, *streams)
		for i := range *streams {
			s, err := ep.Start(dst, pds.Stream{JobID: uint32(i + 1), MessageBytes: *cf.msg})
			if err != nil {
				res.Error = fmt.Sprintf("stream %d of %d: %v", i+1, *streams, err)
				break
			}
			senders = append(senders, s)
		}
		res.SetupSeconds = time.Since(t0).Seconds()
		var steady steadyWindow
		if res.Error == "" {
			t1 := time.Now()
			var acked0 uint64
			for _, s := range senders {
				acked0 += s.Counters().BytesAcked
			}
			dataPackets := func() uint64 {
				c := ep.Counters()
				return c.TxPackets - c.ProbesSent - c.ClosesSent
			}
			steady.start(dataPackets())
			select {
			case <-time.After(time.Duration(*cf.seconds) * time.Second):
			case <-ctx.Done():
			}
			steady.end(dataPackets())
			var acked uint64
			for _, s := range senders {
				acked += s.Counters().BytesAcked
			}
			res.Seconds = time.Since(t1).Seconds()
			if *streams == 1 {
				// One stream: its whole run, as the goodput rows have always
				// counted it.
				acked0, res.Seconds = 0, time.Since(t0).Seconds()
			}
			res.GoodputBps = float64(acked-acked0) * 8 / res.Seconds
		}
		for _, s := range senders {
			s.Stop()
		}
		stopBy := time.After(5 * time.Second)
	wait:
		for _, s := range senders {
			select {
			case <-s.Done():
			case <-stopBy:
				break wait
			}
		}
		res.PeakRSSBytes = peakRSS()
		wall := time.Since(t0)
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		c1 := ep.Counters()
		res.TxPackets = c1.TxPackets - c0.TxPackets - (c1.ProbesSent - c0.ProbesSent) - (c1.ClosesSent - c0.ClosesSent)
		res.Retransmits = c1.Retransmits - c0.Retransmits
		u := conn.Stats()
		res.ConnDatagrams, res.GSODatagrams, res.GSOSends = u.DatagramsSent, u.GSODatagrams, u.GSOSends
		res.ConnReceived = u.DatagramsReceived
		steady.fill(&res)
		return res.emit(&ru0, &ru1, wall)
	}
	fmt.Fprintf(os.Stderr, "%s: -mode %q: want server or client\n", uetChildArg, *cf.mode)
	return 2
}

// uetRun runs one UET test a -> b in two child processes, both sending the
// send way. prof, if set, is a path prefix for the children's CPU profiles.
func uetRun(ctx context.Context, exe string, a, b *lab.Node, o roceOpts, prof string, send pktio.SendPath) (UDPRun, error) {
	var run UDPRun
	rctx, cancel := context.WithTimeout(ctx, time.Duration(o.seconds+30)*time.Second)
	defer cancel()
	srvArgs := []string{uetChildArg, "-mode", "server", "-local", addrB.Addr().String(), "-payload", strconv.Itoa(o.mtu), "-send", send.String()}
	cliArgs := []string{uetChildArg, "-mode", "client", "-local", addrA.Addr().String(), "-server", addrB.Addr().String(), "-send", send.String(),
		"-seconds", strconv.Itoa(o.seconds), "-payload", strconv.Itoa(o.mtu), "-msg", strconv.Itoa(roceMessageBytes)}
	if prof != "" {
		srvArgs = append(srvArgs, "-cpuprofile", prof+"-uet-server.pprof")
		cliArgs = append(cliArgs, "-cpuprofile", prof+"-uet-client.pprof")
	}
	name, args := pinned(o.cpu, exe, srvArgs...)
	t0 := time.Now()
	srv, err := startUETServer(rctx, b, name, args)
	if err != nil {
		return run, err
	}
	name, args = pinned(o.cpu, exe, cliArgs...)
	out, stderr, runErr := runClient(rctx, a, name, args...)
	st, serr := srv.stop()
	var res childResult
	if err := json.Unmarshal(out, &res); err != nil {
		return run, fmt.Errorf("uet client: %v %v (stderr: %s)", err, runErr, strings.TrimSpace(stderr))
	}
	if res.Error != "" || runErr != nil {
		return run, fmt.Errorf("uet client: %s %v", res.Error, runErr)
	}
	if serr != nil {
		return run, serr
	}
	if st["verify_errors"] != 0 {
		return run, fmt.Errorf("uet server: %d verify errors", st["verify_errors"])
	}
	if res.GoodputBps <= 0 || res.TxPackets == 0 {
		return run, errors.New("uet reported no goodput or no packets sent")
	}
	return res.udpRun(srv.cmd.ProcessState, t0), nil
}

// uetServer is a UET server child, started and ready.
type uetServer struct {
	cmd    *exec.Cmd
	rd     *bufio.Reader
	stderr bytes.Buffer
}

// startUETServer starts name args (a uet-child server) in b and waits for
// it to say it is ready.
func startUETServer(rctx context.Context, b *lab.Node, name string, args []string) (*uetServer, error) {
	s := &uetServer{cmd: b.Command(rctx, name, args...)}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.cmd.Stderr = &s.stderr
	s.cmd.WaitDelay = 2 * time.Second
	s.cmd.Cancel = func() error { return s.cmd.Process.Signal(syscall.SIGTERM) }
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start uet server: %w", err)
	}
	s.rd = bufio.NewReader(out)
	line, err := s.rd.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != uetReady {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		return nil, fmt.Errorf("uet server did not start: %q %v: %s", line, err, s.stderr.String())
	}
	return s, nil
}

// stop ends the server and returns what it printed.
func (s *uetServer) stop() (map[string]uint64, error) {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(s.rd)
	werr := s.cmd.Wait()
	var st map[string]uint64
	if err := json.Unmarshal(rest, &st); err != nil {
		return nil, fmt.Errorf("uet server output %q: %v (wait: %v, stderr: %s)", rest, err, werr, s.stderr.String())
	}
	return st, nil
}
