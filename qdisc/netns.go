package qdisc

import (
	"fmt"

	"github.com/vishvananda/netns"
)

// openNetns opens a namespace by name (under /var/run/netns) or path; ""
// means the caller's namespace and yields a closed handle.
func openNetns(nameOrPath string) (netns.NsHandle, error) {
	if nameOrPath == "" {
		return netns.None(), nil
	}
	var h netns.NsHandle
	var err error
	if nameOrPath[0] == '/' {
		h, err = netns.GetFromPath(nameOrPath)
	} else {
		h, err = netns.GetFromName(nameOrPath)
	}
	if err != nil {
		return netns.None(), fmt.Errorf("netns %q: %w", nameOrPath, err)
	}
	return h, nil
}

// dupNetns gives the port its own handle, so the caller may close theirs.
func dupNetns(h netns.NsHandle) (netns.NsHandle, error) {
	if !h.IsOpen() {
		return netns.None(), nil
	}
	return netns.GetFromPath(fmt.Sprintf("/proc/self/fd/%d", int(h)))
}
