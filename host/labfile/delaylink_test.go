//go:build linux

package labfile

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// runIDHandler hands the run ID of the "lab built" record to found.
type runIDHandler struct {
	slog.Handler
	found func(string)
}

func (h runIDHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h runIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "lab built" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "run" {
				h.found(a.Value.String())
			}
			return true
		})
	}
	return nil
}

// TestRunDelayLinkBroken (issue 28, fault 6): a relay's delay link whose
// TUN is deleted mid-run fails the run clearly: Run's error wraps
// ErrLinkBroken and names the link, its result carries the error and
// counts what it lost, and the lab is torn down as after any run.
func TestRunDelayLinkBroken(t *testing.T) {
	labtest.RequireRoot(t)
	f, err := Parse("broken.yaml", []byte(`name: broken
duration: 2s
nodes:
  - {name: a, kind: host}
  - {name: b, kind: host}
links:
  - {a: a, b: b, delay: 1ms}
flows:
  - {name: f1, from: a, to: b, transport: rocev2, cc: dcqcn, line_rate: 100mbit}
`))
	if err != nil {
		t.Fatal(err)
	}
	var (
		once    sync.Once
		deleted = make(chan string, 1)
	)
	// The relay holds the delay links: delete the first TUN there a second
	// after the lab is built, while the flow runs.
	found := func(run string) {
		once.Do(func() {
			go func() {
				time.Sleep(time.Second)
				deleted <- deleteTun(t, run)
			}()
		})
	}
	log := slog.New(runIDHandler{Handler: slog.DiscardHandler, found: found})
	res, err := Run(context.Background(), f, RunOptions{OutDir: "-", Logger: log})
	var tun string
	select {
	case tun = <-deleted:
	case <-time.After(5 * time.Second):
	}
	if tun == "" {
		t.Fatal("found no delay link's TUN to delete")
	}
	t.Logf("deleted %s; Run: %v", tun, err)
	if !errors.Is(err, ErrLinkBroken) || !strings.Contains(err.Error(), tun) {
		t.Fatalf("Run: %v; want ErrLinkBroken naming %s", err, tun)
	}
	if res == nil || len(res.Links) != 1 || len(res.Links[0].Delays) != 2 {
		t.Fatalf("result links %+v: want one link with two delay links", res)
	}
	var broken int
	for _, d := range res.Links[0].Delays {
		if d.Error != "" {
			broken++
			if d.Dropped == 0 {
				t.Errorf("delay link %s broke and lost nothing: %+v", d.Dev, d)
			}
		}
	}
	if broken != 1 || res.Lost() == 0 {
		t.Errorf("%d delay links broken, %d packets lost: want 1, some", broken, res.Lost())
	}
	noNamespacesLeft(t, res.RunID)
}

// deleteTun deletes the first delay link's TUN of the run's namespaces and
// returns its name, "" if it found none.
func deleteTun(t *testing.T, run string) string {
	names, err := lab.LiveNamespaces(run + "-")
	if err != nil {
		t.Error(err)
		return ""
	}
	for _, name := range names {
		ns, err := netns.GetFromName(name)
		if err != nil {
			continue
		}
		h, err := netlink.NewHandleAt(ns)
		ns.Close()
		if err != nil {
			continue
		}
		links, _ := h.LinkList()
		for _, l := range links {
			if l.Type() == "tuntap" {
				if err := h.LinkDel(l); err != nil {
					t.Errorf("delete %s in %s: %v", l.Attrs().Name, name, err)
				}
				h.Close()
				return l.Attrs().Name
			}
		}
		h.Close()
	}
	return ""
}
