package qdisc

import (
	"encoding/binary"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// flowQueueConfig is the test port with flow queues in the RoCE class
// (DSCP 26).
func flowQueueConfig(n int) Config {
	cfg := testConfig()
	cfg.Classes[ClassRoCE].FlowQueues = n
	return cfg
}

// uetFrame is a UET datagram (UDP to 4793) from source port sport whose
// PDS header names source PDC spdcid; pds is the UDP payload's length
// (at least 10 to hold the SPDCID).
func uetFrame(tb testing.TB, v6 bool, sport, spdcid uint16, pds int) []byte {
	tb.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 4793}
	payload := make([]byte, pds)
	if pds >= 10 {
		binary.BigEndian.PutUint16(payload[8:], spdcid)
	}
	var ip gopacket.SerializableLayer
	if v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, TrafficClass: 26<<2 | ect0, NextHeader: layers.IPProtocolUDP, HopLimit: 64,
			SrcIP: net.ParseIP("2001:db8::1"), DstIP: net.ParseIP("2001:db8::2")}
		udp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	} else {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, IHL: 5, TOS: 26<<2 | ect0, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
			SrcIP: net.IPv4(198, 18, 1, 2), DstIP: net.IPv4(198, 19, 0, 2)}
		udp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, gopacket.Payload(payload)); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// flowQueuePriority is what skb->priority must be for class c's flow
// queue b.
func flowQueuePriority(c ClassID, b int) uint32 {
	return htbMajor<<16 | flowQueueMinor(int(c), b)
}

// TestFlowQueueClassify: a class with flow queues puts a UET packet in the
// queue of its source PDC (SPDCID mod the queues), whatever its entropy
// (UDP source port), over IPv4 and IPv6; any other packet of the class in
// one of the class's queues by its 5-tuple; a class without flow queues
// keeps its one leaf; and the class's accounting is the class's.
func TestFlowQueueClassify(t *testing.T) {
	const n = 4
	o := loadTest(t, flowQueueConfig(n), QueueVeth)
	for _, v6 := range []bool{false, true} {
		for id := uint16(1); id <= 9; id++ {
			for _, sport := range []uint16{49152, 50001, 65535} {
				r := run(t, o.PortEnqueue, uetFrame(t, v6, sport, id, 64), skbCtx{})
				if want := flowQueuePriority(ClassRoCE, int(id)%n); r.ret != tcActOK || r.ctx.Priority != want {
					t.Errorf("v6 %v spdcid %d sport %d: verdict %d priority %#x, want pass in %#x", v6, id, sport, r.ret, r.ctx.Priority, want)
				}
			}
		}
	}
	// Too short to name a PDC, or not UET: a queue of the class all the
	// same, by the kernel's hash.
	inClass := func(p uint32) bool {
		return p>>16 == htbMajor && p&0xffff>>8 == uint32(ClassRoCE)+1 && p&0xff < n
	}
	for name, frame := range map[string][]byte{
		"uet short":  uetFrame(t, false, 50000, 3, 6),
		"roce":       craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 100}),
		"roce ipv6":  craft(t, pktSpec{v6: true, dscp: 26, ecn: ect0, payload: 100}),
		"uet header": uetFrame(t, false, 50000, 3, 10),
	} {
		r := run(t, o.PortEnqueue, frame, skbCtx{})
		if r.ret != tcActOK || !inClass(r.ctx.Priority) {
			t.Errorf("%s: verdict %d priority %#x, want pass in a flow queue of class %d", name, r.ret, r.ctx.Priority, ClassRoCE)
		}
	}
	// Class 0 (DSCP 0) has none: its leaf, as before.
	r := run(t, o.PortEnqueue, craft(t, pktSpec{dscp: 0, payload: 100}), skbCtx{})
	if want := uint32(priorityBase); r.ctx.Priority != want {
		t.Errorf("class 0: priority %#x, want its leaf %#x", r.ctx.Priority, want)
	}
	s := stats(t, o)
	if c := s.Classes[ClassRoCE]; c.EnqueuedPackets != 2*9*3+4 || c.BacklogPackets != 2*9*3+4 {
		t.Errorf("class %d enqueued %d, backlog %d packets; want %d each (its queues are the class's)", ClassRoCE, c.EnqueuedPackets, c.BacklogPackets, 2*9*3+4)
	}
}

