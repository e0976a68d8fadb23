package npbpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netns"
)

// Devices is the NP attached to several devices of one host: a QP's CE
// packets may arrive on any of them (a wildcard-bound agent, multipath).
// It implements NPOffload: AddQP and RemoveQP go to every device, Counters
// adds them up.
type Devices struct {
	nps []*NP
}

var _ NPOffload = (*Devices)(nil)

// LocalDevices lists the devices of the calling thread's namespace the NP
// should run on for an agent bound to bind: the up, non-loopback Ethernet
// devices, only those holding bind unless it is unspecified.
func LocalDevices(bind netip.Addr) ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	bind = bind.Unmap()
	var devs []string
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 || len(ifi.HardwareAddr) != 6 {
			continue
		}
		if bind.IsValid() && !bind.IsUnspecified() {
			addrs, err := ifi.Addrs()
			if err != nil {
				return nil, err
			}
			holds := false
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == bind {
					holds = true
				}
			}
			if !holds {
				continue
			}
		}
		devs = append(devs, ifi.Name)
	}
	if len(devs) == 0 {
		if bind.IsValid() && !bind.IsUnspecified() {
			return nil, fmt.Errorf("npbpf: no up Ethernet device holds %v", bind)
		}
		return nil, errors.New("npbpf: no up Ethernet device")
	}
	return devs, nil
}

// AttachDevices attaches the NP to each of devs in ns (netns.None() for
// the calling thread's). On error nothing stays attached.
func AttachDevices(ns netns.NsHandle, devs []string, opts Options) (*Devices, error) {
	d := &Devices{}
	for _, dev := range devs {
		np, err := Attach(ns, dev, opts)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("npbpf: attach to %s: %w", dev, err), d.Close())
		}
		d.nps = append(d.nps, np)
	}
	return d, nil
}

// Names lists the devices.
func (d *Devices) Names() []string {
	var out []string
	for _, np := range d.nps {
		out = append(out, np.Dev)
	}
	return out
}

// AddQP adds c on every device; on error it is removed again.
func (d *Devices) AddQP(c QPContext) error {
	for i, np := range d.nps {
		if err := np.AddQP(c); err != nil {
			for _, done := range d.nps[:i] {
				_ = done.RemoveQP(c.QPN)
			}
			return fmt.Errorf("%s: %w", np.Dev, err)
		}
	}
	return nil
}

// RemoveQP removes the QP from every device.
func (d *Devices) RemoveQP(qpn uint32) error {
	var errs []error
	for _, np := range d.nps {
		if err := np.RemoveQP(qpn); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", np.Dev, err))
		}
	}
	return errors.Join(errs...)
}

// Counters adds up the QP's counters over the devices; MinCNPSpacing is
// the least of them.
func (d *Devices) Counters(qpn uint32) (NPCounters, error) {
	var sum NPCounters
	for _, np := range d.nps {
		c, err := np.Counters(qpn)
		if err != nil {
			return NPCounters{}, fmt.Errorf("%s: %w", np.Dev, err)
		}
		sum.NPECNMarkedRoCEPackets += c.NPECNMarkedRoCEPackets
		sum.NPCNPSent += c.NPCNPSent
		sum.NPCNPCoalesced += c.NPCNPCoalesced
		sum.NPCNPHeldSent += c.NPCNPHeldSent
		sum.NPCNPErrors += c.NPCNPErrors
		sum.NPCNPXmitTimeouts += c.NPCNPXmitTimeouts
		if c.MinCNPSpacing > 0 && (sum.MinCNPSpacing == 0 || c.MinCNPSpacing < sum.MinCNPSpacing) {
			sum.MinCNPSpacing = c.MinCNPSpacing
		}
	}
	return sum, nil
}

// Close detaches every device.
func (d *Devices) Close() error {
	var errs []error
	for _, np := range d.nps {
		errs = append(errs, np.Close())
	}
	d.nps = nil
	return errors.Join(errs...)
}
