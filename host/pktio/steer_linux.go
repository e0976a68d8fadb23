//go:build linux

package pktio

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
)

// QPN steering (bpf/reuseport.c): every RoCEConn of a network namespace
// binds UDP 4791 with SO_REUSEPORT; the group's sk_reuseport program hands
// each packet to the socket in the slot of rocev2_socks named by the BTH
// DestQP's top byte. A conn claims the first free slot (BPF_NOEXIST) and
// its agent numbers its QPs slot<<16 | n. The kernel empties a slot when
// its socket closes. A PPFC notification (seed 003), which names no QP,
// goes to the lowest occupied slot: of several agents on a host, only that
// one receives it.
//
// All conns of a namespace must share the maps. They are not pinned in
// bpffs: `ip netns exec` mounts a fresh /sys for each command, so a pin
// under /sys/fs/bpf made by one roceperf is invisible to the next one in
// the same namespace (and a bpffs mounted there is a private instance).
// Instead the creator records the namespace's cookie (SO_NETNS_COOKIE,
// never reused while the system runs) and the other maps' IDs in
// rocev2_owner, and a later conn finds it by walking the kernel's map IDs.
// The maps live exactly as long as some conn (or the attached program)
// holds them, so nothing can go stale. An abstract unix socket, itself
// per namespace and released when its process dies, serialises joins.

const (
	// steerVersion is the layout of the steering maps; a conn refuses to
	// join maps of another layout. 2: steer_stats.ppfc. 3: the PPFC
	// source filter (rocev2_ppfc_src, rocev2_ppfc_filter).
	steerVersion = 3
	// QPNSlotShift: a steered conn receives the QPNs slot<<QPNSlotShift
	// through slot<<QPNSlotShift | (1<<QPNSlotShift - 1).
	QPNSlotShift = 16
	// SteerSlots is the most steered conns (agents) of one namespace.
	SteerSlots = 1 << (24 - QPNSlotShift)
	// steerLockName is the abstract socket that serialises joins.
	steerLockName = "@fabriclab/rocev2/steer"
	steerLockWait = 10 * time.Second
)

// steerNeeds says what joining the steering takes, for errors.
const steerNeeds = "CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN (root) to load the steering program and find the namespace's steering maps"

// steering is one conn's part in its namespace's steering.
type steering struct {
	socks, stats, owner *ebpf.Map
	ppfcSrc, ppfcFilter *ebpf.Map
	prog                *ebpf.Program
	slot                uint32
}

// joinSteering attaches the namespace's steering program to the reuseport
// group of the UDP socket fd (bound with SO_REUSEPORT) and claims a slot
// for it. Precondition: the calling thread is in fd's network namespace.
func joinSteering(fd int) (_ *steering, err error) {
	unlock, err := lockSteering()
	if err != nil {
		return nil, err
	}
	defer unlock()
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return nil, fmt.Errorf("SO_NETNS_COOKIE (Linux 5.14 or later): %w", err)
	}
	s := &steering{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if err := s.find(cookie); err != nil {
		return nil, err
	}
	if s.owner != nil {
		// The maps' own program, if an earlier conn of this process
		// loaded it.
		s.prog = s.knownProgram(cookie)
	}
	if s.prog == nil {
		if err := s.load(cookie); err != nil {
			return nil, err
		}
	}
	// The group keeps one program, whichever conn attached it last: they
	// all use these maps.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, s.prog.FD()); err != nil {
		return nil, fmt.Errorf("SO_ATTACH_REUSEPORT_EBPF: %w", err)
	}
	for slot := range uint32(SteerSlots) {
		err := s.socks.Update(slot, uint64(fd), ebpf.UpdateNoExist)
		if err == nil {
			s.slot = slot
			// A killed agent that held the slot left its PPFC
			// sources: this conn takes them from any source until
			// its agent says otherwise.
			if err := s.setPPFCSources(nil); err != nil {
				return nil, err
			}
			return s, nil
		}
		if !errors.Is(err, ebpf.ErrKeyExist) {
			return nil, fmt.Errorf("claim steering slot %d: %w", slot, err)
		}
	}
	return nil, fmt.Errorf("all %d QPN blocks of this network namespace are taken (one per agent)", SteerSlots)
}

