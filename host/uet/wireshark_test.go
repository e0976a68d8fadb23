package uet

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// tsharkPath is Debian's tshark (package tshark, in the Makefile's
// RUNTIME_DEPS).
const tsharkPath = "tshark"

// requireTool skips t when a tool is missing, and fails under CI=true,
// where a skip would hide a test CI is meant to run.
func requireTool(t *testing.T, what, why string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s is missing (%s): %v; CI=true forbids skipping", what, why, err)
	}
	t.Skipf("%s is missing (%s): %v", what, why, err)
}

// wsFrame is one UDP payload of the capture, what Parse makes of it and,
// where the PDS header's next header is REQ_STD or RESP, what
// DecodeSESRequest or DecodeSESResponse makes of the payload.
type wsFrame struct {
	name    string
	udp     []byte
	h       Header
	err     error
	sesNH   NextHeader // NextHeaderReqStd or NextHeaderRsp if the frame has a SES header to decode
	sesLen  int        // the SES header's length, 0 if sesErr
	sesErr  error
	sesReq  SESRequest
	sesResp SESResponse
}

// wsFrames returns every form: the wire vectors (some with a payload after
// the header), random headers of every decoded type, the reserved-bit
// vectors and the payloads Parse rejects.
func wsFrames(t *testing.T) []wsFrame {
	t.Helper()
	var fs []wsFrame
	add := func(name string, udp []byte) {
		f := wsFrame{name: name, udp: udp}
		var p []byte
		p, f.err = Parse(udp, &f.h)
		if f.err == nil {
			switch f.h.NextHeader() {
			case NextHeaderReqStd:
				f.sesNH = NextHeaderReqStd
				f.sesLen, f.sesErr = DecodeSESRequest(p, &f.sesReq)
			case NextHeaderRsp:
				f.sesNH = NextHeaderRsp
				f.sesLen, f.sesErr = DecodeSESResponse(p, &f.sesResp)
			}
		}
		fs = append(fs, f)
	}
	for i, v := range vectors {
		udp := mustHex(t, v.hex)
		if i%2 == 1 {
			udp = append(udp, "payload"...)
		}
		add(v.name, udp)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, typ := range decodedTypes {
		for i := range 8 {
			h := randomHeader(r, typ)
			b := make([]byte, MaxHeaderLen+4)
			add(fmt.Sprintf("random %s #%d", typ, i), b[:Build(b, &h, []byte{1, 2, 3, 4}[:i%5])])
		}
	}
	for _, v := range reservedVectors {
		add("reserved: "+v.name, mustHex(t, v.hex))
	}
	// SES headers behind the PDS forms that carry them, with and without
	// data after them.
	sesBehind := func(name string, h Header, ses []byte, data string) {
		b := make([]byte, MaxHeaderLen+len(ses)+len(data))
		add(name, b[:Build(b, &h, append(bytes.Clone(ses), data...))])
	}
	reqHeaders := []Header{
		{Type: TypeRUDReq, Request: Request{Type: TypeRUDReq, NextHeader: NextHeaderReqStd, AR: true, PSN: 100, SPDCID: 1, DPDCID: 2}},
		{Type: TypeRODCCReq, Request: Request{Type: TypeRODCCReq, NextHeader: NextHeaderReqStd, SYN: true, PSN: 7, SPDCID: 3, PSNOffset: 7, CCCID: 4, CreditTarget: 16}},
	}
	for i, v := range sesReqVectors {
		sesBehind("REQ_STD: "+v.name, reqHeaders[i%2], mustHex(t, v.hex), "payload"[:i%2*7])
	}
	respHeaders := []Header{
		{Type: TypeAck, Ack: Ack{Type: TypeAck, NextHeader: NextHeaderRsp, CACKPSN: 100, SPDCID: 2, DPDCID: 1}},
		{Type: TypeAckCC, Ack: Ack{Type: TypeAckCC, NextHeader: NextHeaderRsp, CACKPSN: 5, SPDCID: 2, DPDCID: 1,
			CC: AckCC{CCType: CCCredit, Credit: CreditState{Credit: 9}}}},
		{Type: TypeNack, Nack: Nack{NextHeader: NextHeaderRsp, Code: NackNoResource, NackPSN: 5}},
	}
	for i, v := range sesRespVectors {
		sesBehind("RESP: "+v.name, respHeaders[i%3], mustHex(t, v.hex), "payload"[:i%2*7])
	}
	for _, v := range sesReservedVectors {
		sesBehind("REQ_STD reserved: "+v.name, reqHeaders[0], mustHex(t, v.hex), "")
	}
	for i := range 8 {
		h := randomHeader(r, reqHeaders[0].Type+Type(i%2)) // RUD_REQ, ROD_REQ
		h.Request.NextHeader = NextHeaderReqStd
		s := randomSESRequest(r)
		ses := make([]byte, SESStdLen)
		s.Encode(ses)
		sesBehind(fmt.Sprintf("random REQ_STD #%d", i), h, ses, "data"[:i%5])
		typ := []Type{TypeAck, TypeAckCC}[i%2]
		h = randomHeader(r, typ)
		h.Ack.NextHeader = NextHeaderRsp
		q := randomSESResponse(r)
		ses = make([]byte, SESRespLen)
		q.Encode(ses)
		sesBehind(fmt.Sprintf("random RESP #%d", i), h, ses, "data"[:i%5])
	}
	// SES headers one byte short.
	sesBehind("REQ_STD short", reqHeaders[0], mustHex(t, sesReqVectors[0].hex)[:SESStdLen-1], "")
	sesBehind("RESP short", respHeaders[0], mustHex(t, sesRespVectors[0].hex)[:SESRespLen-1], "")
	for _, v := range rejectedVectors {
		if v.hex == "" {
			continue // UDP hands no empty payload to a dissector
		}
		add("rejected: "+v.name, mustHex(t, v.hex))
	}
	return fs
}

// writePcap writes each frame as Ethernet/IPv4/UDP to Port, the UDP source
// port an entropy value.
func writePcap(t *testing.T, path string, fs []wsFrame) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for i, fr := range fs {
		eth := &layers.Ethernet{
			SrcMAC:       net.HardwareAddr{0x02, 0, 0, 0, 0, 1},
			DstMAC:       net.HardwareAddr{0x02, 0, 0, 0, 0, 2},
			EthernetType: layers.EthernetTypeIPv4,
		}
		ip := &layers.IPv4{
			Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, Flags: layers.IPv4DontFragment,
			SrcIP: net.IPv4(10, 0, 17, 1), DstIP: net.IPv4(10, 0, 18, 1),
		}
		udp := &layers.UDP{SrcPort: layers.UDPPort(0xc000 + i), DstPort: Port}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
		if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, gopacket.Payload(fr.udp)); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		ci := gopacket.CaptureInfo{Timestamp: start.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(data), Length: len(data)}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
}

