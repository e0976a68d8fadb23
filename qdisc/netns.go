package qdisc

import (
	"fmt"

	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

// openNetns opens a namespace by name or path ("": the caller's).
func openNetns(nameOrPath string) (netns.NsHandle, error) { return nsexec.Open(nameOrPath) }

// dupNetns gives the port its own handle, so the caller may close theirs.
func dupNetns(h netns.NsHandle) (netns.NsHandle, error) {
	if !h.IsOpen() {
		return netns.None(), nil
	}
	return netns.GetFromPath(fmt.Sprintf("/proc/self/fd/%d", int(h)))
}