// TestFlowQueueConfig: flow_queues is range-checked, refused on strict and
// trim classes, and read back from the maps.
func TestFlowQueueConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"negative", func(c *Config) { c.Classes[ClassRoCE].FlowQueues = -1 }, "class 3: flow_queues (-1) must be 0 (one FIFO) to 256"},
		{"too many", func(c *Config) { c.Classes[ClassRoCE].FlowQueues = 257 }, "class 3: flow_queues (257) must be 0 (one FIFO) to 256"},
		{"strict", func(c *Config) { c.Classes[ClassCNP].FlowQueues = 4 }, "class 6: flow_queues (4) must be 0 on a strict or trim class"},
		{"trim class", func(c *Config) {
			c.Classes[ClassRoCE].SetTrim()
			c.Classes[DefaultTrimClass].LimitBytes = 64 * units.KiB
			c.Classes[DefaultTrimClass].FlowQueues = 2
		}, "class 7: flow_queues (2) must be 0 on a strict or trim class"},
	} {
		cfg := testConfig()
		tc.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, n := range []int{0, 1, MaxFlowQueues} {
		cfg := flowQueueConfig(n)
		if err := cfg.Validate(); err != nil {
			t.Errorf("flow_queues %d: %v", n, err)
		}
	}
	o := loadTest(t, flowQueueConfig(64), QueueVeth)
	got, _, err := readConfig(&o.PortMaps, flowQueueConfig(64))
	if err != nil {
		t.Fatal(err)
	}
	if got.Classes[ClassRoCE].FlowQueues != 64 || got.Classes[0].FlowQueues != 0 {
		t.Errorf("read back flow_queues %d and %d, want 64 and 0", got.Classes[ClassRoCE].FlowQueues, got.Classes[0].FlowQueues)
	}
}

// TestFlowQueueRoundRobin: through a real port (HTB on a veth), twelve
// frames of one UET flow queued ahead of twelve of another leave in turn
// with flow queues, a frame (at most two: DRR's quantum is an Ethernet
// frame) of each, and all of the first flow first without (a FIFO).
func TestFlowQueueRoundRobin(t *testing.T) {
	for _, n := range []int{4, 0} {
		t.Run(map[int]string{4: "flow queues", 0: "fifo"}[n], func(t *testing.T) {
			order := flowQueueOrder(t, n)
			first := slices.Index(order, 2)
			run, longest := 0, 0
			for i := first; i >= 0 && i < len(order) && slices.Contains(order[i:], 1); i++ {
				if i > first && order[i] == order[i-1] {
					run++
				} else {
					run = 1
				}
				longest = max(longest, run)
			}
			t.Logf("departure order (PDC): %v", order)
			if n == 0 {
				if first != 12 {
					t.Errorf("fifo: the second flow's first frame left %dth, want 12th (after all of the first)", first)
				}
				return
			}
			// Frames take 4.2 ms each at 2 Mbit/s: the second flow is
			// queued within a frame or two of the first unless the
			// sender stalls that long.
			if first > 3 {
				t.Errorf("the second flow's first frame left at %d, want within the first 4: its queue waits for no more than the frame being sent", first)
			}
			if longest > 2 {
				t.Errorf("a run of %d frames of one flow while both had frames queued, want at most 2", longest)
			}
		})
	}
}

