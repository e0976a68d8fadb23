//go:build linux

// Package ethfeat reads and sets a network device's features, what
// `ethtool -k` shows and `ethtool -K` changes (tso, gso, gro, ...), by the
// SIOCETHTOOL ioctls of uapi/linux/ethtool.h, in the calling thread's
// network namespace.
//
// It replaces github.com/safchain/ethtool (v0.7.0), which hands the kernel
// the address of a struct on the goroutine's stack as a uintptr inside its
// ifreq: when the stack grows before the ioctl, the kernel writes into the
// old stack and the call sees zeros. A lab's link setup failed with
// `unsupported feature "tx-tcp-segmentation"` (1 of 15 runs of an
// all-to-all), and a read could as well report no feature at all. Here
// the ifreq holds an unsafe.Pointer to a heap buffer.
package ethfeat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// uapi/linux/ethtool.h and sockios.h.
const (
	siocEthtool     = 0x8946
	cmdGStrings     = 0x1b // ETHTOOL_GSTRINGS
	cmdGSSetInfo    = 0x37 // ETHTOOL_GSSET_INFO
	cmdGFeatures    = 0x3a // ETHTOOL_GFEATURES
	cmdSFeatures    = 0x3b // ETHTOOL_SFEATURES
	ssFeatures      = 4    // ETH_SS_FEATURES
	gstringLen      = 32   // ETH_GSTRING_LEN
	maxFeatures     = 1024 // far above the kernel's NETDEV_FEATURE_COUNT
	getBlockBytes   = 16   // ethtool_get_features_block: available, requested, active, never_changed
	setBlockBytes   = 8    // ethtool_set_features_block: valid, requested
	featuresPerWord = 32
)

// State is one feature's state, ethtool_get_features_block's bits.
type State struct {
	// Available: the device lets it be changed.
	Available bool
	// Requested: asked for by the user; Active: in effect.
	Requested, Active bool
	// NeverChanged: the device cannot change it (ethtool's [fixed]).
	NeverChanged bool
}

// ifreq is struct ifreq with ifr_data: a pointer the garbage collector
// and the stack copier know.
type ifreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte // the union's size
}

// ioctl runs one SIOCETHTOOL command on dev, its buffer buf (the command
// word first).
func ioctl(fd int, dev string, buf []uint64) error {
	if len(dev) >= unix.IFNAMSIZ {
		return fmt.Errorf("ethfeat: device name %q: longer than %d bytes", dev, unix.IFNAMSIZ-1)
	}
	ifr := &ifreq{data: unsafe.Pointer(&buf[0])}
	copy(ifr.name[:], dev)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), siocEthtool, uintptr(unsafe.Pointer(ifr)))
	if errno != 0 {
		return errno
	}
	return nil
}

// bytesOf views buf as bytes (host order, as the kernel writes them).
func bytesOf(buf []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
}

// words returns a zeroed buffer of at least n bytes.
func words(n int) []uint64 { return make([]uint64, (n+7)/8) }

var ne = binary.NativeEndian

// open opens the ioctls' socket in the calling thread's namespace and
// reads dev's feature names; the caller closes fd.
func open(dev string) (fd int, nm []string, err error) {
	fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("ethfeat: socket: %w", err)
	}
	if nm, err = names(fd, dev); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, nm, nil
}

