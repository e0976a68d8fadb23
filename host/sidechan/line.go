// Package sidechan is the lab's side channel, one for every transport:
// like perftest's, a TCP connection on which a client sets a session up
// before any RoCEv2 or UET packet flows, and on which the server reports
// its counters at the end.
//
// Every message is one JSON line: the client's request; the server's
// reply, or an error line ({"error":…,"cause":…}) naming the limit or
// rule; the client's {"finish":true}; the server's result, or an error
// line if the server ended the session itself. A dropped connection ends
// the session. What a request carries and what a session holds is the
// transport's (a Handler, parameterised by its request type); the
// connections, lines, limits, refusals and counters are this package's.
package sidechan

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"time"
)

// readBufferBytes is the bufio.Reader a side channel reads through: with
// readLine's limit, what one connection holds at most.
const readBufferBytes = 4 << 10

// Line errors.
var (
	errLineTooLong = errors.New("line too long")
	errNoNewline   = errors.New("the connection ended in the middle of a line")
)

// readLine reads one line, newline included, of at most limit bytes. It
// stops reading once a line is longer (errLineTooLong): it never holds
// more than limit bytes besides r's buffer. The line may be r's buffer,
// valid until the next read.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line)+len(frag) > limit {
			return nil, errLineTooLong
		}
		switch {
		case err == nil && line == nil:
			return frag, nil
		case err == nil || err == bufio.ErrBufferFull:
			if cap(line)-len(line) < len(frag) {
				// Grow by doubling, never past the limit.
				grown := make([]byte, len(line), min(limit, max(2*cap(line), len(line)+len(frag))))
				copy(grown, line)
				line = grown
			}
			line = append(line, frag...)
			if err == nil {
				return line, nil
			}
		case err == io.EOF && len(line)+len(frag) > 0:
			return nil, errNoNewline
		default:
			return nil, err
		}
	}
}

// writeJSON sends v as one JSON line within timeout.
func writeJSON(c net.Conn, timeout time.Duration, v any) error {
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	return json.NewEncoder(c).Encode(v)
}

// errorLine is a refusal or an abort on the wire: the same shape for
// every transport, so a client of one reads the other's refusal.
type errorLine struct {
	Error string `json:"error,omitempty"`
	Cause string `json:"cause,omitempty"`
}

// finishLine is the client's last line.
type finishLine struct {
	Finish bool `json:"finish"`
}

// finishLineBytes bounds the finish line ({"finish":true}).
const finishLineBytes = 4 << 10
