package fit

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
)

// BaggageKey is the W3C baggage entry that carries the scope over HTTP.
const BaggageKey = "troop-fit"

// LineageHeader is the response header that carries a service's lineage
// back to its caller (base64 of the JSON call tree), so the entry service's
// answer holds the lineage of the whole request.
const LineageHeader = "Troop-Lineage"

// Protocols of calls, in Call.Proto.
const (
	ProtoHTTP = "http"
	ProtoGRPC = "grpc"
)

// Applies reports whether fault f can be injected as itself at a point of
// protocol proto: a status at an HTTP call, a gRPC code at a gRPC call, a
// reset at either, a hold at the store's points; an error, a timeout or a
// delay anywhere. Elsewhere the point fails as an error that names the
// fault.
func Applies(f Fault, proto string) bool {
	switch f.Kind {
	case Status:
		return proto == ProtoHTTP
	case Code:
		return proto == ProtoGRPC
	case Reset:
		return proto == ProtoHTTP || proto == ProtoGRPC
	case Hold:
		return proto != ProtoHTTP && proto != ProtoGRPC
	}
	return true
}

// ErrorHeader is set on an answer when a service refused the request's
// scope (malformed): on the refusing service's 400, and on the answer of
// every instrumented caller above it, so the entry's answer says that the
// request ran under no scope at all, whatever its status.
const ErrorHeader = "Troop-Fit-Error"

// CallerHeader names the instrumented service that sent a request (set by
// Transport). A request without it comes from outside: the service serving
// it is the entry, and its own failure is the point EntryPoint(service).
const CallerHeader = "Troop-Fit-Caller"

// EntryPoint is the point at which the entry service itself fails:
// "client->SERVICE", the call from outside into it.
func EntryPoint(service string) string { return "client->" + service }

// maxLineageHeader bounds the lineage a caller reads back.
const maxLineageHeader = 1 << 20

// ScopeFromHeader reads the scope from an HTTP request's baggage.
func ScopeFromHeader(h http.Header) (Scope, error) {
	v := h.Get("baggage")
	if v == "" {
		return Scope{}, nil
	}
	b, err := baggage.Parse(v)
	if err != nil {
		return Scope{}, fmt.Errorf("fit: baggage header: %w", err)
	}
	return ParseScope(b.Member(BaggageKey).Value())
}

// SetScopeHeader puts scope in the baggage of h, keeping other entries.
func SetScopeHeader(h http.Header, scope Scope) error {
	b, err := baggage.Parse(h.Get("baggage"))
	if err != nil {
		b = baggage.Baggage{}
	}
	b = b.DeleteMember(BaggageKey)
	if len(scope.Faults) > 0 {
		m, err := baggage.NewMemberRaw(BaggageKey, scope.String())
		if err != nil {
			return fmt.Errorf("fit: scope as baggage: %w", err)
		}
		if b, err = b.SetMember(m); err != nil {
			return fmt.Errorf("fit: scope as baggage: %w", err)
		}
	}
	if s := b.String(); s != "" {
		h.Set("baggage", s)
	} else {
		h.Del("baggage")
	}
	return nil
}

// EncodeLineage is the text of the lineage header for a tree.
func EncodeLineage(c *Call) string {
	b, _ := json.Marshal(c) // a Call always marshals
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeLineage reads a lineage header; nil, nil when there is none.
func DecodeLineage(h http.Header) (*Call, error) {
	v := h.Get(LineageHeader)
	if v == "" {
		return nil, nil
	}
	if len(v) > maxLineageHeader {
		return nil, fmt.Errorf("fit: lineage header of %d bytes, over %d", len(v), maxLineageHeader)
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("fit: lineage header: %w", err)
	}
	var c Call
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("fit: lineage header: %w", err)
	}
	return &c, nil
}

// Middleware serves next as service (made a valid name by Name): it reads
// the request's scope from its baggage (a malformed scope is answered 400
// with the ErrorHeader, naming what is wrong), records the request's
// lineage, and returns it in the LineageHeader of the answer. A request
// from outside (without the CallerHeader) passes the point
// EntryPoint(service) first, so the entry service's own failure is a point:
// injected there, the handler does not run and the answer is a 503 (504
// for a timeout). When done is set it gets every finished tree (to export
// it as spans), with a context that holds the caller's traceparent, if it
// sent one.
func Middleware(service string, next http.Handler, done func(context.Context, *Call)) http.Handler {
	service = Name(service)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope, err := ScopeFromHeader(r.Header)
		if err != nil {
			w.Header().Set(ErrorHeader, service+": "+err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// A W3C traceparent makes the request's spans part of the
		// caller's trace, so the caller finds its lineage among exported
		// spans (SpanTail).
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, _ = Begin(ctx, service, scope)
		lw := &lineageWriter{ResponseWriter: w, ctx: ctx}
		if r.Header.Get(CallerHeader) != "" || serveEntry(ctx, lw, service) {
			next.ServeHTTP(lw, r.WithContext(ctx))
		}
		lw.writeHeader(http.StatusOK) // a handler that wrote nothing
		if done != nil {
			done(ctx, Snapshot(ctx))
		}
	})
}