// load loads the steering program on the maps find found, or on new
// ones that it publishes as the namespace's.
func (s *steering) load(cookie uint64) error {
	found := s.owner != nil
	opts := bpf.LoadOptions()
	if found {
		opts.MapReplacements = map[string]*ebpf.Map{
			bpf.ReuseportMapRocev2Socks:      s.socks,
			bpf.ReuseportMapRocev2Stats:      s.stats,
			bpf.ReuseportMapRocev2Owner:      s.owner,
			bpf.ReuseportMapRocev2PpfcSrc:    s.ppfcSrc,
			bpf.ReuseportMapRocev2PpfcFilter: s.ppfcFilter,
		}
	}
	spec, err := bpf.LoadReuseport()
	if err != nil {
		return err
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, *opts)
	if err != nil {
		return fmt.Errorf("load the steering program: %w", err)
	}
	s.prog = coll.DetachProgram(bpf.ReuseportProgRocev2Steer)
	if !found {
		s.socks = coll.DetachMap(bpf.ReuseportMapRocev2Socks)
		s.stats = coll.DetachMap(bpf.ReuseportMapRocev2Stats)
		s.owner = coll.DetachMap(bpf.ReuseportMapRocev2Owner)
		s.ppfcSrc = coll.DetachMap(bpf.ReuseportMapRocev2PpfcSrc)
		s.ppfcFilter = coll.DetachMap(bpf.ReuseportMapRocev2PpfcFilter)
	}
	coll.Close()
	if !found {
		if err := s.publish(cookie); err != nil {
			return err
		}
	}
	rememberProgram(cookie, s.owner, s.prog)
	return nil
}

