// Package fit is request-scoped failure injection: a Scope names the
// injection points that fail for one request and how, travels with the
// request (W3C baggage over HTTP; a RESP command for the store), and every
// instrumented request records its lineage, the tree of injection points it
// passed and which results its answer used.
//
// An injection point is named "service/point" (a step inside a service, such
// as "ratings/cache") or "caller->callee" (a call from one service to
// another, such as "api->ratings").
package fit

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A Kind is how an injection point fails.
type Kind string

const (
	Error   Kind = "error"   // the point fails at once
	Delay   Kind = "delay"   // the point answers after a delay, then normally
	Timeout Kind = "timeout" // the point does not answer until the caller gives up
	Status  Kind = "status"  // an HTTP call is answered with this status
	Code    Kind = "code"    // a gRPC call ends with this status code
	Reset   Kind = "reset"   // the call's connection is reset
	// Hold keeps a call of the store's from leaving until the client that
	// set the scope changes it or hangs up (at most a minute): a test
	// orders its requests against a message it holds back, instead of
	// hoping a slow network does.
	Hold Kind = "hold"
)

// A Fault makes one injection point fail.
type Fault struct {
	Point  string        `json:"point"`
	Kind   Kind          `json:"kind"`
	Delay  time.Duration `json:"delay,omitempty"`  // for Delay
	Status int           `json:"status,omitempty"` // for Status: 400 to 599
	Code   string        `json:"code,omitempty"`   // for Code: a gRPC code name, such as Unavailable
}

// GRPCCodes are the names of the gRPC status codes a fault can end a call
// with (every code but OK), as gRPC's codes package spells them.
var GRPCCodes = []string{"Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
	"OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}

// Action is the fault's text after "POINT=": "error", "delay:50ms",
// "status:503", "code:Unavailable", "reset".
func (f Fault) Action() string {
	switch f.Kind {
	case Delay:
		return "delay:" + f.Delay.String()
	case Status:
		return "status:" + strconv.Itoa(f.Status)
	case Code:
		return "code:" + f.Code
	}
	return string(f.Kind)
}

// ParseAction reads the action of a fault, as after "POINT=" in a scope.
func ParseAction(action string) (Fault, error) {
	var f Fault
	kind, arg, hasArg := strings.Cut(action, ":")
	switch Kind(kind) {
	case Error, Timeout, Reset, Hold:
		if hasArg {
			return f, fmt.Errorf("%s takes no argument", kind)
		}
		f.Kind = Kind(kind)
	case Delay:
		d, err := time.ParseDuration(arg)
		if err != nil || d <= 0 {
			return f, errors.New("delay wants a positive duration such as delay:50ms")
		}
		f.Kind, f.Delay = Delay, d
	case Status:
		n, err := strconv.Atoi(arg)
		if err != nil || n < 400 || n > 599 || strconv.Itoa(n) != arg {
			return f, errors.New("status wants an HTTP error status from 400 to 599, such as status:503")
		}
		f.Kind, f.Status = Status, n
	case Code:
		if !slices.Contains(GRPCCodes, arg) {
			return f, fmt.Errorf("code wants a gRPC status code other than OK: %s", strings.Join(GRPCCodes, ", "))
		}
		f.Kind, f.Code = Code, arg
	default:
		return f, fmt.Errorf("unknown action %q (want error, timeout, delay:DURATION, status:HTTP-STATUS, code:GRPC-CODE, reset or hold)", kind)
	}
	return f, nil
}

// A Scope is the set of faults injected into one request, at most one per
// point. The zero Scope injects nothing.
type Scope struct {
	Faults []Fault `json:"faults,omitempty"`
}

// MaxScopeLen bounds the text of a scope, so a header or command cannot make
// a server parse an unbounded one.
const MaxScopeLen = 8192

// ErrorScope is the scope in which every point of points fails with an error.
func ErrorScope(points ...string) Scope {
	return ScopeOf(Fault{Kind: Error}, points...)
}

// ScopeOf is the scope in which every point of points fails like f.
func ScopeOf(f Fault, points ...string) Scope {
	var s Scope
	for _, p := range points {
		f.Point = p
		s.Faults = append(s.Faults, f)
	}
	return s
}

// Lookup returns the fault at point, if the scope has one.
func (s Scope) Lookup(point string) (Fault, bool) {
	for _, f := range s.Faults {
		if f.Point == point {
			return f, true
		}
	}
	return Fault{}, false
}

// Points lists the points the scope makes fail.
func (s Scope) Points() []string {
	out := make([]string, len(s.Faults))
	for i, f := range s.Faults {
		out[i] = f.Point
	}
	return out
}

// String encodes the scope in its text form (see ParseScope), faults sorted
// by point so equal scopes encode equally.
func (s Scope) String() string {
	faults := slices.Clone(s.Faults)
	slices.SortFunc(faults, func(a, b Fault) int { return strings.Compare(a.Point, b.Point) })
	var b strings.Builder
	for i, f := range faults {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f.Point)
		b.WriteByte('=')
		b.WriteString(f.Action())
	}
	return b.String()
}