// pdmlField is a field of tshark's PDML output.
type pdmlField struct {
	Name     string      `xml:"name,attr"`
	Show     string      `xml:"show,attr"`
	ShowName string      `xml:"showname,attr"`
	Fields   []pdmlField `xml:"field"`
}

type pdmlProto struct {
	Name   string      `xml:"name,attr"`
	Fields []pdmlField `xml:"field"`
}

type pdml struct {
	Packets []struct {
		Protos []pdmlProto `xml:"proto"`
	} `xml:"packet"`
}

// wsWant is what the dissector must show for one frame: the "show" value
// of every fluet field, the name Go's String gives each enum field, and the
// Go fields (paths into Header) the frame covers.
type wsWant struct {
	show  map[string]string
	enum  map[string]string
	paths map[string]bool
}

func (w *wsWant) set(path, field, show string) {
	if _, dup := w.show[field]; dup {
		panic("field listed twice: " + field)
	}
	w.show[field] = show
	if path != "" {
		w.paths[path] = true
	}
}

func (w *wsWant) u(path, field string, v uint64) { w.set(path, field, strconv.FormatUint(v, 10)) }
func (w *wsWant) i(path, field string, v int64)  { w.set(path, field, strconv.FormatInt(v, 10)) }
func (w *wsWant) x(path, field string, v uint64, digits int) {
	w.set(path, field, fmt.Sprintf("0x%0*x", digits, v))
}
func (w *wsWant) b(path, field string, v bool) {
	s := "0"
	if v {
		s = "1"
	}
	w.set(path, field, s)
}

