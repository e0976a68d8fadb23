package pktio

// RoCEOptions configures ListenRoCE. The zero value is valid.
type RoCEOptions struct {
	// RecvBufferBytes is the receive socket's buffer (SO_RCVBUFFORCE,
	// falling back to SO_RCVBUF). Optional: 0 means DefaultUDPBufferBytes.
	RecvBufferBytes int
	// SendBufferBytes is the raw socket's buffer (SO_SNDBUFFORCE, falling
	// back to SO_SNDBUF). Optional: 0 means DefaultUDPBufferBytes.
	SendBufferBytes int
	// BatchSize is the most datagrams one recvmmsg/sendmmsg moves, 1 to
	// MaxBatchSize. Optional: 0 means DefaultBatchSize.
	BatchSize int
	// SendPath is how datagrams leave: UDP GSO where a run of them
	// shares a source port, the raw socket otherwise (SendAuto), or the
	// raw socket always (SendRaw). Optional: SendAuto.
	SendPath SendPath
}

// SteeringStats are the namespace's steering counters, shared by all of
// its RoCEConns (bpf/reuseport.c). Counters only grow while a conn of the
// namespace is open.
type SteeringStats struct {
	Steered uint64 `json:"steered"` // handed to the agent owning the DestQP
	// UnknownQP counts packets dropped because no agent of the namespace
	// owns their DestQP (its block is free), as a NIC drops them.
	UnknownQP uint64 `json:"unknown_qp"`
	// Misdirected counts packets dropped because the DestQP's agent
	// listens on another port or IP family.
	Misdirected uint64 `json:"misdirected"`
	// Malformed counts datagrams too short for UDP + BTH + ICRC, dropped.
	Malformed uint64 `json:"malformed"`
	// PPFC counts PPFC notifications handed to the agent of the lowest
	// occupied slot (with no agent of the family: unknown_qp or
	// misdirected).
	PPFC uint64 `json:"ppfc"`
	// PPFCIgnoredSource counts PPFC notifications dropped because they
	// came from outside the sources that slot's agent set
	// (RoCEConn.SetPPFCSources).
	PPFCIgnoredSource uint64 `json:"ppfc_ignored_source"`
}
