package netnstests

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/uet"
)

// uetTsharkFields are the columns the UET capture check reads from tshark
// with the shipped dissector (host/uet/uet.lua).
var uetTsharkFields = []string{
	"frame.number", "udp.srcport", "udp.dstport",
	"fluet.type", "fluet.flags", "fluet.psn", "fluet.spdcid", "fluet.dpdcid",
	"fluet.cack_psn", "fluet.cc.nscc.rcvd_bytes", "fluet.code",
	"fluet.ses.opcode", "fluet.ses.som", "fluet.ses.eom", "fluet.ses.message_id", "fluet.ses.job_id",
	"fluet.ses.message_offset", "fluet.ses.payload_length", "fluet.ses.request_length",
}

// uetWire is one UET packet as the test decodes it itself, from the byte
// offsets of uet.md's wire format, independent of host/uet and uet.lua.
type uetWire struct {
	frame           int
	sport, dport    int
	typ, flags      int
	psn, cack       int64 // -1: not in this form
	spdcid, dpdcid  int64
	rcvdBytes, code int64
	// The SES standard request header after a data packet's PDS header
	// (-1: none, or not in this packet).
	sesOpcode, som, eom, msgID, jobID int64
	msgOffset, payLen, reqLen         int64
	synPSNOffset                      bool
	ecn                               uint8
	payloadLen                        int
	requestWithPayload                bool
}

func uetDecodeIndependent(frame int, sport, dport int, ecn uint8, b []byte) (uetWire, error) {
	w := uetWire{frame: frame, sport: sport, dport: dport, ecn: ecn, psn: -1, cack: -1, spdcid: -1, dpdcid: -1, rcvdBytes: -1, code: -1, payloadLen: len(b),
		sesOpcode: -1, som: -1, eom: -1, msgID: -1, jobID: -1, msgOffset: -1, payLen: -1, reqLen: -1}
	if len(b) < 12 {
		return w, fmt.Errorf("frame %d: %d bytes of UDP payload", frame, len(b))
	}
	p := binary.BigEndian.Uint16(b)
	w.typ, w.flags = int(p>>11), int(p&0x7F)
	be32 := func(o int) int64 { return int64(binary.BigEndian.Uint32(b[o:])) }
	be16 := func(o int) int64 { return int64(binary.BigEndian.Uint16(b[o:])) }
	switch w.typ {
	case 2, 3, 13, 14: // RUD_REQ, ROD_REQ, the CC forms
		w.psn, w.spdcid = be32(4), be16(8)
		if w.flags&0x04 != 0 { // SYN: the slot carries psn_offset
			w.synPSNOffset = true
		} else {
			w.dpdcid = be16(10)
		}
		w.requestWithPayload = len(b) > 12
		if nh := (p >> 7) & 0xF; nh == 3 && len(b) >= 12+44 { // REQ_STD at byte 12
			ses := b[12:]
			w.sesOpcode = int64(ses[0] & 0x3F)
			w.som, w.eom = int64(ses[1]&0x01), int64(ses[1]>>1&0x01)
			w.msgID = int64(binary.BigEndian.Uint16(ses[2:]))
			w.jobID = int64(ses[5])<<16 | int64(ses[6])<<8 | int64(ses[7])
			if w.som == 0 {
				w.payLen = int64(binary.BigEndian.Uint32(ses[32:]) & 0x3FFF)
				w.msgOffset = int64(binary.BigEndian.Uint32(ses[36:]))
			}
			w.reqLen = int64(binary.BigEndian.Uint32(ses[40:]))
		}
	case 7, 8: // ACK, ACK_CC
		w.cack, w.spdcid, w.dpdcid = be32(4), be16(8), be16(10)
		if w.typ == 8 {
			if len(b) < 32 {
				return w, fmt.Errorf("frame %d: ACK_CC of %d bytes", frame, len(b))
			}
			if b[12]>>4 == 0 { // NSCC cc_state: rcvd_bytes at cc_state+3
				w.rcvdBytes = int64(b[27])<<16 | int64(b[28])<<8 | int64(b[29])
			}
		}
	case 10: // NACK
		w.code, w.psn, w.spdcid, w.dpdcid = int64(b[2]), be32(4), be16(8), be16(10)
	case 11: // CTRL
		w.psn, w.spdcid, w.dpdcid = be32(4), be16(8), be16(10)
	default:
		return w, fmt.Errorf("frame %d: PDS type %d", frame, w.typ)
	}
	return w, nil
}

