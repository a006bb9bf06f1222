// Package grpctarget is the ldfi target of gRPC services instrumented with
// fit's interceptors: a probe is one call to the entry service with the
// scope in its metadata; its lineage comes back in the call's trailers. The
// request is sent as given, already encoded (protobuf bytes), so any method
// can be probed without its generated code.
package grpctarget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/ldfi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Kind is the target kind in specs and scenarios.
const Kind = "grpc"

// Config is one request class: a method of the entry service, and its
// request. The oracle is the call's status: OK or not.
type Config struct {
	Addr   string `json:"addr"`   // the entry service, HOST:PORT (plaintext)
	Method string `json:"method"` // /package.Service/Method
	// Request is the request message, protobuf encoded (base64 in JSON);
	// empty is the message with every field at its default.
	Request []byte `json:"request,omitempty"`
	// Stream: the method streams its answers; every message is read, and
	// the stream must end with OK.
	Stream  bool          `json:"stream,omitempty"`
	Timeout time.Duration `json:"timeout"`
}

// Target probes one gRPC request class.
type Target struct {
	cfg  Config
	conn *grpc.ClientConn
}

// New checks cfg and returns its target; Close closes its connection.
func New(cfg Config) (*Target, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	svc, m, ok := strings.Cut(strings.TrimPrefix(cfg.Method, "/"), "/")
	if !strings.HasPrefix(cfg.Method, "/") || !ok || svc == "" || m == "" || strings.Contains(m, "/") {
		return nil, fmt.Errorf("grpc target: method %q: want /package.Service/Method", cfg.Method)
	}
	if cfg.Addr == "" {
		return nil, errors.New("grpc target: no address: want HOST:PORT")
	}
	conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("grpc target: %w", err)
	}
	return &Target{cfg: cfg, conn: conn}, nil
}

// FromSpec rebuilds a target from its spec (a scenario's).
func FromSpec(s ldfi.Spec) (*Target, error) {
	if s.Kind != Kind {
		return nil, fmt.Errorf("grpc target: spec of kind %q", s.Kind)
	}
	var cfg Config
	dec := json.NewDecoder(strings.NewReader(string(s.Config)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("grpc target: spec: %w", err)
	}
	return New(cfg)
}

// Spec describes the target for scenarios.
func (t *Target) Spec() ldfi.Spec {
	b, _ := json.Marshal(t.cfg) // a Config always marshals
	return ldfi.Spec{Kind: Kind, Config: b}
}

// Close closes the connection.
func (t *Target) Close() error { return t.conn.Close() }

// raw sends and receives messages as the bytes they are encoded as; named
// "proto" so the server decodes them with its protobuf codec.
type raw struct{}

func (raw) Name() string { return "proto" }
func (raw) Marshal(v any) ([]byte, error) {
	return *v.(*[]byte), nil
}
func (raw) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append((*v.(*[]byte))[:0], data...)
	return nil
}

// Probe makes one call under scope and judges it. A call that fails is a
// failed request; a canceled context, or trailers that say a service
// refused the scope, is an error.
func (t *Target) Probe(ctx context.Context, scope fit.Scope) (ldfi.Probe, error) {
	cctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	if len(scope.Faults) > 0 {
		cctx = metadata.AppendToOutgoingContext(cctx, fit.MetadataScope, scope.String())
	}
	var trailer metadata.MD
	req := t.cfg.Request
	if req == nil {
		req = []byte{}
	}
	var err error
	if t.cfg.Stream {
		err = t.stream(cctx, req, &trailer)
	} else {
		var resp []byte
		err = t.conn.Invoke(cctx, t.cfg.Method, &req, &resp, grpc.ForceCodec(raw{}), grpc.Trailer(&trailer))
	}
	if ctx.Err() != nil {
		return ldfi.Probe{}, ctx.Err()
	}
	if why := trailer.Get(fit.MetadataError); len(why) > 0 {
		return ldfi.Probe{}, fmt.Errorf("%w: %s (%s)", ldfi.ErrScopeRejected, why[0], status.Code(err))
	}
	p := ldfi.Probe{OK: err == nil}
	if err != nil {
		s := status.Convert(err)
		p.Detail = fmt.Sprintf("%s: %.80s", s.Code(), s.Message())
	}
	if vs := trailer.Get(fit.MetadataLineage); len(vs) > 0 {
		tree, lerr := fit.DecodeLineage(map[string][]string{fit.LineageHeader: vs[:1]})
		if lerr == nil && tree != nil {
			p.Lineage = ldfi.Lineage{Known: true, Reached: tree.Reached(), Used: tree.UsedPoints(), Tree: tree}
		}
	}
	return p, nil
}

// stream sends req on a server-streaming call and reads every answer.
func (t *Target) stream(ctx context.Context, req []byte, trailer *metadata.MD) error {
	cs, err := t.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, t.cfg.Method, grpc.ForceCodec(raw{}), grpc.Trailer(trailer))
	if err != nil {
		return err
	}
	if err := cs.SendMsg(&req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		var resp []byte
		if err := cs.RecvMsg(&resp); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
