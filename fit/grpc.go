package fit

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// gRPC metadata keys: the scope and the caller travel with a call, the
// lineage and a refusal of the scope come back in its trailers.
const (
	MetadataScope   = "troop-fit"
	MetadataCaller  = "troop-fit-caller"
	MetadataLineage = "troop-lineage"
	MetadataError   = "troop-fit-error"
)

// GRPCCode returns the gRPC code named name (one of GRPCCodes).
func GRPCCode(name string) (codes.Code, bool) {
	for i, n := range GRPCCodes {
		if n == name {
			return codes.Code(i + 1), true
		}
	}
	return codes.Unknown, false
}

// grpcError is what an injected fault at a gRPC point returns: a gRPC
// status (code:C its code; a timeout DeadlineExceeded; anything else
// Unavailable, as grpc-go reports a reset connection), inside an
// InjectedError, so both status.Code(err) and IsInjected(err) see it.
func grpcError(point string, fault Fault, err error) error {
	ie := &InjectedError{}
	if !errors.As(err, &ie) {
		return err // a canceled delay
	}
	code := codes.Unavailable
	switch fault.Kind {
	case Code:
		code, _ = GRPCCode(fault.Code)
	case Timeout:
		code = codes.DeadlineExceeded
	}
	ie.Action = fault.Action()
	ie.Err = status.Error(code, "fit: "+fault.Action()+" injected at "+point)
	return ie
}

// GRPCStatus is the gRPC status of an injected fault (Unavailable unless it
// holds one), so status.Code(err) reads it as grpc-go reads a real one.
func (e *InjectedError) GRPCStatus() *status.Status {
	if s, ok := status.FromError(e.Err); ok && e.Err != nil {
		return s
	}
	return status.New(codes.Unavailable, e.Error())
}

// beginGRPC reads the scope of an incoming call and starts its lineage; the
// entry (no caller in the metadata) passes its own point first. It returns
// an error to end the call with: a refused scope (InvalidArgument, and the
// MetadataError trailer), or the entry's injected fault.
func beginGRPC(ctx context.Context, service string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	scope, err := ParseScope(strings.Join(md.Get(MetadataScope), ","))
	if err != nil {
		grpc.SetTrailer(ctx, metadata.Pairs(MetadataError, service+": "+err.Error()))
		return ctx, status.Error(codes.InvalidArgument, err.Error())
	}
	ctx = propagation.TraceContext{}.Extract(ctx, mdCarrier(md))
	ctx, _ = Begin(ctx, service, scope)
	if len(md.Get(MetadataCaller)) == 0 {
		point := EntryPoint(service)
		call, inner, fault := enterProto(ctx, point, ProtoGRPC)
		err := inject(inner, point, fault)
		if err != nil {
			err = grpcError(point, fault, err)
		}
		leave(inner, call, err)
		if err != nil {
			return ctx, err
		}
	}
	return ctx, nil
}

// endGRPC records the call's outcome, sends the lineage (and a callee's
// refusal of the scope) back in the trailers, and hands the tree to done.
func endGRPC(ctx context.Context, err error, done func(context.Context, *Call)) {
	r, ok := ctx.Value(ctxKey{}).(*request)
	if !ok {
		return
	}
	r.mu.Lock()
	r.root.OK = err == nil
	r.root.Duration = time.Since(r.root.Start)
	rejected := *r.rejected
	r.mu.Unlock()
	tree := Snapshot(ctx)
	md := metadata.Pairs(MetadataLineage, EncodeLineage(tree))
	if rejected != "" {
		md.Set(MetadataError, rejected)
	}
	grpc.SetTrailer(ctx, md)
	if done != nil {
		done(ctx, tree)
	}
}

// UnaryServerInterceptor serves unary calls as service (made a valid name
// by Name), as Middleware does for HTTP: the scope comes in the metadata
// (MetadataScope; a malformed one is refused with InvalidArgument and the
// MetadataError trailer), the lineage goes back in the MetadataLineage
// trailer, and a call from outside passes EntryPoint(service) first. done,
// when set, gets every finished tree.
func UnaryServerInterceptor(service string, done func(context.Context, *Call)) grpc.UnaryServerInterceptor {
	service = Name(service)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := beginGRPC(ctx, service)
		if err == nil {
			var resp any
			resp, err = handler(ctx, req)
			endGRPC(ctx, err, done)
			return resp, err
		}
		endGRPC(ctx, err, done)
		return nil, err
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming calls:
// the lineage of the whole stream goes back in its trailers.
func StreamServerInterceptor(service string, done func(context.Context, *Call)) grpc.StreamServerInterceptor {
	service = Name(service)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := beginGRPC(ss.Context(), service)
		if err == nil {
			err = handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
		}
		endGRPC(ctx, err, done)
		return err
	}
}

