package perf

import (
	"cmp"
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/sidechan"
)

// The UET side channel (roceperf --transport uet): JSON lines over TCP
// (18515), as the RoCEv2 one (host/agent), but nothing to connect: a UET
// target PDC is established by the first packet's SYN. The client
// announces its session (uetRequest: its UET address, the job IDs of its
// streams, message size, verify); the server answers with its UET address
// (uetReply) or an error line naming the field, the value and the range;
// at the end the client sends {"finish":true} and the server answers with
// the receiver's counters of the session's PDCs (uetResult). An error
// line has the RoCEv2 side channel's shape ({"error":…,"cause":…}), so a
// RoCEv2 client of a UET server, and a UET client of a RoCEv2 server,
// print the other's refusal.

// uetProtocolVersion is the UET side channel's version. It travels as
// uet_version: a RoCEv2 server reads the request's "version" as 0 and
// refuses it.
const uetProtocolVersion = 1

// uetRequest is the client's opening line.
type uetRequest struct {
	Transport  string `json:"transport"` // "uet"
	UETVersion int    `json:"uet_version"`
	// Addr is the client's UET address: the source of its PDCs' packets.
	Addr string `json:"uet_addr"`
	// Streams and JobIDs: one PDC per stream, each its own job.
	Streams      int      `json:"streams"`
	JobIDs       []uint32 `json:"job_ids"`
	MessageBytes int      `json:"message_bytes"`
	Verify       bool     `json:"verify"`
	// Informational: the server prints them.
	MTU      int           `json:"mtu,omitempty"`
	DSCP     uint8         `json:"dscp,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"`
	Bytes    uint64        `json:"bytes,omitempty"`
	// CC is the client's congestion control (pds.CCMode's name; absent
	// from a client before --cc: nscc). The server serves credit to
	// whoever asks, whatever this says.
	CC string `json:"cc,omitempty"`
}

// cc is the session's congestion control as the server prints it.
func (r *uetRequest) cc() string {
	if r.CC == "" {
		return pds.CCNSCC.String()
	}
	return r.CC
}

// uetReply answers the request: the server's UET address, or why not
// (Cause names the limit or rule, UETRefused*).
type uetReply struct {
	Error string `json:"error,omitempty"`
	Cause string `json:"cause,omitempty"`
	Addr  string `json:"uet_addr,omitempty"` // "198.18.0.1:4793"
}

// UETReceiverStats are one stream's counters at the server: the target
// PDCs of its job from the client's address (pds.TargetStats, summed over
// the PDC's incarnations if it was established again). VerifyErrors count
// only with verify (a pds target checks every payload, and an unverified
// stream's zeros fail it).
type UETReceiverStats struct {
	JobID uint32 `json:"job_id"`
	PDCs  int    `json:"pdcs"` // target PDCs seen for the job
	pds.Received
}

func (s *UETReceiverStats) add(t *pds.TargetStats) {
	s.PDCs++
	s.Received.Add(t.Received)
}

// uetResult is the server's answer to the finish: a stream per job ID, in
// the request's order; or why the server ended the session.
type uetResult struct {
	Error   string             `json:"error,omitempty"`
	Cause   string             `json:"cause,omitempty"`
	Streams []UETReceiverStats `json:"streams"`
}

// Why a UET connection got no session (UETServerStats.Refused), or why
// the server ended one (UETServerStats.Aborted).
const (
	UETRefusedConns        = sidechan.RefusedConns
	UETRefusedNoRequest    = sidechan.RefusedNoRequest
	UETRefusedTimeout      = sidechan.RefusedTimeout
	UETRefusedRequestBytes = sidechan.RefusedRequestBytes
	UETRefusedMalformed    = sidechan.RefusedMalformed
	UETRefusedTransport    = "transport" // not a UET request (a RoCEv2 client)
	UETRefusedVersion      = "version"
	UETRefusedStreams      = "streams"       // max_streams
	UETRefusedJobIDs       = "job_ids"       // count, range, duplicates, in use
	UETRefusedMessageBytes = "message_bytes" // max_message_bytes
	UETRefusedAddr         = "uet_addr"      // not a unicast address of the server's family
	UETRefusedSessions     = sidechan.RefusedSessions
	UETRefusedBusy         = "busy" // the address's previous PDCs did not expire in time
	UETAbortedDuration     = sidechan.AbortedDuration
	UETAbortedFinish       = sidechan.AbortedFinish
)

// DefaultUETMaxStreams is UETLimits.MaxStreams's default: the RoCEv2
// side's max_qps.
const DefaultUETMaxStreams = 64

// Ranges the UET limits are checked against.
const (
	MaxUETStreams     = 4096 // streams (PDCs) a UET client opens, a session holds
	uetJobIDJSONBytes = 16   // "16777215," and room
	minUETRequest     = 1 << 10
	// uetStreamJSONBytes bounds the client's read of the result: a
	// stream's counters are under 256 bytes of JSON.
	uetStreamJSONBytes = 256
	// maxJobID is the largest JobID (24 bits, pds.Stream).
	maxJobID = 1<<24 - 1
)

// UETLimits bound what the UET side channel's clients may make a server
// hold: the side channel's limits and UET's. Every field is optional: 0
// means the default noted.
type UETLimits struct {
	// The side channel's: sessions, connections, the request line and the
	// timeouts. MaxRequestBytes 0 means 1 KiB plus 16 bytes per stream of
	// MaxStreams.
	sidechan.Limits
	// MaxStreams is the most streams (PDCs) one session may announce
	// (max_streams). 0 means DefaultUETMaxStreams.
	MaxStreams int
	// MaxMessageBytes is the largest message a session may announce
	// (max_message_bytes). 0 means MaxMessageBytes (16 MiB): a target
	// holds no payload, only each message's progress.
	MaxMessageBytes int
}

func (l UETLimits) withDefaults() UETLimits {
	l.MaxStreams = cmp.Or(l.MaxStreams, DefaultUETMaxStreams)
	l.MaxMessageBytes = cmp.Or(l.MaxMessageBytes, MaxMessageBytes)
	l.MaxRequestBytes = cmp.Or(l.MaxRequestBytes, minUETRequest+l.MaxStreams*uetJobIDJSONBytes)
	l.Limits = l.Limits.WithDefaults()
	return l
}

// validate checks limits with their defaults filled, naming the first bad
// one.
func (l *UETLimits) validate() error {
	switch {
	case l.MaxStreams < 1 || l.MaxStreams > MaxUETStreams:
		return fmt.Errorf("uet max_streams %d: must be 1..%d", l.MaxStreams, MaxUETStreams)
	case l.MaxMessageBytes < 1 || l.MaxMessageBytes > pds.MaxMessageBytes:
		return fmt.Errorf("uet max_message_bytes %d: must be 1..%d", l.MaxMessageBytes, pds.MaxMessageBytes)
	}
	if err := l.Limits.Validate(); err != nil {
		return fmt.Errorf("uet %w", err)
	}
	return nil
}
