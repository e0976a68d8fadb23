//go:build linux

package dctcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// DefaultName is the congestion control's name unless Options.Name says
// otherwise: what a socket passes to TCP_CONGESTION (iperf3 -C bpf_dctcp).
const DefaultName = "bpf_dctcp"

// nameMax is TCP_CA_NAME_MAX less the terminating NUL.
const nameMax = 15

// structOpsKernel is the first kernel whose tcp_congestion_ops struct_ops
// registers through a BPF link (BPF_F_LINK), which unregisters it when the
// link's last file descriptor closes, process exit included.
const structOpsKernel = "6.4"

// Options tune Register.
type Options struct {
	// Name is the congestion control's name, at most 15 bytes of [a-z0-9_-].
	// Optional: DefaultName. Tests use a name unique to their run.
	Name string
	// Params are DCTCP's knobs. Optional: DefaultParams.
	Params *Params
	// Trace records every observation window and cut for Trace. Optional.
	Trace bool
}

// Registration is DCTCP registered with the kernel under a name. Close, or
// the process's exit, unregisters it: no new socket can pick it, and the
// kernel frees the program when the last socket using it closes.
type Registration struct {
	name   string
	params Params
	objs   bpf.DctcpObjects
	link   link.Link
	trace  *ringbuf.Reader // nil without Options.Trace
	// close releases the above once; later calls return its result.
	close func() error
}

// Register loads the BPF program and registers it as the TCP congestion
// control opts.Name. It fails if that name is taken (the kernel's own DCTCP
// is "dctcp"; another process may hold DefaultName).
func Register(opts Options) (*Registration, error) {
	name := opts.Name
	if name == "" {
		name = DefaultName
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	p := DefaultParams()
	if opts.Params != nil {
		p = *opts.Params
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if slices.Contains(Available(), name) {
		return nil, fmt.Errorf("dctcp: a TCP congestion control named %q is registered already (net.ipv4.tcp_available_congestion_control): choose another name", name)
	}
	spec, err := bpf.LoadDctcp()
	if err != nil {
		return nil, fmt.Errorf("dctcp: load spec: %w", err)
	}
	for _, v := range []struct {
		name string
		val  any
	}{{bpf.DctcpVarShiftG, p.ShiftG}, {bpf.DctcpVarAlphaOnInit, uint32(p.AlphaOnInit)}, {bpf.DctcpVarTrace, boolByte(opts.Trace)}} {
		if err := spec.Variables[v.name].Set(v.val); err != nil {
			return nil, fmt.Errorf("dctcp: set %s: %w", v.name, err)
		}
	}
	if err := setOpsName(spec.Maps[bpf.DctcpMapDctcp], name); err != nil {
		return nil, err
	}
	r := &Registration{name: name, params: p}
	r.close = sync.OnceValue(r.release)
	if err := spec.LoadAndAssign(&r.objs, bpf.LoadOptions()); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("dctcp: load program: %+v", ve)
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("dctcp: load program: %w (BPF TCP congestion control needs struct_ops links, kernel >= %s, with BTF)", err, structOpsKernel)
		}
		return nil, fmt.Errorf("dctcp: load program: %w", err)
	}
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: r.objs.Dctcp})
	if err != nil {
		_ = r.objs.Close()
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("dctcp: register %q: the name is taken: %w", name, err)
		}
		return nil, fmt.Errorf("dctcp: register %q: %w", name, err)
	}
	r.link = l
	if opts.Trace {
		if r.trace, err = ringbuf.NewReader(r.objs.DctcpTrace); err != nil {
			_ = r.Close()
			return nil, fmt.Errorf("dctcp: trace reader: %w", err)
		}
	}
	return r, nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func validName(name string) error {
	if len(name) > nameMax {
		return fmt.Errorf("dctcp: name %q is %d bytes: at most %d (TCP_CA_NAME_MAX)", name, len(name), nameMax)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("dctcp: name %q: only a-z, 0-9, '_' and '-' allowed", name)
		}
	}
	return nil
}

// setOpsName writes name over the tcp_congestion_ops value's name member.
func setOpsName(ms *ebpf.MapSpec, name string) error {
	if ms == nil || len(ms.Contents) != 1 {
		return errors.New("dctcp: the spec has no tcp_congestion_ops value")
	}
	st, ok := ms.Value.(*btf.Struct)
	if !ok {
		return fmt.Errorf("dctcp: the struct_ops value is %T, want a struct", ms.Value)
	}
	val, ok := ms.Contents[0].Value.([]byte)
	if !ok {
		return fmt.Errorf("dctcp: the struct_ops value holds %T, want bytes", ms.Contents[0].Value)
	}
	for _, m := range st.Members {
		if m.Name != "name" {
			continue
		}
		off := int(m.Offset.Bytes())
		if off+nameMax+1 > len(val) {
			return errors.New("dctcp: tcp_congestion_ops.name is out of the value")
		}
		field := val[off : off+nameMax+1]
		clear(field)
		copy(field, name)
		return nil
	}
	return errors.New("dctcp: tcp_congestion_ops has no name member")
}

