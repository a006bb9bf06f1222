package fit

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxOTLPBody bounds one OTLP/HTTP request the receiver reads.
const maxOTLPBody = 16 << 20

// A SpanSource hands out the lineage of one request from exported spans:
// the tree of the span whose parent is the request's W3C traceparent.
// SpanTail reads a file; OTLPReceiver is an OTLP/HTTP endpoint.
type SpanSource interface {
	Lineage(ctx context.Context, traceID, parentID string, wait time.Duration) (*Call, error)
}

// spanStore keeps spans by trace until the tree a caller waits for is in.
type spanStore struct {
	mu     sync.Mutex
	traces map[string][]exportedSpan
}

func (s *spanStore) add(e exportedSpan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.traces == nil {
		s.traces = map[string][]exportedSpan{}
	}
	s.traces[e.traceID] = append(s.traces[e.traceID], e)
}

// find returns the tree of the span of traceID whose parent is parentID,
// once it is in, and forgets the trace.
func (s *spanStore) find(traceID, parentID string) (*Call, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	spans := s.traces[traceID]
	for _, sp := range spans {
		if sp.parent == parentID {
			delete(s.traces, traceID)
			for _, r := range link(spans) {
				if r.spanID == sp.spanID {
					return r.call, true
				}
			}
		}
	}
	return nil, false
}

// waitFor polls find (after poll, which reads more spans) until wait passes.
func (s *spanStore) waitFor(ctx context.Context, traceID, parentID string, wait time.Duration, where string, poll func() error) (*Call, error) {
	deadline := time.Now().Add(wait)
	for {
		if err := poll(); err != nil {
			return nil, err
		}
		if c, ok := s.find(traceID, parentID); ok {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("fit: no span of trace %s under %s %s after %v (do the services export their lineage there?)", traceID, parentID, where, wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// An OTLPReceiver is a small OTLP/HTTP trace endpoint (POST /v1/traces,
// protobuf or JSON): services export their lineage to it
// (NewSpanExporter(ctx, receiver.Endpoint())), and a caller reads the
// lineage of its request back with Lineage. It keeps spans in memory until
// their request's tree is asked for.
type OTLPReceiver struct {
	ln    net.Listener
	srv   *http.Server
	store spanStore
}

// NewOTLPReceiver serves a receiver on addr (HOST:PORT, port 0 for any).
func NewOTLPReceiver(addr string) (*OTLPReceiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fit: OTLP receiver: %w", err)
	}
	r := &OTLPReceiver{ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serve)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

// Endpoint is the URL services export to.
func (r *OTLPReceiver) Endpoint() string { return "http://" + r.ln.Addr().String() + "/v1/traces" }

// Close stops the receiver.
func (r *OTLPReceiver) Close() error { return r.srv.Close() }

// Lineage waits up to wait for the tree of the span of traceID whose parent
// is parentID.
func (r *OTLPReceiver) Lineage(ctx context.Context, traceID, parentID string, wait time.Duration) (*Call, error) {
	return r.store.waitFor(ctx, traceID, parentID, wait, "at "+r.Endpoint(), func() error { return nil })
}

func (r *OTLPReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxOTLPBody+1))
	if err == nil && len(body) > maxOTLPBody {
		err = fmt.Errorf("body over %d bytes", maxOTLPBody)
	}
	var spans []exportedSpan
	if err == nil {
		spans, err = decodeOTLP(body, req.Header.Get("Content-Type"))
	}
	if err != nil {
		http.Error(w, "fit: OTLP receiver: "+err.Error(), http.StatusBadRequest)
		return
	}
	for _, s := range spans {
		r.store.add(s)
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// decodeOTLP reads an OTLP/HTTP trace export (protobuf, or JSON when
// contentType says so) into the lineage spans it holds; spans without the
// troop attributes are skipped.
func decodeOTLP(body []byte, contentType string) ([]exportedSpan, error) {
	var req coltracepb.ExportTraceServiceRequest
	var err error
	if strings.HasPrefix(contentType, "application/json") {
		err = protojson.Unmarshal(body, &req)
	} else {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace request: %w", err)
	}
	var out []exportedSpan
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				var js spanJSON
				js.Name = sp.GetName()
				js.SpanContext.TraceID = hex.EncodeToString(sp.GetTraceId())
				js.SpanContext.SpanID = hex.EncodeToString(sp.GetSpanId())
				js.Parent.SpanID = hex.EncodeToString(sp.GetParentSpanId())
				js.StartTime = time.Unix(0, int64(sp.GetStartTimeUnixNano()))
				js.EndTime = time.Unix(0, int64(sp.GetEndTimeUnixNano()))
				for _, kv := range sp.GetAttributes() {
					js.Attributes = append(js.Attributes, attrJSON(kv))
				}
				if e, ok := decodeSpan(js); ok {
					out = append(out, e)
				}
			}
		}
	}
	return out, nil
}

// attrJSON is an OTLP attribute as stdouttrace's JSON has it.
func attrJSON(kv *commonpb.KeyValue) (a spanAttr) {
	a.Key = kv.GetKey()
	switch v := kv.GetValue().GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		a.Value.Value = v.StringValue
	case *commonpb.AnyValue_BoolValue:
		a.Value.Value = v.BoolValue
	}
	return a
}