// TestUETCapture: UET traffic of two senders (with CE marks from the port)
// captured at the receiver decodes in tshark with the shipped Lua
// dissector, and every field tshark shows equals the test's own decode of
// the bytes; on the wire every packet goes to UDP 4793, data from its
// PDC's entropy value, ACKs back to it.
func TestUETCapture(t *testing.T) {
	roceSize(t)
	tshark, errT := exec.LookPath("tshark")
	requireTool(t, "tshark", "apt-get install tshark", errT == nil)
	_, errD := exec.LookPath("tcpdump")
	requireTool(t, "tcpdump", "apt-get install tcpdump", errD == nil)
	lua, err := filepath.Abs("../host/uet/uet.lua")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lua); err != nil {
		t.Fatalf("the shipped dissector: %v", err)
	}
	b := newUETBed(t, 2, uetPortConfig(), nil)

	dir := t.TempDir()
	pcap := filepath.Join(dir, "uet.pcap")
	const maxPackets = 4000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dump, dumpErr := startTcpdump(t, ctx, b.d.Receiver, pcap, maxPackets, uet.Port)
	var ss []*pds.Sender
	for i, c := range b.clients {
		s, err := c.Start(b.d.ReceiverAddr, pds.Stream{JobID: uint32(i + 1), MessageBytes: uetMsgBytes, Messages: 40, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	waitSenders(t, time.Now(), ss, 30*time.Second)
	time.Sleep(100 * time.Millisecond)
	_ = dump.Process.Signal(syscall.SIGINT)
	_ = dump.Wait()

	// The test's own decode of every frame.
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var mine []uetWire
	for frame := 1; ; frame++ {
		data, _, err := rd.ReadPacketData()
		if err != nil {
			break
		}
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil {
			t.Fatalf("frame %d: not IPv4/UDP", frame)
		}
		w, err := uetDecodeIndependent(frame, int(udp.SrcPort), int(udp.DstPort), ip.TOS&3, udp.Payload)
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, w)
	}
	if len(mine) < 100 {
		t.Fatalf("captured %d UET packets: %s", len(mine), dumpErr.String())
	}

	args := []string{"-n", "-X", "lua_script:" + lua, "-r", pcap, "-T", "fields", "-E", "separator=|"}
	for _, fl := range uetTsharkFields {
		args = append(args, "-e", fl)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(mine) {
		t.Fatalf("tshark shows %d frames, the pcap has %d", len(lines), len(mine))
	}
	num := func(s string) int64 {
		switch s {
		case "":
			return -1
		case "True":
			return 1
		case "False":
			return 0
		}
		v, err := strconv.ParseInt(strings.TrimPrefix(s, "0x"), map[bool]int{true: 16, false: 10}[strings.HasPrefix(s, "0x")], 64)
		if err != nil {
			return -2
		}
		return v
	}
	types := map[int]int{}
	var bad int
	var ce int
	for i, line := range lines {
		col := strings.Split(line, "|")
		if len(col) != len(uetTsharkFields) {
			t.Fatalf("tshark line %q: %d columns", line, len(col))
		}
		w := mine[i]
		types[w.typ]++
		if w.ecn == 3 {
			ce++
		}
		got := make([]int64, len(col)-1)
		for k := range got {
			got[k] = num(col[k+1])
		}
		want := []int64{int64(w.sport), int64(w.dport), int64(w.typ), int64(w.flags), w.psn, w.spdcid, w.dpdcid, w.cack, w.rcvdBytes, w.code,
			w.sesOpcode, w.som, w.eom, w.msgID, w.jobID, w.msgOffset, w.payLen, w.reqLen}
		if w.synPSNOffset {
			got[6] = -1 // the dissector shows the SYN slot as psn_offset, not dpdcid
		}
		for k := range want {
			if got[k] != want[k] {
				bad++
				if bad <= 10 {
					t.Errorf("frame %d: %s = %d (tshark %q), the test's decode %d", w.frame, uetTsharkFields[k+1], got[k], col[k+1], want[k])
				}
			}
		}
		if w.dport != uet.Port {
			t.Errorf("frame %d: UDP destination port %d, want %d", w.frame, w.dport, uet.Port)
		}
		if w.requestWithPayload && (w.sesOpcode != int64(uet.SESWrite) || w.reqLen != uetMsgBytes || w.jobID < 1 || w.jobID > 2) {
			t.Errorf("frame %d: SES opcode %d, request length %d, job %d: want a WRITE of %d bytes in job 1 or 2", w.frame, w.sesOpcode, w.reqLen, w.jobID, uetMsgBytes)
		}
		if w.requestWithPayload && w.sport < 0xC000 {
			t.Errorf("frame %d: data from source port %d, not an entropy value (0xC000..0xFFFF)", w.frame, w.sport)
		}
	}
	t.Logf("capture: %d UET packets by PDS type %v, %d CE-marked; tshark with uet.lua decoded every one, %d field mismatches against the test's decode", len(mine), types, ce, bad)
	if types[2] == 0 || types[8] == 0 {
		t.Errorf("types %v: want RUD_REQ (2) and ACK_CC (8)", types)
	}
}
