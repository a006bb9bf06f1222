package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// Failure injection and lineage (docs/store.md, "Failure injection and
// lineage"). A node has one injection point for its datastore,
// "<node>/redis", and one for each peer it calls, "<node>-><peer>". A client
// connection that set a scope (TROOP FIT) or asked for lineage (TROOP
// LINEAGE ON) gets a trace for each request: the trace fails the points its
// scope names, records the points the request reached and the replicas
// whose replies made its answer. A request of any other connection has a
// nil trace and pays one nil check per call.

// A trace is one request's failure scope and lineage.
type trace struct {
	scope fit.Scope

	mu       sync.Mutex
	command  string
	level    consistency.Level
	reached  []string
	used     []string
	finished bool     // the answer was given: the lineage is final
	ok       bool     // the answer was not an error
	waiters  []func() // run once finished

	start, end  time.Time // the request's, for exported spans
	traceparent string    // the W3C trace the request belongs to, if any

	// The calls a hold fault keeps go when release or closed is closed:
	// the connection's scope changed, or the connection did. Both are nil
	// in a peer's trace, whose holds last maxHold.
	release, closed <-chan struct{}
}

// maxHold bounds how long a hold keeps a call: the fault is undone even
// if the client that set it never comes back.
const maxHold = time.Minute

// connFit is a client connection's failure injection state.
type connFit struct {
	scope    fit.Scope
	hasScope bool   // TROOP FIT was given
	record   bool   // TROOP LINEAGE ON
	last     *trace // the connection's last traced request
	// traceparent is the W3C trace of the connection's next traced
	// requests (TROOP LINEAGE TRACEPARENT), for the exported spans.
	traceparent string
	// held is closed to let go of the calls the scope holds; nil until a
	// scope with a hold is used.
	held chan struct{}
}

// setScope replaces the connection's scope, letting go of every call the
// old one held.
func (cf *connFit) setScope(scope fit.Scope, has bool) {
	if cf.held != nil {
		close(cf.held)
		cf.held = nil
	}
	cf.scope, cf.hasScope = scope, has
}

// traceFor starts the trace of a request of sess, nil when the connection
// neither injects faults nor records lineage; the trace is exported when
// the request has its answer, if the node exports lineage.
func (n *Node) traceFor(sess *session, command string, level consistency.Level) *trace {
	cf := sess.fit
	if cf == nil || !(cf.hasScope || cf.record) {
		return nil
	}
	tr := &trace{scope: cf.scope, command: command, level: level, start: time.Now(), traceparent: cf.traceparent}
	if slices.ContainsFunc(cf.scope.Faults, func(f fit.Fault) bool { return f.Kind == fit.Hold }) {
		if cf.held == nil {
			cf.held = make(chan struct{})
		}
		tr.release, tr.closed = cf.held, sess.closed
	}
	cf.last = tr
	n.exportWhenFinished(tr)
	return tr
}

// reach records point as reached (unless the answer was already given)
// and returns the fault the scope puts on it.
func (tr *trace) reach(point string) (fit.Fault, bool) {
	tr.mu.Lock()
	if !tr.finished {
		tr.reached = append(tr.reached, point)
	}
	tr.mu.Unlock()
	return tr.scope.Lookup(point)
}

// use records points as having made the answer.
func (tr *trace) use(points ...string) {
	tr.mu.Lock()
	if !tr.finished {
		tr.used = append(tr.used, points...)
	}
	tr.mu.Unlock()
}

// finish freezes the lineage when the answer is given.
func (tr *trace) finish(reply []byte) {
	tr.mu.Lock()
	tr.finished = true
	tr.ok = len(reply) == 0 || reply[0] != '-'
	tr.end = time.Now()
	waiters := tr.waiters
	tr.waiters = nil
	tr.mu.Unlock()
	for _, w := range waiters {
		w()
	}
}

// whenFinished runs f once the request has its answer: at once if it has.
func (tr *trace) whenFinished(f func()) {
	tr.mu.Lock()
	if !tr.finished {
		tr.waiters = append(tr.waiters, f)
		tr.mu.Unlock()
		return
	}
	tr.mu.Unlock()
	f()
}

// Lineage is what TROOP LINEAGE answers about a connection's last traced
// request: the injection points it reached before its answer was given, and
// those whose results made the answer, each list sorted.
type Lineage struct {
	Command string   `json:"command"`
	Level   string   `json:"level"`
	Scope   string   `json:"scope"`
	OK      bool     `json:"ok"` // the answer was not an error
	Reached []string `json:"reached"`
	Used    []string `json:"used"`
}

