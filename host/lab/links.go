//go:build linux

package lab

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fabriclab/fabriclab/host/lab/link"
)

// AddDelay delays every unicast IP packet leaving dev (a device with an
// Ethernet header, such as a veth) by spec, with a link.Delay. The lab
// closes the link when it closes, before its namespaces; Close may be
// called earlier. It needs TCX (kernel >= 6.6).
func (n *Node) AddDelay(dev string, spec link.DelaySpec) (*link.Delay, error) {
	if err := validDevName(dev); err != nil {
		return nil, specErr("dev", "%v", err)
	}
	if err := spec.Validate(); err != nil {
		return nil, linkSpecErr(err)
	}
	l := n.lab
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	// Unique within the run, and recognisably ours: fl-<run hex>-d<n>.
	name := fmt.Sprintf("%s%s-d%d", NamePrefix, l.runID[strings.LastIndexByte(l.runID, '-')+1:], len(l.delays))
	d, err := link.NewDelay(n, dev, name, spec)
	if err != nil {
		return nil, fmt.Errorf("lab: %s: %w", n.Name, err)
	}
	l.delays = append(l.delays, d)
	return d, nil
}

// AddLoss attaches a link.Loss to dev. Close detaches it; the lab does not.
func (n *Node) AddLoss(dev string, spec link.LossSpec) (*link.Loss, error) {
	l, err := link.NewLoss(n, dev, spec)
	if errors.Is(err, link.ErrInvalidSpec) {
		return nil, linkSpecErr(err)
	}
	if err != nil {
		return nil, fmt.Errorf("lab: %s: %w", n.Name, err)
	}
	return l, nil
}

// AddLossT is AddLoss that fails tb on error and closes in tb.Cleanup
// (before the lab, which was built earlier).
func (n *Node) AddLossT(tb TB, dev string, spec link.LossSpec) *link.Loss {
	tb.Helper()
	l, err := n.AddLoss(dev, spec)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := l.Close(); err != nil {
			tb.Errorf("close loss link: %v", err)
		}
	})
	return l
}

// linkSpecErr makes a link's spec error a lab's too, so errors.Is finds
// both ErrInvalidSpec and link.ErrInvalidSpec.
func linkSpecErr(err error) error {
	return fmt.Errorf("lab: %w: %w", ErrInvalidSpec, err)
}
