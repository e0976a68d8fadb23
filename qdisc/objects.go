package qdisc

import (
	"errors"
	"fmt"
	"math"

	"github.com/cilium/ebpf"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Mirrors of bpf/port.h that BTF does not carry (unused enums are not emitted).
const (
	classFlagWREDDrop   = 1 << 0 // CLASS_F_WRED_DROP
	classFlagRemark     = 1 << 1 // CLASS_F_REMARK
	portFlagSetPriority = 1 << 0 // PORT_F_SET_PRIORITY
	portFlagXmitHook    = 1 << 1 // PORT_F_XMIT_HOOK
	portFlagPPFC        = 1 << 2 // PORT_F_PPFC
	portFlagIdleLog     = 1 << 3 // PORT_F_IDLE_LOG
	aqmFlagSqrtLaw      = 1 << 0 // AQM_F_SQRT_LAW
	aqmFlagQueueSignal  = 1 << 1 // AQM_F_QLEN_SIGNAL
	probOne             = 1 << 32
	sojournBuckets      = 32
	handoffSlotBits     = 15 // HANDOFF_SLOT_BITS
	// enum aqm_verdict: what the xmit hook hands the peer hook.
	aqmPass    = 0 // AQM_PASS
	aqmMarkIns = 1 // AQM_MARK_INS
	aqmMarkPst = 2 // AQM_MARK_PST
)

// DefaultFrameBytes is the largest frame of a 1500-byte-MTU Ethernet link,
// what CoDel counts as "one MTU" of backlog unless LoadOptions say otherwise.
const DefaultFrameBytes = 1514

// LoadOptions tune how the programs are loaded.
type LoadOptions struct {
	// TestHooks makes the programs read the clock from test_now_ns and the
	// random draw from test_rand (see Objects.SetClock), for BPF_PROG_RUN
	// tests that must not sleep. Never set it on a real port.
	TestHooks bool
	// FrameBytes is the largest frame on the device (MTU + Ethernet
	// header): CoDel never signals while at most this much is queued.
	// 0 means DefaultFrameBytes.
	FrameBytes uint64
	// Xmit loads the xmit hook (port_xmit, port_host_drop) for this
	// device. Optional: nil loads only the TC programs.
	Xmit *XmitTarget
	// Ifindex is the port device's: the Congestion Port its PPFC
	// notifications name, and part of the mark of their clones (ports
	// sharing a switch's devices must not take each other's).
	Ifindex int
}

// XmitTarget is the device the xmit hook counts departures on. The hook is
// a tracepoint every device's transmissions pass, so it filters on both.
type XmitTarget struct {
	Ifindex int
	// NetnsIno is the inode number of the device's network namespace.
	NetnsIno uint32
}

// Objects are the loaded port programs and maps, not attached to anything.
type Objects struct {
	bpf.PortObjects
	frameBytes uint64
	ifindex    int
	// xmitHook says the xmit hook counts departures (PORT_F_XMIT_HOOK).
	xmitHook bool
	// xmitErr is why the xmit hook's programs did not load, when
	// LoadOptions.Xmit asked for them.
	xmitErr error
}

// coreObjects are the TC programs and the maps, without the tracing
// programs: what loads everywhere the port works.
type coreObjects struct {
	bpf.PortMaps
	bpf.PortVariables
	PortEnqueue *ebpf.Program `ebpf:"port_enqueue"`
	PortDequeue *ebpf.Program `ebpf:"port_dequeue"`
	PpfcEgress  *ebpf.Program `ebpf:"ppfc_egress"`
}

// LoadObjects loads the programs with cfg in their maps.
func LoadObjects(cfg Config, mode QueueMode, priorityBase uint32, opts LoadOptions) (*Objects, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkQueueMode(&cfg, mode); err != nil {
		return nil, err
	}
	spec, err := bpf.LoadPort()
	if err != nil {
		return nil, fmt.Errorf("load port spec: %w", err)
	}
	if opts.TestHooks {
		if err := spec.Variables["test_hooks"].Set(uint8(1)); err != nil {
			return nil, err
		}
	}
	if err := spec.Variables["ppfc_mark"].Set(ppfcMark(opts.Ifindex)); err != nil {
		return nil, err
	}
	if err := spec.Variables["trim_mark"].Set(trimMark(opts.Ifindex)); err != nil {
		return nil, err
	}
	o := &Objects{frameBytes: opts.FrameBytes, ifindex: opts.Ifindex}
	if opts.Xmit != nil {
		if err := errors.Join(spec.Variables["xmit_ifindex"].Set(uint32(opts.Xmit.Ifindex)),
			spec.Variables["xmit_netns_ino"].Set(opts.Xmit.NetnsIno)); err != nil {
			return nil, err
		}
		// The tracing programs need BTF, tp_btf and the kernel's skb
		// layout (CO-RE); without them the port still works, counting
		// departures at the peer's ingress.
		if o.xmitErr = spec.LoadAndAssign(&o.PortObjects, bpf.LoadOptions()); o.xmitErr != nil {
			o.xmitErr = loadError("load xmit hook", o.xmitErr)
		}
	}
	if opts.Xmit == nil || o.xmitErr != nil {
		var core coreObjects
		if err := spec.LoadAndAssign(&core, bpf.LoadOptions()); err != nil {
			return nil, loadError("load port programs", err)
		}
		o.PortMaps, o.PortVariables = core.PortMaps, core.PortVariables
		o.PortPrograms = bpf.PortPrograms{PortEnqueue: core.PortEnqueue, PortDequeue: core.PortDequeue, PpfcEgress: core.PpfcEgress}
	}
	if err := o.writeConfig(cfg, mode, priorityBase); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

func loadError(what string, err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%s: %+v", what, ve)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// handoffSlot is the handoff table's slot of a key (an skb's address), as
// port_xmit.h's handoff_slot computes it: Fibonacci hashing.
func handoffSlot(key uint64) uint32 {
	return uint32((key * 0x9E3779B97F4A7C15) >> (64 - handoffSlotBits))
}

// XmitErr is why the xmit hook's programs did not load (nil when they did,
// or were not asked for).
func (o *Objects) XmitErr() error { return o.xmitErr }

// enableXmitHook tells the programs that port_xmit counts departures. The
// peer's hook counts any departure port_xmit did not hand over, so the
// switch is safe with packets in flight.
func (o *Objects) enableXmitHook() error {
	var pc bpf.PortPortConfig
	if err := o.PortCfg.Lookup(uint32(0), &pc); err != nil {
		return fmt.Errorf("read port config: %w", err)
	}
	o.xmitHook = true
	pc.Flags |= portFlagXmitHook
	if err := o.PortCfg.Put(uint32(0), &pc); err != nil {
		return fmt.Errorf("write port config: %w", err)
	}
	return nil
}

// Stats reads the counters of loaded objects (BPF_PROG_RUN tests and
// benchmarks). cfg names the classes; it may be nil.
func (o *Objects) Stats(cfg *Config) (Stats, error) { return readStats(&o.PortMaps, cfg) }

// SetClock sets the time the programs see when loaded with TestHooks.
func (o *Objects) SetClock(nowNs uint64) error { return o.TestNowNs.Set(nowNs) }

// SetRandom sets the random draw the programs see when loaded with
// TestHooks: WRED marks when draw < p·2^32.
func (o *Objects) SetRandom(draw uint32) error { return o.TestRand.Set(draw) }

// probToFixed converts a probability to the programs' fixed point (2^32 = 1).
func probToFixed(p float64) uint64 {
	return uint64(math.Round(p * probOne))
}

func probFromFixed(v uint64) float64 { return float64(v) / probOne }

// nsPerByteFixed is the time one byte takes at rate, in 16.16 fixed point
// (VQ_FP_SHIFT): exact for rates that divide 8 Gbit/s, within 0.1 % up to
// 400 Gbit/s.
func nsPerByteFixed(rate units.Rate) uint64 {
	if rate == 0 {
		return 0
	}
	return uint64(math.Round(8e9 * (1 << 16) / float64(rate)))
}

// checkQueueMode rejects the dequeue AQMs on a port without a dequeue hook.
func checkQueueMode(cfg *Config, mode QueueMode) error {
	if mode == QueueVeth {
		return nil
	}
	var errs []error
	for i, cc := range cfg.Classes {
		if cc.ECN.Dequeue() {
			errs = append(errs, fmt.Errorf("class %d: ecn %s decides on the sojourn at dequeue and needs queue mode veth (this port is %s): use step or wred", i, cc.ECN, mode))
		}
	}
	return errors.Join(errs...)
}

// sameAQM reports whether two map values run the same dequeue AQM with the
// same settings, so that its state may carry over.
func sameAQM(a, b *bpf.PortClassConfig) bool {
	return a.EcnMode == b.EcnMode && a.InsLo == b.InsLo && a.InsHi == b.InsHi &&
		a.AqmTarget == b.AqmTarget && a.AqmIntervalNs == b.AqmIntervalNs &&
		a.AqmFlags == b.AqmFlags && a.MtuBytes == b.MtuBytes && a.MaxP == b.MaxP
}

// writeConfig puts cfg into the maps. Each class is one map update, so a
// packet sees either the old or the new policy of a class, never a mix of
// fields (array updates copy the value under RCU for readers).
func (o *Objects) writeConfig(cfg Config, mode QueueMode, priorityBase uint32) error {
	for d := range NumDSCP {
		if err := o.DscpClass.Put(uint32(d), uint32(cfg.DSCPClass[d])); err != nil {
			return fmt.Errorf("write dscp map: %w", err)
		}
	}
	for i, cc := range cfg.Classes {
		v := bpf.PortClassConfig{
			LimitBytes: uint64(cc.LimitBytes),
			RateBps:    uint64(cc.Rate),
			EcnMode:    bpf.PortEcnMode(cc.ECN),
			XoffBytes:  uint64(cc.XoffBytes),
			XonBytes:   uint64(cc.XonBytes),
			AlarmBytes: uint64(cc.AlarmBytes),
			TrimBytes:  uint64(cc.TrimBytes),
			TrimDscp:   uint32(cc.TrimDSCP),
			TrimClass:  uint32(cc.TrimClass),
			FlowQueues: uint32(cc.FlowQueues),
		}
		drain := cc.Rate
		if drain == 0 {
			drain = cfg.Rate
		}
		v.VqNsPerByteFp = nsPerByteFixed(drain)
		if cc.WREDDrop {
			v.Flags |= classFlagWREDDrop
		}
		if cc.Remark {
			v.Flags |= classFlagRemark
			v.RemarkDscp = uint32(cc.RemarkDSCP)
		}
		v.MtuBytes = o.frameBytes
		if v.MtuBytes == 0 {
			v.MtuBytes = DefaultFrameBytes
		}
		markerOf(cc.ECN).encode(&v, &cc) // a valid mode: cfg.Validate said so
		var old bpf.PortClassConfig
		if err := o.ClassCfg.Lookup(uint32(i), &old); err != nil {
			return fmt.Errorf("read class %d config: %w", i, err)
		}
		if err := o.ClassCfg.Put(uint32(i), &v); err != nil {
			return fmt.Errorf("write class %d config: %w", i, err)
		}
		// A changed AQM starts from a clean state (its counters stay).
		// The state is written under its spin lock, after the new
		// settings, so a packet never runs the new settings on stale
		// state for longer than the window between the two updates.
		if !sameAQM(&old, &v) {
			if err := o.ClassAqm.Update(uint32(i), &bpf.PortAqmState{}, ebpf.UpdateLock); err != nil {
				return fmt.Errorf("reset class %d aqm state: %w", i, err)
			}
		}
	}
	pc := bpf.PortPortConfig{
		RateBps:      uint64(cfg.Rate),
		QueueMode:    uint32(mode),
		PriorityBase: priorityBase,
		DefaultClass: uint32(cfg.DefaultClass),
		PpfcDscp:     uint32(DSCPCNP),
		PpfcPort:     uint32(o.ifindex) & 0xFFFF,
	}
	if cfg.PPFC() {
		pc.Flags |= portFlagPPFC
	}
	if priorityBase != 0 {
		pc.Flags |= portFlagSetPriority
	}
	if o.xmitHook {
		pc.Flags |= portFlagXmitHook
	}
	// The idle log's reader owns its flag (Port.OpenIdleLog).
	var oldPC bpf.PortPortConfig
	if err := o.PortCfg.Lookup(uint32(0), &oldPC); err != nil {
		return fmt.Errorf("read port config: %w", err)
	}
	pc.Flags |= oldPC.Flags & portFlagIdleLog
	if err := o.PortCfg.Put(uint32(0), &pc); err != nil {
		return fmt.Errorf("write port config: %w", err)
	}
	return nil
}

// readConfig reads back what the maps hold: the effective configuration.
// Names and Strict live in user space and are taken from names.
func readConfig(m *bpf.PortMaps, names Config) (Config, QueueMode, error) {
	cfg := names
	var pc bpf.PortPortConfig
	if err := m.PortCfg.Lookup(uint32(0), &pc); err != nil {
		return cfg, 0, fmt.Errorf("read port config: %w", err)
	}
	cfg.Rate = units.Rate(pc.RateBps)
	cfg.DefaultClass = ClassID(pc.DefaultClass)
	for d := range NumDSCP {
		var c uint32
		if err := m.DscpClass.Lookup(uint32(d), &c); err != nil {
			return cfg, 0, fmt.Errorf("read dscp map: %w", err)
		}
		cfg.DSCPClass[d] = ClassID(c)
	}
	for i := range cfg.Classes {
		var v bpf.PortClassConfig
		if err := m.ClassCfg.Lookup(uint32(i), &v); err != nil {
			return cfg, 0, fmt.Errorf("read class %d config: %w", i, err)
		}
		cc := &cfg.Classes[i]
		cc.LimitBytes = units.ByteSize(v.LimitBytes)
		cc.Rate = units.Rate(v.RateBps)
		cc.ECN = ECNMode(v.EcnMode)
		cc.WREDDrop = v.Flags&classFlagWREDDrop != 0
		cc.Remark = v.Flags&classFlagRemark != 0
		if cc.Remark {
			cc.RemarkDSCP = DSCP(v.RemarkDscp)
		}
		cc.XoffBytes = units.ByteSize(v.XoffBytes)
		cc.XonBytes = units.ByteSize(v.XonBytes)
		cc.AlarmBytes = units.ByteSize(v.AlarmBytes)
		cc.TrimBytes = units.ByteSize(v.TrimBytes)
		cc.TrimDSCP = DSCP(v.TrimDscp)
		cc.TrimClass = ClassID(v.TrimClass)
		cc.FlowQueues = int(v.FlowQueues)
		// The mode's settings; the other modes' fields keep what user
		// space last wrote.
		if mk := markerOf(cc.ECN); mk != nil {
			mk.decode(cc, &v)
		}
	}
	return cfg, QueueMode(pc.QueueMode), nil
}

// ppfcMarkBase marks the clones port_enqueue and ppfc_egress turn into PPFC
// notifications ("PF"); the low 16 bits are the port's ifindex.
const ppfcMarkBase = 0x50460000

func ppfcMark(ifindex int) uint32 { return ppfcMarkBase | uint32(ifindex)&0xFFFF }

// trimMarkBase marks a trimmed packet port_enqueue sends through the
// device's egress once more ("TR"), so that its second pass lets it by;
// the low 16 bits are the port's ifindex.
const trimMarkBase = 0x54520000

func trimMark(ifindex int) uint32 { return trimMarkBase | uint32(ifindex)&0xFFFF }