// e is an enum field: its value, and Go's name for it where Go knows it
// (Wireshark shows "Unknown (n)" where Go shows "0xn").
func (w *wsWant) e(path, field string, v uint64, name string) {
	w.u(path, field, v)
	if !strings.HasPrefix(name, "0x") {
		w.enum[field] = name
	}
}

func (w *wsWant) slot(form string, syn bool, dpdcid uint16, useRsv bool, psnOffset uint16, start uint32) {
	if !syn {
		w.u(form+".DPDCID", "fluet.dpdcid", uint64(dpdcid))
		return
	}
	w.b(form+".UseRsvPDC", "fluet.use_rsv_pdc", useRsv)
	w.u(form+".PSNOffset", "fluet.psn_offset", uint64(psnOffset))
	w.u("", "fluet.start_psn", uint64(start))
}

// wantWireshark maps a decoded header onto the dissector's fields: the Go
// field names in snake_case, under "fluet." without the form's name (see
// uet.lua). udp is the frame's UDP payload: fluet.flags shows the raw flag
// bits, reserved ones included.
func wantWireshark(h *Header, udp []byte) wsWant {
	w := wsWant{show: map[string]string{}, enum: map[string]string{}, paths: map[string]bool{}}
	w.e("Type", "fluet.type", uint64(h.Type), h.Type.String())
	w.x("", "fluet.flags", uint64(udp[1]&prologueFlagsMask), 4)
	switch {
	case h.Type.IsRequest():
		r := &h.Request
		w.paths["Request.Type"] = true
		w.e("Request.NextHeader", "fluet.next_header", uint64(r.NextHeader), r.NextHeader.String())
		w.b("Request.Retx", "fluet.retx", r.Retx)
		w.b("Request.AR", "fluet.ar", r.AR)
		w.b("Request.SYN", "fluet.syn", r.SYN)
		w.i("Request.ClearPSNOffset", "fluet.clear_psn_offset", int64(r.ClearPSNOffset))
		w.u("", "fluet.clear_psn", uint64(r.ClearPSN()))
		w.u("Request.PSN", "fluet.psn", uint64(r.PSN))
		w.u("Request.SPDCID", "fluet.spdcid", uint64(r.SPDCID))
		w.slot("Request", r.SYN, r.DPDCID, r.UseRsvPDC, r.PSNOffset, r.StartPSN())
		if r.Type.HasReqCC() {
			w.u("Request.CCCID", "fluet.ccc_id", uint64(r.CCCID))
			w.u("Request.CreditTarget", "fluet.credit_target", uint64(r.CreditTarget))
		}
	case h.Type == TypeAck || h.Type == TypeAckCC:
		a := &h.Ack
		w.paths["Ack.Type"] = true
		w.e("Ack.NextHeader", "fluet.next_header", uint64(a.NextHeader), a.NextHeader.String())
		w.b("Ack.M", "fluet.m", a.M)
		w.b("Ack.Retx", "fluet.retx", a.Retx)
		w.b("Ack.Probe", "fluet.probe", a.Probe)
		w.e("Ack.Req", "fluet.req", uint64(a.Req), a.Req.String())
		if a.Probe {
			w.x("Ack.ProbeOpaque", "fluet.probe_opaque", uint64(a.ProbeOpaque), 4)
		} else {
			w.i("Ack.AckPSNOffset", "fluet.ack_psn_offset", int64(a.AckPSNOffset))
			w.u("", "fluet.ack_psn", uint64(a.AckPSN()))
		}
		w.u("Ack.CACKPSN", "fluet.cack_psn", uint64(a.CACKPSN))
		w.u("Ack.SPDCID", "fluet.spdcid", uint64(a.SPDCID))
		w.u("Ack.DPDCID", "fluet.dpdcid", uint64(a.DPDCID))
		if h.Type != TypeAckCC {
			break
		}
		c := &a.CC
		w.e("Ack.CC.CCType", "fluet.cc.cc_type", uint64(c.CCType), c.CCType.String())
		w.x("Ack.CC.CCFlags", "fluet.cc.cc_flags", uint64(c.CCFlags), 2)
		w.u("Ack.CC.MPR", "fluet.cc.mpr", uint64(c.MPR))
		w.i("Ack.CC.SACKPSNOffset", "fluet.cc.sack_psn_offset", int64(c.SACKPSNOffset))
		w.u("", "fluet.cc.sack_base", uint64(a.SACKBase()))
		w.x("Ack.CC.SACKBitmap", "fluet.cc.sack_bitmap", c.SACKBitmap, 16)
		switch c.CCType {
		case CCNSCC:
			s := &c.NSCC
			w.u("Ack.CC.NSCC.ServiceTime", "fluet.cc.nscc.service_time", uint64(s.ServiceTime))
			w.b("Ack.CC.NSCC.RC", "fluet.cc.nscc.rc", s.RC)
			w.u("Ack.CC.NSCC.RcvCwndPend", "fluet.cc.nscc.rcv_cwnd_pend", uint64(s.RcvCwndPend))
			w.u("Ack.CC.NSCC.RcvdBytes", "fluet.cc.nscc.rcvd_bytes", uint64(s.RcvdBytes))
			w.u("Ack.CC.NSCC.OOOCount", "fluet.cc.nscc.ooo_count", uint64(s.OOOCount))
		case CCCredit:
			w.u("Ack.CC.Credit.Credit", "fluet.cc.credit.credit", uint64(c.Credit.Credit))
			w.u("Ack.CC.Credit.OOOCount", "fluet.cc.credit.ooo_count", uint64(c.Credit.OOOCount))
		}
	case h.Type == TypeNack:
		n := &h.Nack
		w.e("Nack.NextHeader", "fluet.next_header", uint64(n.NextHeader), n.NextHeader.String())
		w.b("Nack.M", "fluet.m", n.M)
		w.b("Nack.Retx", "fluet.retx", n.Retx)
		w.b("Nack.NT", "fluet.nt", n.NT)
		w.x("Nack.Code", "fluet.code", uint64(n.Code), 2)
		if n.Code.Known() {
			w.enum["fluet.code"] = n.Code.String()
		}
		w.x("Nack.VendorCode", "fluet.vendor_code", uint64(n.VendorCode), 2)
		w.u("Nack.NackPSN", "fluet.nack_psn", uint64(n.NackPSN))
		w.u("Nack.SPDCID", "fluet.spdcid", uint64(n.SPDCID))
		w.u("Nack.DPDCID", "fluet.dpdcid", uint64(n.DPDCID))
		w.u("Nack.MaxRecvPSNPlus1", "fluet.max_recv_psn_plus_1", uint64(n.MaxRecvPSNPlus1))
	case h.Type == TypeCtrl:
		c := &h.Ctrl
		w.e("Ctrl.CtrlType", "fluet.ctrl_type", uint64(c.CtrlType), c.CtrlType.String())
		w.b("Ctrl.IsROD", "fluet.is_rod", c.IsROD)
		w.b("Ctrl.Retx", "fluet.retx", c.Retx)
		w.b("Ctrl.AR", "fluet.ar", c.AR)
		w.b("Ctrl.SYN", "fluet.syn", c.SYN)
		w.x("Ctrl.ProbeOpaque", "fluet.probe_opaque", uint64(c.ProbeOpaque), 4)
		w.u("Ctrl.PSN", "fluet.psn", uint64(c.PSN))
		w.u("Ctrl.SPDCID", "fluet.spdcid", uint64(c.SPDCID))
		w.slot("Ctrl", c.SYN, c.DPDCID, c.UseRsvPDC, c.PSNOffset, c.StartPSN())
		w.x("Ctrl.Payload", "fluet.payload", uint64(c.Payload), 8)
	}
	return w
}