func (tr *trace) lineage() Lineage {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	set := func(s []string) []string {
		s = slices.Clone(s)
		slices.Sort(s)
		return append([]string{}, slices.Compact(s)...)
	}
	return Lineage{Command: tr.command, Level: tr.level.String(), Scope: tr.scope.String(), OK: tr.ok,
		Reached: set(tr.reached), Used: set(tr.used)}
}

// traced wraps done to finish tr with the answer.
func traced(tr *trace, done replyFunc) replyFunc {
	if tr == nil {
		return done
	}
	return func(reply []byte) {
		tr.finish(reply)
		done(reply)
	}
}

// redisPoint is this node's datastore injection point.
func (n *Node) redisPoint() string { return n.cfg.Name + "/redis" }

// name is the node's name as its handshake gave it. A peer never greeted
// has no name yet; it is called "<dc>-<rack>-dyn<peer port>" meanwhile.
func (m *member) name() string {
	m.mu.Lock()
	name := m.info.Name
	m.mu.Unlock()
	if name == "" {
		_, port, _ := net.SplitHostPort(m.peerAddr)
		name = m.dc + "-" + m.rack + "-dyn" + port
	}
	return name
}

// replicaPoints are the points a reply from replica m passed on its way to
// this node: its datastore, and the call to it when it is a peer.
func (n *Node) replicaPoints(m *member) []string {
	if m.self {
		return []string{n.redisPoint()}
	}
	peer := m.name()
	return []string{n.cfg.Name + "->" + peer, peer + "/redis"}
}

// useReplica records replica m's reply as part of the answer.
func (n *Node) useReplica(tr *trace, m *member) {
	if tr != nil {
		tr.use(n.replicaPoints(m)...)
	}
}

// toStore sends a request of a client request to this node's datastore
// through the point <node>/redis.
func (n *Node) toStore(b *batch, tr *trace, l *link.Link, req []byte, done func([]byte, error)) {
	if tr == nil {
		b.send(l, req, done)
		return
	}
	n.inject(b, tr, n.redisPoint(), l, req, done)
}

// toStoreAppend is toStore of the request appendReq encodes. Untraced, it
// is encoded straight into l's buffer, not into a request of its own first:
// a write's value is copied once.
func (n *Node) toStoreAppend(b *batch, tr *trace, l *link.Link, appendReq func(dst []byte) []byte, done func([]byte, error)) {
	if tr == nil {
		b.sendAppend(l, appendReq, done)
		return
	}
	n.inject(b, tr, n.redisPoint(), l, appendReq(nil), done)
}

// toStoreCommand is toStoreAppend of the command args.
func (n *Node) toStoreCommand(b *batch, tr *trace, l *link.Link, args [][]byte, done func([]byte, error)) {
	n.toStoreAppend(b, tr, l, func(dst []byte) []byte { return resp.AppendCommand(dst, args...) }, done)
}

// toPeer sends a request of a client request to peer m through the point
// <node>-><peer>. A traced request carries the part of its scope that m
// acts on (FIT, docs/peer-protocol.md), and m's datastore point counts as
// reached when m answered anything but a protocol error, or did not answer
// in time: m got the request then, and its datastore is what it waits on
// (an injected timeout there lasts the node's timeout, as long as ours).
func (n *Node) toPeer(b *batch, tr *trace, m *member, req []byte, done func([]byte, error)) {
	if tr == nil {
		b.send(m.link, req, done)
		return
	}
	peer := m.name()
	if sub := scopeFor(tr.scope, peer); sub != "" {
		req = wrapFit(req, sub)
	}
	n.inject(b, tr, n.cfg.Name+"->"+peer, m.link, req, func(raw []byte, err error) {
		if err == nil && !bytes.HasPrefix(raw, []byte(peerProtocolError)) || link.IsTimeout(err) {
			tr.reach(peer + "/redis")
		}
		done(raw, err)
	})
}

// peerProtocolError starts the answer of a peer that could not run a
// request at all.
const peerProtocolError = "-ERR troop peer protocol"

// inject sends req on l as point, unless the trace's scope fails the point:
// an error fails it at once, a timeout after the node's timeout, a delay
// sends it late, a hold when the client lets go of it.
func (n *Node) inject(b *batch, tr *trace, point string, l *link.Link, req []byte, done func([]byte, error)) {
	f, ok := tr.reach(point)
	if !ok {
		b.send(l, req, done)
		return
	}
	switch f.Kind {
	case fit.Delay:
		time.AfterFunc(f.Delay, func() { l.Do(req, done) })
	case fit.Timeout:
		time.AfterFunc(n.cfg.Timeout, func() { done(nil, &fit.InjectedError{Point: point, Kind: fit.Timeout}) })
	case fit.Hold:
		go func() {
			bound := time.NewTimer(maxHold)
			defer bound.Stop()
			select {
			case <-tr.release:
			case <-tr.closed:
			case <-bound.C:
			}
			l.Do(req, done)
		}()
	default:
		done(nil, &fit.InjectedError{Point: point, Kind: fit.Error})
	}
}

