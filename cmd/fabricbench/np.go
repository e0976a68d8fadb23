//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/npbpf/npprobe"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
)

// The kernel NP rows (host/npbpf): CE-marked RoCEv2 data arriving at the
// receiver's device -> the CNP sent back leaving it, both stamped by the
// kernel for an AF_PACKET tap on that device (npprobe); the same for the
// agent's user-space NP, for comparison.

// npGoalP99 is the goal for the kernel NP's CE -> CNP p99 on an idle
// machine.
const npGoalP99 = 20 * time.Microsecond

// NPReport is the kernel NP section of the report.
type NPReport struct {
	Config string  `json:"config"`
	Rows   []NPRow `json:"rows"`
	GoalUs float64 `json:"goal_p99_us"`
}

// NPRow is one run: count CE packets, gap apart, to one QP.
type NPRow struct {
	Name string `json:"name"`
	// Latency is CE in -> CNP out on the receiver's device, µs.
	Latency Percentiles `json:"ce_to_cnp_us"`
	CEIn    int         `json:"ce_in"`
	CNPOut  int         `json:"cnp_out"`
	// TapDropped counts frames the tap lost.
	TapDropped uint32 `json:"tap_dropped"`
	Verdict    string `json:"verdict"` // ok, above, ref (the agent), n/a
}

type npFlagSet struct {
	count *int
	gap   *time.Duration
}

func npFlags() *npFlagSet {
	return &npFlagSet{
		count: flag.Int("np-count", 5000, "kernel NP rows: CE packets per row"),
		gap:   flag.Duration("np-gap", 100*time.Microsecond, "kernel NP rows: time between CE packets (each gets its own CNP)"),
	}
}

var (
	npRP4 = netip.MustParsePrefix("198.18.0.1/30")
	npNP4 = netip.MustParsePrefix("198.18.0.2/30")
	npRP6 = netip.MustParsePrefix("2001:db8::1/64")
	npNP6 = netip.MustParsePrefix("2001:db8::2/64")
)

const (
	npDev     = "eth0"
	npPayload = 1024
	npPeerQPN = 0x201
)

// runNP builds a two-namespace lab and measures CE -> CNP for the kernel
// NP (IPv4, IPv6) and for the agent's NP (IPv4).
func runNP(ctx context.Context, f *npFlagSet) (*NPReport, error) {
	rep := &NPReport{GoalUs: us(npGoalP99),
		Config: fmt.Sprintf("%d CE packets %v apart per row, each followed by an ECT(0) one, %d-byte RC SEND_ONLY, N = 0", *f.count, *f.gap, npPayload)}
	if *f.count < 1 || *f.gap <= 0 {
		return rep, errors.New("-np-count and -np-gap must be positive")
	}
	lab, err := lab.Build(lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "rp"}, {Name: "np"}},
		Links: []lab.LinkSpec{{
			A:               lab.Endpoint{Node: "rp", Dev: npDev, Addr: npRP4, Addr6: npRP6},
			B:               lab.Endpoint{Node: "np", Dev: npDev, Addr: npNP4, Addr6: npNP6},
			DisableOffloads: true,
		}},
	})
	if err != nil {
		return rep, err
	}
	defer closeLab(lab)
	rpn, npn := lab.Node("rp"), lab.Node("np")
	rows, err := runKernelNPRows(ctx, rpn, npn, f)
	rep.Rows = rows
	if err != nil || ctx.Err() != nil {
		return rep, err
	}
	progress("agent NP: IPv4, %d CE packets %v apart", *f.count, *f.gap)
	row, err := runAgentNPRow(rpn, npn, f)
	rep.Rows = append(rep.Rows, row)
	return rep, err
}

func runKernelNPRows(ctx context.Context, rpn, npn *lab.Node, f *npFlagSet) ([]NPRow, error) {
	np, err := npbpf.Attach(npn.NsHandle(), npDev, npbpf.Options{})
	if err != nil {
		return nil, err
	}
	defer np.Close()
	// The receiver's sockets read the data, so no port-unreachable goes
	// back.
	for _, a := range []netip.Prefix{npNP4, npNP6} {
		var c *net.UDPConn
		if err := npn.Do(func() (err error) {
			c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Addr(), roce.UDPPort)))
			return err
		}); err != nil {
			return nil, err
		}
		defer c.Close()
		go func() {
			buf := make([]byte, 9000)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}()
	}
	var rows []NPRow
	var errs []error
	for i, fam := range []struct {
		name   string
		rp, np netip.Addr
		qpn    uint32
	}{
		{"IPv4", npRP4.Addr(), npNP4.Addr(), 0x101},
		{"IPv6", npRP6.Addr(), npNP6.Addr(), 0x102},
	} {
		if ctx.Err() != nil {
			break
		}
		progress("kernel NP %d/2: %s, %d CE packets %v apart", i+1, fam.name, *f.count, *f.gap)
		row := NPRow{Name: "kernel NP, " + fam.name, Verdict: "n/a"}
		c := npbpf.QPContext{QPN: fam.qpn, PeerQPN: npPeerQPN, Local: fam.np, Peer: fam.rp, SrcPort: 0xc000 | uint16(fam.qpn)}
		err := np.AddQP(c)
		if err == nil {
			err = measureNP(&row, rpn, npn, fam.rp, fam.np, fam.qpn, f, true)
			err = errors.Join(err, np.RemoveQP(fam.qpn))
		}
		if err == nil {
			row.Verdict = "ok"
			if row.Latency.P99 > us(npGoalP99) {
				row.Verdict = "above"
			}
		}
		rows = append(rows, row)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", row.Name, err))
		}
	}
	return rows, errors.Join(errs...)
}

