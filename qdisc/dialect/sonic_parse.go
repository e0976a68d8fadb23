package dialect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// maxSONiCBytes bounds what ParseSONiC reads: a whole switch's
// config_db.json is a few MB.
const maxSONiCBytes = 64 << 20

// ParseError is a SONiC file ParseSONiC cannot read: the JSON path
// (RFC 6901 pointer: /QUEUE/Ethernet0|3/scheduler), the value found and
// what is allowed.
type ParseError struct {
	Path string
	// Value is as found; Missing: there was none.
	Value   string
	Missing bool
	Allowed string
}

func (e *ParseError) Error() string {
	path := e.Path
	if path == "" {
		path = "/"
	}
	if e.Missing {
		return fmt.Sprintf("sonic: %s: missing: %s", path, e.Allowed)
	}
	return fmt.Sprintf("sonic: %s: %q: %s", path, e.Value, e.Allowed)
}

// ParseSONiC reads the port of a SONiC config_db.json, the subset Render
// writes (package documentation): the one port PORT_QOS_MAP names besides
// "global". Tables the subset does not use are ignored; within the ones
// it reads, a field it does not know is an error, not skipped. The result
// passes qdisc.Config.Validate. The class of non-IP frames is 0; class
// names come from the FABRICLAB table, if any.
func ParseSONiC(r io.Reader) (qdisc.Config, error) { return ParseSONiCPort(r, "") }

// ParseSONiCPort is ParseSONiC for the port named iface ("": the only
// one).
func ParseSONiCPort(r io.Reader, iface string) (qdisc.Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxSONiCBytes+1))
	if err != nil {
		return qdisc.Config{}, err
	}
	if len(data) > maxSONiCBytes {
		return qdisc.Config{}, fmt.Errorf("sonic: the file is larger than %d MiB", maxSONiCBytes>>20)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		return qdisc.Config{}, &ParseError{Value: snippet(data), Allowed: "must be a JSON object of config_db tables" + jsonWhy(err)}
	}
	s := &sonicReader{top: top, tables: map[string]map[string]json.RawMessage{}}
	cfg, err := s.read(iface)
	if err != nil {
		return qdisc.Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return qdisc.Config{}, fmt.Errorf("sonic: the port read is not a valid configuration: %w", err)
	}
	return cfg, nil
}

func jsonWhy(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

// snippet is the start of a bad value, for errors.
func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// pointer is an RFC 6901 JSON pointer to table/key/field.
func pointer(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(p))
	}
	return b.String()
}

type sonicReader struct {
	top    map[string]json.RawMessage
	tables map[string]map[string]json.RawMessage
}

// table is a config_db table's entries (nil if absent).
func (s *sonicReader) table(name string) (map[string]json.RawMessage, error) {
	if t, ok := s.tables[name]; ok {
		return t, nil
	}
	raw, ok := s.top[name]
	if !ok {
		s.tables[name] = nil
		return nil, nil
	}
	var t map[string]json.RawMessage
	if err := json.Unmarshal(raw, &t); err != nil || t == nil {
		return nil, &ParseError{Path: pointer(name), Value: snippet(raw), Allowed: "must be an object of entries"}
	}
	s.tables[name] = t
	return t, nil
}

// entry is one key's fields, each a string; allowed lists the fields the
// subset reads (any other is an error).
type entry struct {
	path   []string
	fields map[string]string
}

func (s *sonicReader) entry(table, key string, allowed ...string) (*entry, error) {
	t, err := s.table(table)
	if err != nil {
		return nil, err
	}
	raw, ok := t[key]
	if !ok {
		return nil, nil
	}
	var fs map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fs); err != nil || fs == nil {
		return nil, &ParseError{Path: pointer(table, key), Value: snippet(raw), Allowed: "must be an object of fields"}
	}
	e := &entry{path: []string{table, key}, fields: map[string]string{}}
	for _, name := range sortedKeys(fs) {
		if !slices.Contains(allowed, name) {
			return nil, &ParseError{Path: e.at(name), Value: snippet(fs[name]),
				Allowed: "not a field fabriclab reads here (it reads " + strings.Join(allowed, ", ") + ")"}
		}
		var v string
		if err := json.Unmarshal(fs[name], &v); err != nil {
			return nil, &ParseError{Path: e.at(name), Value: snippet(fs[name]), Allowed: "must be a string, as config_db keeps every value"}
		}
		e.fields[name] = v
	}
	return e, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (e *entry) at(field string) string { return pointer(append(slices.Clone(e.path), field)...) }

