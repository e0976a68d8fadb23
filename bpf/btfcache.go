package bpf

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// kernelBTF is the process's decoded kernel BTF, shared by every load:
// without it each load of a collection with CO-RE relocations or tracing
// programs decodes /sys/kernel/btf/vmlinux anew (a switch port's did, 13
// ms and megabytes of garbage a port).
var kernelBTF = btf.NewCache()

// LoadOptions are the options every load of this package's objects
// starts from: the shared kernel BTF. Add map replacements to the copy.
func LoadOptions() *ebpf.CollectionOptions {
	return &ebpf.CollectionOptions{Cache: kernelBTF}
}
