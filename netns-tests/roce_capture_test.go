package netnstests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// systemPython is Debian's interpreter, which python3-scapy installs into
// (a python3 earlier in PATH, e.g. pyenv's, does not see it).
const systemPython = "/usr/bin/python3"

// requireTool fails under CI=true and skips otherwise when a tool the
// capture check needs is missing (CI installs tshark, tcpdump and
// python3-scapy).
func requireTool(t *testing.T, what, why string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s is missing (%s), and CI=true forbids skipping", what, why)
	}
	t.Skipf("%s is missing: %s", what, why)
}

// startTcpdump captures UDP port's packets on n's eth0 into pcap (at most
// maxPackets) and returns once tcpdump listens; its stderr collects in
// the buffer. ctx bounds its life.
func startTcpdump(t *testing.T, ctx context.Context, n *lab.Node, pcap string, maxPackets, port int) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	// -Z root: tcpdump would otherwise drop to its own user and could not
	// write into the test's private directory.
	dump := n.Command(ctx, "tcpdump", "-i", "eth0", "-n", "-s", "0", "-U", "-Z", "root",
		"-c", strconv.Itoa(maxPackets), "-w", pcap, "udp", "port", strconv.Itoa(port))
	stderr, err := dump.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan error, 1)
	var dumpErr bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		ready := false
		for sc.Scan() {
			dumpErr.WriteString(sc.Text() + "\n")
			if !ready && strings.Contains(sc.Text(), "listening on") {
				ready = true
				listening <- nil
			}
		}
		if !ready {
			listening <- fmt.Errorf("tcpdump never listened: %s", dumpErr.String())
		}
	}()
	select {
	case err := <-listening:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tcpdump not listening after 10 s")
	}
	return dump, &dumpErr
}

// icrcScript reads a pcap with scapy and checks the ICRC of every UDP 4791
// packet with scapy.contrib.roce's own implementation (BTH.compute_icrc),
// independent of host/roce. It prints one JSON object.
const icrcScript = `
import json, struct, sys
from scapy.all import IP, UDP, PcapReader, bind_layers
from scapy.contrib.roce import BTH
bind_layers(UDP, BTH, dport=4791)

def icrc_ok(pkt):
    b = pkt[BTH]
    return b.compute_icrc(None) == struct.pack("!I", b.icrc)

# The checker checks: roce-wire.md's test vector 1 (a ConnectX-4 Lx CNP)
# verifies, and fails with one bit flipped.
vec = bytes.fromhex("45c2003c718c4000401191610a0011010a001201000012b7002800008100ffff4000011800000000" + "00" * 16 + "82fd002a")
bad = bytearray(vec); bad[50] ^= 1
selftest = icrc_ok(IP(vec)) and not icrc_ok(IP(bytes(bad)))
res = {"selftest": selftest, "udp4791": 0, "bth": 0, "ok": 0, "bad": 0, "opcodes": {}, "bad_examples": [], "cnp": 0, "cnp_bad": []}
for pkt in PcapReader(sys.argv[1]):
    if UDP not in pkt or 4791 not in (pkt[UDP].sport, pkt[UDP].dport):
        continue
    res["udp4791"] += 1
    if BTH not in pkt or IP not in pkt:
        continue
    b = pkt[BTH]
    res["bth"] += 1
    op = "0x%02x" % b.opcode
    res["opcodes"][op] = res["opcodes"].get(op, 0) + 1
    if b.opcode == 0x81:
        # Annex A17.9.3: BECN set, FECN clear, 16 reserved bytes of zero.
        res["cnp"] += 1
        rsvd = bytes(b.payload)
        if (b.becn, b.fecn) != (1, 0) or rsvd != bytes(16):
            if len(res["cnp_bad"]) < 5:
                res["cnp_bad"].append("becn %d fecn %d reserved %s" % (b.becn, b.fecn, rsvd.hex()))
    if icrc_ok(pkt):
        res["ok"] += 1
    else:
        res["bad"] += 1
        if len(res["bad_examples"]) < 5:
            res["bad_examples"].append("%s psn %d icrc %08x" % (op, b.psn, b.icrc))
print(json.dumps(res))
`

