package fit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/troop-lab/troop/internal/ctxtime"
	"go.opentelemetry.io/otel/trace"
)

// A Call is one node of a request's lineage: an injection point the request
// passed, what happened there, and the points passed below it. The root of
// a tree is the service that served the request (Service set, Point empty).
type Call struct {
	Service string `json:"service,omitempty"` // root only
	Point   string `json:"point,omitempty"`
	OK      bool   `json:"ok"`
	// Used: the point succeeded, so the service went on with its result
	// (a successful optional call counts too); a failed point never is.
	Used bool `json:"used"`
	// Injected is the fault injected here, if any, as its action: "error",
	// "status:503" (a Kind when the action has no argument).
	Injected Kind `json:"injected,omitempty"`
	// Proto is the protocol of a call ("http", "grpc"), which says the
	// faults it can take (status:N, code:C); empty for a point inside a
	// service.
	Proto    string        `json:"proto,omitempty"`
	Error    string        `json:"error,omitempty"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"`
	Calls    []*Call       `json:"calls,omitempty"`

	// The span of this node when it is exported, chosen when the point is
	// passed, so a call can name it as the parent of the callee's spans
	// (traceparent); the root also holds the request's trace.
	span  trace.SpanID
	trace trace.TraceID
	// remote: a node of a callee's lineage hung under a call; the callee
	// exports it, not this service.
	remote bool
}

// Reached lists every point in the tree, each once, sorted.
func (c *Call) Reached() []string {
	var out []string
	c.walk(func(n *Call) bool {
		if n.Point != "" {
			out = append(out, n.Point)
		}
		return true
	})
	return sortedSet(out)
}

// UsedPoints lists the points the request succeeded through: the used
// points all of whose ancestors were used too. A failed call that the
// caller tolerated (optional, or replaced by a fallback) is not used, and
// neither is anything below it. It is the execution's clause for ldfi:
// failing at least one of these points might have prevented it.
func (c *Call) UsedPoints() []string {
	var out []string
	c.walk(func(n *Call) bool {
		if n == c {
			return true
		}
		if !n.Used {
			return false
		}
		out = append(out, n.Point)
		return true
	})
	return sortedSet(out)
}

// walk visits the tree depth first; visit returns whether to descend.
func (c *Call) walk(visit func(*Call) bool) {
	if !visit(c) {
		return
	}
	for _, k := range c.Calls {
		k.walk(visit)
	}
}

func sortedSet(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// An InjectedError is the error of a point failed by the scope.
type InjectedError struct {
	Point  string
	Kind   Kind
	Action string // the whole action ("status:503"), when it says more than Kind
	Err    error  // what the fault stands for, if anything: syscall.ECONNRESET for a reset
}

func (e *InjectedError) Error() string {
	action := e.Action
	if action == "" {
		action = string(e.Kind)
	}
	if e.Err != nil {
		return fmt.Sprintf("fit: %s injected at %s: %v", action, e.Point, e.Err)
	}
	return fmt.Sprintf("fit: %s injected at %s", action, e.Point)
}

// Unwrap returns what the fault stands for, so an injected reset is
// errors.Is(err, syscall.ECONNRESET) as a real one is.
func (e *InjectedError) Unwrap() error { return e.Err }

// IsInjected reports whether err is, or wraps, an injected fault.
func IsInjected(err error) bool {
	var ie *InjectedError
	return errors.As(err, &ie)
}

// MaxTimeout bounds an injected timeout when the request has no deadline.
var MaxTimeout = 10 * time.Second

// request is what a request carries through its context: its scope and the
// lineage being recorded.
type request struct {
	service  string
	scope    Scope
	mu       *sync.Mutex // guards every Call of the tree, and rejected
	node     *Call       // the node new calls hang under
	root     *Call
	rejected *string // why a callee refused the scope, if one did
}

type ctxKey struct{}

// Begin starts the lineage of a request that service serves under scope, and
// returns the context that carries both. Middleware calls it for HTTP; a
// server of another protocol calls it itself.
func Begin(ctx context.Context, service string, scope Scope) (context.Context, *Call) {
	root := &Call{Service: service, OK: true, Used: true, Start: time.Now(), span: newSpanID()}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		root.trace = sc.TraceID()
	} else {
		rand.Read(root.trace[:])
	}
	return context.WithValue(ctx, ctxKey{}, &request{service: service, scope: scope, mu: &sync.Mutex{}, node: root, root: root, rejected: new(string)}), root
}

