package fit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	attrService  = "troop.service"
	attrPoint    = "troop.point"
	attrOK       = "troop.ok"
	attrUsed     = "troop.used"
	attrInjected = "troop.injected"
	attrError    = "troop.error"
	attrProto    = "troop.proto"
)

// NewSpanExporter returns an OpenTelemetry span exporter for dest: a file
// ("file:PATH", or a bare PATH) gets JSON spans appended, one per line (the
// OTel Go SDK's stdouttrace format); an OTLP/HTTP endpoint ("otlp:URL", or
// a bare http:// or https:// URL such as http://localhost:4318/v1/traces)
// gets them posted. The io.Closer closes the file, if any.
func NewSpanExporter(ctx context.Context, dest string) (sdktrace.SpanExporter, io.Closer, error) {
	kind, arg, _ := strings.Cut(dest, ":")
	switch {
	case strings.HasPrefix(dest, "http://") || strings.HasPrefix(dest, "https://"):
		kind, arg = "otlp", dest
	case kind != "file" && kind != "otlp":
		kind, arg = "file", dest
	}
	if arg == "" {
		return nil, nil, fmt.Errorf("fit: span destination %q: want a file (file:PATH) or an OTLP/HTTP URL", dest)
	}
	if kind == "otlp" {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(arg))
		return exp, io.NopCloser(nil), err
	}
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
}

// SpanWriter writes lineage trees as spans through an exporter, each tree a
// trace whose span times are the calls' own.
type SpanWriter struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// NewSpanWriter writes through exp; each span is exported when it ends.
func NewSpanWriter(exp sdktrace.SpanExporter) *SpanWriter {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(idGenerator{}))
	return &SpanWriter{provider: tp, tracer: tp.Tracer("github.com/troop-lab/troop/fit")}
}

// Write exports one tree: the service's own spans, not those of its
// callees' lineage hung under its calls (the callees export those, as
// children of the calls' spans, in the same trace: the Transport and the
// gRPC interceptors send each callee a traceparent naming its call's span).
func (w *SpanWriter) Write(ctx context.Context, root *Call) {
	w.span(context.WithValue(ctx, traceKey{}, root.trace), root)
}

// The IDs a node's span takes: chosen when the point was passed.
type (
	traceKey struct{}
	spanKey  struct{}
)

// idGenerator gives a span the IDs its node chose, random ones for a node
// that has none (a tree read back, or built by hand).
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, _ := ctx.Value(traceKey{}).(trace.TraceID)
	if !tid.IsValid() {
		rand.Read(tid[:])
	}
	return tid, idGenerator{}.NewSpanID(ctx, tid)
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	sid, _ := ctx.Value(spanKey{}).(trace.SpanID)
	if !sid.IsValid() {
		rand.Read(sid[:])
	}
	return sid
}

func (w *SpanWriter) span(ctx context.Context, c *Call) {
	if c.remote {
		return
	}
	ctx = context.WithValue(ctx, spanKey{}, c.span)
	name := c.Point
	if name == "" {
		name = c.Service
	}
	attrs := []attribute.KeyValue{attribute.Bool(attrOK, c.OK), attribute.Bool(attrUsed, c.Used)}
	for k, v := range map[string]string{attrService: c.Service, attrPoint: c.Point, attrInjected: string(c.Injected), attrError: c.Error, attrProto: c.Proto} {
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
	Attributes  []spanAttr
}

type spanAttr struct {
	Key   string
	Value struct {
		Type  string
		Value any
	}
}

// NewTraceparent returns a random W3C trace ID and span ID, in hex: a caller
// sends "00-TRACE-SPAN-01" as the traceparent of a request, and finds the
// request's spans with SpanTail.Lineage(ctx, TRACE, SPAN, ...).
func NewTraceparent() (traceID, spanID string) {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
}

// An exportedSpan is one span of a lineage, as read back.
type exportedSpan struct {
	traceID, spanID, parent string
	call                    *Call
}

// decodeSpan reads the lineage node of a span; false when the span has no
// troop attributes.
func decodeSpan(s spanJSON) (exportedSpan, bool) {
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
		case attrError:
			c.Error = str
		case attrProto:
			c.Proto = str
		}
	}
	return exportedSpan{traceID: s.SpanContext.TraceID, spanID: s.SpanContext.SpanID, parent: s.Parent.SpanID, call: c}, troop
}

