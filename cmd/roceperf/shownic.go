package main

import (
	"errors"
	"io"

	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/perf"
)

// showNIC prints --show-nic: the client's DCQCN parameters, as a run
// would build them, as an NVIDIA ConnectX NIC's settings.
func showNIC(w io.Writer, o *options) error {
	c := o.client
	p, err := c.DCQCNParams() // as a run builds them
	if err != nil {
		return perfErr(err)
	}
	if err := p.WriteMLX5(w, dcqcn.MLX5NIC{Dev: o.nicDev, DSCP: c.DSCP, Profile: c.Profile, RPOff: c.RP == perf.RPOff}); err != nil {
		return errors.New("roceperf: --show-nic " + o.nicDev + ": " + err.Error())
	}
	return nil
}
