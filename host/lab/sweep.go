//go:build linux

package lab

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

// LiveNamespaces lists the named namespaces whose name starts with prefix,
// sorted. A missing netns directory means there are none.
func LiveNamespaces(prefix string) ([]string, error) {
	entries, err := os.ReadDir(NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// staleName matches the names Build creates: fl-<pid>-<4 hex>-<node>.
var staleName = regexp.MustCompile(`^` + regexp.QuoteMeta(NamePrefix) + `([0-9]+)-[0-9a-f]{4}-.`)

// SweepStale deletes namespaces left by earlier processes (crash, SIGKILL,
// `go test -timeout`), killing what still runs inside them, then the pins
// and records of ports and tunnel PEs whose device went away with such a
// namespace (qdisc.SweepStale, tunnel.SweepStale). It returns the names of
// the namespaces, then the pin directories, it removed. A namespace is
// stale only when the pid in its name no longer exists; a reused pid merely
// postpones the sweep, which errs on the side of never deleting a live lab.
// Build calls it.
func SweepStale() ([]string, error) {
	names, err := LiveNamespaces(NamePrefix)
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var swept []string
	var errs []error
	for _, name := range names {
		m := staleName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 || pid == self || pidAlive(pid) {
			continue
		}
		// What the dead owner started inside (a daemon, a traffic tool)
		// outlives it when it died by a signal it could not catch.
		if h, err := netns.GetFromPath(NetnsDir + "/" + name); err == nil {
			err = killNetnsProcs(h)
			h.Close()
			if err != nil {
				errs = append(errs, fmt.Errorf("lab: sweep %s: %w", name, err))
				continue
			}
		}
		if err := deleteNamed(name); err != nil {
			errs = append(errs, fmt.Errorf("lab: sweep %s: %w", name, err))
			continue
		}
		swept = append(swept, name)
	}
	for _, sweep := range []func() ([]string, error){qdisc.SweepStale, tunnel.SweepStale} {
		dirs, err := sweep()
		swept = append(swept, dirs...)
		if err != nil {
			errs = append(errs, fmt.Errorf("lab: %w", err))
		}
	}
	return swept, errors.Join(errs...)
}

func pidAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	// Anything but "does not exist" counts as alive: never guess towards deletion.
	return !errors.Is(err, os.ErrNotExist)
}
