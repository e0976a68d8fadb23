//go:build linux

package ethfeat

import (
	"errors"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGetLoopback reads lo's features: the names ethtool -k shows, with
// GSO available on lo.
func TestGetLoopback(t *testing.T) {
	fs, err := Get("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"tx-generic-segmentation", "rx-gro", "tx-tcp-segmentation", "tx-udp-segmentation"} {
		if _, ok := fs[n]; !ok {
			t.Errorf("lo has no feature %q (%d features)", n, len(fs))
		}
	}
	if st := fs["tx-generic-segmentation"]; !st.Active {
		t.Errorf("lo's gso %+v: want active", st)
	}
}

// TestErrors: an unknown device, a name too long, an unknown feature.
func TestErrors(t *testing.T) {
	if _, err := Get("nosuchdev0"); !errors.Is(err, unix.ENODEV) {
		t.Errorf("Get(nosuchdev0): %v, want ENODEV", err)
	}
	if _, err := Get("a-name-longer-than-15"); err == nil {
		t.Error("Get of a 21-byte name: no error")
	}
	if _, err := Set("lo", map[string]bool{"warp-drive": true}); !errors.Is(err, ErrUnknown) {
		t.Errorf("Set(warp-drive): %v, want ErrUnknown", err)
	}
}

// grow calls Get from depth frames down, so that the goroutine's stack
// grows at some call inside it (what broke safchain/ethtool's reads).
func grow(depth int, pad [64]byte) (map[string]State, error) {
	if depth == 0 {
		return Get("lo")
	}
	pad[depth%64]++
	return grow(depth-1, pad)
}

// TestStackGrowth reads lo's features from fresh goroutines at many stack
// depths: every read must see them all.
func TestStackGrowth(t *testing.T) {
	want, err := Get("lo")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for d := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := grow(d, [64]byte{})
			switch {
			case err != nil:
				errs <- err
			case len(got) != len(want):
				errs <- errors.New("a read saw another feature count")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