// ses adds what the dissector must show of the frame's SES header, under
// the Go paths "SESRequest.…" and "SESResponse.…".
func (w *wsWant) ses(fr *wsFrame) {
	if fr.sesNH == NextHeaderNone || fr.sesErr != nil {
		return
	}
	if fr.sesNH == NextHeaderRsp {
		r := &fr.sesResp
		w.u("SESResponse.List", "fluet.ses.resp.list", uint64(r.List))
		w.e("SESResponse.Opcode", "fluet.ses.resp.opcode", uint64(r.Opcode), r.Opcode.String())
		w.u("SESResponse.Version", "fluet.ses.resp.version", uint64(r.Version))
		w.e("SESResponse.ReturnCode", "fluet.ses.resp.return_code", uint64(r.ReturnCode), r.ReturnCode.String())
		w.u("SESResponse.MessageID", "fluet.ses.resp.message_id", uint64(r.MessageID))
		w.u("SESResponse.IndexGeneration", "fluet.ses.resp.index_generation", uint64(r.IndexGeneration))
		w.u("SESResponse.JobID", "fluet.ses.resp.job_id", uint64(r.JobID))
		w.u("SESResponse.ModifiedLength", "fluet.ses.resp.modified_length", uint64(r.ModifiedLength))
		return
	}
	s := &fr.sesReq
	w.e("SESRequest.Opcode", "fluet.ses.opcode", uint64(s.Opcode), s.Opcode.String())
	w.u("SESRequest.Version", "fluet.ses.version", uint64(s.Version))
	w.b("SESRequest.DC", "fluet.ses.dc", s.DC)
	w.b("SESRequest.IE", "fluet.ses.ie", s.IE)
	w.b("SESRequest.Rel", "fluet.ses.rel", s.Rel)
	w.b("SESRequest.HD", "fluet.ses.hd", s.HD)
	w.b("SESRequest.EOM", "fluet.ses.eom", s.EOM)
	w.b("SESRequest.SOM", "fluet.ses.som", s.SOM)
	w.u("SESRequest.MessageID", "fluet.ses.message_id", uint64(s.MessageID))
	w.u("SESRequest.IndexGeneration", "fluet.ses.index_generation", uint64(s.IndexGeneration))
	w.u("SESRequest.JobID", "fluet.ses.job_id", uint64(s.JobID))
	w.u("SESRequest.PIDOnFEP", "fluet.ses.pid_on_fep", uint64(s.PIDOnFEP))
	w.u("SESRequest.ResourceIndex", "fluet.ses.resource_index", uint64(s.ResourceIndex))
	w.u("SESRequest.BufferOffset", "fluet.ses.buffer_offset", s.BufferOffset)
	w.x("SESRequest.Initiator", "fluet.ses.initiator", uint64(s.Initiator), 8)
	w.x("SESRequest.MemKeyMatchBits", "fluet.ses.mem_key_match_bits", s.MemKeyMatchBits, 16)
	if s.SOM {
		w.x("SESRequest.HeaderData", "fluet.ses.header_data", s.HeaderData, 16)
	} else {
		w.u("SESRequest.PayloadLength", "fluet.ses.payload_length", uint64(s.PayloadLength))
		w.u("SESRequest.MessageOffset", "fluet.ses.message_offset", uint64(s.MessageOffset))
	}
	w.u("SESRequest.RequestLength", "fluet.ses.request_length", uint64(s.RequestLength))
}

