package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/troop-lab/troop/chaos"
)

// metricsHandler answers GET /metrics: the records' terminations and the
// global stop, and the Go runtime's, the process's and the build's metrics.
func (h *Handler) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		&recordsCollector{h: h},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		version.NewCollector("troop"),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(h.opt.Logger.Handler(), slog.LevelError),
		Registry: reg,
	})
}

var (
	terminationsDesc = prometheus.NewDesc("troop_chaos_terminations",
		"Terminations in the records (within retention), by group, outcome and reason.", []string{"group", "outcome", "reason"}, nil)
	stoppedDesc = prometheus.NewDesc("troop_chaos_stopped", "Whether the global stop is on (1) or not (0).", nil, nil)
)

// recordsCollector counts the terminations in the records at scrape time
// rather than in memory, so that the counts survive a daemon restart and
// agree with GET /api/v1/chaos. For the same reason they are gauges:
// pruning the records past their retention makes them go down.
type recordsCollector struct{ h *Handler }

func (c *recordsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- terminationsDesc
	ch <- stoppedDesc
}

// scrapeTimeout bounds the records' query of one scrape.
const scrapeTimeout = 10 * time.Second

func (c *recordsCollector) Collect(ch chan<- prometheus.Metric) {
	stopped := 0.0
	if c.h.opt.Switch.Stopped() {
		stopped = 1
	}
	ch <- prometheus.MustNewConstMetric(stoppedDesc, prometheus.GaugeValue, stopped)
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	ts, err := c.h.opt.Records.Terminations(ctx, chaos.Query{})
	if err != nil {
		// The handler answers 500 and logs it.
		ch <- prometheus.NewInvalidMetric(terminationsDesc, err)
		return
	}
	type key struct{ group, outcome, reason string }
	counts := map[key]int{}
	for _, t := range ts {
		counts[key{t.Group, string(t.Outcome), string(t.Reason)}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(terminationsDesc, prometheus.GaugeValue, float64(n), k.group, k.outcome, k.reason)
	}
}
