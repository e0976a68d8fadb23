// Package pinning keeps an attached object's eBPF maps and links pinned
// in bpffs and its JSON record beside them, so that later commands
// (stats, configure, detach) find it after the attaching process has
// exited: the one home of what the port (qdisc) and the tunnel PE
// (qdisc/tunnel) share.
package pinning

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

// Root is where objects pin their maps and links, a directory each.
const Root = "/sys/fs/bpf/fabriclab"

// Dir is where an object (prefix "ns": a port; "tunnel_ns": a PE) on dev
// in namespace ns keeps its pins: named after the namespace's inode and
// the device, unique while the namespace lives.
func Dir(ns netns.NsHandle, prefix, dev string) string {
	id := "self"
	if ino, err := nsexec.Ino(ns); err == nil {
		id = fmt.Sprint(ino)
	}
	return filepath.Join(Root, prefix+id+"_"+dev)
}

// RecordPath is the JSON record, under root, of the object pinned in dir.
func RecordPath(root, dir string) string {
	return filepath.Join(root, filepath.Base(dir)+".json")
}

// ReadRecord reads the record of the object pinned in dir into v. The
// error of an absent record is os.ErrNotExist's; a bad one names its path.
func ReadRecord(root, dir string, v any) error {
	path := RecordPath(root, dir)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("record %s: %w", path, err)
	}
	return nil
}

// WriteRecord writes v as the record of the object pinned in dir,
// atomically (a reader sees the old record or the new one).
func WriteRecord(root, dir string, v any) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	path := RecordPath(root, dir)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Remove removes an object's pins and record, and nothing else.
func Remove(root, dir string) error {
	err := os.Remove(RecordPath(root, dir))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return errors.Join(os.RemoveAll(dir), err)
}

// Pin pins maps by name and links as link0, link1, … in dir, then writes
// record under root: what Load and LoadLinks find again.
func Pin(root, dir string, maps map[string]*ebpf.Map, links []link.Link, record any) error {
	if err := EnsureBPFFS(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pin: %w", err)
	}
	for name, m := range maps {
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("pin map %s: %w", name, err)
		}
	}
	for i, l := range links {
		if err := l.Pin(filepath.Join(dir, fmt.Sprintf("link%d", i))); err != nil {
			return fmt.Errorf("pin link: %w", err)
		}
	}
	return WriteRecord(root, dir, record)
}

// LoadMap opens the map pinned as name in dir.
func LoadMap(dir, name string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
	if err != nil {
		return nil, fmt.Errorf("open pinned map %s: %w", name, err)
	}
	return m, nil
}

// LoadMaps opens the maps pinned in dir into their destinations, by name
// (Pin's maps, read back). On an error the maps opened so far stay in
// theirs, for the caller to close.
func LoadMaps(dir string, dsts map[string]**ebpf.Map) error {
	for name, dst := range dsts {
		m, err := LoadMap(dir, name)
		if err != nil {
			return err
		}
		*dst = m
	}
	return nil
}

// LoadLinks opens the links pinned in dir, in their order.
func LoadLinks(dir string) ([]link.Link, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var links []link.Link
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "link") {
			l, err := link.LoadPinnedLink(filepath.Join(dir, e.Name()), nil)
			if err != nil {
				for _, l := range links {
					_ = l.Close()
				}
				return nil, fmt.Errorf("open pinned link %s: %w", e.Name(), err)
			}
			links = append(links, l)
		}
	}
	return links, nil
}

// Orphaned reports whether pinned TCX links are attached to no device any
// more (theirs went away, alone or with its namespace): what makes a pinned
// record stale. No links, or one that is not TCX or cannot be read: false.
func Orphaned(links []link.Link) bool {
	if len(links) == 0 {
		return false
	}
	for _, l := range links {
		info, err := l.Info()
		if err != nil {
			return false
		}
		if t := info.TCX(); t == nil || t.Ifindex != 0 {
			return false
		}
	}
	return true
}

// OrphanedProg is Orphaned for an object whose links are not all on its
// own device (a port's PPFC links on the other devices of its namespace,
// its tracing links): whether the TCX links running the program named
// prog (the one on the object's device) are attached to no device any
// more. None running prog, or one that cannot be read: false.
func OrphanedProg(links []link.Link, prog string) bool {
	found := false
	for _, l := range links {
		info, err := l.Info()
		if err != nil {
			return false
		}
		t := info.TCX()
		if t == nil {
			continue
		}
		p, err := ebpf.NewProgramFromID(info.Program)
		if err != nil {
			return false
		}
		pi, err := p.Info()
		p.Close()
		if err != nil {
			return false
		}
		if pi.Name != prog {
			continue
		}
		if t.Ifindex != 0 {
			return false
		}
		found = true
	}
	return found
}

// SweepOrphaned removes the objects pinned under pinRoot, in directories
// named prefix…, whose links orphaned reports orphaned (Orphaned,
// OrphanedProg): their device went away, alone or with its namespace,
// while they were attached, and the process that owned them did not live
// to detach them. Their record under metaRoot goes with them. It returns
// the directories it removed. A directory whose links cannot be read, or
// that has none (an attach that is still pinning), is left alone: never
// guess towards deletion.
func SweepOrphaned(pinRoot, metaRoot, prefix string, orphaned func([]link.Link) bool) ([]string, error) {
	entries, err := os.ReadDir(pinRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var swept []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		dir := filepath.Join(pinRoot, e.Name())
		links, err := LoadLinks(dir)
		if err != nil {
			continue
		}
		gone := orphaned(links)
		for _, l := range links {
			_ = l.Close()
		}
		if !gone {
			continue
		}
		if err := Remove(metaRoot, dir); err != nil {
			errs = append(errs, fmt.Errorf("sweep %s: %w", dir, err))
			continue
		}
		swept = append(swept, dir)
	}
	return swept, errors.Join(errs...)
}

// ErrPrivateBPFFS: this process has a mount namespace of its own whose
// /sys hides the system's bpffs, so whatever it pinned would be seen by no
// other process.
var ErrPrivateBPFFS = errors.New("/sys/fs/bpf here is not the system's bpffs: this process has a mount namespace " +
	"of its own with a fresh /sys (ip netns exec makes one), so a port pinned here would be invisible to portctl " +
	"and fabriclabd; run it in the host's mount namespace: portctl --netns NAME, or nsenter --net=/run/netns/NAME")

// EnsureBPFFS mounts bpffs on /sys/fs/bpf if nothing is mounted there. It
// refuses where that bpffs would be private (ErrPrivateBPFFS).
func EnsureBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/bpf", &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if privateSys() {
		return ErrPrivateBPFFS
	}
	if err := os.MkdirAll("/sys/fs/bpf", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("bpffs", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs on /sys/fs/bpf: %w", err)
	}
	return nil
}

// privateSys reports whether this process is in another mount namespace
// than its parent or PID 1, which sees a bpffs on /sys/fs/bpf that this one
// does not: what ip netns exec leaves (the parent is its caller). PID 1
// may be unreadable (a sandbox); the parent is the one ip netns exec ran in.
func privateSys() bool {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false
	}
	for _, pid := range []int{os.Getppid(), 1} {
		other, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err != nil || other == self {
			continue
		}
		var st unix.Statfs_t
		if unix.Statfs(fmt.Sprintf("/proc/%d/root/sys/fs/bpf", pid), &st) == nil && st.Type == unix.BPF_FS_MAGIC {
			return true
		}
	}
	return false
}
