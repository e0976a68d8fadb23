//go:build linux

package pktio

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// pollWaitMillis bounds one wait for a full send buffer, so that Close is
// noticed.
const pollWaitMillis = 20

// pollFD is a non-blocking socket the Go netpoller does not watch. An fd in
// an epoll set has a waiter on its wait queue, and then every skb of it
// that the stack frees wakes that epoll (sock_wfree ->
// sock_def_write_space_wfree): per packet, for a socket that only ever
// waits when its send buffer is full. Write has the syscall.RawConn
// contract: f returns false on EAGAIN, and Write then waits in poll(2).
type pollFD struct {
	fd     int
	closed *atomic.Bool
	pfd    [1]unix.PollFd
}

// Write calls f until it returns true, waiting for POLLOUT in between; it
// returns net.ErrClosed once the conn closes.
func (p *pollFD) Write(f func(fd uintptr) bool) error {
	for !f(uintptr(p.fd)) {
		if p.closed.Load() {
			return net.ErrClosed
		}
		p.pfd[0] = unix.PollFd{Fd: int32(p.fd), Events: unix.POLLOUT}
		if _, err := unix.Poll(p.pfd[:], pollWaitMillis); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll: %w", err)
		}
	}
	return nil
}
