package npprobe

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
)

// Data is one RC request to send.
type Data struct {
	Op      roce.Opcode
	DestQP  uint32
	PSN     uint32
	Payload int   // bytes
	TOS     uint8 // DSCP << 2 | ECN; 3 in the low bits is CE
}

// Received is a RoCEv2 datagram the Sender's socket received (the CNPs).
type Received struct {
	At     time.Time // when the read returned
	From   netip.AddrPort
	TOS    uint8
	BTH    roce.BTH
	ICRCOK bool // roce.VerifyICRC against the addresses it came with
	Len    int  // UDP payload bytes
}

// Sender is a RoCEv2 endpoint on a UDP socket: it sends RC requests built
// with host/roce (ICRC over the DF, ID 0 header the socket sends) and
// receives what comes back to its port. Create it inside the sender's
// network namespace.
type Sender struct {
	conn  *pktio.UDPConn
	local netip.AddrPort
	msgs  []pktio.Message
	bufs  [][]byte
	rmsgs []pktio.Message
}

// NewSender binds a socket to local.
func NewSender(local netip.AddrPort) (*Sender, error) {
	c, err := pktio.ListenUDP(local, pktio.UDPOptions{})
	if err != nil {
		return nil, fmt.Errorf("npprobe: sender: %w", err)
	}
	s := &Sender{conn: c, local: c.LocalAddr()}
	s.rmsgs = make([]pktio.Message, 64)
	for i := range s.rmsgs {
		s.rmsgs[i].Buffers = [][]byte{make([]byte, 9000)}
	}
	return s, nil
}

// Send sends the packets to dst in one batch (sendmmsg).
func (s *Sender) Send(dst netip.AddrPort, pkts []Data) error {
	for len(s.bufs) < len(pkts) {
		s.bufs = append(s.bufs, nil)
	}
	s.msgs = s.msgs[:0]
	for i, d := range pkts {
		n := roce.PacketLen(d.Op, d.Payload)
		if n == 0 {
			return fmt.Errorf("npprobe: opcode %v with %d bytes", d.Op, d.Payload)
		}
		if cap(s.bufs[i]) < n {
			s.bufs[i] = make([]byte, n)
		}
		b := s.bufs[i][:n]
		h := roce.Header{BTH: roce.BTH{Opcode: d.Op, PKey: roce.DefaultPKey, DestQP: d.DestQP, PSN: d.PSN}}
		if d.Op.HasRETH() {
			h.RETH = roce.RETH{VA: 0x10000, RKey: 1, DMALen: uint32(d.Payload)}
		}
		if roce.Build(b, &h, make([]byte, d.Payload)) != n {
			return fmt.Errorf("npprobe: build %v", d.Op)
		}
		roce.SealICRC(s.local, dst, b)
		s.msgs = append(s.msgs, pktio.Message{Buffers: [][]byte{b}, Addr: dst, TOS: d.TOS})
	}
	for off := 0; off < len(s.msgs); {
		n, err := s.conn.WriteBatch(s.msgs[off:])
		off += n
		if err != nil {
			return fmt.Errorf("npprobe: send: %w", err)
		}
	}
	return nil
}

// Receive reads what arrives until nothing has for idle, or until
// deadline.
func (s *Sender) Receive(idle time.Duration, deadline time.Time) ([]Received, error) {
	var out []Received
	for {
		next := time.Now().Add(idle)
		if next.After(deadline) {
			next = deadline
		}
		if err := s.conn.SetReadDeadline(next); err != nil {
			return out, err
		}
		n, err := s.conn.ReadBatch(s.rmsgs)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out, nil
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return out, nil
			}
			return out, err
		}
		now := time.Now()
		for _, m := range s.rmsgs[:n] {
			b := m.Buffers[0][:m.N]
			r := Received{At: now, From: m.Addr, TOS: m.TOS, Len: len(b)}
			var h roce.Header
			if _, err := roce.Parse(b, &h); err == nil {
				r.BTH = h.BTH
				r.ICRCOK = roce.VerifyICRC(m.Addr, s.local, b)
			}
			out = append(out, r)
		}
	}
}

// Close closes the socket.
func (s *Sender) Close() error { return s.conn.Close() }

// SendPaced sends count CE-marked packets of opcode op (SEND_ONLY, WRITE
// MIDDLE: opcodes without a RETH) with payload bytes to qpn, gap apart,
// each followed by ectAfter ECT(0) packets in the same batch. PSNs count
// from 0, so a responder expecting PSN 0 takes SEND_ONLY packets in
// order. It waits by spinning: Go's timers wake up to a millisecond late
// on a small VM.
func (s *Sender) SendPaced(dst netip.AddrPort, op roce.Opcode, qpn uint32, count, ectAfter, payload int, gap time.Duration) error {
	const ceTOS, ectTOS = 26<<2 | 3, 26<<2 | 2 // DSCP 26 (RoCE), CE or ECT(0)
	batch := make([]Data, 1+ectAfter)
	psn := uint32(0)
	next := time.Now()
	for range count {
		for i := range batch {
			batch[i] = Data{Op: op, DestQP: qpn, PSN: psn & roce.PSNMask, Payload: payload, TOS: ectTOS}
			psn++
		}
		batch[0].TOS = ceTOS
		for time.Now().Before(next) {
		}
		if err := s.Send(dst, batch); err != nil {
			return err
		}
		next = time.Now().Add(gap)
	}
	return nil
}
