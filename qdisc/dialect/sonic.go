package dialect

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/fabriclab/fabriclab/qdisc"
)

// sonicDB is config_db.json: table → key → field → value. SONiC keeps
// every value a string; encoding/json sorts the keys, so the output is
// stable.
type sonicDB map[string]map[string]map[string]string

func (db sonicDB) set(table, key string, fields map[string]string) {
	if db[table] == nil {
		db[table] = map[string]map[string]string{}
	}
	db[table][key] = fields
}

// The platform's buffer pools, as SONiC's buffers templates name them;
// a port's file refers to them and leaves their sizes to the platform.
const (
	poolEgressLossless  = "egress_lossless_pool"
	poolEgressLossy     = "egress_lossy_pool"
	poolIngressLossless = "ingress_lossless_pool"
)

// sonicNoteTable holds what SONiC has no field for: the header (target,
// source, notes) under the port's key and the class names under
// "PORT|N". No SONiC daemon reads it; delete it where a load validates
// tables against YANG.
const sonicNoteTable = "FABRICLAB"

// sonicBase is the name a port's objects get: its interface name, made
// a valid profile name ([a-zA-Z0-9][-a-zA-Z0-9_]*).
func sonicBase(iface string) string {
	var b strings.Builder
	for i, r := range iface {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if i > 0 && (r == '-' || r == '_') {
			ok = true
		}
		if ok {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

// sonic renders the port as config_db.json (package documentation).
func (p *port) sonic() (string, error) {
	cfg := p.cfg
	db := sonicDB{}
	base := sonicBase(p.iface)
	key := func(q int) string { return p.iface + "|" + strconv.Itoa(q) }

	// The port's rate is a port shaper, pir in bytes per second.
	if cfg.Rate%8 != 0 {
		p.refuse(-1, "rate", cfg.Rate.String(), "must be whole bytes per second (SCHEDULER pir)")
	}
	db.set("SCHEDULER", base+"_port", map[string]string{"meter_type": "bytes", "pir": u64(uint64(cfg.Rate) / 8)})

	dscp := map[string]string{}
	for d, c := range cfg.DSCPClass {
		dscp[strconv.Itoa(d)] = strconv.Itoa(int(c))
	}
	db.set("DSCP_TO_TC_MAP", base, dscp)
	// Class N is traffic class, queue, priority group and PFC priority N.
	identity := map[string]string{}
	for q := range qdisc.NumClasses {
		identity[strconv.Itoa(q)] = strconv.Itoa(q)
	}
	for _, t := range []string{"TC_TO_QUEUE_MAP", "TC_TO_PRIORITY_GROUP_MAP", "MAP_PFC_PRIORITY_TO_QUEUE"} {
		db.set(t, base, identity)
	}

	var pfc []string
	for q := range cfg.Classes {
		cc := &cfg.Classes[q]
		queue := map[string]string{}
		if cc.Strict {
			queue["scheduler"] = base + "_strict"
			db.set("SCHEDULER", base+"_strict", map[string]string{"type": "STRICT"})
		} else {
			// The lab shares the non-strict classes equally.
			queue["scheduler"] = base + "_dwrr"
			db.set("SCHEDULER", base+"_dwrr", map[string]string{"type": "DWRR", "weight": "1"})
		}
		if cv, ok := p.curveOf(q, "green_drop_probability"); ok {
			name := base + "_q" + strconv.Itoa(q)
			queue["wred_profile"] = name
			w := map[string]string{"ecn": "ecn_all"}
			// No colours in the lab: every colour gets the class's curve.
			for _, colour := range []string{"green", "yellow", "red"} {
				w[colour+"_min_threshold"] = u64(cv.minBytes)
				w[colour+"_max_threshold"] = u64(cv.maxBytes)
				w[colour+"_drop_probability"] = strconv.Itoa(cv.percent)
				// Off: Not-ECT packets are not dropped on the curve,
				// only at the limit (the lab's default).
				w["wred_"+colour+"_enable"] = strconv.FormatBool(cc.WREDDrop)
			}
			db.set("WRED_PROFILE", name, w)
		}
		db.set("QUEUE", key(q), queue)

		pool := poolEgressLossy
		if p.lossless(q) {
			pool = poolEgressLossless
		}
		qp := base + "_q" + strconv.Itoa(q)
		db.set("BUFFER_PROFILE", qp, map[string]string{"pool": pool, "size": "0", "static_th": u64(uint64(cc.LimitBytes))})
		db.set("BUFFER_QUEUE", key(q), map[string]string{"profile": qp})

		if p.lossless(q) {
			pfc = append(pfc, strconv.Itoa(q))
			// Pause once the priority group holds xoff; what arrives
			// after the pause fills the headroom up to the class limit;
			// resume at xon.
			pg := base + "_pg" + strconv.Itoa(q)
			db.set("BUFFER_PROFILE", pg, map[string]string{"pool": poolIngressLossless, "size": "0",
				"static_th": u64(uint64(cc.XoffBytes)), "xoff": u64(uint64(cc.LimitBytes - cc.XoffBytes)), "xon": u64(uint64(cc.XonBytes))})
			db.set("BUFFER_PG", key(q), map[string]string{"profile": pg})
		}
		if cc.Name != "" {
			db.set(sonicNoteTable, key(q), map[string]string{"name": cc.Name})
		}
	}
	// pfc_enable is written even when empty: config load merges, and an
	// absent field would keep an earlier one.
	db.set("PORT_QOS_MAP", p.iface, map[string]string{
		"dscp_to_tc_map": base, "tc_to_queue_map": base, "tc_to_pg_map": base, "pfc_to_queue_map": base,
		"pfc_enable": strings.Join(pfc, ","), "scheduler": base + "_port",
	})
	if len(p.errs) > 0 {
		return "", errors.Join(p.errs...)
	}

	about := map[string]string{"target": p.d.Target(), "note": "config load merges: load on a port with no QoS settings of its own; the buffer pools are the platform's",
		// Read from sonic-swss 202305 (swss-schema.md, qosorch.cpp,
		// bufferorch.cpp): what the schema takes and the ASIC may not.
		"platform": "BUFFER_PROFILE static_th is a static threshold, for static pools: where the platform's pools are dynamic, give dynamic_th instead (the byte limits are then lost); WRED_PROFILE ecn_all with wred_*_enable false marks without dropping Not-ECT packets on the curve, which some SAIs tie to the colour's enable: check marking on the ASIC"}
	if p.opt.Source != "" {
		about["source"] = p.opt.Source
	}
	for i, n := range p.notes {
		about["not_expressed_"+strconv.Itoa(i+1)] = n
	}
	db.set(sonicNoteTable, p.iface, about)
	b, err := json.MarshalIndent(db, "", "    ")
	if err != nil {
		return "", err
	}
	return string(b) + "\n", nil
}