// get is a field's value; required: missing is an error saying what.
func (e *entry) get(field string, required bool, what string) (string, bool, error) {
	v, ok := e.fields[field]
	if !ok && required {
		return "", false, &ParseError{Path: e.at(field), Missing: true, Allowed: what}
	}
	return v, ok, nil
}

// uint reads a decimal field in [lo, hi].
func (e *entry) uint(field string, lo, hi uint64, what string) (uint64, error) {
	v, _, err := e.get(field, true, what)
	if err != nil {
		return 0, err
	}
	n, perr := strconv.ParseUint(v, 10, 64)
	if perr != nil || n < lo || n > hi {
		return 0, &ParseError{Path: e.at(field), Value: v, Allowed: fmt.Sprintf("must be %s, %d to %d", what, lo, hi)}
	}
	return n, nil
}

// ref follows a reference field to its entry in table: "name", or the
// older "[TABLE|name]".
func (s *sonicReader) ref(e *entry, field, table, what string, allowed ...string) (*entry, error) {
	v, _, err := e.get(field, true, what)
	if err != nil {
		return nil, err
	}
	name := v
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		t, n, ok := strings.Cut(v[1:len(v)-1], "|")
		if !ok || t != table {
			return nil, &ParseError{Path: e.at(field), Value: v, Allowed: "must name a " + table + " entry"}
		}
		name = n
	}
	r, err := s.entry(table, name, allowed...)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, &ParseError{Path: e.at(field), Value: v, Allowed: "names no " + table + " entry"}
	}
	return r, nil
}

// perQueue finds the entries of table keyed "PORT|Q" or "PORT|A-B" for
// iface, by queue; a queue two keys cover is an error.
func (s *sonicReader) perQueue(table, iface string) ([qdisc.NumClasses]string, error) {
	var keys [qdisc.NumClasses]string
	t, err := s.table(table)
	if err != nil {
		return keys, err
	}
	for _, k := range sortedKeys(t) {
		port, idx, ok := strings.Cut(k, "|")
		if !ok || port != iface {
			continue
		}
		lo, hi, ok := queueRange(idx)
		if !ok {
			return keys, &ParseError{Path: pointer(table, k), Value: idx, Allowed: "the queue must be 0 to 7, or a range A-B of them"}
		}
		for q := lo; q <= hi; q++ {
			if keys[q] != "" {
				return keys, &ParseError{Path: pointer(table, k), Value: k, Allowed: "queue " + strconv.Itoa(q) + " is also " + keys[q]}
			}
			keys[q] = k
		}
	}
	return keys, nil
}

// queueRange reads "3" or "3-4".
func queueRange(s string) (lo, hi int, ok bool) {
	a, b, isRange := strings.Cut(s, "-")
	lo, ok = smallInt(a, qdisc.NumClasses-1)
	if !ok {
		return 0, 0, false
	}
	if !isRange {
		return lo, lo, true
	}
	hi, ok = smallInt(b, qdisc.NumClasses-1)
	return lo, hi, ok && hi >= lo
}

// smallInt reads a decimal 0..max without sign or leading zeros.
func smallInt(s string, max int) (int, bool) {
	if s == "" || len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= max
}

// identityMap checks a TC → queue / PG / PFC priority map: the lab's class
// N is all of them.
func (s *sonicReader) identityMap(pqm *entry, field, table string) error {
	if _, ok := pqm.fields[field]; !ok {
		return nil
	}
	allowed := make([]string, qdisc.NumClasses)
	for i := range allowed {
		allowed[i] = strconv.Itoa(i)
	}
	m, err := s.ref(pqm, field, table, "a "+table+" name", allowed...)
	if err != nil {
		return err
	}
	for k, v := range m.fields {
		if v != k {
			return &ParseError{Path: m.at(k), Value: v, Allowed: "must be " + k + ": the lab's class N is traffic class, queue, priority group and PFC priority N"}
		}
	}
	return nil
}