// runAgentNPRow measures the agent's user-space NP the same way: a QP of
// an agent on a UDP socket at the receiver, connected to the sender's
// address, takes the SEND_ONLY packets in PSN order.
func runAgentNPRow(rpn, npn *lab.Node, f *npFlagSet) (NPRow, error) {
	row := NPRow{Name: "agent NP (user space), IPv4", Verdict: "ref"}
	var conn *pktio.UDPConn
	if err := npn.Do(func() (err error) {
		conn, err = pktio.ListenUDP(netip.AddrPortFrom(npNP4.Addr(), roce.UDPPort), pktio.UDPOptions{})
		return err
	}); err != nil {
		return row, err
	}
	ag, err := agent.New(agent.Config{Conn: conn})
	if err != nil {
		conn.Close()
		return row, err
	}
	defer ag.Close()
	qc := agent.DefaultQPConfig()
	qc.MTU = npPayload
	qc.CNPPeriod = 0
	qp, err := ag.CreateQP(qc)
	if err != nil {
		return row, err
	}
	peer := agent.Endpoint{Addr: netip.AddrPortFrom(npRP4.Addr(), roce.UDPPort), QPN: npPeerQPN, MTU: qc.MTU}
	if err := qp.Connect(netip.AddrPortFrom(npNP4.Addr(), roce.UDPPort), peer); err != nil {
		return row, err
	}
	// The tap sleeps here: spinning, it and the sender would take both
	// CPUs from the agent's loops.
	err = measureNP(&row, rpn, npn, npRP4.Addr(), npNP4.Addr(), qp.QPN(), f, false)
	if c := qp.Counters(); err == nil && (c.NPCNPSent == 0 || c.NPECNMarkedRoCEPackets == 0) {
		err = fmt.Errorf("the agent's QP counted %d CE and sent %d CNPs", c.NPECNMarkedRoCEPackets, c.NPCNPSent)
	}
	return row, err
}

// measureNP sends the CE packets from rp to qpn at np and fills row from
// what the tap on np's device saw; spin: the tap never sleeps (see
// npprobe.TapOptions).
func measureNP(row *NPRow, rpn, npn *lab.Node, rpAddr, npAddr netip.Addr, qpn uint32, f *npFlagSet, spin bool) error {
	var s *npprobe.Sender
	if err := rpn.Do(func() (err error) {
		s, err = npprobe.NewSender(netip.AddrPortFrom(rpAddr, roce.UDPPort))
		return err
	}); err != nil {
		return err
	}
	defer s.Close()
	dst := netip.AddrPortFrom(npAddr, roce.UDPPort)
	// Neighbour resolution before the tap starts (to a QPN nobody has).
	if err := s.Send(dst, []npprobe.Data{{Op: roce.OpRCSendOnly, DestQP: 0xfffffe, Payload: 64}}); err != nil {
		return err
	}
	time.Sleep(20 * time.Millisecond)
	var tap *npprobe.Tap
	if err := npn.Do(func() (err error) {
		tap, err = npprobe.OpenTap(npDev, npprobe.TapOptions{Spin: spin})
		return err
	}); err != nil {
		return err
	}
	sendErr := s.SendPaced(dst, roce.OpRCSendOnly, qpn, *f.count, 1, npPayload, *f.gap)
	time.Sleep(50 * time.Millisecond)
	pkts := tap.Packets()
	st, tapErr := tap.Close()
	row.TapDropped = st.Dropped
	if err := errors.Join(sendErr, tapErr); err != nil {
		return err
	}
	r := npprobe.Analyze(pkts, map[uint32]uint32{qpn: npPeerQPN})
	row.CEIn, row.CNPOut = r.CEIn, r.CNPOut
	lat := make([]float64, len(r.Latency))
	for i, d := range r.Latency {
		lat[i] = us(d)
	}
	row.Latency = percentiles(lat)
	if row.Latency.N == 0 {
		return errors.New("no CE -> CNP pair on the tap")
	}
	return nil
}

func printNPRows(tw io.Writer, r *NPReport) {
	if r == nil {
		return
	}
	for _, x := range r.Rows {
		goal := "-"
		if x.Verdict != "ref" {
			goal = "p99 <= " + fmtUs(r.GoalUs) + " µs"
		}
		fmt.Fprintf(tw, "CE -> CNP on the wire\t%s\tp99\t%s\t-\t-\t-\t%s\t%s\t%s; %d CE in, %d CNPs out, tap lost %d\n",
			x.Name, p99Val(x.Latency), goal, x.Verdict, x.Latency, x.CEIn, x.CNPOut, x.TapDropped)
	}
}

func p99Val(p Percentiles) string {
	if p.N == 0 {
		return "n/a"
	}
	return fmtUs(p.P99) + " µs"
}

func printNPNotes(w io.Writer, r *NPReport) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "CE -> CNP rows: a sender in one namespace, the NP in the other (one veth pair); %s.\n", r.Config)
	fmt.Fprintln(w, "kernel NP: bpf/np.c attached (TCX) to the receiver's device; agent NP: a host/agent QP on a UDP socket there instead.")
	fmt.Fprintln(w, "Both times are the kernel's, for an AF_PACKET tap on the receiver's device: CE = the frame handed to the stack (netif_rx,")
	fmt.Fprintln(w, "before TC ingress), CNP = the frame handed to the driver (dev_queue_xmit_nit). Each CNP is charged to the last CE of its QP")
	fmt.Fprintln(w, "before it. The tap spins for the kernel rows (a sleeping reader is woken by the receiving CPU before TC ingress runs:")
	fmt.Fprintln(w, "an IPI to an idle vCPU, microseconds counted as NP time); it sleeps for the agent row, whose loops need the CPUs.")
}
