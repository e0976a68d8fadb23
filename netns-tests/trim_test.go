package netnstests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/ethfeat"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestPortTrim floods UDP at twice the port rate into a class with a small
// limit and trimming on, over IPv4 and IPv6. Every packet the limit would
// drop reaches the receiver cut to trim_bytes with the trim DSCP and its
// ECN (IP_RECVTOS, IPV6_RECVTCLASS), its kept payload intact; none is
// dropped while the trim class has room; and the receiver's counts equal
// the port's.
//
// The port's device transmits without checksum offload, so the stack
// computes each UDP checksum there and the receiver verifies it (veth
// passes ip_summed on unchanged): with the sender's checksum offloaded the
// packets reach the port CHECKSUM_PARTIAL and the program must leave the
// seed of the new length in the field; with it computed by the sender the
// program sets it to 0 over IPv4 (none) and computes it anew over IPv6.
// Either way no checksum error may show.
func TestPortTrim(t *testing.T) {
	for _, am := range attachModes {
		for _, senderCsum := range []struct {
			name    string
			offload bool
		}{{"offloaded", true}, {"computed", false}} {
			for _, v6 := range []bool{false, true} {
				if v6 && am.legacy {
					continue // the program is the same: one attach mode is enough
				}
				name := am.name + "/" + senderCsum.name
				if v6 {
					name += "/ipv6"
				}
				t.Run(name, func(t *testing.T) { portTrim(t, am.legacy, senderCsum.offload, v6) })
			}
		}
	}
}

