package pds

import (
	"fmt"

	"github.com/fabriclab/fabriclab/host/uet"
)

// sesLen is the SES header every data packet carries: the standard
// request header (REQ_STD).
const sesLen = uet.SESStdLen

// sesHeader is what the PDS layer puts in and reads from the SES header
// of a data packet: n bytes of a UET_WRITE of message msgID (length bytes)
// at offset, in job jobID. As UE lays the standard request out
// (host/uet): the message's first packet (SOM) is at offset 0, every other
// one says its message_offset and payload_length; buffer_offset, where the
// message lands in the target's buffer, is 0 (one buffer per message).
type sesHeader struct {
	jobID    uint32
	msgID    uint16
	offset   uint32
	n        int
	length   uint32
	som, eom bool
}

func (s *sesHeader) encode(b []byte) int {
	r := uet.SESRequest{
		Opcode:        uet.SESWrite,
		SOM:           s.som,
		EOM:           s.eom,
		MessageID:     s.msgID,
		JobID:         s.jobID,
		RequestLength: s.length,
	}
	if !s.som {
		r.MessageOffset, r.PayloadLength = s.offset, uint16(s.n)
	}
	return r.Encode(b)
}

// decode reads a data packet's SES header and returns its length.
func (s *sesHeader) decode(b []byte) (int, error) {
	var r uet.SESRequest
	n, err := uet.DecodeSESRequest(b, &r)
	if err != nil {
		return 0, err
	}
	if r.Opcode != uet.SESWrite || r.BufferOffset != 0 || !r.SOM && r.MessageOffset > r.RequestLength {
		return 0, fmt.Errorf("pds: ses %v buffer_offset %d message_offset %d request_length %d: not a write this endpoint serves", r.Opcode, r.BufferOffset, r.MessageOffset, r.RequestLength)
	}
	*s = sesHeader{jobID: r.JobID, msgID: r.MessageID, length: r.RequestLength, som: r.SOM, eom: r.EOM, n: -1}
	if !r.SOM {
		s.offset, s.n = r.MessageOffset, int(r.PayloadLength)
	}
	return n, nil
}
