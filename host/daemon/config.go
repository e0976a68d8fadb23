// Package daemon is fabriclabd, the agent of a lab server: from one YAML
// file it serves RoCEv2 and UET sessions (the traffic tool's -s server,
// host/perf), attaches switch egress ports to the server's NICs (qdisc, in
// virtual-queue mode by default), runs flows to other servers, and exports
// every counter for Prometheus with the NIC's names (np_cnp_sent,
// rp_cnp_handled, ...) per QP, PDC and port class.
//
// Reload (SIGHUP in cmd/fabriclabd) applies a new file as a difference:
// servers, ports and flows whose settings did not change keep running
// (sessions and flows are not interrupted, port counters survive a
// changed AQM), and a file that fails validation or cannot be applied
// leaves the running configuration as it was. Drain (SIGTERM) stops
// accepting sessions, lets those in progress end, stops the flows and
// detaches the ports.
package daemon

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/sidechan"
	"github.com/fabriclab/fabriclab/host/tcpflow"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Defaults.
const (
	DefaultConfigPath    = "/etc/fabriclab/fabriclabd.yaml"
	DefaultMetricsListen = "127.0.0.1:9471"
	DefaultDrainTimeout  = 30 * time.Second
	MaxDrainTimeout      = time.Hour
	DefaultFlowPause     = time.Second
	MaxFlowStart         = 24 * time.Hour
)

// Config is the daemon's file.
type Config struct {
	Log     LogConfig     `yaml:"log"`
	Metrics MetricsConfig `yaml:"metrics"`
	// DrainTimeout bounds how long Drain waits for sessions in progress.
	DrainTimeout time.Duration  `yaml:"drain_timeout"`
	Servers      []ServerConfig `yaml:"servers"`
	Profiles     Profiles       `yaml:"profiles"`
	Ports        []PortConfig   `yaml:"ports"`
	Flows        []FlowConfig   `yaml:"flows"`
	// Lab runs one node of a lab file (host/labfile) on this server: its
	// servers, its ports (in virtual-queue mode), its tunnel PEs and the
	// flows that leave it (repeating, Pause apart), beside what the
	// sections above list. The machine's addresses and routes are the
	// file's plan (fabriclab plan FILE -node NODE -apply).
	Lab *LabRef `yaml:"lab"`

	deploy  *labfile.Deployment // Lab, loaded by Validate
	labFile *labfile.File       // Lab's file, for the check
	labSum  [32]byte            // its content's hash: a reload that changes it restarts the check
}

// LabRef names a lab file and the node this server is.
type LabRef struct {
	File string `yaml:"file"`
	Node string `yaml:"node"`
	// Variant deploys one of the file's variants (its pes' decap and
	// agents, its ports). Optional: the file as written.
	Variant string `yaml:"variant"`
	// Check has this daemon judge the lab's flows every window (seed
	// 000's three layers, as fabriclab check -daemons) and export the
	// verdicts: fabriclab_check_* and GET /check. Optional.
	Check *LabCheck `yaml:"check"`
}

// LogConfig: slog JSON on stderr (the journal), at Level.
type LogConfig struct {
	Level string `yaml:"level"` // debug, info (default), warn, error
}

// MetricsConfig is the HTTP endpoint: /metrics (Prometheus) and /healthz.
type MetricsConfig struct {
	// Listen is host:port. Optional: DefaultMetricsListen; "off" serves
	// nothing.
	Listen string `yaml:"listen"`
}

// ServerConfig is one listening server, exactly what `roceperf -s`
// (or `roceperf -s --transport uet`) serves: clients cannot tell them apart.
// A tcp server is a lab file's kernel TCP sink (host/tcpflow).
type ServerConfig struct {
	Transport string     `yaml:"transport"` // rocev2 (default), uet or tcp
	Bind      netip.Addr `yaml:"bind"`      // optional for rocev2 and tcp (all addresses); required for uet
	Port      int        `yaml:"port"`      // side channel (tcp: the listener); default 18515 (tcp 18517)
	// CC is a tcp server's congestion control, the kernel's name: the
	// receiver's ACKs follow it (DCTCP's ECE echo). Default dctcp (the
	// BPF DCTCP of host/dctcp where the kernel has none).
	CC      string `yaml:"cc"`
	UDPPort int    `yaml:"udp_port"` // rocev2; default 4791
	NP      string `yaml:"np"`       // rocev2: kernel or agent (default: kernel where it attaches)
	// What clients may make the server hold.
	MaxQPs          int           `yaml:"max_qps"`           // rocev2: per session; uet: streams (PDCs) per session
	MaxSessions     int           `yaml:"max_sessions"`      // at once
	MaxTotalQPs     int           `yaml:"max_total_qps"`     // rocev2
	MaxMessageBytes int           `yaml:"max_message_bytes"` //
	RequestTimeout  time.Duration `yaml:"request_timeout"`
	// UET: the code points of trimmed packets (NACK TRIMMED, TRIMMED_LASTHOP).
	TrimDSCP        uint8 `yaml:"trim_dscp"`
	TrimLastHopDSCP uint8 `yaml:"trim_lasthop_dscp"`
	// RoCEv2: the switches that may pause the server's QPs with PPFC
	// notifications (default any; the host's steering drops the others),
	// the longest pause a stop puts on them (default 65.535 ms) and the
	// pause-storm watchdog (a duration or off; default max(200 ms, 2 ×
	// the max pause)), as roceperf's --ppfc-* flags.
	PPFCSources  []perf.PPFCSource `yaml:"ppfc_sources"`
	PPFCMaxPause time.Duration     `yaml:"ppfc_max_pause"`
	PPFCWatchdog labfile.Watchdog  `yaml:"ppfc_watchdog"`

	// lineRate and baseRTT are a lab node's uet server's (its credit
	// pacer's: labfile.ServerPlan).
	lineRate units.Rate
	baseRTT  time.Duration
}