func (s *sonicReader) read(iface string) (qdisc.Config, error) {
	var cfg qdisc.Config
	pqmTable, err := s.table("PORT_QOS_MAP")
	if err != nil {
		return cfg, err
	}
	if iface == "" {
		var ports []string
		for _, k := range sortedKeys(pqmTable) {
			if k != "global" {
				ports = append(ports, k)
			}
		}
		if len(ports) != 1 {
			return cfg, &ParseError{Path: pointer("PORT_QOS_MAP"), Value: strings.Join(ports, ","), Missing: len(ports) == 0,
				Allowed: "must hold exactly one port (name the one to read)"}
		}
		iface = ports[0]
	}
	pqm, err := s.entry("PORT_QOS_MAP", iface, "dscp_to_tc_map", "tc_to_queue_map", "tc_to_pg_map", "pfc_to_queue_map", "pfc_enable", "scheduler")
	if err != nil {
		return cfg, err
	}
	if pqm == nil {
		return cfg, &ParseError{Path: pointer("PORT_QOS_MAP", iface), Missing: true, Allowed: "the port's QoS map binding"}
	}

	// The DSCP map; a DSCP it leaves out goes to class 0, as in SONiC.
	dscpNames := make([]string, qdisc.NumDSCP)
	for i := range dscpNames {
		dscpNames[i] = strconv.Itoa(i)
	}
	dm, err := s.ref(pqm, "dscp_to_tc_map", "DSCP_TO_TC_MAP", "a DSCP_TO_TC_MAP name", dscpNames...)
	if err != nil {
		return cfg, err
	}
	for d, v := range dm.fields {
		c, ok := smallInt(v, qdisc.NumClasses-1)
		if !ok {
			return cfg, &ParseError{Path: dm.at(d), Value: v, Allowed: "must be a traffic class, 0 to 7"}
		}
		n, _ := smallInt(d, qdisc.NumDSCP-1)
		cfg.DSCPClass[n] = qdisc.ClassID(c)
	}
	for _, m := range [][2]string{{"tc_to_queue_map", "TC_TO_QUEUE_MAP"}, {"tc_to_pg_map", "TC_TO_PRIORITY_GROUP_MAP"}, {"pfc_to_queue_map", "MAP_PFC_PRIORITY_TO_QUEUE"}} {
		if err := s.identityMap(pqm, m[0], m[1]); err != nil {
			return cfg, err
		}
	}

	// The port's rate: its shaper.
	sh, err := s.ref(pqm, "scheduler", "SCHEDULER", "the port shaper: a SCHEDULER with pir (bytes/s), the port's rate", "meter_type", "pir")
	if err != nil {
		return cfg, err
	}
	if mt, ok, _ := sh.get("meter_type", false, ""); ok && mt != "bytes" {
		return cfg, &ParseError{Path: sh.at("meter_type"), Value: mt, Allowed: "must be bytes"}
	}
	pir, err := sh.uint("pir", uint64(qdisc.MinRate+7)/8, math.MaxUint64/8, "the port's rate in bytes/s")
	if err != nil {
		return cfg, err
	}
	cfg.Rate = units.Rate(pir * 8)

	var lossless [qdisc.NumClasses]bool
	if v, ok, _ := pqm.get("pfc_enable", false, ""); ok && v != "" {
		for _, f := range strings.Split(v, ",") {
			q, ok := smallInt(f, qdisc.NumClasses-1)
			if !ok || lossless[q] {
				return cfg, &ParseError{Path: pqm.at("pfc_enable"), Value: v, Allowed: "must list priorities 0 to 7, each once, comma-separated"}
			}
			lossless[q] = true
		}
	}

	queues, err := s.perQueue("QUEUE", iface)
	if err != nil {
		return cfg, err
	}
	bufQueues, err := s.perQueue("BUFFER_QUEUE", iface)
	if err != nil {
		return cfg, err
	}
	pgs, err := s.perQueue("BUFFER_PG", iface)
	if err != nil {
		return cfg, err
	}
	weight, weightAt := "", ""
	for q := range qdisc.NumClasses {
		cc := &cfg.Classes[q]
		if queues[q] == "" {
			return cfg, &ParseError{Path: pointer("QUEUE", iface+"|"+strconv.Itoa(q)), Missing: true, Allowed: "every queue 0 to 7 needs its scheduler"}
		}
		qe, err := s.entry("QUEUE", queues[q], "scheduler", "wred_profile")
		if err != nil {
			return cfg, err
		}
		sc, err := s.ref(qe, "scheduler", "SCHEDULER", "a SCHEDULER name", "type", "weight")
		if err != nil {
			return cfg, err
		}
		switch t, _, _ := sc.get("type", false, ""); t {
		case "STRICT":
			cc.Strict = true
		case "", "DWRR", "WRR":
			// The lab shares non-strict classes equally.
			w, ok, _ := sc.get("weight", false, "")
			if !ok {
				w = "1"
			}
			switch {
			case weightAt == "":
				weight, weightAt = w, sc.at("weight")
			case w != weight:
				return cfg, &ParseError{Path: sc.at("weight"), Value: w, Allowed: "must be " + weight + " as at " + weightAt + ": the lab shares its non-strict classes equally"}
			}
		default:
			return cfg, &ParseError{Path: sc.at("type"), Value: t, Allowed: "must be STRICT, DWRR or WRR"}
		}
		if _, ok := qe.fields["wred_profile"]; ok {
			if err := s.readWRED(qe, cc); err != nil {
				return cfg, err
			}
		}

		if bufQueues[q] == "" {
			return cfg, &ParseError{Path: pointer("BUFFER_QUEUE", iface+"|"+strconv.Itoa(q)), Missing: true, Allowed: "every queue 0 to 7 needs its buffer profile (its limit)"}
		}
		bq, err := s.entry("BUFFER_QUEUE", bufQueues[q], "profile")
		if err != nil {
			return cfg, err
		}
		bp, err := s.ref(bq, "profile", "BUFFER_PROFILE", "a BUFFER_PROFILE name", "pool", "size", "static_th")
		if err != nil {
			return cfg, err
		}
		if err := zeroSize(bp); err != nil {
			return cfg, err
		}
		if _, _, err := bp.get("pool", true, "the buffer pool"); err != nil {
			return cfg, err
		}
		limit, err := bp.uint("static_th", 1, math.MaxUint32, "the queue's limit in bytes")
		if err != nil {
			return cfg, err
		}
		cc.LimitBytes = units.ByteSize(limit)

		switch {
		case lossless[q] && pgs[q] == "":
			return cfg, &ParseError{Path: pointer("BUFFER_PG", iface+"|"+strconv.Itoa(q)), Missing: true, Allowed: "pfc_enable lists priority " + strconv.Itoa(q) + ": its lossless priority group's profile (xoff, xon)"}
		case !lossless[q] && pgs[q] != "":
			return cfg, &ParseError{Path: pointer("BUFFER_PG", pgs[q]), Value: pgs[q], Allowed: "only the lossless priority groups pfc_enable lists are read"}
		case lossless[q]:
			if err := s.readPG(pgs[q], cc); err != nil {
				return cfg, err
			}
		}
	}

	// Names: the FABRICLAB table's, where there is one.
	if t, err := s.table(sonicNoteTable); err != nil {
		return cfg, err
	} else if t != nil {
		for q := range qdisc.NumClasses {
			e, err := s.entry(sonicNoteTable, iface+"|"+strconv.Itoa(q), "name")
			if err != nil {
				return cfg, err
			}
			if e == nil {
				continue
			}
			n, _, err := e.get("name", true, "the class's name")
			if err != nil {
				return cfg, err
			}
			if err := qdisc.CheckName(n); err != nil {
				return cfg, &ParseError{Path: e.at("name"), Value: n, Allowed: "must be 1 to 32 letters, digits, '-', '_' or '.'"}
			}
			cfg.Classes[q].Name = n
		}
	}
	return cfg, nil
}