// names returns the features' names in their bit order.
func names(fd int, dev string) ([]string, error) {
	// ethtool_sset_info: cmd, reserved, sset_mask (u64), data[1].
	info := words(8 + 8 + 4)
	b := bytesOf(info)
	ne.PutUint32(b[0:], cmdGSSetInfo)
	ne.PutUint64(b[8:], 1<<ssFeatures)
	if err := ioctl(fd, dev, info); err != nil {
		return nil, fmt.Errorf("ethfeat: %s: ETHTOOL_GSSET_INFO: %w", dev, err)
	}
	if ne.Uint64(b[8:]) == 0 {
		return nil, fmt.Errorf("ethfeat: %s: the kernel has no feature names", dev)
	}
	n := int(ne.Uint32(b[16:]))
	if n <= 0 || n > maxFeatures {
		return nil, fmt.Errorf("ethfeat: %s: %d feature names: want 1..%d", dev, n, maxFeatures)
	}
	// ethtool_gstrings: cmd, string_set, len, data[len × 32].
	gs := words(12 + n*gstringLen)
	b = bytesOf(gs)
	ne.PutUint32(b[0:], cmdGStrings)
	ne.PutUint32(b[4:], ssFeatures)
	ne.PutUint32(b[8:], uint32(n))
	if err := ioctl(fd, dev, gs); err != nil {
		return nil, fmt.Errorf("ethfeat: %s: ETHTOOL_GSTRINGS: %w", dev, err)
	}
	if got := int(ne.Uint32(b[8:])); got != n {
		return nil, fmt.Errorf("ethfeat: %s: %d feature names, then %d", dev, n, got)
	}
	out := make([]string, n)
	for i := range out {
		s := b[12+i*gstringLen : 12+(i+1)*gstringLen]
		for j, c := range s {
			if c == 0 {
				s = s[:j]
				break
			}
		}
		out[i] = string(s)
	}
	return out, nil
}

// Get returns dev's features by name (in the calling thread's network
// namespace).
func Get(dev string) (map[string]State, error) {
	fd, nm, err := open(dev)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return get(fd, dev, nm)
}

func get(fd int, dev string, nm []string) (map[string]State, error) {
	blocks := (len(nm) + featuresPerWord - 1) / featuresPerWord
	// ethtool_gfeatures: cmd, size, features[size].
	g := words(8 + blocks*getBlockBytes)
	b := bytesOf(g)
	ne.PutUint32(b[0:], cmdGFeatures)
	ne.PutUint32(b[4:], uint32(blocks))
	if err := ioctl(fd, dev, g); err != nil {
		return nil, fmt.Errorf("ethfeat: %s: ETHTOOL_GFEATURES: %w", dev, err)
	}
	out := make(map[string]State, len(nm))
	for i, name := range nm {
		if name == "" {
			continue
		}
		blk := b[8+(i/featuresPerWord)*getBlockBytes:]
		bit := uint32(1) << (i % featuresPerWord)
		out[name] = State{
			Available:    ne.Uint32(blk[0:])&bit != 0,
			Requested:    ne.Uint32(blk[4:])&bit != 0,
			Active:       ne.Uint32(blk[8:])&bit != 0,
			NeverChanged: ne.Uint32(blk[12:])&bit != 0,
		}
	}
	return out, nil
}

// ErrUnknown is the error for a feature name dev does not have.
var ErrUnknown = errors.New("no such feature")

// Set turns dev's features in want on or off (ethtool -K) and returns
// their states after; a feature the device cannot change keeps its state
// (compare). A name dev does not have is an error wrapping ErrUnknown,
// and nothing is changed.
func Set(dev string, want map[string]bool) (map[string]State, error) {
	fd, nm, err := open(dev)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	index := make(map[string]int, len(nm))
	for i, n := range nm {
		index[n] = i
	}
	blocks := (len(nm) + featuresPerWord - 1) / featuresPerWord
	// ethtool_sfeatures: cmd, size, features[size] of valid, requested.
	s := words(8 + blocks*setBlockBytes)
	b := bytesOf(s)
	ne.PutUint32(b[0:], cmdSFeatures)
	ne.PutUint32(b[4:], uint32(blocks))
	for name, on := range want {
		i, ok := index[name]
		if !ok || name == "" {
			return nil, fmt.Errorf("ethfeat: %s: %q: %w", dev, name, ErrUnknown)
		}
		blk := b[8+(i/featuresPerWord)*setBlockBytes:]
		bit := uint32(1) << (i % featuresPerWord)
		ne.PutUint32(blk[0:], ne.Uint32(blk[0:])|bit)
		if on {
			ne.PutUint32(blk[4:], ne.Uint32(blk[4:])|bit)
		}
	}
	// A positive return (ETHTOOL_F_WISH, ...) says some wish was not
	// met: the states read after show which.
	if err := ioctl(fd, dev, s); err != nil {
		return nil, fmt.Errorf("ethfeat: %s: ETHTOOL_SFEATURES: %w", dev, err)
	}
	return get(fd, dev, nm)
}