// ParseScope reads the text form of a scope:
//
//	scope    = "" | fault *( "," fault )
//	fault    = point "=" action
//	action   = "error" | "timeout" | "delay:" duration   ; duration as in Go: 50ms, 1.5s
//	         | "status:" 3DIGIT                          ; an HTTP status, 400 to 599
//	         | "code:" grpc-code                         ; a gRPC code name but OK: Unavailable, ...
//	         | "reset"                                   ; the connection is reset
//	point    = name "/" name | name "->" name
//	name     = 1*( ALPHA / DIGIT / "-" / "_" / "." )
//
// For example "api->ratings=status:503,playlist/cache=delay:200ms". The text has
// no spaces, so it fits in one RESP argument (TROOP FIT <scope>) and, percent
// encoded, in the value of one W3C baggage entry (troop-fit=<scope>).
func ParseScope(text string) (Scope, error) {
	var s Scope
	if text == "" {
		return s, nil
	}
	if len(text) > MaxScopeLen {
		return s, fmt.Errorf("fit scope: %d bytes, more than the limit of %d", len(text), MaxScopeLen)
	}
	for i, item := range strings.Split(text, ",") {
		point, action, ok := strings.Cut(item, "=")
		if !ok {
			return Scope{}, fmt.Errorf("fit scope: fault %d %q: want POINT=ACTION", i+1, item)
		}
		if err := CheckPoint(point); err != nil {
			return Scope{}, fmt.Errorf("fit scope: fault %d: %w", i+1, err)
		}
		if _, dup := s.Lookup(point); dup {
			return Scope{}, fmt.Errorf("fit scope: point %q appears twice", point)
		}
		f, err := ParseAction(action)
		if err != nil {
			return Scope{}, fmt.Errorf("fit scope: fault %d %q: %w", i+1, item, err)
		}
		f.Point = point
		s.Faults = append(s.Faults, f)
	}
	return s, nil
}

// CheckPoint reports whether name is a well-formed injection point name,
// "service/point" or "caller->callee".
func CheckPoint(name string) error {
	a, b, ok := strings.Cut(name, "->")
	if !ok {
		a, b, ok = strings.Cut(name, "/")
	}
	if !ok || !validName(a) || !validName(b) {
		return fmt.Errorf("injection point %q: want SERVICE/POINT or CALLER->CALLEE, names of letters, digits, '-', '_' and '.'", name)
	}
	return nil
}

// Name makes s a valid name for one side of a point: every character but
// letters, digits, '-', '_' and '.' becomes '_', so a URL's host
// "127.0.0.1:8080" names the service "127.0.0.1_8080".
func Name(s string) string {
	if validName(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !validName(string(c)) {
			b[i] = '_'
		}
	}
	return string(b)
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}
