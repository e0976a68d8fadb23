package npprobe

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// tapBufferBytes is the tap's receive buffer (SO_RCVBUFFORCE).
const tapBufferBytes = 64 << 20

// TapStats are the tap's own counters.
type TapStats struct {
	Frames  int    // frames kept
	Dropped uint32 // frames the kernel dropped for lack of buffer (PACKET_STATISTICS)
}

// Tap captures a device's UDP 4791 frames, both directions, with kernel
// timestamps. Open it inside the device's network namespace (the socket
// stays there); its methods may be called from anywhere.
type Tap struct {
	fd   int
	spin bool
	done chan struct{}

	mu     sync.Mutex
	frames []Frame
	err    error
	stop   bool
	closed bool
}

// udp4791 is a classic BPF filter: untagged IPv4 (not a later fragment) or
// IPv6 with UDP to 4791 as the next header.
func udp4791() ([]unix.SockFilter, error) {
	const drop, keep = 0, 0xffff
	insns := []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 12, Size: 2},
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherIPv4, SkipFalse: 7},
		/* 2 */ bpf.LoadAbsolute{Off: 23, Size: 1},
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: ipProtoUDP, SkipFalse: 11},
		/* 4 */ bpf.LoadAbsolute{Off: 20, Size: 2},
		/* 5 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 9},
		/* 6 */ bpf.LoadMemShift{Off: ethLen},
		/* 7 */ bpf.LoadIndirect{Off: ethLen + 2, Size: 2},
		/* 8 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4791, SkipTrue: 5, SkipFalse: 6},
		/* 9 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherIPv6, SkipFalse: 5},
		/* 10 */ bpf.LoadAbsolute{Off: 20, Size: 1},
		/* 11 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: ipProtoUDP, SkipFalse: 3},
		/* 12 */ bpf.LoadAbsolute{Off: ethLen + ipv6Len + 2, Size: 2},
		/* 13 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4791, SkipFalse: 1},
		/* 14 */ bpf.RetConstant{Val: keep},
		/* 15 */ bpf.RetConstant{Val: drop},
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TapOptions configure OpenTap. The zero value is valid.
type TapOptions struct {
	// Spin makes the tap read without ever sleeping, at the cost of a CPU
	// while it runs. A sleeping reader is woken for each frame by the CPU
	// that receives it, and on a VM with idle CPUs that wake-up (an IPI)
	// costs microseconds; an arriving frame reaches the tap before the TC
	// ingress programs, so the wake-up would be counted in the NP's
	// reaction time. Optional.
	Spin bool
}

// OpenTap opens a tap on dev in the calling thread's network namespace and
// starts capturing.
func OpenTap(dev string, opts TapOptions) (*Tap, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, fmt.Errorf("npprobe: tap: %w", err)
	}
	// Protocol 0: nothing arrives before the filter and the bind.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("npprobe: tap socket: %w", err)
	}
	t := &Tap{fd: fd, spin: opts.Spin, done: make(chan struct{})}
	if err := t.setup(ifi.Index); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("npprobe: tap on %s: %w", dev, err)
	}
	go t.loop()
	return t, nil
}

func (t *Tap) setup(ifindex int) error {
	filter, err := udp4791()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(t.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fmt.Errorf("filter: %w", err)
	}
	if err := unix.SetsockoptInt(t.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, tapBufferBytes); err != nil {
		return fmt.Errorf("SO_RCVBUFFORCE: %w", err)
	}
	if err := unix.SetsockoptInt(t.fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fmt.Errorf("SO_TIMESTAMPNS: %w", err)
	}
	// The loop looks at the stop flag this often.
	tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
	if err := unix.SetsockoptTimeval(t.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("SO_RCVTIMEO: %w", err)
	}
	return unix.Bind(t.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex})
}

func (t *Tap) loop() {
	defer close(t.done)
	buf := make([]byte, 1<<16)
	oob := make([]byte, 128)
	for {
		t.mu.Lock()
		stop := t.stop
		t.mu.Unlock()
		if stop {
			return
		}
		rflags := 0
		if t.spin {
			rflags = unix.MSG_DONTWAIT
		}
		n, oobn, flags, from, err := unix.Recvmsg(t.fd, buf, oob, rflags)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.fail(err)
			return
		}
		if flags&unix.MSG_TRUNC != 0 {
			continue
		}
		at, ok := stamp(oob[:oobn])
		if !ok {
			t.fail(errors.New("a frame without a kernel timestamp"))
			return
		}
		ll, _ := from.(*unix.SockaddrLinklayer)
		f := Frame{At: at, Out: ll != nil && ll.Pkttype == unix.PACKET_OUTGOING, Data: append([]byte(nil), buf[:n]...)}
		t.mu.Lock()
		t.frames = append(t.frames, f)
		t.mu.Unlock()
	}
}

func (t *Tap) fail(err error) {
	t.mu.Lock()
	t.err = err
	t.mu.Unlock()
}

func stamp(oob []byte) (time.Time, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return time.Unix(ts.Unix()), true
		}
	}
	return time.Time{}, false
}

// Take returns the frames captured so far and forgets them.
func (t *Tap) Take() []Frame {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.frames
	t.frames = nil
	return f
}

// Packets decodes what Take returns, dropping frames that are not RoCEv2.
func (t *Tap) Packets() []Packet {
	var out []Packet
	for _, f := range t.Take() {
		if p, ok := Decode(f); ok {
			out = append(out, p)
		}
	}
	return out
}

// Close stops capturing and returns the kernel's drop count and the error
// that stopped the capture, if any. It is idempotent.
func (t *Tap) Close() (TapStats, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return TapStats{}, nil
	}
	t.closed, t.stop = true, true
	t.mu.Unlock()
	<-t.done
	st := TapStats{}
	if ps, err := unix.GetsockoptTpacketStats(t.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		st.Dropped = ps.Drops
	}
	t.mu.Lock()
	st.Frames = len(t.frames)
	err := t.err
	t.mu.Unlock()
	return st, errors.Join(err, unix.Close(t.fd))
}