// link hangs every span under its parent and returns the roots (spans whose
// parent is not among them), in the order they were read. Spans end children
// first, so linking waits until all are read; siblings are ordered by start.
func link(spans []exportedSpan) []exportedSpan {
	byID := map[string]exportedSpan{}
	for _, s := range spans {
		byID[s.traceID+"/"+s.spanID] = s
	}
	var roots []exportedSpan
	for _, s := range spans {
		if p, ok := byID[s.traceID+"/"+s.parent]; ok && s.parent != "" {
			p.call.Calls = append(p.call.Calls, s.call)
		} else {
			roots = append(roots, s)
		}
	}
	seen := map[*Call]bool{}
	for _, r := range roots {
		splice(r.call, seen)
	}
	for _, s := range spans {
		slices.SortStableFunc(s.call.Calls, func(a, b *Call) int { return a.Start.Compare(b.Start) })
	}
	return roots
}

// splice puts the points of a callee's own tree (a service's root span,
// exported by the callee as a child of the call's span) directly under the
// call, as the lineage header would have. A span met twice (spans that
// name each other as parents, in a file no exporter wrote) is dropped.
func splice(c *Call, seen map[*Call]bool) {
	seen[c] = true
	var out []*Call
	for _, k := range c.Calls {
		if seen[k] {
			continue
		}
		splice(k, seen)
		if k.Service != "" && k.Point == "" {
			out = append(out, k.Calls...)
		} else {
			out = append(out, k)
		}
	}
	c.Calls = out
}

// ReadSpans reads JSON spans written by a file exporter and rebuilds one
// lineage tree per trace, in the order their roots appear. Spans without the
// troop attributes are ignored.
func ReadSpans(r io.Reader) ([]*Call, error) {
	dec := json.NewDecoder(r)
	var spans []exportedSpan
	for {
		var s spanJSON
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fit: read spans: %w", err)
		}
		if e, ok := decodeSpan(s); ok {
			spans = append(spans, e)
		}
	}
	var out []*Call
	for _, r := range link(spans) {
		out = append(out, r.call)
	}
	return out, nil
}

// A SpanTail reads a spans file that services are still writing, and hands
// out the lineage of one request: the tree of the span whose remote parent
// is the request's W3C traceparent.
type SpanTail struct {
	path    string
	off     int64
	partial []byte // a line not yet complete
	store   spanStore
}

// NewSpanTail reads path from its current end: spans written before are
// not looked at.
func NewSpanTail(path string) (*SpanTail, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &SpanTail{path: path}, nil
	case err != nil:
		return nil, fmt.Errorf("fit: spans file: %w", err)
	}
	return &SpanTail{path: path, off: st.Size()}, nil
}

// Lineage waits up to wait for the span of traceID whose parent is parentID
// (the span ID of the caller's traceparent) and returns its tree. Each span
// is exported when it ends, children first (a callee's before its caller's),
// so the tree is whole once its root is in. The trace's spans are forgotten
// then.
func (t *SpanTail) Lineage(ctx context.Context, traceID, parentID string, wait time.Duration) (*Call, error) {
	return t.store.waitFor(ctx, traceID, parentID, wait, "in "+t.path, t.read)
}

// read reads the lines appended since the last read.
func (t *SpanTail) read() error {
	f, err := os.Open(t.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fit: spans file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, t.off, 1<<40))
	if err != nil {
		return fmt.Errorf("fit: spans file: %w", err)
	}
	t.off += int64(len(b))
	b = append(t.partial, b...)
	for {
		line, rest, ok := bytes.Cut(b, []byte("\n"))
		if !ok {
			break
		}
		b = rest
		var s spanJSON
		if err := json.Unmarshal(line, &s); err != nil {
			return fmt.Errorf("fit: spans file %s: %w", t.path, err)
		}
		if e, ok := decodeSpan(s); ok {
			t.store.add(e)
		}
	}
	t.partial = slices.Clone(b)
	return nil
}
