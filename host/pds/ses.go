package pds

import (
	"fmt"

	"github.com/fabriclab/fabriclab/host/uet"
)

// sesLen is the SES header every data packet carries: the standard
// request header (REQ_STD).
const sesLen = uet.SESStdLen

// sesHeader is what the PDS layer puts in and reads from the SES header
// of a data packet: a UET_WRITE of message msgID (length bytes) at offset,
// in job jobID.
type sesHeader struct {
	jobID    uint32
	msgID    uint16
	offset   uint32
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
		BufferOffset:  uint64(s.offset),
		RequestLength: s.length,
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
	if r.Opcode != uet.SESWrite || r.HD || r.BufferOffset > uint64(r.RequestLength) {
		return 0, fmt.Errorf("pds: ses %v hd %v offset %d length %d: not a write this endpoint serves", r.Opcode, r.HD, r.BufferOffset, r.RequestLength)
	}
	*s = sesHeader{jobID: r.JobID, msgID: r.MessageID, offset: uint32(r.BufferOffset), length: r.RequestLength, som: r.SOM, eom: r.EOM}
	return n, nil
}
