package api

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/troop-lab/troop/chaos"
)

// metrics answers GET /metrics in the Prometheus text format (0.0.4).
//
// The termination counts come from the records at scrape time rather than
// from counters in memory, so that they survive a daemon restart and agree
// with GET /api/v1/chaos. For the same reason they are gauges: pruning the
// records past their retention makes them go down.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	ts, err := h.opt.Records.Terminations(r.Context(), chaos.Query{})
	if err != nil {
		h.opt.Logger.Error("chaos api: metrics", "err", err)
		http.Error(w, "cannot read the records", http.StatusInternalServerError)
		return
	}
	type key struct{ group, outcome, reason string }
	counts := map[key]int{}
	for _, t := range ts {
		counts[key{t.Group, string(t.Outcome), string(t.Reason)}]++
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	// A stable order keeps scrapes diffable and tests simple.
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.group != b.group {
			return a.group < b.group
		}
		if a.outcome != b.outcome {
			return a.outcome < b.outcome
		}
		return a.reason < b.reason
	})

	var b strings.Builder
	b.WriteString("# HELP troop_chaos_terminations Terminations in the records (within retention), by group, outcome and reason.\n")
	b.WriteString("# TYPE troop_chaos_terminations gauge\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "troop_chaos_terminations{group=\"%s\",outcome=\"%s\",reason=\"%s\"} %d\n",
			escapeLabel(k.group), escapeLabel(k.outcome), escapeLabel(k.reason), counts[k])
	}
	stopped := 0
	if h.opt.Switch.Stopped() {
		stopped = 1
	}
	b.WriteString("# HELP troop_chaos_stopped Whether the global stop is on (1) or not (0).\n")
	b.WriteString("# TYPE troop_chaos_stopped gauge\n")
	fmt.Fprintf(&b, "troop_chaos_stopped %d\n", stopped)

	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}

// escapeLabel escapes a label value as the text format asks: backslash,
// double quote and newline.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
