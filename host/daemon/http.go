package daemon

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics (Prometheus text or protobuf), /healthz: the
// Health JSON, status 200 when ok, 503 when degraded or draining, and
// /check: the lab check's last verdicts (CheckState; 404 without one).
func (d *Daemon) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{d}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogErrorLog{d}, ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := d.Health()
		w.Header().Set("Content-Type", "application/json")
		if h.Status != "ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(h)
	})
	mux.HandleFunc("GET /check", func(w http.ResponseWriter, _ *http.Request) {
		st, ok := d.CheckState()
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error": "no lab check configured (lab.check)"}` + "\n"))
			return
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
	return mux
}

type slogErrorLog struct{ d *Daemon }

func (l slogErrorLog) Println(v ...any) { l.d.log.Warn("metrics", "err", v) }