// serveEntry passes the entry point, a leaf before the handler's own
// points; false when the scope failed it and the answer is written (a 503,
// 504 for a timeout, the status of status:N) or the connection reset.
func serveEntry(ctx context.Context, w *lineageWriter, service string) bool {
	point := EntryPoint(service)
	call, inner, fault := enterProto(ctx, point, ProtoHTTP)
	err := inject(inner, point, fault)
	leave(inner, call, err)
	if err == nil {
		return true
	}
	status := http.StatusServiceUnavailable
	switch fault.Kind {
	case Timeout:
		status = http.StatusGatewayTimeout
	case Status:
		status = fault.Status
	case Reset:
		if resetConn(w.ResponseWriter) {
			w.written = true
			return false
		}
	}
	w.writeHeader(status)
	io.WriteString(w.ResponseWriter, err.Error()+"\n")
	return false
}

// resetConn closes the connection of w with a TCP reset; false when it
// cannot (HTTP/2, a writer that does not hijack).
func resetConn(w http.ResponseWriter) bool {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // close sends RST, not FIN
	}
	conn.Close()
	return true
}

// lineageWriter adds the lineage header when the handler starts its answer:
// by then the handler has made its calls.
type lineageWriter struct {
	http.ResponseWriter
	ctx     context.Context
	written bool
}

func (w *lineageWriter) writeHeader(status int) {
	if w.written {
		return
	}
	w.written = true
	r := w.ctx.Value(ctxKey{}).(*request)
	r.mu.Lock()
	r.root.OK = status < 500
	r.root.Duration = time.Since(r.root.Start)
	r.mu.Unlock()
	r.mu.Lock()
	rejected := *r.rejected
	r.mu.Unlock()
	if rejected != "" {
		w.Header().Set(ErrorHeader, rejected)
	}
	w.Header().Set(LineageHeader, EncodeLineage(Snapshot(w.ctx)))
	w.ResponseWriter.WriteHeader(status)
}

func (w *lineageWriter) WriteHeader(status int) { w.writeHeader(status) }

func (w *lineageWriter) Write(b []byte) (int, error) {
	w.writeHeader(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Transport is an http.RoundTripper for the calls of an instrumented
// service: each call is the injection point "caller->callee", fails when the
// request's scope says so, carries the scope on in baggage, and hangs the
// callee's lineage (from its answer) under the call. An answer of status
// 500 or more counts as a failed call. Injected, status:N is an answer of
// that status (the callee is not called), reset an error that wraps
// syscall.ECONNRESET, a gRPC code an error. A callee that refused the scope
// (ErrorHeader) makes the caller's own answer carry the ErrorHeader too.
type Transport struct {
	Base http.RoundTripper // http.DefaultTransport when nil
	// Callee names the service a request goes to; when nil, the URL's host
	// and port made a valid name ("127.0.0.1_8080", "ratings_80"). Name
	// your services: a port changes from run to run, and a scenario names
	// its points.
	Callee func(*http.Request) string
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	r, ok := ctx.Value(ctxKey{}).(*request)
	if !ok {
		return t.base().RoundTrip(req)
	}
	callee := req.URL.Host
	if t.Callee != nil {
		callee = t.Callee(req)
	}
	point := r.service + "->" + Name(callee)
	call, ctx, fault := enterProto(ctx, point, ProtoHTTP)
	if fault.Kind == Status {
		// The callee's answer, as a status: the caller reads it as it
		// would a real one.
		err := &InjectedError{Point: point, Kind: Status, Action: fault.Action()}
		leave(ctx, call, err)
		body := err.Error() + "\n"
		return &http.Response{Status: fmt.Sprintf("%d %s", fault.Status, http.StatusText(fault.Status)), StatusCode: fault.Status,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}, nil
	}
	if err := inject(ctx, point, fault); err != nil {
		leave(ctx, call, err)
		return nil, err
	}
	req = req.Clone(ctx)
	req.Header.Set(CallerHeader, r.service)
	req.Header.Set("traceparent", traceparent(ctx, call))
	if err := SetScopeHeader(req.Header, r.scope); err != nil {
		leave(ctx, call, err)
		return nil, err
	}
	resp, err := t.base().RoundTrip(req)
	if err != nil {
		leave(ctx, call, err)
		return nil, err
	}
	if sub, _ := DecodeLineage(resp.Header); sub != nil {
		hangRemote(ctx, call, sub)
	}
	r.mu.Lock()
	if why := resp.Header.Get(ErrorHeader); why != "" && *r.rejected == "" {
		*r.rejected = why
	}
	r.mu.Unlock()
	var callErr error
	if resp.StatusCode >= 500 {
		callErr = fmt.Errorf("%s: HTTP %d", point, resp.StatusCode)
	}
	leave(ctx, call, callErr)
	return resp, nil
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}
