package pds

import (
	"fmt"
	"sync"
)

// Stream is what a Sender sends: messages of MessageBytes, Messages of
// them (0: until Stop), on the PDC of {JobID, destination, traffic class,
// RUD}.
type Stream struct {
	// JobID is the job the messages belong to (24 bits): PDCs are per
	// job.
	JobID uint32
	// MessageBytes is each message's size. Required: 1..MaxMessageBytes.
	MessageBytes int
	// Messages is how many to send; 0 sends until Stop.
	Messages uint64
	// Verify fills the payload with the pattern the target checks
	// (host/pattern); without it the payload is zeros and the target
	// checks nothing.
	Verify bool
}

// MaxMessageBytes bounds Stream.MessageBytes (SES request_length is 32
// bits; a message this size spans thousands of packets).
const MaxMessageBytes = 1 << 30

// maxJobID is the largest JobID (24 bits).
const maxJobID = 1<<24 - 1

// Validate names the field, the value and the allowed range of a bad one.
func (s Stream) Validate() error {
	switch {
	case s.JobID > maxJobID:
		return fmt.Errorf("pds: job_id %d: must be 0..%d", s.JobID, maxJobID)
	case s.MessageBytes < 1 || s.MessageBytes > MaxMessageBytes:
		return fmt.Errorf("pds: message_bytes %d: must be 1..%d", s.MessageBytes, MaxMessageBytes)
	}
	return nil
}

// SenderCounters are one Sender's progress.
type SenderCounters struct {
	MessagesQueued uint64 `json:"messages_queued"` // packetized (or being)
	MessagesAcked  uint64 `json:"messages_acked"`  // every byte acknowledged
	BytesAcked     uint64 `json:"bytes_acked"`     // payload bytes acknowledged
}

// Sender sends one Stream over a PDC. Its fields are guarded by the
// endpoint's mu.
type Sender struct {
	pdc        *initiator
	s          Stream
	queued     uint64
	acked      uint64
	ackedBytes uint64
	stopped    bool
	done       chan struct{}
	doneOnce   sync.Once
	err        error
}

// wantsMore reports whether the Sender has a message to start.
func (s *Sender) wantsMore() bool {
	if s.stopped || s.err != nil {
		return false
	}
	return s.s.Messages == 0 || s.queued < s.s.Messages
}

func (s *Sender) messageAcked() {
	s.acked++
	if !s.wantsMore() && s.acked == s.queued {
		s.finish(nil)
	}
}

func (s *Sender) finish(err error) {
	s.doneOnce.Do(func() {
		if s.err == nil {
			s.err = err
		}
		close(s.done)
	})
}

// Done is closed once every message is acknowledged (or, after Stop,
// every message started), or the PDC failed.
func (s *Sender) Done() <-chan struct{} { return s.done }

// Err is why the Sender ended, nil if it finished.
func (s *Sender) Err() error {
	ep := s.pdc.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return s.err
}

// Stop starts no new message; the ones started complete, then Done.
func (s *Sender) Stop() {
	ep := s.pdc.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	s.stopped = true
	if s.acked == s.queued && (s.pdc.cur == nil || s.pdc.cur.s != s) {
		s.finish(nil)
	}
	s.pdc.touch()
	s.pdc.ccc.kick()
}

// Counters returns the Sender's progress.
func (s *Sender) Counters() SenderCounters {
	ep := s.pdc.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return SenderCounters{MessagesQueued: s.queued, MessagesAcked: s.acked, BytesAcked: s.ackedBytes}
}

// PDC returns the local ID of the Sender's PDC (its spdcid).
func (s *Sender) PDC() uint16 { return s.pdc.id }