type icrcResult struct {
	SelfTest    bool           `json:"selftest"`
	UDP4791     int            `json:"udp4791"`
	BTH         int            `json:"bth"`
	OK          int            `json:"ok"`
	Bad         int            `json:"bad"`
	Opcodes     map[string]int `json:"opcodes"`
	BadExamples []string       `json:"bad_examples"`
	CNP         int            `json:"cnp"`
	CNPBad      []string       `json:"cnp_bad"`
}

// tsharkFields are the columns the capture check reads, in order.
var tsharkFields = []string{
	"ip.src", "ip.dst", "ip.dsfield.dscp", "ip.dsfield.ecn", "ip.id", "ip.flags.df", "ip.len",
	"udp.srcport", "udp.dstport", "udp.checksum",
	"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.padcnt",
}

type capturedPacket struct {
	src, dst         string
	dscp, ecn        int
	ipID, df, ipLen  int
	sport, dport     int
	udpChecksum      int
	opcode           int
	destQP, psn, pad int
	decoded          bool
	line             string
}

func parseTsharkLine(line string) (capturedPacket, error) {
	f := strings.Split(line, "\t")
	if len(f) != len(tsharkFields) {
		return capturedPacket{}, fmt.Errorf("%d fields, want %d", len(f), len(tsharkFields))
	}
	p := capturedPacket{src: f[0], dst: f[1], line: line}
	num := func(s string) (int, error) {
		v, err := strconv.ParseInt(s, 0, 64)
		return int(v), err
	}
	ints := []*int{&p.dscp, &p.ecn, &p.ipID, &p.df, &p.ipLen, &p.sport, &p.dport, &p.udpChecksum}
	for i, dst := range ints {
		v, err := num(f[2+i])
		if err != nil {
			return p, fmt.Errorf("%s %q: %v", tsharkFields[2+i], f[2+i], err)
		}
		*dst = v
	}
	const ib = 10 // the first InfiniBand field
	if f[ib] == "" {
		return p, nil // not decoded as InfiniBand
	}
	p.decoded = true
	for i, dst := range []*int{&p.opcode, &p.destQP, &p.psn, &p.pad} {
		v, err := num(f[ib+i])
		if err != nil {
			return p, fmt.Errorf("%s %q: %v", tsharkFields[ib+i], f[ib+i], err)
		}
		*dst = v
	}
	return p, nil
}

// psnIn reports whether psn is one of the n PSNs starting at first (24-bit,
// wrapping).
func psnIn(psn, first uint32, n uint64) bool {
	return uint64((psn-first)&roce.PSNMask) < n
}