func zeroSize(bp *entry) error {
	if v, _, err := bp.get("size", true, "the reserved size, 0"); err != nil {
		return err
	} else if v != "0" {
		return &ParseError{Path: bp.at("size"), Value: v, Allowed: "must be 0: the lab reserves nothing per class"}
	}
	return nil
}

// readWRED reads a queue's WRED profile into cc: min < max is wred, min =
// max a step at K = min with probability 100.
func (s *sonicReader) readWRED(qe *entry, cc *qdisc.ClassConfig) error {
	var fields []string
	for _, c := range []string{"green", "yellow", "red"} {
		fields = append(fields, c+"_min_threshold", c+"_max_threshold", c+"_drop_probability", "wred_"+c+"_enable")
	}
	w, err := s.ref(qe, "wred_profile", "WRED_PROFILE", "a WRED_PROFILE name", append(fields, "ecn")...)
	if err != nil {
		return err
	}
	ecn, _, err := w.get("ecn", true, "ecn_all or ecn_green: the lab's curves mark ECN")
	if err != nil {
		return err
	}
	if ecn != "ecn_all" && ecn != "ecn_green" {
		return &ParseError{Path: w.at("ecn"), Value: ecn, Allowed: "must be ecn_all or ecn_green: the lab's curves mark ECN-capable packets"}
	}
	// No colours in the lab: yellow and red, where given, must be green's.
	for _, c := range []string{"yellow", "red"} {
		for _, f := range []string{"_min_threshold", "_max_threshold", "_drop_probability"} {
			if v, ok := w.fields[c+f]; ok && v != w.fields["green"+f] {
				return &ParseError{Path: w.at(c + f), Value: v, Allowed: "must be green" + f + "'s (" + w.fields["green"+f] + "): the lab has no colours"}
			}
		}
		if v, ok := w.fields["wred_"+c+"_enable"]; ok && v != w.fields["wred_green_enable"] {
			return &ParseError{Path: w.at("wred_" + c + "_enable"), Value: v, Allowed: "must be wred_green_enable's: the lab has no colours"}
		}
	}
	minTh, err := w.uint("green_min_threshold", 0, math.MaxUint32, "bytes")
	if err != nil {
		return err
	}
	maxTh, err := w.uint("green_max_threshold", minTh, math.MaxUint32, "bytes, at least green_min_threshold")
	if err != nil {
		return err
	}
	pc, err := w.uint("green_drop_probability", 1, 100, "percent")
	if err != nil {
		return err
	}
	switch v, _, _ := w.get("wred_green_enable", false, ""); v {
	case "", "false":
	case "true":
		cc.WREDDrop = true
	default:
		return &ParseError{Path: w.at("wred_green_enable"), Value: v, Allowed: "must be true or false"}
	}
	cc.MinThBytes = units.ByteSize(minTh)
	if minTh == maxTh {
		if pc != 100 {
			return &ParseError{Path: w.at("green_drop_probability"), Value: strconv.FormatUint(pc, 10), Allowed: "must be 100: min = max is a step, which marks every packet at K"}
		}
		cc.ECN = qdisc.ECNStep
		return nil
	}
	cc.ECN = qdisc.ECNWRED
	cc.MaxThBytes = units.ByteSize(maxTh)
	cc.MaxP = float64(pc) / 100
	return nil
}

