package pktio

// UDPOptions configures ListenUDP. The zero value is valid.
type UDPOptions struct {
	// DefaultTOS is the socket-level IP_TOS / IPV6_TCLASS. Optional.
	// Datagrams whose Message.TOS differs carry their own per-datagram
	// control message.
	DefaultTOS uint8
	// RecvBufferBytes is the receive buffer asked for with SO_RCVBUFFORCE
	// (needs CAP_NET_ADMIN), falling back to SO_RCVBUF (capped by
	// net.core.rmem_max). Optional: 0 means DefaultUDPBufferBytes.
	RecvBufferBytes int
	// SendBufferBytes is the send buffer, SO_SNDBUFFORCE falling back to
	// SO_SNDBUF. Optional: 0 means DefaultUDPBufferBytes.
	SendBufferBytes int
	// BatchSize is the most datagrams one recvmmsg/sendmmsg moves, 1 to
	// MaxBatchSize. Optional: 0 means DefaultBatchSize. Larger batches
	// passed to ReadBatch are read in part, larger batches passed to
	// WriteBatch are sent in several system calls.
	BatchSize int
	// ReusePort sets SO_REUSEPORT before bind, so that other sockets of
	// the same user may bind the same address and port (RoCEConn's
	// receive socket). Optional.
	ReusePort bool
	// GRO sets UDP_GRO: a device that coalesces received UDP datagrams
	// (generic receive offload; veth with gro on) hands the socket a run
	// of datagrams of one flow as one, which ReadBatch splits again, so
	// the stack below the socket runs once per run instead of once per
	// datagram. Reads then land in BatchSize buffers of 64 KiB (resident
	// only as far as datagrams fill them) and are copied out. Optional.
	GRO bool
}

// UDPStats counts what a UDPConn moved. Counters only grow.
type UDPStats struct {
	DatagramsSent     uint64
	BytesSent         uint64
	DatagramsReceived uint64
	BytesReceived     uint64 // bytes stored, truncated datagrams count their stored part
	// SendErrors counts datagrams WriteBatch failed to send (bad
	// destination, EMSGSIZE, …).
	SendErrors uint64
	// Truncated counts datagrams received longer than their buffer.
	Truncated uint64
	// RecvBufferDrops is the kernel's count of datagrams dropped for this
	// socket before they could be queued, almost always because the receive
	// buffer was full (SO_RXQ_OVFL, sk_drops). The kernel reports it with the
	// next datagram queued after a drop, so it lags by one arrival.
	RecvBufferDrops uint64
	// GROReads are the reads that returned a coalesced run of datagrams
	// (UDPOptions.GRO), GROSegments the datagrams of DatagramsReceived
	// they held (GROSegments / GROReads is the mean run).
	GROReads, GROSegments uint64
	// GSODatagrams are the datagrams of DatagramsSent that left in UDP GSO
	// sends, GSOSends those sends (RoCEConn, EntropyConn; GSODatagrams /
	// GSOSends is the mean segments per send).
	GSODatagrams, GSOSends uint64
}