// TestRoCECapture captures a short congested run at the receiver and checks
// every RoCEv2 packet with two decoders that share no code with host/roce:
// Wireshark's InfiniBand dissector (opcodes, QPNs, PSNs, IP header) and
// scapy's ICRC.
func TestRoCECapture(t *testing.T) {
	roceSize(t)
	tshark, errT := exec.LookPath("tshark")
	requireTool(t, "tshark", "apt-get install tshark", errT == nil)
	_, errD := exec.LookPath("tcpdump")
	requireTool(t, "tcpdump", "apt-get install tcpdump", errD == nil)
	errS := exec.Command(systemPython, "-c", "from scapy.contrib.roce import BTH, CNPPadding").Run()
	requireTool(t, "python3-scapy", fmt.Sprintf("%s cannot import scapy.contrib.roce (%v): apt-get install python3-scapy", systemPython, errS), errS == nil)

	// A step at 16 KB marks as soon as two line-rate senders meet: CE data
	// and CNPs from the first milliseconds.
	cfg := qdisc.DefaultConfig(roceRate)
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: qdisc.ECNStep, MinThBytes: 16 * units.KiB}
	b := newRoCEBed(t, 2, cfg)
	p := roceParams(t)
	// s1 writes 64 KiB messages (FIRST/MIDDLE/LAST, RETH on the first);
	// s2 writes 4001-byte ones (WRITE_ONLY with 3 bytes of pad).
	msgSizes := []int{roceMsgBytes, 4001}
	flows := []*roceFlow{
		b.dialMsg(t, 0, senderQPConfig(p), false, msgSizes[0]),
		b.dialMsg(t, 1, senderQPConfig(p), false, msgSizes[1]),
	}

	dir := t.TempDir()
	pcap := filepath.Join(dir, "roce.pcap")
	const maxPackets = 6000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dump, dumpErr := startTcpdump(t, ctx, b.d.Receiver, pcap, maxPackets, roce.UDPPort)
	for i, f := range flows {
		f.startMsg(t, 0, false, msgSizes[i])
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- dump.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("tcpdump: %v: %s", err, dumpErr.String())
		}
	case <-time.After(15 * time.Second):
		_ = dump.Process.Signal(syscall.SIGINT)
		<-waitErr
		t.Logf("tcpdump did not see %d packets in 15 s: %s", maxPackets, dumpErr.String())
	}
	for _, f := range flows {
		f.stop(t)
	}

	// What each flow may put on the wire: its QPNs and PSN ranges.
	type expect struct {
		name                 string
		sender               string
		senderQP, receiverQP int
		firstPSN             uint32
		sent                 uint64
		data, ce, cnp, ack   int
		gsoSegments          int // data with IP ID > 0: segment 1.. of a GSO send
		ops                  map[int]int
		maxPad               int
		// UDP source ports seen on data (from the sender's QP) and on
		// ACKs and CNPs (from the receiver's QP).
		dataSports, replySports map[int]int
	}
	var exps []*expect
	for i, f := range flows {
		_, sent := f.qp.Progress()
		exps = append(exps, &expect{
			name: f.name, sender: b.d.SenderAddrs[i].String(),
			senderQP: int(f.qp.QPN()), receiverQP: int(f.sess.Remote[0].QPN),
			firstPSN: f.qp.Endpoint().PSN, sent: sent, ops: map[int]int{},
			dataSports: map[int]int{}, replySports: map[int]int{},
		})
	}
	byIP := map[string]*expect{}
	for _, e := range exps {
		byIP[e.sender] = e
	}
	recv := b.d.ReceiverAddr.String()

	args := []string{"-r", pcap, "-n", "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=/t"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	args = append(args, "udp.port==4791")
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("tshark: %v: %s", err, ee.Stderr)
		}
		t.Fatalf("tshark: %v", err)
	}
	var total, undecoded, bad int
	report := func(format string, args ...any) {
		bad++
		if bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		pk, err := parseTsharkLine(sc.Text())
		if err != nil {
			report("tshark line %q: %v", sc.Text(), err)
			continue
		}
		total++
		if !pk.decoded {
			undecoded++
			report("not decoded as InfiniBand: %s", pk.line)
			continue
		}
		// kernel.md: a DF socket sends IP ID 0, which the ICRC covers;
		// segment k of a UDP GSO send (pktio) has ID k, and its ICRC is
		// the one of ID k (scapy checks every ICRC below).
		if pk.ipID >= roce.GSOSegments || pk.df != 1 {
			report("IP ID %#x DF %d, want an ID below %d (0, or a GSO segment's) with DF: %s", pk.ipID, pk.df, roce.GSOSegments, pk.line)
		}
		// roce-wire.md, "Encapsulation": every packet, data, ACK or CNP,
		// to 4791; the source port is the sending QP's (checked below,
		// per QP). The UDP checksum is 0 from the raw socket, real from a
		// GSO send (the ICRC masks it).
		if pk.dport != roce.UDPPort {
			report("UDP destination port %d, want 4791: %s", pk.dport, pk.line)
		}
		switch {
		case pk.dst == recv: // sender -> receiver: data
			e := byIP[pk.src]
			if e == nil {
				report("data from an unknown sender: %s", pk.line)
				continue
			}
			e.data++
			if pk.ipID > 0 {
				e.gsoSegments++
			}
			e.dataSports[pk.sport]++
			e.ops[pk.opcode]++
			e.maxPad = max(e.maxPad, pk.pad)
			if pk.opcode < int(roce.OpRCWriteFirst) || pk.opcode > int(roce.OpRCWriteOnly) {
				report("%s: opcode %#x toward the receiver, want RDMA WRITE 0x06-0x0a: %s", e.name, pk.opcode, pk.line)
			}
			if pk.destQP != e.receiverQP {
				report("%s: data to QP %#x, want the receiver's QP %#x: %s", e.name, pk.destQP, e.receiverQP, pk.line)
			}
			if !psnIn(uint32(pk.psn), e.firstPSN, e.sent) {
				report("%s: data PSN %#x outside the %d sent from %#x: %s", e.name, pk.psn, e.sent, e.firstPSN, pk.line)
			}
			if pk.dscp != int(qdisc.DSCPRoCE) || (pk.ecn != 2 && pk.ecn != 3) {
				report("%s: data DSCP %d ECN %d, want DSCP 26 with ECT(0) or CE: %s", e.name, pk.dscp, pk.ecn, pk.line)
			}
			if pk.ecn == 3 {
				e.ce++
			}
		case pk.src == recv: // receiver -> sender: ACKs and CNPs
			e := byIP[pk.dst]
			if e == nil {
				report("reply to an unknown sender: %s", pk.line)
				continue
			}
			if pk.destQP != e.senderQP {
				report("%s: reply opcode %#x to QP %#x, want the sender's QP %#x: %s", e.name, pk.opcode, pk.destQP, e.senderQP, pk.line)
			}
			e.replySports[pk.sport]++
			switch pk.opcode {
			case int(roce.OpCNP):
				e.cnp++
				// Annex A17.9.3: PSN 0, BTH + 16 reserved bytes + ICRC,
				// so IPv4 total length 60; DSCP 48 (roce-wire.md).
				if pk.psn != 0 || pk.dscp != int(qdisc.DSCPCNP) || pk.ipLen != 60 {
					report("%s: CNP PSN %#x DSCP %d IP length %d, want PSN 0, DSCP 48, length 60: %s", e.name, pk.psn, pk.dscp, pk.ipLen, pk.line)
				}
			case int(roce.OpRCAck):
				e.ack++
				if !psnIn(uint32(pk.psn), e.firstPSN, e.sent) || pk.dscp != int(qdisc.DSCPRoCE) {
					report("%s: ACK PSN %#x (sent %d from %#x) DSCP %d, want a sent PSN and DSCP 26: %s", e.name, pk.psn, e.sent, e.firstPSN, pk.dscp, pk.line)
				}
			default:
				report("%s: opcode %#x toward the sender, want CNP 0x81 or ACK 0x11: %s", e.name, pk.opcode, pk.line)
			}
		default:
			report("packet neither to nor from the receiver: %s", pk.line)
		}
	}

	// The ICRC of every packet, by scapy.
	script := filepath.Join(dir, "icrc.py")
	if err := os.WriteFile(script, []byte(icrcScript), 0o600); err != nil {
		t.Fatal(err)
	}
	pyOut, err := exec.Command(systemPython, script, pcap).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("icrc.py: %v: %s", err, ee.Stderr)
		}
		t.Fatalf("icrc.py: %v", err)
	}
	var ic icrcResult
	if err := json.Unmarshal(pyOut, &ic); err != nil {
		t.Fatalf("icrc.py output %q: %v", pyOut, err)
	}

	t.Logf("capture: %d UDP 4791 packets, all decoded by tshark as InfiniBand: %v (%d not)", total, undecoded == 0, undecoded)
	t.Logf("%-4s %8s %8s %8s %6s %6s %6s %-12s %-12s %s", "flow", "data", "ID > 0", "CE", "CNP", "ACK", "pad", "data sport", "reply sport", "data opcodes")
	for _, e := range exps {
		t.Logf("%-4s %8d %8d %8d %6d %6d %6d %-12s %-12s %v", e.name, e.data, e.gsoSegments, e.ce, e.cnp, e.ack, e.maxPad, fmt.Sprint(keys(e.dataSports)), fmt.Sprint(keys(e.replySports)), e.ops)
	}
	t.Logf("scapy ICRC: %d UDP 4791, %d with a BTH, %d ok, %d bad; opcodes %v %v; CNPs with BECN=1, FECN=0, zero reserved bytes: %d of %d",
		ic.UDP4791, ic.BTH, ic.OK, ic.Bad, ic.Opcodes, ic.BadExamples, ic.CNP-len(ic.CNPBad), ic.CNP)
	cnps := 0
	for _, e := range exps {
		cnps += e.cnp
	}

	if total < maxPackets/2 {
		t.Errorf("captured %d RoCE packets, want at least %d", total, maxPackets/2)
	}
	if ic.UDP4791 != total || ic.BTH != total {
		t.Errorf("scapy saw %d UDP 4791 packets (%d with a BTH), tshark %d", ic.UDP4791, ic.BTH, total)
	}
	if !ic.SelfTest {
		t.Errorf("icrc.py self-test failed: scapy does not verify roce-wire.md's test vector 1 or misses a flipped bit")
	}
	if ic.CNP != cnps || len(ic.CNPBad) != 0 {
		t.Errorf("scapy: %d CNPs (tshark %d), malformed: %v", ic.CNP, cnps, ic.CNPBad)
	}
	if ic.Bad != 0 || ic.OK != total {
		t.Errorf("ICRC: %d ok, %d bad of %d (examples: %v)", ic.OK, ic.Bad, total, ic.BadExamples)
	}
	// Enough of every kind: data of each opcode the streams use, CE marks,
	// CNPs and ACKs for both flows.
	const minData, minCNP, minACK = 500, 5, 5
	wantOps := [][]int{
		{int(roce.OpRCWriteFirst), int(roce.OpRCWriteMiddle), int(roce.OpRCWriteLast)},
		{int(roce.OpRCWriteOnly)},
	}
	for i, e := range exps {
		for _, op := range wantOps[i] {
			if e.ops[op] == 0 {
				t.Errorf("%s: no data packet with opcode %#x captured", e.name, op)
			}
		}
		if e.data < minData || e.cnp < minCNP || e.ack < minACK || e.ce == 0 {
			t.Errorf("%s: captured %d data (%d CE), %d CNPs, %d ACKs; want at least %d data, some CE, %d CNPs, %d ACKs",
				e.name, e.data, e.ce, e.cnp, e.ack, minData, minCNP, minACK)
		}
	}
	// Exactly one source port per QP, rxe's: data from the sender's QP,
	// ACKs and CNPs from the receiver's.
	for _, e := range exps {
		for _, c := range []struct {
			what  string
			qpn   int
			ports map[int]int
		}{{"data", e.senderQP, e.dataSports}, {"ACKs and CNPs", e.receiverQP, e.replySports}} {
			want := int(agent.SourcePort(uint32(c.qpn)))
			if len(c.ports) != 1 || c.ports[want] == 0 {
				t.Errorf("%s: %s of QP %#x left from source ports %v, want only %d (0xC000 + hash_32(qpn, 14))", e.name, c.what, c.qpn, c.ports, want)
			}
		}
	}
	// The senders sent runs of their QP's packets as GSO sends, and the
	// port saw them one by one: its RoCE class's packets are at most a
	// path MTU's (a super-packet would be up to 64 KB).
	for _, e := range exps {
		if e.gsoSegments == 0 {
			t.Errorf("%s: no data packet with an IP ID above 0: no GSO send captured", e.name)
		}
	}
	st, err := b.port.Stats()
	if err != nil {
		t.Fatal(err)
	}
	rc := st.Classes[qdisc.ClassRoCE]
	const maxFrame = 14 + 20 + 8 + roce.BTHLen + roce.RETHLen + roceMTU + roce.ICRCLen
	if rc.EnqueuedPackets == 0 || rc.EnqueuedBytes > rc.EnqueuedPackets*maxFrame {
		t.Errorf("port: %d bytes in %d packets, more than %d bytes a packet: it saw GSO super-packets", rc.EnqueuedBytes, rc.EnqueuedPackets, maxFrame)
	}
	t.Logf("port: %d packets, %.0f bytes each on average (at most %d a path-MTU frame)", rc.EnqueuedPackets, float64(rc.EnqueuedBytes)/float64(max(rc.EnqueuedPackets, 1)), maxFrame)
	if exps[1].maxPad != 3 {
		t.Errorf("%s: 4001-byte WRITE_ONLY packets carry pad %d, want 3", exps[1].name, exps[1].maxPad)
	}
}

// keys lists a map's keys in order.
func keys(m map[int]int) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
