package agent

import (
	"errors"
	"testing"
)

// TestOpenHostModes: a mode other than kernel, agent or empty is refused
// before anything opens, naming the role.
func TestOpenHostModes(t *testing.T) {
	for _, tc := range []struct {
		cfg  HostConfig
		want string
	}{
		{HostConfig{NP: "bpf"}, `agent: np bpf: must be kernel, agent or empty (kernel where it attaches)`},
		{HostConfig{RP: "nic"}, `agent: rp nic: must be kernel, agent or empty (kernel where it attaches)`},
	} {
		_, err := OpenHost(tc.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || err.Error() != tc.want {
			t.Errorf("%+v: got %v, want %s", tc.cfg, err, tc.want)
		}
	}
	e := &OffloadError{Role: "rp", Err: errors.New("no device")}
	if e.Error() != "the kernel RP did not attach: no device" || !errors.Is(e, e.Err) {
		t.Errorf("%v", e)
	}
}
