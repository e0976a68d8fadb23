//go:build linux

package lab

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// SteerRx pins the receive processing of the switch to one CPU and of the
// receiver to another (RPS). A veth delivers a packet on the CPU that sent
// it; when consecutive packets of a flow are sent from different CPUs they
// are processed in parallel and arrive reordered, and TCP answers with
// spurious fast retransmits although nothing was dropped. It returns the
// CPUs used, or "" when there is a single CPU.
func (d *Dumbbell) SteerRx(ctx context.Context) (string, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return "", nil
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		return "", nil
	}
	write := func(n *Node, dev string, cpu int) error {
		path := "/sys/class/net/" + dev + "/queues/rx-0/rps_cpus"
		// ip netns exec mounts the namespace's own /sys for the child.
		out, err := n.Command(ctx, "sh", "-c", `echo "$0" > "$1"`, cpuMask(cpu), path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("set RPS on %s:%s: %v %s", n.Name, dev, err, bytes.TrimSpace(out))
		}
		return nil
	}
	for _, p := range d.SenderPorts {
		if err := write(p.Node, p.Dev, cpus[0]); err != nil {
			return "", err
		}
	}
	if err := write(d.Receiver, d.Bottleneck.PeerDev, cpus[1]); err != nil {
		return "", err
	}
	return fmt.Sprintf("switch ports on CPU %d, receiver on CPU %d", cpus[0], cpus[1]), nil
}

// cpuMask is the rps_cpus mask of one CPU: hex, in 32-bit words separated by
// commas.
func cpuMask(cpu int) string {
	words := make([]string, cpu/32+1)
	for i := range words {
		words[i] = "00000000"
	}
	words[cpu/32] = fmt.Sprintf("%08x", uint32(1)<<(cpu%32))
	// The most significant word comes first.
	for i, j := 0, len(words)-1; i < j; i, j = i+1, j-1 {
		words[i], words[j] = words[j], words[i]
	}
	return strings.Join(words, ",")
}
