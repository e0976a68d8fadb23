package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/pktio"
)

// fuzzConn is a side channel in memory: the server reads the input and
// writes to out; deadlines never fire.
type fuzzConn struct {
	in  *bytes.Reader
	out bytes.Buffer
	// readBeforeReply is what the server read before its first line.
	readBeforeReply int
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	n, err := c.in.Read(p)
	if c.out.Len() == 0 {
		c.readBeforeReply += n
	}
	return n, err
}

func (c *fuzzConn) Write(p []byte) (int, error) { return c.out.Write(p) }
func (c *fuzzConn) Close() error                { return nil }
func (c *fuzzConn) LocalAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 18515}
}
func (c *fuzzConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(198, 18, 0, 2), Port: 40000}
}
func (c *fuzzConn) SetDeadline(t time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(t time.Time) error { return nil }

// FuzzSessionRequest feeds arbitrary bytes to the server as a side
// channel's request (and finish) lines: it never panics, every input gets
// a session or an error line, the server reads at most max_request_bytes
// plus its buffer before it answers, and every session's QPs and budget
// are released when the input ends.
func FuzzSessionRequest(f *testing.F) {
	valid := request(1, 4096)
	for _, seed := range []string{
		valid,
		valid + `{"finish":true}` + "\n",
		request(4, 64<<10) + `{"finish":true}` + "\n",
		request(2, 1) + `{"finish":false}` + "\n",
		request(1, 4096) + "garbage\n",
		request(5, 4096),
		request(0, 4096),
		request(1, 0),
		request(1, 1<<30),
		request(3, 256<<10), // over the fuzz server's memory
		strings.Replace(valid, `"version":1`, `"version":2`, 1),
		strings.Replace(valid, `"op":"write"`, `"op":"send"`, 1),
		strings.Replace(valid, `"op":"write"`, `"op":"read"`, 1),
		strings.Replace(valid, `"mtu":1024,"dscp"`, `"mtu":300,"dscp"`, 1),
		strings.Replace(valid, `"qpn":256`, `"qpn":0`, 1),
		strings.Replace(valid, `"198.18.0.2:4791"`, `"[2001:db8::2]:4791"`, 1),
		strings.Replace(valid, `"198.18.0.2:4791"`, `"0.0.0.0:4791"`, 1),
		strings.Replace(valid, `"mtu":1024}`, `"mtu":4096}`, 1),
		strings.TrimSuffix(valid, "\n"),
		`{"version":1,` + "\n",
		"{}\n", "null\n", "[]\n", "\n", "",
		strings.Repeat("x", 6000) + "\n",
	} {
		f.Add([]byte(seed))
	}
	pa, _ := pktio.NewPipe(pktio.PipeOptions{})
	a, err := newAgent(Config{Conn: pa}) // no loops: the QPs only exist
	if err != nil {
		f.Fatal(err)
	}
	defer a.Close()
	srv, err := a.NewServer(ServerOptions{ServerLimits: ServerLimits{MaxQPs: 4, MaxBufferBytes: 1 << 20}})
	if err != nil {
		f.Fatal(err)
	}
	lim := srv.Limits()
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &fuzzConn{in: bytes.NewReader(in)}
		_ = srv.ServeConn(c)
		if c.readBeforeReply > lim.MaxRequestBytes+4<<10 { // sidechan reads through a 4 KiB buffer
			t.Fatalf("read %d bytes before answering: max_request_bytes is %d", c.readBeforeReply, lim.MaxRequestBytes)
		}
		r := bufio.NewReader(&c.out)
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("no reply line (%q)", c.out.String())
		}
		var rep sessionReply
		if err := json.Unmarshal(line, &rep); err != nil {
			t.Fatalf("reply %q: %v", line, err)
		}
		switch {
		case rep.Error != "" && (rep.Cause == "" || len(rep.QPs) != 0):
			t.Fatalf("refusal without a cause, or with QPs: %s", line)
		case rep.Error == "" && (len(rep.QPs) < 1 || len(rep.QPs) > lim.MaxQPs):
			t.Fatalf("a session of %d QPs: %s", len(rep.QPs), line)
		}
		if rep.Error == "" {
			// After the session: its result, an error line, or nothing
			// (the input ended without a finish).
			if line, err := r.ReadBytes('\n'); err == nil {
				var res SessionResult
				if err := json.Unmarshal(line, &res); err != nil || (res.Error == "") != (len(res.QPs) == len(rep.QPs)) {
					t.Fatalf("after the session: %q (%v)", line, err)
				}
			}
		}
		if st := srv.Stats(); st.Conns != 0 || st.Sessions != 0 || st.QPs != 0 || st.BufferBytes != 0 {
			t.Fatalf("server holds %+v after the input", st)
		}
		if n := len(a.QPs()); n != 0 {
			t.Fatalf("agent holds %d QPs after the input", n)
		}
	})
}