// readPG reads a lossless priority group's profile into cc's PPFC: pause
// at static_th, resume at xon, headroom xoff up to the class limit.
func (s *sonicReader) readPG(key string, cc *qdisc.ClassConfig) error {
	pg, err := s.entry("BUFFER_PG", key, "profile")
	if err != nil {
		return err
	}
	bp, err := s.ref(pg, "profile", "BUFFER_PROFILE", "a BUFFER_PROFILE name", "pool", "size", "static_th", "xoff", "xon")
	if err != nil {
		return err
	}
	if err := zeroSize(bp); err != nil {
		return err
	}
	if _, _, err := bp.get("pool", true, "the buffer pool"); err != nil {
		return err
	}
	xoff, err := bp.uint("static_th", 1, uint64(cc.LimitBytes), "the PFC pause threshold in bytes, at most the queue's limit")
	if err != nil {
		return err
	}
	// The headroom takes what arrives after the pause, up to the limit.
	headroom := uint64(cc.LimitBytes) - xoff
	if v, _, err := bp.get("xoff", true, "the headroom: the queue's limit less static_th"); err != nil {
		return err
	} else if v != strconv.FormatUint(headroom, 10) {
		return &ParseError{Path: bp.at("xoff"), Value: v, Allowed: fmt.Sprintf("must be %d: the headroom is the queue's limit (%d) less static_th (%d)", headroom, cc.LimitBytes, xoff)}
	}
	xon, err := bp.uint("xon", 0, xoff-1, "the resume threshold in bytes, below static_th")
	if err != nil {
		return err
	}
	cc.XoffBytes, cc.XonBytes = units.ByteSize(xoff), units.ByteSize(xon)
	return nil
}
