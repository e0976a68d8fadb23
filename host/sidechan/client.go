package sidechan

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// DefaultTimeout bounds each exchange of a client whose context has no
// deadline: the request and its reply, the finish and its result.
const DefaultTimeout = 10 * time.Second

// ServerError is a server's error line: it refused the session (a
// Refused* cause or the transport's), or ended it (Aborted*).
type ServerError struct{ Cause, Msg string }

func (e *ServerError) Error() string { return e.Msg }

// Client is the client's end of one session.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
}

// Open sends req on c and reads the server's reply, a line of at most
// limit bytes, into reply. An error line is a *ServerError. From now on
// the Client owns c; on an error, c is closed.
func Open(ctx context.Context, c net.Conn, req, reply any, limit int) (*Client, error) {
	cl := &Client{conn: c, r: bufio.NewReaderSize(c, readBufferBytes)}
	if err := cl.exchange(ctx, req, reply, limit); err != nil {
		_ = c.Close()
		return nil, err
	}
	return cl, nil
}

// Finish tells the server the run is over and reads its result, a line
// of at most limit bytes, into res. An error line is a *ServerError.
func (cl *Client) Finish(ctx context.Context, res any, limit int) error {
	return cl.exchange(ctx, finishLine{Finish: true}, res, limit)
}

// Close closes the side channel.
func (cl *Client) Close() error { return cl.conn.Close() }

// Conn is the side channel's connection.
func (cl *Client) Conn() net.Conn { return cl.conn }

// exchange sends one line and reads the answer, within ctx's deadline
// (DefaultTimeout without one); a cancelled ctx ends a blocked read or
// write.
func (cl *Client) exchange(ctx context.Context, out, in any, limit int) error {
	c := cl.conn
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(DefaultTimeout))
	}
	unblock := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if unblock() {
			_ = c.SetDeadline(time.Time{})
		}
	}()
	if err := json.NewEncoder(c).Encode(out); err != nil {
		return err
	}
	line, err := readLine(cl.r, limit)
	if err != nil {
		if err == errLineTooLong {
			return fmt.Errorf("side-channel message over %d bytes", limit)
		}
		return err
	}
	var el errorLine
	if err := json.Unmarshal(line, &el); err != nil {
		return fmt.Errorf("bad side-channel message: %w", err)
	}
	if el.Error != "" {
		return &ServerError{Cause: el.Cause, Msg: el.Error}
	}
	if err := json.Unmarshal(line, in); err != nil {
		return fmt.Errorf("bad side-channel message: %w", err)
	}
	return nil
}
