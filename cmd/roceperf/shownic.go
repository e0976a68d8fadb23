package main

import (
	"errors"
	"io"
	"strconv"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/perf"
)

// showNIC prints --show-nic: the client's DCQCN parameters, as a run
// would build them, as an NVIDIA ConnectX NIC's settings.
func showNIC(w io.Writer, o *options) error {
	c := o.client
	lineRate := c.LineRate
	if lineRate == 0 {
		lineRate = perf.DefaultLineRate
	}
	// As a run: --cnp-dscp is cnp_dscp unless a --dcqcn knob sets it.
	knobs := append([]cc.Knob{{Name: "cnp_dscp", Value: strconv.Itoa(int(c.CNPDSCP))}}, c.Knobs...)
	p, err := dcqcn.New(c.Profile, lineRate, knobs...)
	if err != nil {
		var ke *dcqcn.KnobError
		if errors.As(err, &ke) && ke.Profile {
			return perfErr(&perf.ConfigError{Field: perf.FieldProfile, Value: c.Profile, Must: "must be one of " + joinOr(dcqcn.ProfileNames())})
		}
		return perfErr(&perf.ConfigError{Field: perf.FieldKnobs, Cause: err})
	}
	if err := p.WriteMLX5(w, dcqcn.MLX5NIC{Dev: o.nicDev, DSCP: c.DSCP, Profile: c.Profile}); err != nil {
		return errors.New("roceperf: --show-nic " + o.nicDev + ": " + err.Error())
	}
	return nil
}

// joinOr is "lab, mlx5 or paper".
func joinOr(ns []string) string {
	s := ns[0]
	for i, n := range ns[1:] {
		if i == len(ns)-2 {
			s += " or " + n
		} else {
			s += ", " + n
		}
	}
	return s
}
