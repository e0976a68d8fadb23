package qdisc

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	tc "github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The legacy attach path for kernels without TCX (< 6.6): a clsact qdisc
// with a direct-action cls_bpf filter on its ingress or egress hook.
const (
	// legacyFilterPrio identifies our filter among others on the hook.
	legacyFilterPrio    = 0xfab
	legacyHandle        = 1
	tcaBPFFlagActDirect = 1 // TCA_BPF_FLAG_ACT_DIRECT
	ethPAll             = 0x0003
)

func clsactParent(ingress bool) uint32 {
	if ingress {
		return core.BuildHandle(tc.HandleRoot, tc.HandleMinIngress)
	}
	return core.BuildHandle(tc.HandleRoot, tc.HandleMinEgress)
}

func attachClsact(ns netns.NsHandle, ifindex uint32, prog *ebpf.Program, ingress bool) error {
	t, err := openTC(ns)
	if err != nil {
		return err
	}
	defer t.Close()
	clsact := &tc.Object{
		Msg:       tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: core.BuildHandle(tc.HandleRoot, 0), Parent: tc.HandleIngress},
		Attribute: tc.Attribute{Kind: "clsact"},
	}
	if err := t.Qdisc().Add(clsact); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add clsact qdisc: %w", err)
	}
	fd := uint32(prog.FD())
	flags := uint32(tcaBPFFlagActDirect)
	info, _ := prog.Info()
	name := "fabriclab"
	if info != nil {
		name = info.Name
	}
	filter := &tc.Object{
		Msg: tc.Msg{
			Family:  unix.AF_UNSPEC,
			Ifindex: ifindex,
			Handle:  legacyHandle,
			Parent:  clsactParent(ingress),
			Info:    core.FilterInfo(legacyFilterPrio, ethPAll),
		},
		Attribute: tc.Attribute{Kind: "bpf", BPF: &tc.Bpf{FD: &fd, Name: &name, Flags: &flags}},
	}
	if err := t.Filter().Add(filter); err != nil {
		return fmt.Errorf("add cls_bpf filter: %w", err)
	}
	return nil
}

// detachClsact removes our filter, and the clsact qdisc when nothing else
// hangs off it.
func detachClsact(ns netns.NsHandle, ifindex uint32, ingress bool) error {
	t, err := openTC(ns)
	if err != nil {
		return err
	}
	defer t.Close()
	filter := &tc.Object{Msg: tc.Msg{
		Family:  unix.AF_UNSPEC,
		Ifindex: ifindex,
		Handle:  legacyHandle,
		Parent:  clsactParent(ingress),
		Info:    core.FilterInfo(legacyFilterPrio, ethPAll),
	}, Attribute: tc.Attribute{Kind: "bpf"}}
	if err := t.Filter().Delete(filter); err != nil && !isGone(err) {
		return fmt.Errorf("delete cls_bpf filter: %w", err)
	}
	for _, dir := range []bool{true, false} {
		rest, err := t.Filter().Get(&tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Parent: clsactParent(dir)})
		if err == nil && len(rest) > 0 {
			return nil
		}
	}
	clsact := &tc.Object{Msg: tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: core.BuildHandle(tc.HandleRoot, 0), Parent: tc.HandleIngress},
		Attribute: tc.Attribute{Kind: "clsact"}}
	if err := t.Qdisc().Delete(clsact); err != nil && !isGone(err) {
		return fmt.Errorf("delete clsact qdisc: %w", err)
	}
	return nil
}
