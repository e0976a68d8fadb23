package bpf

// SkBuff mirrors struct __sk_buff (192 bytes): the context a TC program
// gets, and what BPF_PROG_RUN takes and gives back for one (RunOptions
// Context and ContextOut). BPF_PROG_RUN accepts mark, priority, ifindex,
// cb, tstamp, wire_len, gso_segs and gso_size in; the rest must be zero.
type SkBuff struct {
	Len          uint32
	PktType      uint32
	Mark         uint32
	QueueMapping uint32
	Protocol     uint32
	VlanPresent  uint32
	VlanTCI      uint32
	VlanProto    uint32
	Priority     uint32
	IngressIfidx uint32
	Ifindex      uint32
	TCIndex      uint32
	CB           [5]uint32
	Hash         uint32
	TCClassid    uint32
	Data         uint32
	DataEnd      uint32
	NapiID       uint32
	Family       uint32
	RemoteIP4    uint32
	LocalIP4     uint32
	RemoteIP6    [4]uint32
	LocalIP6     [4]uint32
	RemotePort   uint32
	LocalPort    uint32
	DataMeta     uint32
	FlowKeys     uint64
	Tstamp       uint64
	WireLen      uint32
	GSOSegs      uint32
	Sk           uint64
	GSOSize      uint32
	TstampType   uint8
	_            [3]uint8
	HWTstamp     uint64
}
