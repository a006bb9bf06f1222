// Package grpcshop is three gRPC services instrumented with fit's
// interceptors, as docs/fit.md shows: front's Get reads its session (a
// point inside), calls prices (required; prices reads its database) and
// streams reviews (optional). Planted fault: front mistakes a reviews
// stream that ends with ResourceExhausted for its own quota, and fails.
//
// The messages are protobuf's StringValue, and the services are described
// by hand (grpc.ServiceDesc), so the example needs no generated code.
package grpcshop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/troop-lab/troop/fit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Methods of the three services.
const (
	FrontGet    = "/shop.Front/Get"
	PricesGet   = "/shop.Prices/Get"
	ReviewsList = "/shop.Reviews/List"
)

// Shop is the three services, each a gRPC server on its own loopback port.
type Shop struct {
	Addr    map[string]string // service to HOST:PORT
	servers []*grpc.Server
	conns   []*grpc.ClientConn
}

// unary describes a service of one unary method.
func unary(service, method string, fn func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{
		MethodName: method,
		Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			if icpt == nil {
				return fn(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/" + service + "/" + method}, func(ctx context.Context, req any) (any, error) {
				return fn(ctx, req.(*wrapperspb.StringValue))
			})
		},
	}}}
}

// streaming describes a service of one server-streaming method.
func streaming(service, method string, fn func(*wrapperspb.StringValue, grpc.ServerStream) error) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil), Streams: []grpc.StreamDesc{{
		StreamName:    method,
		ServerStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			return fn(in, ss)
		},
	}}}
}

// Start serves the three services on free loopback ports until Stop.
func Start() (*Shop, error) {
	s := &Shop{Addr: map[string]string{}}
	listeners := map[string]net.Listener{}
	for _, name := range []string{"front", "prices", "reviews"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.Stop()
			return nil, err
		}
		listeners[name] = l
		s.Addr[name] = l.Addr().String()
	}
	// The instrumentation, as docs/fit.md shows it: interceptors on each
	// server and on each client connection.
	dial := func(addr string) (*grpc.ClientConn, error) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(fit.UnaryClientInterceptor(nil)),
			grpc.WithChainStreamInterceptor(fit.StreamClientInterceptor(nil)))
		if err == nil {
			s.conns = append(s.conns, cc)
		}
		return cc, err
	}
	prices, err := dial(s.Addr["prices"])
	if err != nil {
		s.Stop()
		return nil, err
	}
	reviews, err := dial(s.Addr["reviews"])
	if err != nil {
		s.Stop()
		return nil, err
	}
	services := map[string]*grpc.ServiceDesc{
		"front": unary("shop.Front", "Get", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			if err := fit.Do(ctx, "front/session", func(context.Context) error { return nil }); err != nil {
				return nil, status.Error(codes.Unavailable, "no session")
			}
			price := new(wrapperspb.StringValue)
			if err := prices.Invoke(ctx, PricesGet, in, price); err != nil {
				return nil, status.Errorf(codes.Unavailable, "no price: %v", err)
			}
			n, err := readReviews(ctx, reviews, in)
			if status.Code(err) == codes.ResourceExhausted {
				// Planted: the reviews' quota taken for front's own.
				return nil, status.Error(codes.ResourceExhausted, "quota exceeded")
			}
			return wrapperspb.String(fmt.Sprintf("%s: %s, %d reviews", in.GetValue(), price.GetValue(), n)), nil
		}),
		"prices": unary("shop.Prices", "Get", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			if err := fit.Do(ctx, "prices/db", func(context.Context) error { return nil }); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
			return wrapperspb.String("9.99"), nil
		}),
		"reviews": streaming("shop.Reviews", "List", func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
			if err := fit.Do(ss.Context(), "reviews/db", func(context.Context) error { return nil }); err != nil {
				return status.Error(codes.Unavailable, err.Error())
			}
			for i := range 3 {
				if err := ss.SendMsg(wrapperspb.String(fmt.Sprintf("review %d", i+1))); err != nil {
					return err
				}
			}
			return nil
		}),
	}
	for name, l := range listeners {
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(fit.UnaryServerInterceptor(name, nil)),
			grpc.ChainStreamInterceptor(fit.StreamServerInterceptor(name, nil)))
		srv.RegisterService(services[name], nil)
		s.servers = append(s.servers, srv)
		go srv.Serve(l)
	}
	return s, nil
}

// readReviews reads the reviews stream to its end: how many came, and the
// error it ended with, if any.
func readReviews(ctx context.Context, cc *grpc.ClientConn, in *wrapperspb.StringValue) (int, error) {
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, ReviewsList)
	if err != nil {
		return 0, err
	}
	if err := cs.SendMsg(in); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	if err := cs.CloseSend(); err != nil {
		return 0, err
	}
	n := 0
	for {
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		n++
	}
}

// Stop stops the services and closes their connections.
func (s *Shop) Stop() {
	for _, cc := range s.conns {
		cc.Close()
	}
	for _, srv := range s.servers {
		srv.Stop()
	}
}