// goFieldPaths lists every leaf field of Header ("Ack.CC.NSCC.RC").
func goFieldPaths(t reflect.Type, prefix string) []string {
	var paths []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Struct {
			paths = append(paths, goFieldPaths(f.Type, prefix+f.Name+".")...)
			continue
		}
		paths = append(paths, prefix+f.Name)
	}
	return paths
}

// expertOf maps Parse's errors onto the dissector's expert infos.
var expertOf = map[error]string{
	ErrTruncated:       "fluet.short",
	ErrUnknownType:     "fluet.unknown_type",
	ErrUnsupportedType: "fluet.unsupported_type",
	ErrCCType:          "fluet.cc_type_unknown",
}

const expertReserved = "fluet.reserved"

// shown is what tshark showed of one frame.
type shown struct {
	fields   map[string]pdmlField
	experts  map[string]bool
	dataLen  string // data.len of the bytes after the header, "" if none
	problems []string
}

func collect(protos []pdmlProto) shown {
	s := shown{fields: map[string]pdmlField{}, experts: map[string]bool{}}
	var walk func(fs []pdmlField, inExpert bool)
	walk = func(fs []pdmlField, inExpert bool) {
		for _, f := range fs {
			switch {
			case f.Name == "_ws.lua.error" || f.Name == "_ws.malformed":
				s.problems = append(s.problems, f.Name+": "+f.ShowName)
			case inExpert && strings.HasPrefix(f.Name, "fluet."):
				s.experts[f.Name] = true
			case f.Name == "data.len":
				s.dataLen = f.Show
			case strings.HasPrefix(f.Name, "fluet."):
				if _, dup := s.fields[f.Name]; dup {
					s.problems = append(s.problems, "field shown twice: "+f.Name)
				}
				s.fields[f.Name] = f
			}
			walk(f.Fields, f.Name == "_ws.expert")
		}
	}
	for _, p := range protos {
		if p.Name == "_ws.malformed" {
			s.problems = append(s.problems, "malformed")
		}
		walk(p.Fields, false)
	}
	return s
}

