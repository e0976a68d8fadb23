package htsim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Counters are htsim_uec's totals over the senders, as its last line
// prints them.
type Counters struct {
	NewPackets  int64 `json:"new"`
	Retransmits int64 `json:"rtx"`
	RTS         int64 `json:"rts"`
	Bounced     int64 `json:"bounced"`
	ACKs        int64 `json:"acks"`
	// NACKs are the trims: htsim NACKs every trimmed packet.
	NACKs int64 `json:"nacks"`
	Pulls int64 `json:"pulls"`
	// SLEEKPackets are SLEEK's retransmissions.
	SLEEKPackets int64 `json:"sleek_pkts"`
}

// output is what htsim_uec's standard output says.
type output struct {
	counters     Counters
	haveCounters bool
	// finishedUs is each sender's finish time, µs to 6 digits.
	finishedUs map[int]float64
	// unloadedRTTUs is network_max_unloaded_rtt, µs to 6 digits; 0 if
	// not printed.
	unloadedRTTUs float64
}

// parseOutput reads htsim_uec's standard output: the flows that finished
// to receiver, the unloaded RTT and the counters.
func parseOutput(r io.Reader, receiver int) (output, error) {
	o := output{finishedUs: map[int]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// htsim's clock (clock.cpp) prints a '.' every 50 ms of its
		// time and a '|' every 10th, before whatever line comes next.
		line := strings.TrimLeft(sc.Text(), ".|")
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "network_max_unloaded_rtt":
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return o, fmt.Errorf("htsim output: %q: %v", line, err)
			}
			o.unloadedRTTUs = v
		case len(f) >= 2 && f[0] == "Flow" && strings.HasPrefix(f[1], "Uec_"):
			i := index(f, "finished")
			if i < 0 || i+2 >= len(f) || f[i+1] != "at" {
				continue // "starting at"
			}
			src, dst, ok := flowName(f[1])
			if !ok || dst != receiver {
				continue
			}
			v, err := strconv.ParseFloat(f[i+2], 64)
			if err != nil {
				return o, fmt.Errorf("htsim output: %q: %v", line, err)
			}
			o.finishedUs[src] = v
		case len(f) >= 1 && f[0] == "New:":
			c, err := parseCounters(f)
			if err != nil {
				return o, err
			}
			o.counters, o.haveCounters = c, true
		}
	}
	return o, sc.Err()
}

// parseCounters reads htsim_uec's last line, its counters over the
// senders: "New: N Rtx: N RTS: N Bounced: N ACKs: N NACKs: N Pulls: N
// sleek_pkts: N".
func parseCounters(f []string) (Counters, error) {
	var c Counters
	if len(f) != 16 {
		return c, fmt.Errorf("htsim output: counters %q: want 8 names and values", strings.Join(f, " "))
	}
	for i, p := range []*int64{&c.NewPackets, &c.Retransmits, &c.RTS, &c.Bounced, &c.ACKs, &c.NACKs, &c.Pulls, &c.SLEEKPackets} {
		v, err := strconv.ParseInt(f[2*i+1], 10, 64)
		if err != nil {
			return c, fmt.Errorf("htsim output: counters %q: %v", strings.Join(f, " "), err)
		}
		*p = v
	}
	return c, nil
}

// flowName reads a sender's name, Uec_SRC_DST.
func flowName(s string) (src, dst int, ok bool) {
	rest, ok := strings.CutPrefix(s, "Uec_")
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, "_")
	if !ok {
		return 0, 0, false
	}
	src, err1 := strconv.Atoi(a)
	dst, err2 := strconv.Atoi(b)
	return src, dst, err1 == nil && err2 == nil
}

func index(f []string, s string) int {
	for i, v := range f {
		if v == s {
			return i
		}
	}
	return -1
}

// ids are the log's IDs of what a run reports on.
type ids struct {
	queue   int64         // the receiver's ToR downlink
	senders map[int64]int // a sender's log IDs → its host
}

// parseIDMap reads the idmap.txt htsim_uec writes in its working
// directory ("ID name" lines) for the receiver's downlink queue, named
// LS<tor>->DST<host>(0), and the senders, Uec_<src>_<receiver>.
func parseIDMap(r io.Reader, tor, receiver int) (ids, error) {
	m := ids{queue: -1, senders: map[int64]int{}}
	queue := fmt.Sprintf("LS%d->DST%d(0)", tor, receiver)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		idText, name, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(idText, 10, 64)
		if err != nil {
			return m, fmt.Errorf("htsim idmap: %q: %v", sc.Text(), err)
		}
		if name == queue {
			m.queue = id
		} else if src, dst, ok := flowName(name); ok && dst == receiver {
			m.senders[id] = src
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if m.queue < 0 {
		return m, fmt.Errorf("htsim idmap: no queue %s", queue)
	}
	return m, nil
}

// queueSample is one sample of the receiver's queue: its bytes at tPs
// and the most it held since the sample before.
type queueSample struct {
	tPs, lastBytes, maxBytes int64
}

// logRecords is what a run's log says about the receiver's queue and the
// senders.
type logRecords struct {
	samples  []queueSample
	finishPs map[int]int64 // by sender
}

// parseLog reads parse_output -ascii's lines: "T Type QUEUE_APPROX ID n
// Ev RANGE LastQ b MinQ b MaxQ b" for the queue and "T Type FLOW_EVENT
// SrcID n Ev FINISH ..." for the senders, T in seconds to the ns.
func parseLog(r io.Reader, m ids) (logRecords, error) {
	lr := logRecords{finishPs: map[int]int64{}}
	queueID := strconv.FormatInt(m.queue, 10)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 7 || f[1] != "Type" {
			continue
		}
		bad := func(err error) (logRecords, error) {
			return lr, fmt.Errorf("htsim log: %q: %v", sc.Text(), err)
		}
		switch {
		case f[2] == "QUEUE_APPROX" && f[3] == "ID" && f[4] == queueID && f[5] == "Ev" && f[6] == "RANGE":
			if len(f) < 13 || f[7] != "LastQ" || f[11] != "MaxQ" {
				return bad(fmt.Errorf("want LastQ, MinQ, MaxQ"))
			}
			t, err := seconds(f[0])
			if err != nil {
				return bad(err)
			}
			last, err1 := strconv.ParseInt(f[8], 10, 64)
			most, err2 := strconv.ParseInt(f[12], 10, 64)
			if err1 != nil || err2 != nil {
				return bad(fmt.Errorf("queue bytes: %v, %v", err1, err2))
			}
			lr.samples = append(lr.samples, queueSample{tPs: t, lastBytes: last, maxBytes: most})
		case f[2] == "FLOW_EVENT" && f[3] == "SrcID" && f[5] == "Ev" && f[6] == "FINISH":
			id, err := strconv.ParseInt(f[4], 10, 64)
			if err != nil {
				return bad(err)
			}
			src, ok := m.senders[id]
			if !ok {
				continue
			}
			t, err := seconds(f[0])
			if err != nil {
				return bad(err)
			}
			lr.finishPs[src] = t
		}
	}
	return lr, sc.Err()
}

// seconds reads a log time in seconds (9 decimals) as ps.
func seconds(s string) (int64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) {
		return 0, fmt.Errorf("time %q: want seconds", s)
	}
	return int64(math.Round(v*1e9)) * 1e3, nil
}
