package fit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes of a lineage exported as OpenTelemetry spans.
const (
	attrService     = "troop.service"
	attrPoint       = "troop.point"
	attrOK          = "troop.ok"
	attrUsed        = "troop.used"
	attrInjected    = "troop.injected"
	attrAlternative = "troop.alternative_of"
	attrError       = "troop.error"
)

// NewSpanExporter returns an OpenTelemetry span exporter for dest: "file:PATH"
// appends JSON spans (one per line, the OTel Go SDK's stdouttrace format) to
// PATH, "otlp:URL" posts OTLP/HTTP to URL (such as
// http://localhost:4318/v1/traces). The io.Closer closes the file, if any.
func NewSpanExporter(ctx context.Context, dest string) (sdktrace.SpanExporter, io.Closer, error) {
	kind, arg, _ := strings.Cut(dest, ":")
	switch kind {
	case "file":
		f, err := os.OpenFile(arg, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, err
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(f))
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		return exp, f, nil
	case "otlp":
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(arg))
		return exp, io.NopCloser(nil), err
	}
	return nil, nil, fmt.Errorf("fit: span destination %q: want file:PATH or otlp:URL", dest)
}

// SpanWriter writes lineage trees as spans through an exporter, each tree a
// trace whose span times are the calls' own.
type SpanWriter struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// NewSpanWriter writes through exp; each span is exported when it ends.
func NewSpanWriter(exp sdktrace.SpanExporter) *SpanWriter {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	return &SpanWriter{provider: tp, tracer: tp.Tracer("github.com/troop-lab/troop/fit")}
}

// Write exports one tree.
func (w *SpanWriter) Write(ctx context.Context, root *Call) {
	w.span(ctx, root)
}

func (w *SpanWriter) span(ctx context.Context, c *Call) {
	name := c.Point
	if name == "" {
		name = c.Service
	}
	attrs := []attribute.KeyValue{attribute.Bool(attrOK, c.OK), attribute.Bool(attrUsed, c.Used)}
	for k, v := range map[string]string{attrService: c.Service, attrPoint: c.Point, attrInjected: string(c.Injected), attrAlternative: c.AlternativeOf, attrError: c.Error} {
		if v != "" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	ctx, s := w.tracer.Start(ctx, name, trace.WithTimestamp(c.Start), trace.WithAttributes(attrs...))
	if !c.OK {
		s.SetStatus(codes.Error, c.Error)
	}
	for _, k := range c.Calls {
		w.span(ctx, k)
	}
	s.End(trace.WithTimestamp(c.Start.Add(c.Duration)))
}

// Close flushes and shuts the exporter down.
func (w *SpanWriter) Close(ctx context.Context) error { return w.provider.Shutdown(ctx) }

// spanJSON is the part of stdouttrace's JSON span that lineage needs.
type spanJSON struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ SpanID string }
	StartTime   time.Time
	EndTime     time.Time
	Attributes  []struct {
		Key   string
		Value struct {
			Type  string
			Value any
		}
	}
}

// ReadSpans reads JSON spans written by a "file:" exporter and rebuilds one
// lineage tree per trace, in the order their roots appear. Spans without the
// troop attributes are ignored.
func ReadSpans(r io.Reader) ([]*Call, error) {
	dec := json.NewDecoder(r)
	type node struct {
		call   *Call
		parent string
		trace  string
	}
	nodes := map[string]*node{}
	var order []string
	for {
		var s spanJSON
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fit: read spans: %w", err)
		}
		c := &Call{Start: s.StartTime, Duration: s.EndTime.Sub(s.StartTime)}
		troop := false
		for _, a := range s.Attributes {
			str, _ := a.Value.Value.(string)
			b, _ := a.Value.Value.(bool)
			switch a.Key {
			case attrService:
				c.Service, troop = str, true
			case attrPoint:
				c.Point, troop = str, true
			case attrOK:
				c.OK = b
			case attrUsed:
				c.Used = b
			case attrInjected:
				c.Injected = Kind(str)
			case attrAlternative:
				c.AlternativeOf = str
			case attrError:
				c.Error = str
			}
		}
		if !troop {
			continue
		}
		nodes[s.SpanContext.SpanID] = &node{call: c, parent: s.Parent.SpanID, trace: s.SpanContext.TraceID}
		order = append(order, s.SpanContext.SpanID)
	}
	// Spans end children first, so link them once all are read, and order
	// siblings by start time.
	var roots []*Call
	for _, id := range order {
		n := nodes[id]
		if p, ok := nodes[n.parent]; ok && p.trace == n.trace {
			p.call.Calls = append(p.call.Calls, n.call)
		} else {
			roots = append(roots, n.call)
		}
	}
	for _, n := range nodes {
		slices.SortStableFunc(n.call.Calls, func(a, b *Call) int { return a.Start.Compare(b.Start) })
	}
	return roots, nil
}
