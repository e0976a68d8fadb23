package tunnel

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// OuterHeaderBytes is what encapsulation adds: an IPv4 header without
// options. The inner MTU is the device's less this.
const OuterHeaderBytes = 20

// Route sends traffic to Prefix through the tunnel to the egress PE Remote.
type Route struct {
	Prefix netip.Prefix `json:"prefix"`
	Remote netip.Addr   `json:"remote"`
}

// Config is one PE on one device: the routes it encapsulates on egress and
// the peers whose tunnel packets it decapsulates on ingress.
type Config struct {
	// Local is this PE's address: the outer source of what it
	// encapsulates, and the outer destination it decapsulates.
	Local  netip.Addr `json:"local"`
	Routes []Route    `json:"routes"`
	// Peers are further PEs whose packets are decapsulated; every route's
	// Remote is one already. A tunnel packet from anyone else is counted
	// as spoofed and dropped.
	Peers []netip.Addr `json:"peers,omitempty"`
	ECN   EncapMode    `json:"ecn"`
	// TwoThreshold: decapsulation keeps an outer ECT(1) (light congestion,
	// seed 001) out of the inner header.
	TwoThreshold bool `json:"two_threshold,omitempty"`
	// TTL of the outer header: 1 to 255. 0 means DefaultTTL.
	TTL uint8 `json:"ttl,omitempty"`
	// MTU of the device: an outer packet may not exceed it. 0 means the
	// device's MTU, read at attach.
	MTU int `json:"mtu,omitempty"`
	// LogInterval is the least time between two reports of the same
	// unused decapsulation cell. 0 means DefaultLogInterval.
	LogInterval time.Duration `json:"log_interval,omitempty"`
	// HeavyHold is how long after a heavy-congestion CNP from a WAN port
	// the PE marks CE in the inner header of ECN-capable packets into
	// that tunnel (seed 001, T2), so the receivers' NPs answer the
	// senders. 0 means DefaultHeavyHold; a negative value turns it off.
	HeavyHold time.Duration `json:"heavy_hold,omitempty"`
}

const (
	DefaultTTL         = 64
	DefaultLogInterval = time.Second
	// DefaultHeavyHold is the lab DCQCN profile's CNP interval N (1 ms):
	// a receiver NP answers one marked packet per QP per N.
	DefaultHeavyHold = time.Millisecond
	// MaxHeavyHold bounds HeavyHold.
	MaxHeavyHold = time.Second
	// MinMTU: an outer header and the 68 bytes every IPv4 link carries
	// (RFC 791).
	MinMTU = 68 + OuterHeaderBytes
	MaxMTU = 65535
	// MaxRoutes and MaxPeers are the maps' sizes in bpf/tunnel.c.
	MaxRoutes = 1024
	MaxPeers  = 256
)

// withDefaults fills the zero fields that have defaults.
func (c Config) withDefaults() Config {
	c.TTL = cmp.Or(c.TTL, DefaultTTL)
	c.LogInterval = cmp.Or(c.LogInterval, DefaultLogInterval)
	c.HeavyHold = cmp.Or(c.HeavyHold, DefaultHeavyHold)
	return c
}

// Validate checks the configuration; errors name the field, the value and
// what is allowed.
func (c *Config) Validate() error {
	if !c.Local.Is4() || !c.Local.IsGlobalUnicast() && !c.Local.IsPrivate() {
		return fmt.Errorf("local (%v): want a unicast IPv4 address", c.Local)
	}
	if len(c.Routes) == 0 {
		return fmt.Errorf("routes: want at least one prefix to tunnel")
	}
	if len(c.Routes) > MaxRoutes {
		return fmt.Errorf("routes (%d of them): at most %d", len(c.Routes), MaxRoutes)
	}
	seen := map[netip.Prefix]bool{}
	for i, r := range c.Routes {
		if !r.Prefix.IsValid() || !r.Prefix.Addr().Is4() {
			return fmt.Errorf("routes[%d].prefix (%v): want an IPv4 prefix such as 198.19.2.0/24", i, r.Prefix)
		}
		if r.Prefix != r.Prefix.Masked() {
			return fmt.Errorf("routes[%d].prefix (%v): host bits set; want %v", i, r.Prefix, r.Prefix.Masked())
		}
		if seen[r.Prefix] {
			return fmt.Errorf("routes[%d].prefix (%v): listed twice", i, r.Prefix)
		}
		seen[r.Prefix] = true
		if !r.Remote.Is4() || !r.Remote.IsGlobalUnicast() && !r.Remote.IsPrivate() {
			return fmt.Errorf("routes[%d].remote (%v): want the egress PE's unicast IPv4 address", i, r.Remote)
		}
		if r.Remote == c.Local {
			return fmt.Errorf("routes[%d].remote (%v): is local; want another PE", i, r.Remote)
		}
		if r.Prefix.Contains(r.Remote) {
			return fmt.Errorf("routes[%d].remote (%v): inside the prefix it tunnels (%v), which would tunnel the tunnel", i, r.Remote, r.Prefix)
		}
	}
	for i, p := range c.Peers {
		if !p.Is4() || !p.IsGlobalUnicast() && !p.IsPrivate() {
			return fmt.Errorf("peers[%d] (%v): want a unicast IPv4 address", i, p)
		}
	}
	if n := len(c.peers()); n > MaxPeers {
		return fmt.Errorf("peers (%d with the routes' remotes): at most %d", n, MaxPeers)
	}
	if c.ECN != Normal && c.ECN != Compat {
		return fmt.Errorf("ecn (%v): want normal or compat", c.ECN)
	}
	if c.MTU != 0 && (c.MTU < MinMTU || c.MTU > MaxMTU) {
		return fmt.Errorf("mtu (%d): want %d to %d, or 0 for the device's", c.MTU, MinMTU, MaxMTU)
	}
	if c.LogInterval < 0 {
		return fmt.Errorf("log_interval (%v): want 0 (the default, %v) or more", c.LogInterval, DefaultLogInterval)
	}
	if c.HeavyHold > MaxHeavyHold {
		return fmt.Errorf("heavy_hold (%v): want at most %v (0: the default, %v; negative: off)", c.HeavyHold, MaxHeavyHold, DefaultHeavyHold)
	}
	return nil
}

// peers are the addresses whose tunnel packets are decapsulated.
func (c *Config) peers() []netip.Addr {
	var out []netip.Addr
	for _, r := range c.Routes {
		out = append(out, r.Remote)
	}
	out = append(out, c.Peers...)
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}
