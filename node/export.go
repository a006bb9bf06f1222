package node

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/troop-lab/troop/fit"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// Lineage export (troop_lineage_export, docs/store.md): the lineage of every
// traced request (a connection with TROOP FIT or TROOP LINEAGE ON; other
// traffic is not traced and costs nothing here) goes out as OpenTelemetry
// spans, to a file or an OTLP/HTTP endpoint: a span for the request, served
// by this node, with a child span per injection point it reached (used when
// its result made the answer). A request that came after TROOP LINEAGE
// TRACEPARENT belongs to that W3C trace, so ldfi finds its spans.

// lineageExport writes lineage as spans.
type lineageExport struct {
	w      *fit.SpanWriter
	closer io.Closer
}

// openLineageExport starts the export troop_lineage_export asks for, if any.
func (n *Node) openLineageExport() error {
	if n.cfg.LineageExport == "" {
		return nil
	}
	exp, closer, err := fit.NewSpanExporter(context.Background(), n.cfg.LineageExport)
	if err != nil {
		return fmt.Errorf("troop_lineage_export %q: %w", n.cfg.LineageExport, err)
	}
	n.export = &lineageExport{w: fit.NewSpanWriter(exp), closer: closer}
	return nil
}

func (n *Node) closeLineageExport() {
	if n.export != nil {
		n.export.w.Close(context.Background())
		n.export.closer.Close()
	}
}

// exportWhenFinished exports tr's lineage once the request has its answer.
func (n *Node) exportWhenFinished(tr *trace) {
	if n.export == nil || tr == nil {
		return
	}
	tr.whenFinished(func() { go n.export.write(n.cfg.Name, tr) })
}

func (e *lineageExport) write(node string, tr *trace) {
	l := tr.lineage()
	tr.mu.Lock()
	start, end, parent := tr.start, tr.end, tr.traceparent
	tr.mu.Unlock()
	root := &fit.Call{Service: node, OK: l.OK, Used: true, Start: start, Duration: end.Sub(start)}
	for _, p := range l.Reached {
		used := slices.Contains(l.Used, p)
		c := &fit.Call{Point: p, OK: used, Used: used, Start: start, Duration: end.Sub(start)}
		if f, ok := tr.scope.Lookup(p); ok {
			c.Injected = f.Kind
		}
		root.Calls = append(root.Calls, c)
	}
	ctx := context.Background()
	if parent != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": parent})
	}
	e.w.Write(ctx, root)
}

// checkTraceparent accepts a W3C traceparent: 00-TRACEID-SPANID-FLAGS.
func checkTraceparent(s string) error {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
	if !oteltrace.SpanContextFromContext(ctx).IsValid() {
		return fmt.Errorf("traceparent %q: want 00-<32 hex digits>-<16 hex digits>-<2 hex digits>", s)
	}
	return nil
}