func newSpanID() (id trace.SpanID) {
	rand.Read(id[:])
	return id
}

// traceparent is the W3C traceparent a call sends its callee: the request's
// trace, and the call's own span as the parent of the callee's.
func traceparent(ctx context.Context, call *Call) string {
	r := ctx.Value(ctxKey{}).(*request)
	return "00-" + r.root.trace.String() + "-" + call.span.String() + "-01"
}

// hangRemote hangs the calls of a callee's lineage under call, marked as
// the callee's own to export.
func hangRemote(ctx context.Context, call *Call, sub *Call) {
	r := ctx.Value(ctxKey{}).(*request)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range sub.Calls {
		k.walk(func(n *Call) bool { n.remote = true; return true })
		call.Calls = append(call.Calls, k)
	}
}

// ScopeFrom returns the scope of the request in ctx.
func ScopeFrom(ctx context.Context) Scope {
	if r, ok := ctx.Value(ctxKey{}).(*request); ok {
		return r.scope
	}
	return Scope{}
}

// Snapshot returns a deep copy of root, taken under the tree's lock, so it can
// be encoded while calls of the request still run.
func Snapshot(ctx context.Context) *Call {
	r, ok := ctx.Value(ctxKey{}).(*request)
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.root.clone()
}

func (c *Call) clone() *Call {
	out := *c
	out.Calls = make([]*Call, len(c.Calls))
	for i, k := range c.Calls {
		out.Calls[i] = k.clone()
	}
	return &out
}

// Do runs fn as injection point point of the request in ctx: fails it if the
// request's scope says so, and records it in the lineage, with the points fn
// passes below it. The result counts as used when fn succeeds. Outside an
// instrumented request Do just runs fn.
func Do(ctx context.Context, point string, fn func(context.Context) error) error {
	call, ctx, fault := enter(ctx, point)
	if call == nil {
		return fn(ctx)
	}
	err := inject(ctx, point, fault)
	if err == nil {
		err = fn(ctx)
	}
	leave(ctx, call, err)
	return err
}

// enter adds a node for point under the current one and returns it, a
// context in which it is the current node, and the fault the scope puts on
// point (zero Kind for none).
func enter(ctx context.Context, point string) (*Call, context.Context, Fault) {
	return enterProto(ctx, point, "")
}

// enterProto is enter for a call of protocol proto.
func enterProto(ctx context.Context, point, proto string) (*Call, context.Context, Fault) {
	r, ok := ctx.Value(ctxKey{}).(*request)
	if !ok {
		return nil, ctx, Fault{}
	}
	c := &Call{Point: point, Proto: proto, Start: time.Now(), span: newSpanID()}
	fault, _ := r.scope.Lookup(point)
	if fault.Kind != "" {
		c.Injected = Kind(fault.Action())
	}
	r.mu.Lock()
	r.node.Calls = append(r.node.Calls, c)
	r.mu.Unlock()
	below := *r
	below.node = c
	return c, context.WithValue(ctx, ctxKey{}, &below), fault
}

// leave records the outcome of call.
func leave(ctx context.Context, call *Call, err error) {
	r := ctx.Value(ctxKey{}).(*request)
	r.mu.Lock()
	defer r.mu.Unlock()
	call.Duration = time.Since(call.Start)
	call.OK = err == nil
	call.Used = call.OK
	if err != nil {
		call.Error = err.Error()
	}
}

// inject applies fault at point: an error at once, a timeout when the
// request's deadline passes (or MaxTimeout), a delay and then nothing. A
// status, a gRPC code or a reset are the protocol's to answer with
// (Transport, Middleware, the gRPC interceptors); anywhere else they fail
// the point as an error that says which (a reset wraps ECONNRESET).
func inject(ctx context.Context, point string, fault Fault) error {
	switch fault.Kind {
	case "":
		return nil
	case Timeout:
		ctxtime.Sleep(ctx, MaxTimeout) // a timeout fails as one, however the wait ends
		return &InjectedError{Point: point, Kind: Timeout}
	case Delay:
		return ctxtime.Sleep(ctx, fault.Delay)
	case Reset:
		return &InjectedError{Point: point, Kind: Reset, Err: syscall.ECONNRESET}
	}
	return &InjectedError{Point: point, Kind: fault.Kind, Action: fault.Action()}
}
