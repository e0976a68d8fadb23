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
	var sw []rxDev
	for _, p := range d.SenderPorts {
		sw = append(sw, rxDev{p.Node, p.Dev})
	}
	cpus, err := steerRx(ctx, sw, []rxDev{{d.Receiver, d.Bottleneck.PeerDev}})
	if err != nil || cpus == nil {
		return "", err
	}
	return fmt.Sprintf("switch ports on CPU %d, receiver on CPU %d", cpus[0], cpus[1]), nil
}

// SteerRx is the WAN's: the receive processing of the network (leaf1's
// ports toward the senders, where a sender's packets enter, and each
// core's device from its fiber, where the delay link's forwarder writes
// them back) on one CPU, the receiver's on another, so that no flow is
// reordered on the way (see Dumbbell.SteerRx). It returns the CPUs used,
// or "" when there is a single CPU.
func (w *WAN) SteerRx(ctx context.Context) (string, error) {
	var net []rxDev
	for i := range w.Senders {
		net = append(net, rxDev{w.Leaf1, fmt.Sprintf("h%d", i+1)})
	}
	for _, p := range w.Paths {
		net = append(net, rxDev{p.FiberOut.PeerNode, p.FiberOut.PeerDev})
	}
	cpus, err := steerRx(ctx, net, []rxDev{{w.Receiver, "eth0"}})
	if err != nil || cpus == nil {
		return "", err
	}
	return fmt.Sprintf("leaf1 and the cores on CPU %d, receiver on CPU %d", cpus[0], cpus[1]), nil
}

// SteerRx steers the receive processing of the network devices (the
// forwarding nodes', where packets enter and where a delay link's
// forwarder writes them back) to one CPU and the hosts' to another (RPS),
// so that no flow is reordered between namespaces (see Dumbbell.SteerRx).
// Each is "node" and the device's name. It returns the CPUs used, or ""
// when there is a single CPU.
func (l *Lab) SteerRx(ctx context.Context, network, hosts [][2]string) (string, error) {
	devs := func(in [][2]string) ([]rxDev, error) {
		var out []rxDev
		for _, d := range in {
			n := l.Node(d[0])
			if n == nil {
				return nil, fmt.Errorf("lab: SteerRx: no node %q", d[0])
			}
			out = append(out, rxDev{n, d[1]})
		}
		return out, nil
	}
	first, err := devs(network)
	if err != nil {
		return "", err
	}
	second, err := devs(hosts)
	if err != nil {
		return "", err
	}
	cpus, err := steerRx(ctx, first, second)
	if err != nil || cpus == nil {
		return "", err
	}
	return fmt.Sprintf("network on CPU %d, hosts on CPU %d", cpus[0], cpus[1]), nil
}

// rxDev is a device whose receive processing is steered.
type rxDev struct {
	node *Node
	dev  string
}

// steerRx sets RPS on first to the first CPU this process may run on and
// on second to the second; it returns the two CPUs, or nil with a single
// one.
func steerRx(ctx context.Context, first, second []rxDev) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, nil
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		return nil, nil
	}
	write := func(d rxDev, cpu int) error {
		path := "/sys/class/net/" + d.dev + "/queues/rx-0/rps_cpus"
		// ip netns exec mounts the namespace's own /sys for the child.
		out, err := d.node.Command(ctx, "sh", "-c", `echo "$0" > "$1"`, cpuMask(cpu), path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("set RPS on %s:%s: %v %s", d.node.Name, d.dev, err, bytes.TrimSpace(out))
		}
		return nil
	}
	for k, devs := range [][]rxDev{first, second} {
		for _, d := range devs {
			if err := write(d, cpus[k]); err != nil {
				return nil, err
			}
		}
	}
	return cpus, nil
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
