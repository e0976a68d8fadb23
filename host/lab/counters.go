//go:build linux

package lab

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// SoftnetDrops is the packets the kernel dropped because a CPU's input
// backlog (net.core.netdev_max_backlog) was full, summed over the CPUs
// (/proc/net/softnet_stat, second column). It is global, not per
// namespace: a veth delivers through this backlog, so a lab's packets lost
// on the way between namespaces count here.
func SoftnetDrops() (uint64, error) {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 {
			v, err := strconv.ParseUint(f[1], 16, 64)
			if err != nil {
				return 0, fmt.Errorf("softnet_stat: %w", err)
			}
			n += v
		}
	}
	return n, nil
}

// UDPCounter is the Udp counter name (InErrors, RcvbufErrors, ...) of n's
// namespace (/proc/net/snmp).
func (n *Node) UDPCounter(name string) (uint64, error) {
	return n.netCounter("snmp", func(text string) (uint64, error) {
		var names []string
		for _, l := range strings.Split(text, "\n") {
			f := strings.Fields(l)
			if len(f) == 0 || f[0] != "Udp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i := range names {
				if names[i] == name && i < len(f) {
					return strconv.ParseUint(f[i], 10, 64)
				}
			}
		}
		return 0, fmt.Errorf("no Udp %s in /proc/net/snmp", name)
	})
}

// UDP6Counter is the Udp6 counter name (InCsumErrors, RcvbufErrors, ...)
// of n's namespace (/proc/net/snmp6, where it reads Udp6<name>).
func (n *Node) UDP6Counter(name string) (uint64, error) {
	return n.netCounter("snmp6", func(text string) (uint64, error) {
		for _, l := range strings.Split(text, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "Udp6"+name {
				return strconv.ParseUint(f[1], 10, 64)
			}
		}
		return 0, fmt.Errorf("no Udp6%s in /proc/net/snmp6", name)
	})
}

// netCounter reads file of /proc/net as n's namespace has it and takes a
// counter from its text with pick.
func (n *Node) netCounter(file string, pick func(text string) (uint64, error)) (uint64, error) {
	var v uint64
	err := n.Do(func() error {
		// /proc/self/net is the process leader's namespace, not this
		// thread's.
		b, err := os.ReadFile("/proc/thread-self/net/" + file)
		if err != nil {
			return err
		}
		v, err = pick(string(b))
		return err
	})
	return v, err
}