// Name is the congestion control's name.
func (r *Registration) Name() string { return r.name }

// Params are the knobs it was loaded with.
func (r *Registration) Params() Params { return r.params }

// Close unregisters the congestion control and frees what this process
// holds. Sockets that use it keep it until they close. It is idempotent:
// later calls return the first one's result.
func (r *Registration) Close() error { return r.close() }

func (r *Registration) release() error {
	var errs []error
	if r.trace != nil {
		errs = append(errs, r.trace.Close())
	}
	if r.link != nil {
		errs = append(errs, r.link.Close())
	}
	errs = append(errs, r.objs.Close())
	return errors.Join(errs...)
}

// Available lists the kernel's registered TCP congestion controls
// (net.ipv4.tcp_available_congestion_control, the same in every
// namespace).
func Available() []string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// FlowKey names a connection by its end of it: the local address and port
// first.
type FlowKey struct {
	Local, Remote netip.AddrPort
}

func (k FlowKey) String() string { return k.Local.String() + " -> " + k.Remote.String() }

func flowKeyOf(k bpf.DctcpDctcpFlowKey) FlowKey {
	addr := func(w [4]uint32) netip.Addr {
		var b [16]byte
		for i, x := range w {
			binary.NativeEndian.PutUint32(b[4*i:], x) // network order in memory
		}
		if k.Family == unix.AF_INET6 {
			return netip.AddrFrom16(b)
		}
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return FlowKey{netip.AddrPortFrom(addr(k.Saddr), k.Sport), netip.AddrPortFrom(addr(k.Daddr), k.Dport)}
}

// Flow is what the program keeps of one connection it runs, at either end:
// a sender's windows and cuts, a receiver's CE transitions.
type Flow struct {
	Key FlowKey `json:"-"`
	// Start is when the congestion control took the connection; Updated
	// the last observation window's end (CLOCK_MONOTONIC, ns).
	StartNs, UpdatedNs uint64
	// Windows of data ended (something delivered in them), and the sum of
	// α after each (MeanAlpha).
	Windows  uint64
	AlphaSum uint64
	Alpha    Alpha
	// Delivered and DeliveredCE are tcp_sock's counts at the last window's
	// end: packets acknowledged, and of them with ECE.
	Delivered, DeliveredCE uint32
	// Cuts are ssthresh calls (an ECE's CWR, once per window); LossReactions
	// Recovery entered or an RTO.
	Cuts, LossReactions uint64
	// CETransitions and AcksFlushed are the receiver's: CE state changes,
	// and delayed ACKs sent first with the old state's ECE.
	CETransitions, AcksFlushed uint64
	CEState                    bool
	// StateRepairs: snd_cwnd or snd_ssthresh put back (Counters).
	StateRepairs        uint64
	Cwnd, SSThresh, MSS uint32
	// CAState is the program's congestion state at the last window's
	// end (the last set_state), SocketCAState the socket's then
	// (icsk_ca_state: 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss).
	CAState, SocketCAState uint8
	// Fallback: ECN was not negotiated and Reno runs the connection.
	Fallback bool
}

// MeanAlpha is the mean α over the flow's windows.
func (f Flow) MeanAlpha() float64 {
	if f.Windows == 0 {
		return 0
	}
	return float64(f.AlphaSum) / float64(f.Windows) / float64(MaxAlpha)
}

// MarkedFraction is DeliveredCE / Delivered.
func (f Flow) MarkedFraction() float64 {
	if f.Delivered == 0 {
		return 0
	}
	return float64(f.DeliveredCE) / float64(f.Delivered)
}

// Flows lists the connections the program runs or ran (an LRU of 4096).
func (r *Registration) Flows() ([]Flow, error) {
	var out []Flow
	var k bpf.DctcpDctcpFlowKey
	var v bpf.DctcpDctcpFlow
	it := r.objs.DctcpFlows.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Flow{
			Key: flowKeyOf(k), StartNs: v.InitNs, UpdatedNs: v.UpdatedNs, Windows: v.Windows, AlphaSum: v.AlphaSum,
			Alpha: Alpha(v.Alpha), Delivered: v.Delivered, DeliveredCE: v.DeliveredCe, Cuts: v.Cuts,
			LossReactions: v.LossReactions, CETransitions: v.CeTransitions, AcksFlushed: v.AcksFlushed,
			CEState: v.CeState != 0, StateRepairs: v.StateRepairs, Cwnd: v.Cwnd, SSThresh: v.Ssthresh, MSS: v.Mss, Fallback: v.Fallback != 0,
			CAState: uint8(v.CaState), SocketCAState: uint8(v.SkCaState),
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("dctcp: read flows: %w", err)
	}
	slices.SortFunc(out, func(a, b Flow) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out, nil
}

// Counters are the program's totals over every connection.
type Counters struct {
	Inits          uint64 `json:"inits"`
	Fallbacks      uint64 `json:"fallbacks"`       // ECN not negotiated: Reno
	FallbackErrors uint64 `json:"fallback_errors"` // the switch to Reno failed
	Windows        uint64 `json:"windows"`
	Cuts           uint64 `json:"cuts"`
	LossReactions  uint64 `json:"loss_reactions"`
	CETransitions  uint64 `json:"ce_transitions"`
	AcksFlushed    uint64 `json:"acks_flushed"`
	TraceLost      uint64 `json:"trace_lost"`
	// StateRepairs counts snd_cwnd or snd_ssthresh values no window can
	// have, put back to the program's (bpf/dctcp.c says why);
	// SSThreshAdopted plausible ssthresh values the kernel wrote itself
	// (an application-limited or idle restart, an undo), taken over.
	StateRepairs    uint64 `json:"state_repairs"`
	SSThreshAdopted uint64 `json:"ssthresh_adopted"`
	// StateResyncs counts ACKs on which the socket's congestion state
	// was not the one set_state last gave the program, which took the
	// socket's over (bpf/dctcp.c, cong_control, says why).
	StateResyncs uint64 `json:"state_resyncs"`
}

// Counters sums the per-CPU totals.
func (r *Registration) Counters() (Counters, error) {
	var c Counters
	if err := bpf.SumPerCPU[bpf.DctcpDctcpStats](r.objs.DctcpCounters, 0, &c); err != nil {
		return Counters{}, fmt.Errorf("dctcp: %w", err)
	}
	return c, nil
}

// EventKind is what a trace record is.
type EventKind uint32

// The trace's record kinds (bpf/dctcp.c enum dctcp_event_kind).
const (
	EventInit   EventKind = EventKind(bpf.DctcpDctcpEventKindDCTCP_EV_INIT)
	EventWindow EventKind = EventKind(bpf.DctcpDctcpEventKindDCTCP_EV_WINDOW)
	EventCut    EventKind = EventKind(bpf.DctcpDctcpEventKindDCTCP_EV_CUT)
	EventLoss   EventKind = EventKind(bpf.DctcpDctcpEventKindDCTCP_EV_LOSS)
	EventRepair EventKind = EventKind(bpf.DctcpDctcpEventKindDCTCP_EV_REPAIR)
)

var eventKindNames = enum.Names{EventInit: {"init"}, EventWindow: {"window"}, EventCut: {"cut"},
	EventLoss: {"loss"}, EventRepair: {"repair"}}

func (k EventKind) String() string { return enum.String(k, eventKindNames, "event") }

// Event is one trace record: the start of a connection (α), a window's
// end (its counts and α before and after; windows with nothing delivered
// too, as at a receiver), or a cut (cwnd before, ssthresh after, at α).
type Event struct {
	Key                    FlowKey
	AtNs                   uint64
	Kind                   EventKind
	AlphaBefore, Alpha     Alpha
	Delivered, DeliveredCE uint32
	Cwnd, SSThresh         uint32
}

// Trace reads the records the program wrote until deadline (or until
// none is waiting); it needs Options.Trace.
func (r *Registration) Trace(deadline time.Time) ([]Event, error) {
	rd := r.trace
	if rd == nil {
		return nil, errors.New("dctcp: registered without Options.Trace")
	}
	var out []Event
	for {
		rd.SetDeadline(deadline)
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("dctcp: read trace: %w", err)
		}
		var e bpf.DctcpDctcpEvent
		if len(rec.RawSample) < binary.Size(e) {
			return out, fmt.Errorf("dctcp: trace record of %d bytes, want %d", len(rec.RawSample), binary.Size(e))
		}
		if _, err := binary.Decode(rec.RawSample, binary.NativeEndian, &e); err != nil {
			return out, fmt.Errorf("dctcp: decode trace record: %w", err)
		}
		out = append(out, Event{Key: flowKeyOf(e.Key), AtNs: e.AtNs, Kind: EventKind(e.Kind), AlphaBefore: Alpha(e.AlphaBefore),
			Alpha: Alpha(e.AlphaAfter), Delivered: e.Delivered, DeliveredCE: e.DeliveredCe, Cwnd: e.Cwnd, SSThresh: e.Ssthresh})
	}
}

// SetCongestion sets TCP_CONGESTION on the socket fd.
func SetCongestion(fd int, name string) error {
	if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name); err != nil {
		return fmt.Errorf("TCP_CONGESTION %s: %w", name, err)
	}
	return nil
}