func portTrim(t *testing.T, legacy, senderOffload, v6 bool) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	d := lab.NewDumbbellT(t, lab.DumbbellSpec{Senders: 1, DisableOffloads: true, IPv6: v6})
	setTxChecksum(t, d.Bottleneck.Node, d.Bottleneck.Dev, false)
	if !senderOffload {
		setTxChecksum(t, d.SenderPorts[0].PeerNode, d.SenderPorts[0].PeerDev, false)
	}
	const rate = 100 * units.Mbit
	cfg := qdisc.DefaultConfig(rate)
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: 64 * units.KiB}
	cfg.Classes[qdisc.ClassRoCE].SetTrim()
	trimClass := cfg.Classes[qdisc.ClassRoCE].TrimClass
	port := attachPort(t, d.Bottleneck, cfg, legacy)

	const payload = 1400
	network, dst, hdrs := "udp4", d.ReceiverAddr, 28
	counter := func(name string) uint64 { return udpCounter(t, d.Receiver, name) }
	if v6 {
		network, dst, hdrs = "udp6", d.ReceiverAddr6, 48
		counter = func(name string) uint64 {
			v, err := d.Receiver.UDP6Counter(name)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	keep := int(qdisc.DefaultTrimBytes) - hdrs // UDP payload a trimmed datagram keeps
	pattern := make([]byte, payload)
	for i := range pattern {
		pattern[i] = byte(i*7 + 3)
	}
	tosWhole := tosRoCEECT0
	tosTrimmed := int(qdisc.DefaultTrimDSCP)<<2 | tosRoCEECT0&3
	sk := newClassifyingSinkOn(t, d.Receiver, network, func(b []byte, tos byte) int {
		switch {
		case len(b) == payload && int(tos) == tosWhole && string(b) == string(pattern):
			return sinkWhole
		case len(b) == keep && int(tos) == tosTrimmed && string(b) == string(pattern[:keep]):
			return sinkTrimmed
		}
		return sinkOther
	})
	csum0, rcvbuf0 := counter("InCsumErrors"), counter("RcvbufErrors")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sent, err := floodUDP(ctx, d.Senders[0], netip.AddrPortFrom(dst, uint16(sk.port)), tosWhole, pattern, 2*rate, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := settle(t, port) // the counters' identities, trimming included
	c, tc := s.Classes[qdisc.ClassRoCE], s.Classes[trimClass]
	whole, trimmed, other := sk.waitKinds(c.DequeuedPackets + tc.DequeuedPackets)
	csum := counter("InCsumErrors") - csum0
	rcvbuf := counter("RcvbufErrors") - rcvbuf0
	t.Logf("sent %d; class 3: enqueued %d, dequeued %d, trimmed %d (cut %d B, kept %d B), dropped %d (trim class full %d), max backlog %d B; class %d: trimmed in %d, dequeued %d, max backlog %d B; receiver: %d whole, %d trimmed, %d other, %d checksum errors, %d rcvbuf errors",
		sent, c.EnqueuedPackets, c.DequeuedPackets, c.TrimmedPackets, c.TrimmedBytes, c.TrimmedKeptBytes, c.DroppedPackets(), c.TrimDroppedPackets,
		c.MaxBacklogBytes, trimClass, tc.TrimInPackets, tc.DequeuedPackets, tc.MaxBacklogBytes, whole, trimmed, other, csum, rcvbuf)

	if c.EnqueuedPackets < uint64(sent)*99/100 {
		t.Errorf("class 3 saw %d of %d datagrams sent", c.EnqueuedPackets, sent)
	}
	// Twice the rate: about half the datagrams are trimmed, and
	// none dropped while the trim class has room.
	if frac := float64(c.TrimmedPackets) / float64(c.EnqueuedPackets); frac < 0.3 || frac > 0.7 {
		t.Errorf("trimmed %.2f of the datagrams, want about 0.5", frac)
	}
	if c.DroppedPackets() != 0 || tc.DroppedPackets() != 0 {
		t.Errorf("dropped %d datagrams in class 3 (%d with the trim class full) and %d in the trim class: the trim class had room",
			c.DroppedPackets(), c.TrimDroppedPackets, tc.DroppedPackets())
	}
	if tc.TrimInPackets != c.TrimmedPackets || tc.TrimInBytes != c.TrimmedKeptBytes || tc.EnqueuedPackets != tc.TrimInPackets {
		t.Errorf("trim class took in %d packets (%d B) of %d enqueued, class 3 trimmed %d (%d B kept)",
			tc.TrimInPackets, tc.TrimInBytes, tc.EnqueuedPackets, c.TrimmedPackets, c.TrimmedKeptBytes)
	}
	if c.TrimmedKeptBytes != c.TrimmedPackets*uint64(14+qdisc.DefaultTrimBytes) {
		t.Errorf("trimmed frames kept %d B, want %d × %d B", c.TrimmedKeptBytes, c.TrimmedPackets, 14+qdisc.DefaultTrimBytes)
	}
	// HTB sized each trimmed packet anew (the program sends it
	// through the device once more): its bytes are the port's.
	q, err := port.Qdisc()
	if err != nil {
		t.Fatal(err)
	}
	if tot := s.Total(); q.SentBytes != tot.DequeuedBytes+s.Port.UnaccountedBytes {
		t.Errorf("HTB sent %d B, the port dequeued %d B (+ %d B unaccounted): trimmed packets charged at their old length?",
			q.SentBytes, tot.DequeuedBytes, s.Port.UnaccountedBytes)
	}
	if c.MaxBacklogBytes > uint64(cfg.Classes[qdisc.ClassRoCE].LimitBytes) {
		t.Errorf("class 3 max backlog %d B over its limit", c.MaxBacklogBytes)
	}
	if csum != 0 || other != 0 {
		t.Errorf("the receiver saw %d UDP checksum errors and %d datagrams neither whole nor trimmed as sent", csum, other)
	}
	// The receiver's counts are the port's: exactly, unless the
	// host lost some after the port (then within what it lost).
	lost := rcvbuf + c.Host.DroppedPackets + tc.Host.DroppedPackets
	if trimmed > tc.DequeuedPackets || trimmed+lost < tc.DequeuedPackets {
		t.Errorf("the receiver got %d trimmed datagrams, the port sent %d (%d lost on the host)", trimmed, tc.DequeuedPackets, lost)
	}
	if whole > c.DequeuedPackets || whole+lost < c.DequeuedPackets {
		t.Errorf("the receiver got %d whole datagrams, the port sent %d (%d lost on the host)", whole, c.DequeuedPackets, lost)
	}
}

// setTxChecksum turns dev's transmit checksum offload on or off.
func setTxChecksum(t *testing.T, n *lab.Node, dev string, on bool) {
	t.Helper()
	err := n.Do(func() error {
		got, err := ethfeat.Set(dev, map[string]bool{"tx-checksum-ip-generic": on})
		if err != nil {
			return err
		}
		if got["tx-checksum-ip-generic"].Active != on {
			return fmt.Errorf("tx-checksum-ip-generic stayed %v", got["tx-checksum-ip-generic"].Active)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s %s: tx checksum offload %s: %v", n.Name, dev, map[bool]string{true: "on", false: "off"}[on], err)
	}
}

// udpCounter reads a counter of the Udp line of n's /proc/net/snmp.
func udpCounter(t *testing.T, n *lab.Node, name string) uint64 {
	t.Helper()
	v, err := n.UDPCounter(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Kinds of datagram TestPortTrim's sink counts.
const (
	sinkWhole = iota
	sinkTrimmed
	sinkOther
)

// wait gives the receiving socket up to 2 s to read want datagrams, then
// returns what it counted.
func (s *sink) waitKinds(want uint64) (whole, trimmed, other uint64) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		whole, trimmed, other = s.received[sinkWhole].Load(), s.received[sinkTrimmed].Load(), s.received[sinkOther].Load()
		if whole+trimmed+other >= want || time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// floodUDP sends payload from n to dst with TOS (traffic class) tos at
// rate (of Ethernet frames) for total, paced every 500 µs, and returns the
// datagrams sent.
func floodUDP(ctx context.Context, n *lab.Node, dst netip.AddrPort, tos int, payload []byte, rate units.Rate, total time.Duration) (int, error) {
	var conn *net.UDPConn
	network, hdrs := "udp4", 42
	if dst.Addr().Is6() {
		network, hdrs = "udp6", 62
	}
	err := n.Do(func() error {
		var err error
		conn, err = net.DialUDP(network, nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if network == "udp6" {
		err = ipv6.NewConn(conn).SetTrafficClass(tos)
	} else {
		err = ipv4.NewConn(conn).SetTOS(tos)
	}
	if err != nil {
		return 0, err
	}
	perSec := rate.BytesPerSecond() / float64(len(payload)+hdrs)
	start := time.Now()
	tick := time.NewTicker(500 * time.Microsecond)
	defer tick.Stop()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case now := <-tick.C:
			elapsed := now.Sub(start)
			if elapsed >= total {
				return sent, nil
			}
			for range int(elapsed.Seconds()*perSec) - sent {
				// A full socket buffer drops like a NIC ring would.
				if _, err := conn.Write(payload); err != nil && !errors.Is(err, syscall.ENOBUFS) {
					return sent, err
				}
				sent++
			}
		}
	}
}