// Profiles are named congestion-control settings that flows refer to.
type Profiles struct {
	DCQCN map[string]DCQCNProfile `yaml:"dcqcn"`
	NSCC  map[string]NSCCProfile  `yaml:"nscc"`
}

// DCQCNProfile is a DCQCN base profile and knobs by their mlx5 names
// (rpg_time_reset, rate_reduce_monitor_period, ...; `roceperf --dcqcn help`).
type DCQCNProfile struct {
	Base  string            `yaml:"base"` // lab (default, dcqcn.DefaultProfile), mlx5 or paper
	Knobs map[string]string `yaml:"knobs"`
}

// NSCCProfile is NSCC's base RTT and knobs by their spec names
// (target_qdelay, gamma, max_wnd, ...; nscc.KnobNames).
type NSCCProfile struct {
	BaseRTT time.Duration     `yaml:"base_rtt"`
	Knobs   map[string]string `yaml:"knobs"`
}

// PortConfig is a switch egress port on one of this server's devices,
// configured as portctl's options are (--tc, --dscp, --default-class).
type PortConfig struct {
	Dev string `yaml:"dev"`
	// config is the whole port configuration of a lab file's port.
	config *qdisc.Config
	Netns  string     `yaml:"netns"` // optional: the daemon's own
	Mode   string     `yaml:"mode"`  // virtual (default: a NIC's far end is not ours) or veth
	Rate   units.Rate `yaml:"rate"`
	// Shape makes a virtual-queue port really send at Rate (HTB on the
	// device, qdisc.AttachOptions.Shape): a port slower than its NIC. A
	// lab file's PE rate limiter is one.
	Shape bool     `yaml:"shape"`
	TC    []string `yaml:"tc"`   // "3:wred:min=50kb,max=1mb,p=0.1"
	DSCP  []string `yaml:"dscp"` // "26=3"
	// DefaultClass is the class of unmapped DSCPs. Optional.
	DefaultClass string `yaml:"default_class"`
}

// FlowConfig is traffic this server sends: a roceperf client run against
// Server, started Start after the daemon (or the reload that added it).
type FlowConfig struct {
	Name      string     `yaml:"name"`
	Transport string     `yaml:"transport"` // rocev2 (default), uet or tcp
	Server    string     `yaml:"server"`    // host or host:port of a server (another daemon, roceperf -s; tcp: ADDRESS[:PORT])
	Bind      netip.Addr `yaml:"bind"`      // optional: the route's source
	// QPs (rocev2) or Streams (uet): parallel QPs or PDCs, as in a lab
	// file. Default 1.
	QPs     int `yaml:"qps"`
	Streams int `yaml:"streams"`
	// LineRate is the emulated NIC's line rate (roceperf -b).
	LineRate units.Rate `yaml:"line_rate"`
	// CC is dcqcn (default) or none for rocev2; nscc (default), rccc,
	// both or none for uet; the kernel's congestion control for tcp
	// (default dctcp).
	CC    string `yaml:"cc"`
	DCQCN string `yaml:"dcqcn"` // a profiles.dcqcn name; default: dcqcn.DefaultProfile (lab)
	NSCC  string `yaml:"nscc"`  // a profiles.nscc name; default: the lab's
	LB    string `yaml:"lb"`    // uet: oblivious, bitmap, reps or mixed
	// uet: each PDC's retransmission timeout (roceperf --rto; default
	// 10 ms) and how it infers a loss before it (--loss: rack, sleek,
	// none; default rack).
	RTO  time.Duration `yaml:"rto"`
	Loss string        `yaml:"loss"`
	// Size ends a run after this much payload; else Duration (default 10 s).
	Size        units.ByteSize `yaml:"size"`
	Duration    time.Duration  `yaml:"duration"`
	MessageSize units.ByteSize `yaml:"message_size"` // bytes per message; default 64 KiB
	MTU         int            `yaml:"mtu"`
	DSCP        uint8          `yaml:"dscp"`
	Start       time.Duration  `yaml:"start"`
	// Repeat runs the flow again Pause after each run ends, until it is
	// removed or the daemon stops.
	Repeat bool          `yaml:"repeat"`
	Pause  time.Duration `yaml:"pause"`
	// RoCEv2: PPFC, as a server's ppfc_* settings, for the flow's QPs.
	PPFCSources  []perf.PPFCSource `yaml:"ppfc_sources"`
	PPFCMaxPause time.Duration     `yaml:"ppfc_max_pause"`
	PPFCWatchdog labfile.Watchdog  `yaml:"ppfc_watchdog"`

	// client is a lab file's flow, planned by labfile; tcp, a lab
	// file's tcp flow.
	client *perf.ClientConfig
	tcp    *tcpflow.Conn
	// series is a lab file's flow: its sizes, count and spacing, and its
	// ideal FCT.
	series *series
}

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse decodes and validates a config; errors name the file, the line,
// the field, the value and what is allowed.
func Parse(name string, data []byte) (*Config, error) {
	var c Config
	if err := conf.Decode(name, data, &c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, conf.Locate(name, data, err)
	}
	return &c, nil
}

