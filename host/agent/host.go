package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/rpbpf"
	"github.com/fabriclab/fabriclab/qdisc"
)

// A RoCEv2 host is the one way every program of the lab opens RoCEv2:
// the port (pktio.RoCEConn on UDP 4791 of an address), DCQCN's NP and
// RP in the kernel where they attach (host/npbpf, host/rpbpf, on the
// devices that carry the address), and an agent on them. roceperf, the
// lab files and the daemon (host/perf), the demo, the bench and the
// experiments open their hosts here.

// Offload says where a DCQCN role runs (HostConfig.NP and RP).
type Offload string

const (
	// OffloadAuto runs the role in the kernel when it attaches, else in
	// the agent (HostConfig.Logger says why).
	OffloadAuto Offload = ""
	// OffloadKernel runs it in the kernel, or fails.
	OffloadKernel Offload = "kernel"
	// OffloadAgent runs it in the agent's receive loop.
	OffloadAgent Offload = "agent"
)

// HostConfig configures OpenHost.
type HostConfig struct {
	// Addr is the RoCEv2 port's address: an unspecified address listens
	// on all; port 0 means 4791.
	Addr netip.AddrPort
	// Port sets the port's socket (send path, receive buffer).
	Port pktio.RoCEOptions
	// NP and RP say where DCQCN's notification and reaction points run.
	// A host that only receives needs no kernel RP, and one that only
	// sends no kernel NP: set the other to OffloadAgent.
	NP, RP Offload
	// Devices are those the kernel roles attach to; nil means the up
	// Ethernet devices that carry Addr (all of them for an unspecified
	// address).
	Devices []string
	// Agent is the agent's configuration; OpenHost sets its Conn and
	// offloads. Its Logger also logs a kernel role that fell back.
	Agent Config
}

// OffloadError is a kernel role that did not attach where it had to.
type OffloadError struct {
	Role string // "np" or "rp"
	Err  error
}

func (e *OffloadError) Error() string {
	return fmt.Sprintf("the kernel %s did not attach: %v", roleName(e.Role), e.Err)
}

func (e *OffloadError) Unwrap() error { return e.Err }

// PortError is the RoCEv2 port that did not open.
type PortError struct {
	Addr netip.AddrPort
	Err  error
}

func (e *PortError) Error() string { return fmt.Sprintf("RoCEv2 port %s: %v", e.Addr, e.Err) }

func (e *PortError) Unwrap() error { return e.Err }

func roleName(role string) string {
	if role == "np" {
		return "NP"
	}
	return "RP"
}

// Host is an open RoCEv2 host.
type Host struct {
	Agent *Agent
	Conn  *pktio.RoCEConn
	// NP and RP are the kernel's roles; nil where the agent runs them.
	// The RP's program is shared with the other hosts of the process on
	// the namespace's same devices (rpbpf.Attach); its QPs are this
	// host's.
	NP *npbpf.Devices
	RP *rpbpf.RP
	// RawForPorts are the devices of the namespace that carry a port
	// (qdisc.PortsHere) and so made HostConfig.Port.SendPath SendAuto
	// send raw: each of its GSO sends would be one packet to the port.
	RawForPorts []string
}

// SendPathHere is the send path a conn opened in the calling thread's
// namespace takes for p: SendAuto becomes SendRaw where the namespace has
// a pinned port (qdisc.PortsHere), the devices it returns, since each UDP
// GSO send would be one packet to that port. RoCEv2 (OpenHost) and UET
// endpoints both decide here.
func SendPathHere(p pktio.SendPath) (pktio.SendPath, []string, error) {
	if p != pktio.SendAuto {
		return p, nil, nil
	}
	devs, err := qdisc.PortsHere()
	if err != nil || len(devs) == 0 {
		return p, nil, err
	}
	return pktio.SendRaw, devs, nil
}