// lockSteering binds the namespace's abstract lock socket, waiting while
// another conn holds it.
func lockSteering() (unlock func(), err error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("steering lock: %w", err)
	}
	deadline := time.Now().Add(steerLockWait)
	for {
		err := unix.Bind(fd, &unix.SockaddrUnix{Name: steerLockName})
		if err == nil {
			return func() { unix.Close(fd) }, nil
		}
		if !errors.Is(err, unix.EADDRINUSE) || time.Now().After(deadline) {
			unix.Close(fd)
			return nil, fmt.Errorf("steering lock %s: %w", steerLockName, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// steerOwners remembers, per namespace cookie, the ID of the owner map
// this process last found or made there: a later conn of the process
// looks at that map first. Walking every map of the kernel (a lab's ports
// hold hundreds), each read through its fdinfo, took half the CPU of a lab
// that set up hundreds of flows. An ID only names: the map it resolves to
// is checked as a walk's would be, and a freed one sends the conn back to
// the walk.
var steerOwners struct {
	sync.Mutex
	ids map[uint64]steerIDs
}

// steerIDs are a namespace's owner map and steering program, as this
// process last found or made them (0: not known).
type steerIDs struct {
	owner ebpf.MapID
	prog  ebpf.ProgramID
}

// find looks for the steering maps of the namespace with this cookie
// among the kernel's maps, and keeps them if found.
func (s *steering) find(cookie uint64) error {
	steerOwners.Lock()
	known, ok := steerOwners.ids[cookie]
	steerOwners.Unlock()
	if ok && known.owner != 0 {
		if m, err := ebpf.NewMapFromID(known.owner); err == nil {
			if found, err := s.adopt(m, cookie); found || err != nil {
				return err
			}
		}
	}
	var id ebpf.MapID
	for {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("walk the kernel's BPF maps: %w", err)
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue // freed meanwhile
		}
		if found, err := s.adopt(m, cookie); found || err != nil {
			return err
		}
	}
}

// adopt keeps m and the maps it names if m is the owner map of the
// namespace with this cookie and they are all there; else it closes m.
func (s *steering) adopt(m *ebpf.Map, cookie uint64) (found bool, err error) {
	info, err := m.Info()
	if err != nil || info.Name != bpf.ReuseportMapRocev2Owner || info.Type != ebpf.Array {
		m.Close()
		return false, nil
	}
	var o bpf.ReuseportSteerOwner
	if err := m.Lookup(uint32(0), &o); err != nil || o.NetnsCookie != cookie {
		m.Close()
		return false, nil
	}
	if o.Version != steerVersion {
		m.Close()
		return false, fmt.Errorf("the agents of this network namespace steer with layout %d, this one with %d: stop them first", o.Version, steerVersion)
	}
	socks, err1 := ebpf.NewMapFromID(ebpf.MapID(o.SocksId))
	stats, err2 := ebpf.NewMapFromID(ebpf.MapID(o.StatsId))
	src, err3 := ebpf.NewMapFromID(ebpf.MapID(o.PpfcSrcId))
	filter, err4 := ebpf.NewMapFromID(ebpf.MapID(o.PpfcFilterId))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		// Their last holder is gone: the namespace has no agent left.
		for _, x := range []*ebpf.Map{m, socks, stats, src, filter} {
			if x != nil {
				x.Close()
			}
		}
		return false, nil
	}
	s.owner, s.socks, s.stats, s.ppfcSrc, s.ppfcFilter = m, socks, stats, src, filter
	rememberOwner(cookie, m)
	return true, nil
}

// rememberOwner records owner as the namespace's owner map (steerOwners).
func rememberOwner(cookie uint64, owner *ebpf.Map) {
	id, err := mapID(owner)
	if err != nil {
		return
	}
	steerOwners.Lock()
	defer steerOwners.Unlock()
	if steerOwners.ids == nil {
		steerOwners.ids = make(map[uint64]steerIDs)
	}
	if steerOwners.ids[cookie].owner != id {
		steerOwners.ids[cookie] = steerIDs{owner: id}
	}
}

// rememberProgram records prog as the steering program of the namespace
// whose owner map is owner (steerOwners).
func rememberProgram(cookie uint64, owner *ebpf.Map, prog *ebpf.Program) {
	oid, err := mapID(owner)
	if err != nil {
		return
	}
	info, err := prog.Info()
	if err != nil {
		return
	}
	pid, ok := info.ID()
	if !ok {
		return
	}
	steerOwners.Lock()
	defer steerOwners.Unlock()
	if steerOwners.ids == nil {
		steerOwners.ids = make(map[uint64]steerIDs)
	}
	steerOwners.ids[cookie] = steerIDs{owner: oid, prog: pid}
}

// knownProgram is the namespace's steering program this process loaded
// before, if it is still there and steers to s.socks; else nil. Loading
// the program again for every conn (the verifier) was a quarter of the
// CPU of a lab that set up hundreds of flows.
func (s *steering) knownProgram(cookie uint64) *ebpf.Program {
	steerOwners.Lock()
	known := steerOwners.ids[cookie]
	steerOwners.Unlock()
	oid, err1 := mapID(s.owner)
	sid, err2 := mapID(s.socks)
	if known.prog == 0 || err1 != nil || err2 != nil || known.owner != oid {
		return nil
	}
	p, err := ebpf.NewProgramFromID(known.prog)
	if err != nil {
		return nil
	}
	info, err := p.Info()
	if err == nil && info.Name == bpf.ReuseportProgRocev2Steer {
		if ids, ok := info.MapIDs(); ok && slices.Contains(ids, sid) {
			return p
		}
	}
	p.Close()
	return nil
}

// mapID is m's kernel ID.
func mapID(m *ebpf.Map) (ebpf.MapID, error) {
	info, err := m.Info()
	if err != nil {
		return 0, err
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("no map ID")
	}
	return id, nil
}

// publish records the namespace and the map IDs in the owner map.
func (s *steering) publish(cookie uint64) error {
	id := func(m *ebpf.Map) (uint32, error) {
		mid, err := mapID(m)
		return uint32(mid), err
	}
	socksID, err1 := id(s.socks)
	statsID, err2 := id(s.stats)
	srcID, err3 := id(s.ppfcSrc)
	filterID, err4 := id(s.ppfcFilter)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return fmt.Errorf("steering map IDs: %w", err)
	}
	o := bpf.ReuseportSteerOwner{NetnsCookie: cookie, SocksId: socksID, StatsId: statsID, Version: steerVersion,
		PpfcSrcId: srcID, PpfcFilterId: filterID}
	if err := s.owner.Put(uint32(0), &o); err != nil {
		return fmt.Errorf("steering owner: %w", err)
	}
	return nil
}

