package npbpf

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fabriclab/fabriclab/bpf"
)

// LoadOptions tune how the programs are loaded.
type LoadOptions struct {
	// Mark is the skb mark of the clones that become CNPs, and of the
	// CNPs. Optional: 0 means DefaultMark. Pick another if the host uses
	// that value.
	Mark uint32
	// XmitTimeout bounds how long a QP waits for its CNP to reach the
	// transmit hook before it may decide the next one: a qdisc may hold
	// the CNP, or lose it without telling. 1 µs..1 s. Optional: 0 means
	// DefaultXmitTimeout.
	XmitTimeout time.Duration
	// TestHooks makes the programs read the clock from SetClock and count
	// CNPs in Redirects instead of cloning packets, for BPF_PROG_RUN tests.
	// Never set it on a device.
	TestHooks bool
}

// objects are what a device runs (the test programs are left out).
type objects struct {
	Ingress *ebpf.Program `ebpf:"np_ingress"`
	Egress  *ebpf.Program `ebpf:"np_egress"`
	Xmit    *ebpf.Program `ebpf:"np_xmit"`
	bpf.NpMaps
	bpf.NpVariables
}

func (o *objects) close() error {
	var errs []error
	for _, p := range []*ebpf.Program{o.Ingress, o.Egress, o.Xmit} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(append(errs, o.NpMaps.Close())...)
}

// testObjects add the test programs (prog_test.go).
type testObjects struct {
	objects
	ICRCTest *ebpf.Program `ebpf:"np_icrc_test"`
	XmitTest *ebpf.Program `ebpf:"np_xmit_test"`
}

// Objects are the loaded NP programs and maps, attached to nothing. They
// implement NPOffload; with LoadOptions.TestHooks, tests run the programs
// with BPF_PROG_RUN. Methods are safe for concurrent use, Close excepted.
type Objects struct {
	objs     objects
	icrcTest *ebpf.Program // tests only
	xmitTest *ebpf.Program // tests only
	mark     uint32
}

// Load loads the programs and creates their maps.
func Load(opts LoadOptions) (*Objects, error) {
	return load(opts, false)
}

func load(opts LoadOptions, withTestProgs bool) (*Objects, error) {
	if opts.XmitTimeout == 0 {
		opts.XmitTimeout = DefaultXmitTimeout
	}
	if opts.XmitTimeout < minXmitTimeout || opts.XmitTimeout > maxXmitTimeout {
		return nil, fmt.Errorf("npbpf: xmit timeout %v: must be %v..%v", opts.XmitTimeout, minXmitTimeout, maxXmitTimeout)
	}
	spec, err := bpf.LoadNp()
	if err != nil {
		return nil, fmt.Errorf("npbpf: load spec: %w", err)
	}
	o := &Objects{mark: opts.Mark}
	if o.mark == 0 {
		o.mark = DefaultMark
	}
	if err := spec.Variables[bpf.NpVarNpMark].Set(o.mark); err != nil {
		return nil, fmt.Errorf("npbpf: set np_mark: %w", err)
	}
	if err := spec.Variables[bpf.NpVarXmitTimeoutNs].Set(uint64(opts.XmitTimeout)); err != nil {
		return nil, fmt.Errorf("npbpf: set xmit_timeout_ns: %w", err)
	}
	if opts.TestHooks {
		if err := spec.Variables[bpf.NpVarTestHooks].Set(uint8(1)); err != nil {
			return nil, fmt.Errorf("npbpf: set test_hooks: %w", err)
		}
	}
	var to any = &o.objs
	var t testObjects
	if withTestProgs {
		to = &t
	}
	if err := spec.LoadAndAssign(to, bpf.LoadOptions()); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("npbpf: load programs: %+v", ve)
		}
		return nil, fmt.Errorf("npbpf: load programs: %w", err)
	}
	if withTestProgs {
		o.objs, o.icrcTest, o.xmitTest = t.objects, t.ICRCTest, t.XmitTest
	}
	return o, nil
}

// Mark is the skb mark the CNPs carry.
func (o *Objects) Mark() uint32 { return o.mark }

// AddQP starts answering the CE packets of c.QPN with a fresh state: no
// CNP sent yet, counters zero.
func (o *Objects) AddQP(c QPContext) error {
	if err := c.Validate(); err != nil {
		return err
	}
	v := c.value()
	if err := o.objs.NpQps.Update(c.QPN, &v, ebpf.UpdateNoExist); err != nil {
		if errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("npbpf: qp %#x: already added (RemoveQP first)", c.QPN)
		}
		return fmt.Errorf("npbpf: qp %#x: add: %w", c.QPN, err)
	}
	return nil
}

// RemoveQP stops answering the QP's CE packets. A CNP the programs are
// building at that moment is dropped, never sent as data.
func (o *Objects) RemoveQP(qpn uint32) error {
	if err := o.objs.NpQps.Delete(qpn); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("npbpf: qp %#x: %w", qpn, ErrUnknownQP)
		}
		return fmt.Errorf("npbpf: qp %#x: remove: %w", qpn, err)
	}
	return nil
}

// Counters reads the QP's counters, all from one moment (under the QP's
// lock).
func (o *Objects) Counters(qpn uint32) (NPCounters, error) {
	var v bpf.NpNpQp
	if err := o.objs.NpQps.LookupWithFlags(qpn, &v, ebpf.LookupLock); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return NPCounters{}, fmt.Errorf("npbpf: qp %#x: %w", qpn, ErrUnknownQP)
		}
		return NPCounters{}, fmt.Errorf("npbpf: qp %#x: read counters: %w", qpn, err)
	}
	return countersOf(&v), nil
}

// Stats reads the device's counters.
func (o *Objects) Stats() (Stats, error) {
	var s Stats
	if err := bpf.SumPerCPU[bpf.NpNpStats](o.objs.NpCounters, 0, &s); err != nil {
		return Stats{}, fmt.Errorf("npbpf: %w", err)
	}
	return s, nil
}

// Close frees the programs and maps. Attached programs stay attached until
// their links close (NP.Close does both).
func (o *Objects) Close() error {
	err := o.objs.close()
	for _, p := range []*ebpf.Program{o.icrcTest, o.xmitTest} {
		if p != nil {
			err = errors.Join(err, p.Close())
		}
	}
	return err
}

// Test hooks (LoadOptions.TestHooks).

// SetClock sets the time in ns the programs see.
func (o *Objects) SetClock(nowNs uint64) error { return o.objs.TestNowNs.Set(nowNs) }

// RunIngress hands one Ethernet frame to np_ingress (BPF_PROG_RUN), as a
// device's ingress would: for tests that hold the kernel NP's verdicts
// against another's (host/agent). It returns the program's return code.
func (o *Objects) RunIngress(frame []byte) (uint32, error) {
	return o.objs.Ingress.Run(&ebpf.RunOptions{Data: frame})
}

// Redirects returns how many CNPs np_ingress would have cloned.
func (o *Objects) Redirects() (uint64, error) {
	var n uint64
	err := o.objs.TestRedirects.Get(&n)
	return n, err
}

// SetRedirectError makes the simulated clone fail with -errno (0: succeed).
func (o *Objects) SetRedirectError(errno int32) error {
	return o.objs.TestRedirectRet.Set(-errno)
}