// OpenHost opens the port, attaches the kernel roles and starts the
// agent, all in the calling thread's network namespace (run it inside
// lab.Node.Do for a lab's node).
func OpenHost(cfg HostConfig) (*Host, error) {
	for _, m := range []struct {
		role string
		o    Offload
	}{{"np", cfg.NP}, {"rp", cfg.RP}} {
		switch m.o {
		case OffloadAuto, OffloadKernel, OffloadAgent:
		default:
			return nil, &ConfigError{Field: m.role, Value: string(m.o), Must: "must be kernel, agent or empty (kernel where it attaches)"}
		}
	}
	ap := cfg.Addr
	if !ap.Addr().IsValid() {
		ap = netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port())
	}
	if ap.Port() == 0 {
		ap = netip.AddrPortFrom(ap.Addr(), roce.UDPPort)
	}
	h := &Host{}
	ok := false
	defer func() {
		if !ok {
			_ = h.Close()
		}
	}()
	var err error
	if cfg.Port.BatchSize == 0 {
		// The conn's batches are the agent's: its receive buffers
		// (64 KiB each with GRO) as few as its engine's.
		cfg.Port.BatchSize = cfg.Agent.BatchSize
		if cfg.Port.BatchSize == 0 {
			cfg.Port.BatchSize = engine.DefaultBatchSize(cfg.Agent.PortRate)
		}
	}
	if cfg.Port.SendPath, h.RawForPorts, err = SendPathHere(cfg.Port.SendPath); err != nil {
		return nil, &PortError{Addr: ap, Err: err}
	}
	if h.Conn, err = pktio.ListenRoCE(ap, cfg.Port); err != nil {
		return nil, &PortError{Addr: ap, Err: err}
	}
	log := cfg.Agent.Logger
	if h.NP, err = attachRole(cfg.NP, "np", ap.Addr(), cfg.Devices, log, func(devs []string) (*npbpf.Devices, error) {
		return npbpf.AttachDevices(netns.None(), devs, npbpf.Options{})
	}); err != nil {
		return nil, err
	}
	if h.RP, err = attachRole(cfg.RP, "rp", ap.Addr(), cfg.Devices, log, func(devs []string) (*rpbpf.RP, error) {
		// The hosts of a namespace on these devices share one RP,
		// sized for all of them.
		return rpbpf.Attach(netns.None(), devs, rpbpf.LoadOptions{})
	}); err != nil {
		return nil, err
	}
	acfg := cfg.Agent
	acfg.Conn = h.Conn
	if h.NP != nil {
		acfg.NPOffload = h.NP
	}
	if h.RP != nil {
		acfg.RPOffload = h.RP
	}
	if h.Agent, err = New(acfg); err != nil {
		return nil, err
	}
	ok = true
	return h, nil
}

// attachRole attaches one kernel role as mode says: nil with no error is
// the agent's.
func attachRole[T any](mode Offload, role string, addr netip.Addr, devs []string, log *slog.Logger, attach func([]string) (*T, error)) (*T, error) {
	if mode == OffloadAgent {
		return nil, nil
	}
	var err error
	if devs == nil {
		devs, err = npbpf.LocalDevices(addr)
	}
	var k *T
	if err == nil {
		k, err = attach(devs)
	}
	switch {
	case err == nil:
		return k, nil
	case mode == OffloadKernel:
		return nil, &OffloadError{Role: role, Err: err}
	}
	if log != nil {
		log.Warn(fmt.Sprintf("the kernel %s did not attach; the agent runs it", roleName(role)), "err", err)
	}
	return nil, nil
}

// NPDevices lists the devices the kernel NP runs on (none: the agent's).
func (h *Host) NPDevices() []string {
	if h.NP == nil {
		return nil
	}
	return h.NP.Names()
}

// Close stops the agent, closes the port and detaches the kernel roles.
func (h *Host) Close() error {
	var errs []error
	switch {
	case h.Agent != nil:
		errs = append(errs, h.Agent.Close()) // closes the port
	case h.Conn != nil:
		errs = append(errs, h.Conn.Close())
	}
	if h.NP != nil {
		errs = append(errs, h.NP.Close())
	}
	if h.RP != nil {
		errs = append(errs, h.RP.Close())
	}
	return errors.Join(errs...)
}