// flowQueueOrder sends 12 UET frames of PDC 1 and then 12 of PDC 2 into a
// 2 Mbit/s port whose data class has n flow queues, and returns the PDCs
// in the order they reach the peer.
func flowQueueOrder(t *testing.T, n int) []uint16 {
	labtest.EnterNetns(t)
	vethUp(t, "fq0", "fq1")
	cfg := DefaultConfig(2 * units.Mbit)
	cfg.Classes[ClassRoCE].FlowQueues = n
	p, err := Attach(cfg, AttachOptions{Dev: "fq0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, leaves := htbRates(t, p); n > 0 && len(leaves) != NumClasses+n {
		t.Fatalf("%d htb classes under the port, want %d leaves and %d flow queues", len(leaves), NumClasses, n)
	}

	ifi := func(dev string) int {
		i, err := net.InterfaceByName(dev)
		if err != nil {
			t.Fatal(err)
		}
		return i.Index
	}
	rx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rx)
	if err := unix.Bind(rx, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi("fq1")}); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval((2 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	tx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tx)
	to := &unix.SockaddrLinklayer{Ifindex: ifi("fq0"), Halen: 6}
	for i := range 24 {
		id := uint16(1 + i/12)
		if err := unix.Sendto(tx, uetFrame(t, false, uint16(50000+i), id, 1000), 0, to); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	var order []uint16
	buf := make([]byte, 2048)
	const pdcOff = 14 + 20 + 8 + 8
	for len(order) < 24 {
		m, _, err := unix.Recvfrom(rx, buf, 0)
		if err != nil {
			t.Fatalf("after %d frames (%v): %v", len(order), order, err)
		}
		if m < pdcOff+2 || binary.BigEndian.Uint16(buf[12:]) != 0x0800 || binary.BigEndian.Uint16(buf[14+20+2:]) != 4793 {
			continue // the kernel's own (IPv6 router solicitations)
		}
		order = append(order, binary.BigEndian.Uint16(buf[pdcOff:]))
	}
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Classes[ClassRoCE]; c.EnqueuedPackets != 24 || c.DroppedLimitPackets != 0 {
		t.Errorf("class %d: enqueued %d, dropped %d; want 24 and 0", ClassRoCE, c.EnqueuedPackets, c.DroppedLimitPackets)
	}
	return order
}

// TestUDPGSOUnaccounted: a UDP GSO super-packet is judged and passed but
// kept out of the class's accounting, counted apart: its device sends it
// as datagrams, each with the stamp, and their departures would take the
// backlog below zero. A datagram alone is accounted as before.
func TestUDPGSOUnaccounted(t *testing.T) {
	o := loadTest(t, flowQueueConfig(4), QueueVeth)
	for _, v6 := range []bool{false, true} {
		frame := uetFrame(t, v6, 50000, 7, 4*500) // BPF_PROG_RUN takes at most a page
		before := stats(t, o)
		r := run(t, o.PortEnqueue, frame, skbCtx{GSOSegs: 4, GSOSize: 500})
		after := stats(t, o)
		c, c0 := after.Classes[ClassRoCE], before.Classes[ClassRoCE]
		if r.ret != tcActOK || after.Port.UnaccountedPackets != before.Port.UnaccountedPackets+1 ||
			c.EnqueuedPackets != c0.EnqueuedPackets || c.BacklogBytes != c0.BacklogBytes {
			t.Errorf("v6 %v, 4 segments: verdict %d, unaccounted +%d, class enqueued +%d, backlog +%d; want pass, +1, 0, 0",
				v6, r.ret, after.Port.UnaccountedPackets-before.Port.UnaccountedPackets, c.EnqueuedPackets-c0.EnqueuedPackets, c.BacklogBytes-c0.BacklogBytes)
		}
		if want := flowQueuePriority(ClassRoCE, 7%4); r.ctx.Priority != want {
			t.Errorf("v6 %v, 4 segments: priority %#x, want its flow's queue %#x", v6, r.ctx.Priority, want)
		}
		r = run(t, o.PortEnqueue, frame, skbCtx{})
		if c2 := stats(t, o).Classes[ClassRoCE]; r.ret != tcActOK || c2.EnqueuedPackets != c.EnqueuedPackets+1 || c2.BacklogBytes != c.BacklogBytes+uint64(len(frame)) {
			t.Errorf("v6 %v, one datagram: verdict %d, enqueued +%d, backlog +%d; want pass, +1, +%d", v6, r.ret, c2.EnqueuedPackets-c.EnqueuedPackets, c2.BacklogBytes-c.BacklogBytes, len(frame))
		}
	}
}