// qpnBlock is the slot's QPNs.
func (s *steering) qpnBlock() (first, last uint32) {
	first = s.slot << QPNSlotShift
	return first, first | (1<<QPNSlotShift - 1)
}

func (s *steering) readStats() (SteeringStats, error) {
	var st SteeringStats
	if err := bpf.SumPerCPU[bpf.ReuseportSteerStats](s.stats, 0, &st); err != nil {
		return SteeringStats{}, fmt.Errorf("pktio: steering stats: %w", err)
	}
	return st, nil
}

// maxPPFCSourceBits is a source key's length: the slot's byte, then the
// address as IPv6 (IPv4 mapped).
const maxPPFCSourceBits = 8 + 128

// ppfcSourceKey is prefix p of the agent in slot, as rocev2_ppfc_src
// keys it.
func ppfcSourceKey(slot uint32, p netip.Prefix) bpf.ReuseportPpfcSrcKey {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return bpf.ReuseportPpfcSrcKey{Prefixlen: uint32(8 + bits), Slot: uint8(slot), Addr: netip.AddrFrom16(p.Masked().Addr().As16()).As16()}
}

// setPPFCSources replaces the slot's PPFC sources: with none, its agent
// takes PPFC notifications from any source. Only the slot's owner writes
// its keys.
func (s *steering) setPPFCSources(prefixes []netip.Prefix) error {
	var stale []bpf.ReuseportPpfcSrcKey
	var k bpf.ReuseportPpfcSrcKey
	var v uint8
	for it := s.ppfcSrc.Iterate(); it.Next(&k, &v); {
		if uint32(k.Slot) == s.slot {
			stale = append(stale, k)
		}
	}
	off := uint32(0)
	if err := s.ppfcFilter.Put(s.slot, off); err != nil {
		return fmt.Errorf("PPFC source filter: %w", err)
	}
	for _, k := range stale {
		if err := s.ppfcSrc.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("PPFC sources: remove %v: %w", k, err)
		}
	}
	if len(prefixes) == 0 {
		return nil
	}
	for _, p := range prefixes {
		if !p.IsValid() {
			return fmt.Errorf("PPFC sources: invalid prefix %v", p)
		}
		k := ppfcSourceKey(s.slot, p)
		if err := s.ppfcSrc.Put(&k, uint8(1)); err != nil {
			return fmt.Errorf("PPFC sources: add %v (the namespace's agents hold at most %d prefixes): %w", p, s.ppfcSrc.MaxEntries(), err)
		}
	}
	on := uint32(1)
	if err := s.ppfcFilter.Put(s.slot, on); err != nil {
		return fmt.Errorf("PPFC source filter: %w", err)
	}
	return nil
}

// close releases this conn's references; its slot empties when its socket
// closes.
func (s *steering) close() {
	if s == nil {
		return
	}
	for _, m := range []*ebpf.Map{s.socks, s.stats, s.owner, s.ppfcSrc, s.ppfcFilter} {
		if m != nil {
			m.Close()
		}
	}
	if s.prog != nil {
		s.prog.Close()
	}
}