// WithDefaults fills the optional fields.
func (c Config) WithDefaults() Config {
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Metrics.Listen == "" {
		c.Metrics.Listen = DefaultMetricsListen
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	c.Servers = slices.Clone(c.Servers)
	c.Ports = slices.Clone(c.Ports)
	c.Flows = slices.Clone(c.Flows)
	if dep := c.deploy; dep != nil {
		for _, sp := range dep.Servers {
			c.Servers = append(c.Servers, ServerConfig{Transport: sp.Transport, Bind: sp.Addr.Addr(), Port: int(sp.Addr.Port()), CC: sp.CC, NP: sp.NP,
				TrimDSCP: sp.TrimDSCP, TrimLastHopDSCP: sp.TrimLastHopDSCP, lineRate: sp.LineRate, baseRTT: sp.BaseRTT})
		}
		for _, po := range dep.Ports {
			q := po.Config
			c.Ports = append(c.Ports, PortConfig{Dev: po.Dev, Rate: q.Rate, Shape: po.Limiter, config: &q})
		}
		for _, fp := range dep.Flows {
			sr := &series{plan: &fp, seed: dep.Seed}
			if tp := fp.TCP; tp != nil {
				conn := tp.Conn(tp.CC, tp.Size)
				c.Flows = append(c.Flows, FlowConfig{Name: fp.Flow.Name, Transport: labfile.TransportTCP, Server: tp.Server.String(),
					Start: fp.Flow.Start, Repeat: true, tcp: &conn, series: sr})
				continue
			}
			cc := fp.Client
			cc.Interval = 0
			c.Flows = append(c.Flows, FlowConfig{Name: fp.Flow.Name, Transport: fp.Flow.Transport, Server: cc.Server,
				Start: fp.Flow.Start, Repeat: true, client: &cc, series: sr})
		}
	}
	for i := range c.Servers {
		s := &c.Servers[i]
		if s.Transport == "" {
			s.Transport = perf.TransportRoCEv2
		}
		if s.Port == 0 {
			s.Port = perf.DefaultPort
			if s.Transport == labfile.TransportTCP {
				s.Port = labfile.TCPPort
			}
		}
		if s.Transport == labfile.TransportTCP && s.CC == "" {
			s.CC = tcpflow.DCTCP
		}
		if s.Transport == perf.TransportRoCEv2 && s.UDPPort == 0 {
			s.UDPPort = perf.DefaultUDPPort
		}
	}
	for i := range c.Ports {
		if c.Ports[i].Mode == "" {
			c.Ports[i].Mode = qdisc.QueueVirtual.String()
		}
	}
	for i := range c.Flows {
		f := &c.Flows[i]
		if f.Transport == "" {
			f.Transport = perf.TransportRoCEv2
		}
		if f.Repeat && f.Pause == 0 {
			f.Pause = DefaultFlowPause
		}
	}
	return c
}

var logLevels = []string{"debug", "info", "warn", "error"}

// Validate checks every field; the first bad one is a *conf.Error. It
// reads the lab file, if any.
func (c *Config) Validate() error {
	if c.Lab != nil {
		if err := c.loadLab(); err != nil {
			return err
		}
	}
	d := c.WithDefaults()
	if !slices.Contains(logLevels, d.Log.Level) {
		return conf.Errorf("log.level", d.Log.Level, "must be one of %s", strings.Join(logLevels, ", "))
	}
	if l := d.Metrics.Listen; l != "off" {
		if _, err := netip.ParseAddrPort(l); err != nil {
			return conf.Errorf("metrics.listen", l, "must be ADDRESS:PORT (e.g. %s) or off", DefaultMetricsListen)
		}
	}
	if d.DrainTimeout < 0 || d.DrainTimeout > MaxDrainTimeout {
		return conf.Errorf("drain_timeout", d.DrainTimeout, "must be 0 (%v)..%v", DefaultDrainTimeout, MaxDrainTimeout)
	}
	listens := map[string]string{}
	for i, s := range d.Servers {
		p := conf.Index("servers", i)
		if err := s.validate(p); err != nil {
			return err
		}
		for _, k := range s.listenKeys() {
			if prev, ok := listens[k]; ok {
				return conf.Errorf(p, k, "the same address and port as %s", prev)
			}
			listens[k] = p
		}
	}
	for name, pr := range d.Profiles.DCQCN {
		if _, err := pr.params(units.Gbit * 10); err != nil {
			p := conf.Key("profiles.dcqcn", name)
			return labfile.DCQCNError(conf.Join(p, "base"), conf.Join(p, "knobs"), err)
		}
	}
	for name, pr := range d.Profiles.NSCC {
		if pr.BaseRTT != 0 && (pr.BaseRTT < perf.MinUETBaseRTT || pr.BaseRTT > perf.MaxUETBaseRTT) {
			return conf.Errorf(conf.Join(conf.Key("profiles.nscc", name), "base_rtt"), pr.BaseRTT, "must be %v..%v", perf.MinUETBaseRTT, perf.MaxUETBaseRTT)
		}
	}
	devs := map[string]string{}
	for i, pc := range d.Ports {
		p := conf.Index("ports", i)
		if _, err := pc.qdiscConfig(p); err != nil {
			return err
		}
		k := pc.key()
		if prev, ok := devs[k]; ok {
			return conf.Errorf(conf.Join(p, "dev"), pc.Dev, "already a port (%s)", prev)
		}
		devs[k] = p
	}
	names := map[string]string{}
	for i, f := range d.Flows {
		p := conf.Index("flows", i)
		if f.Name == "" {
			return conf.Errorf(conf.Join(p, "name"), "", "required: a unique name")
		}
		if prev, ok := names[f.Name]; ok {
			return conf.Errorf(conf.Join(p, "name"), f.Name, "already the name of %s", prev)
		}
		names[f.Name] = p
		if f.Transport == labfile.TransportTCP {
			if _, err := d.tcpConn(p, f); err != nil {
				return err
			}
			continue
		}
		if _, err := d.clientConfig(p, f); err != nil {
			return err
		}
	}
	return nil
}

func (s ServerConfig) validate(p string) error {
	switch s.Transport {
	case perf.TransportRoCEv2, perf.TransportUET:
		if s.CC != "" {
			return conf.Errorf(conf.Join(p, "cc"), s.CC, "tcp only: a rocev2 or uet flow's client picks its congestion control")
		}
	case labfile.TransportTCP:
		return s.validateTCP(p)
	default:
		return conf.Errorf(conf.Join(p, "transport"), s.Transport, "must be rocev2, uet or tcp")
	}
	switch {
	case s.Port < 1 || s.Port > 65535:
		return conf.Errorf(conf.Join(p, "port"), s.Port, "must be 1..65535")
	case s.UDPPort < 0 || s.UDPPort > 65535:
		return conf.Errorf(conf.Join(p, "udp_port"), s.UDPPort, "must be 1..65535")
	case s.Transport == perf.TransportUET && s.UDPPort != 0:
		return conf.Errorf(conf.Join(p, "udp_port"), s.UDPPort, "rocev2 only: UET is on UDP 4793")
	case s.Transport == perf.TransportUET && (!s.Bind.IsValid() || s.Bind.IsUnspecified()):
		return conf.Errorf(conf.Join(p, "bind"), s.Bind, "required with transport uet: a unicast address of this server")
	case s.NP != "" && s.NP != perf.NPKernel && s.NP != perf.NPAgent && s.NP != perf.NPOff:
		return conf.Errorf(conf.Join(p, "np"), s.NP, "must be kernel, agent or off")
	case s.NP != "" && s.NP != perf.NPOff && s.Transport == perf.TransportUET:
		return conf.Errorf(conf.Join(p, "np"), s.NP, "kernel and agent place RoCEv2's NP; uet takes off alone (the target echoes no CE)")
	case s.MaxQPs < 0 || s.MaxQPs > perf.MaxQPs:
		return conf.Errorf(conf.Join(p, "max_qps"), s.MaxQPs, "must be 0 (default)..%d", perf.MaxQPs)
	case s.MaxSessions < 0 || s.MaxSessions > 4096:
		return conf.Errorf(conf.Join(p, "max_sessions"), s.MaxSessions, "must be 0 (default)..4096")
	case s.MaxTotalQPs < 0 || (s.MaxTotalQPs > 0 && s.MaxTotalQPs < s.MaxQPs):
		return conf.Errorf(conf.Join(p, "max_total_qps"), s.MaxTotalQPs, "must be 0 (default) or at least max_qps (%d)", s.MaxQPs)
	case s.MaxMessageBytes < 0 || s.MaxMessageBytes > perf.MaxMessageBytes:
		return conf.Errorf(conf.Join(p, "max_message_bytes"), s.MaxMessageBytes, "must be 0 (default)..%d", perf.MaxMessageBytes)
	case s.RequestTimeout < 0 || s.RequestTimeout > time.Hour:
		return conf.Errorf(conf.Join(p, "request_timeout"), s.RequestTimeout, "must be 0 (default)..1h")
	case s.TrimDSCP > 63:
		return conf.Errorf(conf.Join(p, "trim_dscp"), s.TrimDSCP, "must be 0 (none)..63")
	case s.TrimLastHopDSCP > 63:
		return conf.Errorf(conf.Join(p, "trim_lasthop_dscp"), s.TrimLastHopDSCP, "must be 0 (none)..63")
	case (s.TrimDSCP != 0 || s.TrimLastHopDSCP != 0) && s.Transport != perf.TransportUET:
		return conf.Errorf(conf.Join(p, "trim_dscp"), s.TrimDSCP, "uet only")
	}
	return checkPPFC(p, s.Transport, s.PPFCSources, s.PPFCMaxPause, s.PPFCWatchdog)
}

// checkPPFC checks a rocev2 server's or flow's ppfc_* settings at path p
// as perf will, and refuses them for another transport.
func checkPPFC(p, transport string, sources []perf.PPFCSource, maxPause time.Duration, watchdog labfile.Watchdog) error {
	if transport != perf.TransportRoCEv2 {
		for _, f := range []struct {
			field string
			set   bool
			value any
		}{{"ppfc_sources", len(sources) > 0, sources}, {"ppfc_max_pause", maxPause != 0, maxPause}, {"ppfc_watchdog", watchdog != 0, time.Duration(watchdog)}} {
			if f.set {
				return conf.Errorf(conf.Join(p, f.field), f.value, "rocev2 only")
			}
		}
		return nil
	}
	var ce *perf.ConfigError
	if err := perf.CheckPPFC(perf.PPFCPrefixes(sources), maxPause, time.Duration(watchdog)); errors.As(err, &ce) {
		return conf.Errorf(conf.Join(p, string(ce.Field)), ce.Value, "%s", ce.Reason())
	}
	return nil
}

// validateTCP checks a tcp server: a listener and its congestion control.
func (s ServerConfig) validateTCP(p string) error {
	for _, f := range []struct {
		field string
		set   bool
		value any
	}{
		{"udp_port", s.UDPPort != 0, s.UDPPort}, {"np", s.NP != "", s.NP}, {"max_qps", s.MaxQPs != 0, s.MaxQPs},
		{"max_total_qps", s.MaxTotalQPs != 0, s.MaxTotalQPs}, {"max_message_bytes", s.MaxMessageBytes != 0, s.MaxMessageBytes},
		{"max_sessions", s.MaxSessions != 0, s.MaxSessions}, {"request_timeout", s.RequestTimeout != 0, s.RequestTimeout},
		{"trim_dscp", s.TrimDSCP != 0, s.TrimDSCP}, {"trim_lasthop_dscp", s.TrimLastHopDSCP != 0, s.TrimLastHopDSCP},
		{"ppfc_sources", len(s.PPFCSources) > 0, s.PPFCSources}, {"ppfc_max_pause", s.PPFCMaxPause != 0, s.PPFCMaxPause},
		{"ppfc_watchdog", s.PPFCWatchdog != 0, time.Duration(s.PPFCWatchdog)},
	} {
		if f.set {
			return conf.Errorf(conf.Join(p, f.field), f.value, "not for a tcp server (a kernel TCP sink)")
		}
	}
	if s.Port < 1 || s.Port > 65535 {
		return conf.Errorf(conf.Join(p, "port"), s.Port, "must be 1..65535")
	}
	if s.Bind.IsValid() && !s.Bind.Is4() {
		return conf.Errorf(conf.Join(p, "bind"), s.Bind, "an IPv4 address of this server (tcp flows are IPv4)")
	}
	if err := tcpflow.CheckCC(s.CC); err != nil {
		return conf.Errorf(conf.Join(p, "cc"), s.CC, "%v", err)
	}
	return nil
}

// tcpConn is a tcp flow's connection; its CC is the name the config gives
// (resolved to the kernel's when the flow starts).
func (c *Config) tcpConn(p string, f FlowConfig) (tcpflow.Conn, error) {
	if f.tcp != nil {
		return *f.tcp, nil // planned and validated by labfile
	}
	for _, x := range []struct {
		field string
		set   bool
		value any
	}{
		{"qps", f.QPs != 0, f.QPs}, {"streams", f.Streams != 0, f.Streams}, {"line_rate", f.LineRate != 0, f.LineRate},
		{"dcqcn", f.DCQCN != "", f.DCQCN}, {"nscc", f.NSCC != "", f.NSCC}, {"lb", f.LB != "", f.LB}, {"rto", f.RTO != 0, f.RTO}, {"loss", f.Loss != "", f.Loss},
		{"mtu", f.MTU != 0, f.MTU},
		{"ppfc_sources", len(f.PPFCSources) > 0, f.PPFCSources}, {"ppfc_max_pause", f.PPFCMaxPause != 0, f.PPFCMaxPause},
		{"ppfc_watchdog", f.PPFCWatchdog != 0, time.Duration(f.PPFCWatchdog)},
	} {
		if x.set {
			return tcpflow.Conn{}, conf.Errorf(conf.Join(p, x.field), x.value, "not for a tcp flow (a kernel connection: its congestion control is cc)")
		}
	}
	conn := tcpflow.Conn{Bind: f.Bind, CC: f.CC, DSCP: int(f.DSCP), Size: uint64(f.Size), Duration: f.Duration, WriteBytes: int(f.MessageSize)}
	server, err := netip.ParseAddrPort(f.Server)
	if err != nil {
		a, aerr := netip.ParseAddr(f.Server)
		if aerr != nil {
			return conn, conf.Errorf(conf.Join(p, "server"), f.Server, "must be ADDRESS or ADDRESS:PORT (IPv4) of a tcp server")
		}
		server = netip.AddrPortFrom(a, labfile.TCPPort)
	}
	conn.Server = server
	switch {
	case !server.Addr().Is4() || server.Port() == 0:
		return conn, conf.Errorf(conf.Join(p, "server"), f.Server, "must be ADDRESS or ADDRESS:PORT (IPv4) of a tcp server")
	case f.Bind.IsValid() && !f.Bind.Is4():
		return conn, conf.Errorf(conf.Join(p, "bind"), f.Bind, "an IPv4 address of this server (tcp flows are IPv4)")
	case f.Start < 0 || f.Start > MaxFlowStart:
		return conn, conf.Errorf(conf.Join(p, "start"), f.Start, "must be 0..%v", MaxFlowStart)
	case f.Pause < 0 || f.Pause > MaxFlowStart:
		return conn, conf.Errorf(conf.Join(p, "pause"), f.Pause, "must be 0..%v", MaxFlowStart)
	case f.Pause != 0 && !f.Repeat:
		return conn, conf.Errorf(conf.Join(p, "pause"), f.Pause, "only with repeat: true")
	case f.Size != 0 && f.Duration != 0:
		return conn, conf.Errorf(conf.Join(p, "duration"), f.Duration, "not with size: a flow ends on one of them")
	case f.Duration < 0 || (f.Duration > 0 && f.Duration < time.Millisecond) || f.Duration > perf.MaxDuration:
		return conn, conf.Errorf(conf.Join(p, "duration"), f.Duration, "must be 1ms..%v", perf.MaxDuration)
	case f.MessageSize > perf.MaxMessageBytes:
		return conn, conf.Errorf(conf.Join(p, "message_size"), f.MessageSize, "must be 1..%d bytes (a write's size)", perf.MaxMessageBytes)
	case f.DSCP > 63:
		return conn, conf.Errorf(conf.Join(p, "dscp"), f.DSCP, "must be 0..63")
	}
	if conn.CC == "" {
		conn.CC = tcpflow.DCTCP
	}
	if err := tcpflow.CheckCC(conn.CC); err != nil {
		return conn, conf.Errorf(conf.Join(p, "cc"), f.CC, "%v", err)
	}
	if conn.Size == 0 && conn.Duration == 0 {
		conn.Duration = perf.DefaultDuration
	}
	return conn, nil
}

// listenKeys are the sockets the server binds, to find two servers on one.
func (s ServerConfig) listenKeys() []string {
	bind := "0.0.0.0"
	if s.Bind.IsValid() {
		bind = s.Bind.String()
	}
	return []string{fmt.Sprintf("tcp %s:%d", bind, s.Port)}
}

// perfConfig is the server as host/perf takes it.
func (s ServerConfig) perfConfig() perf.ServerConfig {
	return perf.ServerConfig{
		Bind: s.Bind, Port: s.Port, UDPPort: s.UDPPort, NP: s.NP, Transport: s.Transport,
		Interval: -1,
		Limits: agent.ServerLimits{MaxQPs: s.MaxQPs, MaxTotalQPs: s.MaxTotalQPs, MaxMessageBytes: s.MaxMessageBytes,
			Limits: sidechan.Limits{MaxSessions: s.MaxSessions, RequestTimeout: s.RequestTimeout}},
		UETLimits: perf.UETLimits{MaxStreams: s.MaxQPs, MaxMessageBytes: s.MaxMessageBytes,
			Limits: sidechan.Limits{MaxSessions: s.MaxSessions, RequestTimeout: s.RequestTimeout}},
		TrimDSCP: s.TrimDSCP, TrimLastHopDSCP: s.TrimLastHopDSCP,
		LineRate: s.lineRate, BaseRTT: s.baseRTT,
		PPFCSources: perf.PPFCPrefixes(s.PPFCSources), PPFCMaxPause: s.PPFCMaxPause, PPFCWatchdog: time.Duration(s.PPFCWatchdog),
	}
}

// name labels the server in metrics and logs: "rocev2/198.18.0.1:18515"
// (no space: a label value promtool accepts; "rocev2/*:18515" unbound).
func (s ServerConfig) name() string {
	addr := fmt.Sprintf("*:%d", s.Port)
	if s.Bind.IsValid() {
		addr = netip.AddrPortFrom(s.Bind, uint16(s.Port)).String()
	}
	return s.Transport + "/" + addr
}

func (pr DCQCNProfile) params(lineRate units.Rate) (dcqcn.Params, error) {
	base := pr.Base
	if base == "" {
		base = dcqcn.DefaultProfile
	}
	return dcqcn.New(base, lineRate, labfile.SortedKnobs(pr.Knobs)...)
}

func (pc PortConfig) key() string { return pc.Netns + "/" + pc.Dev }

// qdiscConfig is the port's configuration: qdisc.DefaultConfig(rate) with
// the tc, dscp and default_class edits, as portctl attach makes it.
func (pc PortConfig) qdiscConfig(p string) (qdisc.Config, error) {
	if pc.config != nil {
		return *pc.config, nil // validated by labfile
	}
	if pc.Dev == "" || len(pc.Dev) > 15 || strings.ContainsAny(pc.Dev, "/ ") {
		return qdisc.Config{}, conf.Errorf(conf.Join(p, "dev"), pc.Dev, "required: a device name of 1..15 characters")
	}
	var mode qdisc.QueueMode
	if err := mode.UnmarshalText([]byte(pc.Mode)); err != nil {
		return qdisc.Config{}, conf.Errorf(conf.Join(p, "mode"), pc.Mode, "must be virtual or veth")
	}
	if pc.Shape && mode != qdisc.QueueVirtual {
		return qdisc.Config{}, conf.Errorf(conf.Join(p, "shape"), true, "only with mode virtual (a veth port shapes at its rate already)")
	}
	if pc.Rate == 0 {
		return qdisc.Config{}, conf.Errorf(conf.Join(p, "rate"), "", "required: the port's rate, e.g. 10gbit")
	}
	cfg := qdisc.DefaultConfig(pc.Rate)
	edits, err := qdisc.ParseEdits(pc.TC, pc.DSCP, pc.DefaultClass)
	if err != nil {
		return cfg, conf.Errorf(p, "", "%v", err)
	}
	if err := edits.Apply(&cfg); err != nil {
		return cfg, conf.Errorf(p, "", "%v", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, conf.Errorf(p, "", "%v", err)
	}
	return cfg, nil
}

// perfKey is a flow's key for a perf setting where it is not the
// setting's own name (perf.Field).
var perfKey = map[perf.Field]string{
	perf.FieldKnobs: "dcqcn", perf.FieldProfile: "dcqcn", perf.FieldNSCCKnobs: "nscc", perf.FieldBaseRTT: "nscc",
}

func flowKey(f perf.Field) string {
	if k, ok := perfKey[f]; ok {
		return k
	}
	return string(f)
}

// clientConfig is the flow as a perf client run, validated by perf.
func (c *Config) clientConfig(p string, f FlowConfig) (perf.ClientConfig, error) {
	if f.client != nil {
		return *f.client, nil // planned and validated by labfile
	}
	var cc perf.ClientConfig
	switch f.Transport {
	case perf.TransportRoCEv2:
		cc = perf.DefaultClientConfig(f.Server)
	case perf.TransportUET:
		cc = perf.DefaultUETClientConfig(f.Server)
	default:
		return cc, conf.Errorf(conf.Join(p, "transport"), f.Transport, "must be rocev2 or uet")
	}
	if f.Server == "" {
		return cc, conf.Errorf(conf.Join(p, "server"), "", "required: HOST or HOST:PORT of a server")
	}
	if f.Start < 0 || f.Start > MaxFlowStart {
		return cc, conf.Errorf(conf.Join(p, "start"), f.Start, "must be 0..%v", MaxFlowStart)
	}
	if f.Pause < 0 || f.Pause > MaxFlowStart {
		return cc, conf.Errorf(conf.Join(p, "pause"), f.Pause, "must be 0..%v", MaxFlowStart)
	}
	if f.Pause != 0 && !f.Repeat {
		return cc, conf.Errorf(conf.Join(p, "pause"), f.Pause, "only with repeat: true")
	}
	if f.Size != 0 && f.Duration != 0 {
		return cc, conf.Errorf(conf.Join(p, "duration"), f.Duration, "not with size: a flow ends on one of them")
	}
	cc.Interval = 0
	cc.Bind = f.Bind
	isUET := f.Transport == perf.TransportUET
	switch {
	case isUET && f.QPs != 0:
		return cc, conf.Errorf(conf.Join(p, "qps"), f.QPs, "a uet flow has streams, not qps")
	case !isUET && f.Streams != 0:
		return cc, conf.Errorf(conf.Join(p, "streams"), f.Streams, "a rocev2 flow has qps, not streams")
	case f.QPs != 0:
		cc.QPs = f.QPs
	case f.Streams != 0:
		cc.QPs = f.Streams
	}
	if f.LineRate != 0 {
		cc.LineRate = f.LineRate
	}
	if f.Size != 0 {
		cc.Bytes = uint64(f.Size)
	}
	if f.Duration != 0 {
		cc.Duration = f.Duration
	}
	if f.MessageSize != 0 {
		if f.MessageSize > perf.MaxMessageBytes {
			return cc, conf.Errorf(conf.Join(p, "message_size"), f.MessageSize, "must be 1..%d bytes", perf.MaxMessageBytes)
		}
		cc.MessageBytes = int(f.MessageSize)
	}
	if f.MTU != 0 {
		cc.MTU = f.MTU
	}
	if f.DSCP != 0 {
		cc.DSCP = f.DSCP
	}
	if err := checkPPFC(p, f.Transport, f.PPFCSources, f.PPFCMaxPause, f.PPFCWatchdog); err != nil {
		return cc, err
	}
	cc.PPFCSources, cc.PPFCMaxPause, cc.PPFCWatchdog = perf.PPFCPrefixes(f.PPFCSources), f.PPFCMaxPause, time.Duration(f.PPFCWatchdog)
	switch {
	case isUET && f.DCQCN != "":
		return cc, conf.Errorf(conf.Join(p, "dcqcn"), f.DCQCN, "rocev2 only (uet flows take nscc)")
	case !isUET && f.NSCC != "":
		return cc, conf.Errorf(conf.Join(p, "nscc"), f.NSCC, "uet only (rocev2 flows take dcqcn)")
	case !isUET && f.LB != "":
		return cc, conf.Errorf(conf.Join(p, "lb"), f.LB, "uet only")
	case !isUET && f.RTO != 0:
		return cc, conf.Errorf(conf.Join(p, "rto"), f.RTO, "uet only (a rocev2 QP's timeout is its dcqcn profile's)")
	case !isUET && f.Loss != "":
		return cc, conf.Errorf(conf.Join(p, "loss"), f.Loss, "uet only")
	}
	if isUET {
		if f.CC != "" {
			m, err := pds.ParseCCMode(f.CC)
			if err != nil {
				return cc, conf.Errorf(conf.Join(p, "cc"), f.CC, "must be one of %s for uet", strings.Join(pds.CCModeNames(), ", "))
			}
			cc.UETCC = m
		}
		if f.LB != "" {
			k, err := lb.ParseKind(f.LB)
			if err != nil {
				return cc, conf.Errorf(conf.Join(p, "lb"), f.LB, "must be oblivious, bitmap, reps or mixed")
			}
			cc.LB = k
		}
		if f.Loss != "" {
			l, err := pds.ParseLossInference(f.Loss)
			if err != nil {
				return cc, conf.Errorf(conf.Join(p, "loss"), f.Loss, "must be one of %s", strings.Join(pds.LossInferenceNames(), ", "))
			}
			cc.Loss = l
		}
		cc.RTO = f.RTO // perf checks its range
		if f.NSCC != "" {
			pr, ok := c.Profiles.NSCC[f.NSCC]
			if !ok {
				return cc, conf.Errorf(conf.Join(p, "nscc"), f.NSCC, "no such profile under profiles.nscc (%s)", profileNames(c.Profiles.NSCC))
			}
			if pr.BaseRTT != 0 {
				cc.BaseRTT = pr.BaseRTT
			}
			cc.NSCCKnobs = labfile.SortedKnobs(pr.Knobs)
		}
	} else {
		switch f.CC {
		case "", "dcqcn":
			cc.CC = agent.CCDCQCN
		case "none":
			cc.CC = agent.CCNone
		default:
			return cc, conf.Errorf(conf.Join(p, "cc"), f.CC, "must be dcqcn or none for rocev2")
		}
		if f.DCQCN != "" {
			pr, ok := c.Profiles.DCQCN[f.DCQCN]
			if !ok {
				return cc, conf.Errorf(conf.Join(p, "dcqcn"), f.DCQCN, "no such profile under profiles.dcqcn (%s)", profileNames(c.Profiles.DCQCN))
			}
			if pr.Base != "" {
				cc.Profile = pr.Base
			}
			cc.Knobs = labfile.SortedKnobs(pr.Knobs)
		}
	}
	if err := cc.Validate(); err != nil {
		var ce *perf.ConfigError
		if !errors.As(err, &ce) {
			return cc, conf.Errorf(p, "", "%v", err)
		}
		// A rule across settings names the first; the rest are in the text.
		msg := ce.Reason()
		if len(ce.With) > 0 {
			with := make([]string, len(ce.With))
			for i, s := range ce.With {
				with[i] = flowKey(s.Field) + " " + s.Value
			}
			msg = "with " + strings.Join(with, " ") + ": " + msg
		}
		return cc, conf.Errorf(conf.Join(p, flowKey(ce.Field)), ce.Value, "%s", msg)
	}
	return cc, nil
}

// loadLab reads the lab file and takes this server's node of it.
func (c *Config) loadLab() error {
	if c.Lab.File == "" {
		return conf.Errorf("lab.file", "", "required: the lab file (fabriclab's YAML)")
	}
	if c.Lab.Node == "" {
		return conf.Errorf("lab.node", "", "required: this server's node in %s", c.Lab.File)
	}
	f, err := labfile.Load(c.Lab.File)
	if err != nil {
		return conf.Errorf("lab.file", c.Lab.File, "%v", err)
	}
	if v := c.Lab.Variant; v != "" && !slices.Contains(f.VariantNames(), v) {
		names := strings.Join(f.VariantNames(), ", ")
		if names == "" {
			names = "none"
		}
		return conf.Errorf("lab.variant", v, "not a variant of %s (variants: %s)", c.Lab.File, names)
	}
	d, err := f.DeployVariant(c.Lab.Node, c.Lab.Variant)
	if err != nil {
		var ce *conf.Error
		if c.Lab.Variant != "" && !(errors.As(err, &ce) && ce.Path == "node") {
			// The file as written planned (Load): the variant is why.
			return conf.Errorf("lab.variant", c.Lab.Variant, "node %s: %v", c.Lab.Node, err)
		}
		return conf.Errorf("lab.node", c.Lab.Node, "%v", err)
	}
	if c.Lab.Check != nil {
		if err := c.Lab.Check.validate(f, c.Lab.Node); err != nil {
			return err
		}
	}
	if b, err := os.ReadFile(c.Lab.File); err == nil {
		c.labSum = sha256.Sum256(b)
	}
	c.deploy, c.labFile = d, f
	return nil
}

// PEs are the tunnel PEs of the lab file's node.
func (c *Config) pes() []labfile.PEPlan {
	if c.deploy == nil {
		return nil
	}
	return c.deploy.PEs
}

func profileNames[T any](m map[string]T) string {
	if len(m) == 0 {
		return "none defined"
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