type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

// GRPCCallee names the service a call goes to: by default the gRPC service
// of its method ("/shop.Prices/Get" is "shop.Prices").
type GRPCCallee func(method string) string

func (f GRPCCallee) name(method string) string {
	if f != nil {
		return Name(f(method))
	}
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return Name(svc)
}

// outgoing starts the point of a call from the request in ctx: its node,
// the context the call runs in (scope and caller in the metadata), and the
// injected fault's error, if the scope fails the point. ok is false outside
// an instrumented request.
func outgoing(ctx context.Context, method string, callee GRPCCallee) (call *Call, out context.Context, err error, ok bool) {
	r, ok := ctx.Value(ctxKey{}).(*request)
	if !ok {
		return nil, ctx, nil, false
	}
	point := r.service + "->" + callee.name(method)
	call, ctx, fault := enterProto(ctx, point, ProtoGRPC)
	if err := inject(ctx, point, fault); err != nil {
		return call, ctx, grpcError(point, fault, err), true
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(MetadataCaller, r.service)
	md.Set("traceparent", traceparent(ctx, call))
	if len(r.scope.Faults) > 0 {
		md.Set(MetadataScope, r.scope.String())
	} else {
		md.Delete(MetadataScope)
	}
	return call, metadata.NewOutgoingContext(ctx, md), nil, true
}

// incoming hangs the callee's lineage from the trailers under call, notes a
// refusal of the scope, and records the call's outcome.
func incoming(ctx context.Context, call *Call, trailer metadata.MD, err error) {
	r := ctx.Value(ctxKey{}).(*request)
	if vs := trailer.Get(MetadataLineage); len(vs) > 0 {
		h := make(map[string][]string)
		h[LineageHeader] = vs[:1]
		if sub, _ := DecodeLineage(h); sub != nil {
			hangRemote(ctx, call, sub)
		}
	}
	if vs := trailer.Get(MetadataError); len(vs) > 0 {
		r.mu.Lock()
		if *r.rejected == "" {
			*r.rejected = vs[0]
		}
		r.mu.Unlock()
	}
	leave(ctx, call, err)
}

// UnaryClientInterceptor makes every unary call of an instrumented request
// the point "caller->callee" (callee by default the method's gRPC service):
// failed when the scope says so (a gRPC status error: code:C gives C), the
// scope passed on in the metadata, the callee's lineage hung under the
// call. Any error is a failed call.
func UnaryClientInterceptor(callee GRPCCallee) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		call, ctx, err, ok := outgoing(ctx, method, callee)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if err != nil {
			leave(ctx, call, err)
			return err
		}
		var trailer metadata.MD
		err = invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
		incoming(ctx, call, trailer, err)
		return err
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streaming calls:
// the call's outcome and lineage are recorded when the stream ends (a
// receive returns io.EOF or an error).
func StreamClientInterceptor(callee GRPCCallee) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		call, ctx, err, ok := outgoing(ctx, method, callee)
		if !ok {
			return streamer(ctx, desc, cc, method, opts...)
		}
		if err != nil {
			leave(ctx, call, err)
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			leave(ctx, call, err)
			return nil, err
		}
		return &clientStream{ClientStream: cs, ctx: ctx, call: call}, nil
	}
}

type clientStream struct {
	grpc.ClientStream
	ctx  context.Context
	call *Call
	once sync.Once
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.once.Do(func() {
			callErr := err
			if errors.Is(err, io.EOF) {
				callErr = nil
			}
			incoming(s.ctx, s.call, s.Trailer(), callErr)
		})
	}
	return err
}

// mdCarrier reads W3C trace context from gRPC metadata.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if vs := metadata.MD(c).Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}
func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }
func (c mdCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}
