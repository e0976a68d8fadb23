//go:build linux

package labfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fabriclab/fabriclab/host/cm"
	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Workload is an htsim connection matrix run as the lab's flows: each
// connection a flow from host Hosts[src] to Hosts[dst] with the
// connection's size, started at its start time (µs, slowed by the
// file's timescale) or when its trigger fires (host/cm: a trigger fires
// when the flows that name it finish sending or receiving).
type Workload struct {
	// CM is a .cm file, relative to the lab file. Either CM or Kind.
	CM string `yaml:"cm"`
	// Kind generates the matrix (cm.Kinds: allreduce-ring, alltoall,
	// ...) over the Hosts, with Group, Fanout, Size, Seed and Spread in
	// the meaning of htsim's generator of that kind (cm.Gen).
	Kind   string         `yaml:"kind"`
	Group  int            `yaml:"group"`
	Fanout int            `yaml:"fanout"`
	Size   units.ByteSize `yaml:"size"`
	Seed   uint64         `yaml:"seed"`
	Spread time.Duration  `yaml:"spread"`
	// Hosts are the lab's hosts that the matrix's nodes 0, 1, ... are.
	// Optional: every host node in file order; the matrix's Nodes must
	// not exceed them.
	Hosts []string `yaml:"hosts"`
	// Flow is every connection's flow but for from, to, size and start:
	// transport, cc, knobs, line_rate, verify, ... Its name is ignored
	// (a connection's flow is c1, c2, ... in matrix order) and its group
	// names them all (optional: "matrix"), for a variant's overrides.
	Flow Flow `yaml:"flow"`
}

// MatrixGroup is the group of a workload's flows without one.
const MatrixGroup = "matrix"

// Matrix is the file's workload matrix, nil without one; connection i
// is the flow MatrixFlow(i).
func (f *File) Matrix() *cm.Matrix { return f.matrix }

// MatrixFlow is the index in Flows of the matrix's connection i.
func (f *File) MatrixFlow(i int) int { return f.matrixFirst + i }

// expandWorkload reads or generates the workload's matrix and appends a
// flow per connection, once (variants share the file's flows).
func (f *File) expandWorkload(byName map[string]int) error {
	w := f.Workload
	if w == nil || f.matrix != nil {
		return nil
	}
	const p = "workload"
	hosts := w.Hosts
	if len(hosts) == 0 {
		for _, n := range f.Nodes {
			if n.Kind == KindHost {
				hosts = append(hosts, n.Name)
			}
		}
	}
	for i, h := range hosts {
		j, ok := byName[h]
		switch {
		case !ok:
			return conf.Errorf(conf.Index(conf.Join(p, "hosts"), i), h, "no such node; nodes are %s", nodeNames(f.Nodes))
		case f.Nodes[j].Kind != KindHost:
			return conf.Errorf(conf.Index(conf.Join(p, "hosts"), i), h, "is a %s; a matrix's nodes are hosts (%s)", f.Nodes[j].Kind, f.hostNames())
		case slices.Index(hosts, h) != i:
			return conf.Errorf(conf.Index(conf.Join(p, "hosts"), i), h, "given twice (also hosts[%d])", slices.Index(hosts, h))
		}
	}
	var m *cm.Matrix
	switch {
	case (w.CM == "") == (w.Kind == ""):
		return conf.Errorf(p, "", "want one of cm (an htsim .cm file) or kind (%s)", orList(cm.Kinds))
	case w.CM != "":
		if w.Group != 0 || w.Fanout != 0 || w.Size != 0 || w.Seed != 0 || w.Spread != 0 {
			return conf.Errorf(conf.Join(p, "cm"), w.CM, "a .cm file gives its own sizes and starts: group, fanout, size, seed and spread are the generators' (kind)")
		}
		path := w.CM
		if !filepath.IsAbs(path) && f.Path != "" {
			path = filepath.Join(filepath.Dir(f.Path), path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return conf.Errorf(conf.Join(p, "cm"), w.CM, "%v", err)
		}
		if m, err = cm.Parse(bytes.NewReader(data)); err != nil {
			return conf.Errorf(conf.Join(p, "cm"), w.CM, "%v", err)
		}
	default:
		var err error
		m, err = cm.Generate(cm.Gen{Kind: w.Kind, Nodes: len(hosts), Group: w.Group, Fanout: w.Fanout, Size: uint64(w.Size), Seed: w.Seed, Spread: w.Spread})
		if err != nil {
			return conf.Errorf(conf.Join(p, "kind"), w.Kind, "%v", err)
		}
	}
	if m.Nodes > len(hosts) {
		return conf.Errorf(conf.Join(p, "hosts"), len(hosts), "the matrix has %d nodes; name as many hosts (the file has %d)", m.Nodes, len(hosts))
	}
	if len(f.Flows)+len(m.Conns) > MaxFlows {
		return conf.Errorf(p, len(m.Conns), "the matrix's %d connections and the file's %d flows: at most %d flows", len(m.Conns), len(f.Flows), MaxFlows)
	}
	tmpl := w.Flow
	for _, field := range []struct {
		name string
		set  bool
	}{{"from", tmpl.From != ""}, {"to", tmpl.To != ""}, {"size", tmpl.Size != 0}, {"size_max", tmpl.SizeMax != 0},
		{"start", tmpl.Start != 0}, {"count", tmpl.Count > 1}, {"every", tmpl.Every != 0}, {"duration", tmpl.Duration != 0}} {
		if field.set {
			return conf.Errorf(conf.Join(conf.Join(p, "flow"), field.name), "", "the matrix gives every connection's ends, size and start")
		}
	}
	if tmpl.Group == "" {
		tmpl.Group = MatrixGroup
	}
	f.matrix, f.matrixFirst = m, len(f.Flows)
	for i, c := range m.Conns {
		fl := tmpl
		fl.Name = fmt.Sprintf("c%d", i+1)
		fl.From, fl.To = hosts[c.Src], hosts[c.Dst]
		fl.Size = units.ByteSize(c.Size)
		fl.Start = c.Start
		fl.Knobs = tmpl.Knobs // shared, read only
		fl.conn = i + 1
		f.Flows = append(f.Flows, fl)
	}
	return nil
}

// errMatrixStopped stops the flows still waiting for a trigger when a
// flow of the matrix failed: what it would have fired never fires.
var errMatrixStopped = errors.New("a flow of the matrix failed: its triggers never fire")