// scopeFor is the text of the faults of scope that node acts on: its
// datastore point and its calls to others ("" for none).
func scopeFor(scope fit.Scope, node string) string {
	var sub fit.Scope
	for _, f := range scope.Faults {
		if rest, ok := strings.CutPrefix(f.Point, node); ok && (strings.HasPrefix(rest, "/") || strings.HasPrefix(rest, "->")) {
			sub.Faults = append(sub.Faults, f)
		}
	}
	if len(sub.Faults) == 0 {
		return ""
	}
	return sub.String()
}

// wrapFit turns the peer request req (a RESP array) into FIT scope req...
func wrapFit(req []byte, scope string) []byte {
	end := strings.Index(string(req), "\r\n")
	count, _ := strconv.Atoi(string(req[1:end]))
	out := resp.AppendArrayHeader(nil, count+2)
	out = resp.AppendBulkString(out, "FIT")
	out = resp.AppendBulkString(out, scope)
	return append(out, req[end+2:]...)
}

// peerTrace is the trace of a peer request that came with FIT scope: it
// fails this node's points of the scope. Lineage is the caller's business.
func peerTrace(text []byte) (*trace, error) {
	scope, err := fit.ParseScope(string(text))
	if err != nil {
		return nil, err
	}
	return &trace{scope: scope}, nil
}

// troopFit runs TROOP FIT:
//
//	TROOP FIT          -> this connection's scope, "" for none
//	TROOP FIT scope    -> fail those points in this connection's requests
//	TROOP FIT RESET    -> inject nothing any more
func troopFit(args [][]byte, sess *session) []byte {
	cf := sess.fit
	switch {
	case len(args) == 2:
		if cf == nil || !cf.hasScope {
			return resp.AppendBulkString(nil, "")
		}
		return resp.AppendBulkString(nil, cf.scope.String())
	case len(args) != 3:
		return resp.AppendError(nil, "ERR troop: usage: TROOP FIT [SCOPE|RESET], SCOPE as point=action,... (docs/store.md)")
	case strings.EqualFold(string(args[2]), "RESET"):
		if cf != nil {
			cf.setScope(fit.Scope{}, false)
		}
		return resp.AppendSimple(nil, "OK")
	}
	scope, err := fit.ParseScope(string(args[2]))
	if err != nil {
		return resp.AppendError(nil, "ERR troop: "+err.Error())
	}
	if cf == nil {
		cf = &connFit{}
		sess.fit = cf
	}
	cf.setScope(scope, true)
	return resp.AppendSimple(nil, "OK")
}

// troopLineage runs TROOP LINEAGE, answering through complete:
//
//	TROOP LINEAGE         -> the lineage of this connection's last traced
//	                         request as JSON (nil when there is none), once
//	                         that request has its answer
//	TROOP LINEAGE ON|OFF  -> trace every request, even without a scope
//	TROOP LINEAGE TRACEPARENT TP|RESET -> the connection's next traced
//	                         requests belong to the W3C trace TP (exported
//	                         spans, troop_lineage_export)
func troopLineage(args [][]byte, sess *session, complete func([]byte)) {
	cf := sess.fit
	switch {
	case len(args) == 2:
		if cf == nil || cf.last == nil {
			complete(resp.AppendNullBulk(nil))
			return
		}
		tr := cf.last
		tr.whenFinished(func() {
			b, _ := json.Marshal(tr.lineage()) // a Lineage always marshals
			complete(resp.AppendBulk(nil, b))
		})
	case len(args) == 3 && strings.EqualFold(string(args[2]), "ON"):
		if cf == nil {
			cf = &connFit{}
			sess.fit = cf
		}
		cf.record = true
		complete(resp.AppendSimple(nil, "OK"))
	case len(args) == 3 && strings.EqualFold(string(args[2]), "OFF"):
		if cf != nil {
			cf.record = false
		}
		complete(resp.AppendSimple(nil, "OK"))
	case len(args) == 4 && strings.EqualFold(string(args[2]), "TRACEPARENT"):
		tp := string(args[3])
		if strings.EqualFold(tp, "RESET") {
			tp = ""
		} else if err := checkTraceparent(tp); err != nil {
			complete(resp.AppendError(nil, "ERR troop: "+err.Error()))
			return
		}
		if cf == nil {
			cf = &connFit{}
			sess.fit = cf
		}
		cf.traceparent = tp
		complete(resp.AppendSimple(nil, "OK"))
	default:
		complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: usage: TROOP LINEAGE [ON|OFF|TRACEPARENT TP|TRACEPARENT RESET], got %d arguments", len(args)-2)))
	}
}