// TestWiresharkDissector writes every form into a pcap (Ethernet/IPv4/UDP
// to Port, source port an EV), dissects it with tshark and uet.lua, and
// compares every field the dissector shows with Parse's decode of the same
// bytes; the frames Parse rejects must carry the matching expert info.
func TestWiresharkDissector(t *testing.T) {
	tshark, err := exec.LookPath(tsharkPath)
	requireTool(t, "tshark", "it runs the Lua dissector; apt-get install tshark", err)
	lua, err := filepath.Abs("uet.lua")
	if err != nil {
		t.Fatal(err)
	}
	luaText, err := os.ReadFile(lua)
	if err != nil {
		t.Fatal(err)
	}
	fs := wsFrames(t)
	pcap := filepath.Join(t.TempDir(), "uet.pcap")
	writePcap(t, pcap, fs)
	cmd := exec.Command(tshark, "-n", "-X", "lua_script:"+lua, "-r", pcap, "-T", "pdml")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
	}
	if strings.Contains(stderr.String(), "Lua") {
		t.Fatalf("%s: Lua reports\n%s", cmd, stderr.String())
	}
	var doc pdml
	if err := xml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("PDML: %v", err)
	}
	if len(doc.Packets) != len(fs) {
		t.Fatalf("tshark shows %d packets, the pcap has %d", len(doc.Packets), len(fs))
	}
	if !bytes.Contains(out, []byte(`<proto name="fluet"`)) {
		t.Fatalf("%s: no packet dissected as fluet: did tshark load %s (built with Lua?)\n%s", cmd, lua, stderr.String())
	}
	seen := map[string]bool{}    // dissector fields shown at least once
	covered := map[string]bool{} // Go fields covered
	for i, fr := range fs {
		got := collect(doc.Packets[i].Protos)
		where := fmt.Sprintf("frame %d (%s, %x)", i+1, fr.name, fr.udp)
		for _, p := range got.problems {
			t.Errorf("%s: %s", where, p)
		}
		for name := range got.fields {
			seen[name] = true
		}
		for name := range got.experts {
			seen[name] = true
		}
		if fr.err != nil {
			var want string
			for e, name := range expertOf {
				if errors.Is(fr.err, e) {
					want = name
				}
			}
			if !got.experts[want] || len(got.experts) != 1 {
				t.Errorf("%s: Parse: %v; dissector experts %v, want only %s", where, fr.err, keys(got.experts), want)
			}
			continue
		}
		w := wantWireshark(&fr.h, fr.udp)
		w.ses(&fr)
		for p := range w.paths {
			covered[p] = true
		}
		for name, show := range w.show {
			f, ok := got.fields[name]
			switch {
			case !ok:
				t.Errorf("%s: %s not shown, want %s", where, name, show)
			case f.Show != show:
				t.Errorf("%s: %s = %s, want %s (%s)", where, name, f.Show, show, f.ShowName)
			case w.enum[name] != "" && !strings.Contains(f.ShowName, ": "+w.enum[name]+" ("):
				t.Errorf("%s: %s shown as %q, Go's name is %s", where, name, f.ShowName, w.enum[name])
			}
		}
		for name, f := range got.fields {
			if _, ok := w.show[name]; !ok {
				t.Errorf("%s: %s shown (%s), not in the Go decode", where, name, f.ShowName)
			}
		}
		// Reserved bits: Parse and the SES decoders ignore them, the
		// dissector warns. A SES header too short for DecodeSES* and a RESP
		// opcode that is not NoData carry their own expert infos.
		n := fr.h.Len()
		canon := make([]byte, n)
		fr.h.Encode(canon)
		wantExperts := map[string]bool{}
		if !bytes.Equal(canon, fr.udp[:n]) {
			wantExperts[expertReserved] = true
		}
		switch {
		case fr.sesErr != nil:
			if !errors.Is(fr.sesErr, ErrTruncated) {
				t.Fatalf("%s: SES decode: %v", where, fr.sesErr)
			}
			wantExperts["fluet.ses.short"] = true
		case fr.sesNH == NextHeaderReqStd:
			ses := make([]byte, SESStdLen)
			fr.sesReq.Encode(ses)
			if !bytes.Equal(ses, fr.udp[n:n+SESStdLen]) {
				wantExperts[expertReserved] = true
			}
		case fr.sesNH == NextHeaderRsp && !fr.sesResp.Opcode.NoData():
			wantExperts["fluet.ses.resp_opcode"] = true
		}
		if !maps.Equal(got.experts, wantExperts) {
			t.Errorf("%s: experts %v, want %v", where, keys(got.experts), keys(wantExperts))
		}
		n += fr.sesLen
		wantData := ""
		if len(fr.udp) > n {
			wantData = strconv.Itoa(len(fr.udp) - n)
		}
		if got.dataLen != wantData {
			t.Errorf("%s: data after the header %q bytes, want %q", where, got.dataLen, wantData)
		}
	}
	// Every field of uet.lua was shown and checked, every Go field covered.
	for _, m := range regexp.MustCompile(`(?:ProtoField\.\w+|ProtoExpert\.new)\("([^"]+)"`).FindAllSubmatch(luaText, -1) {
		if name := string(m[1]); !seen[name] {
			t.Errorf("uet.lua's %s never shown", name)
		}
	}
	paths := goFieldPaths(reflect.TypeFor[Header](), "")
	paths = append(paths, goFieldPaths(reflect.TypeFor[SESRequest](), "SESRequest.")...)
	paths = append(paths, goFieldPaths(reflect.TypeFor[SESResponse](), "SESResponse.")...)
	for _, p := range paths {
		if !covered[p] {
			t.Errorf("Go field %s has no dissector field checked", p)
		}
	}
}

func keys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }
