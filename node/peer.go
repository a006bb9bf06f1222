package node

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/node/repair"
	"github.com/troop-lab/troop/resp"
)

// Peer protocol, version 2 (docs/peer-protocol.md). Peers speak RESP over a
// persistent connection: requests are arrays of bulk strings, replies come in
// request order.
//
//	HELLO 1 name dc rack listen stats   first request: who is calling
//	  -> [1, name, dc, rack, listen, stats]   who answers
//	PING                                -> +PONG
//	LOCAL cmd args...                   run cmd on the peer's redis-server as is
//	READ cmd args...                    run cmd; reply [version, reply]
//	VERSION key                         the key's version, "" for none
//	WRITE version cmd args...           apply cmd with that version
//	STAMP deadline version cmd args...  stamp a whole-value write above
//	                                    version and the peer's own, apply
//	                                    it; reply [version, reply], or
//	                                    -NOTAPPLIED past deadline (Unix ms
//	                                    by the peer's clock)
//	FWD version cmd args...             WRITE, then replicate to the other
//	                                    racks of the peer's datacenter
//	HANDOFF key version dump pttl vpttl a membership change's copy of a key:
//	                                    REPAIR, never mirrored again
//	MEMBERSHIP op [json]                a membership change's step, stream,
//	                                    cleanup or state (node/reconfig)
//	FIT scope request...                the request, failing the peer's
//	                                    injection points that scope names
const peerProtocol = "2"

// peerHandshake introduces this node to peer m and checks that the node at
// the seed's address is the one the seed describes.
func (n *Node) peerHandshake(m *member) func(net.Conn, *resp.Reader) error {
	hello := resp.AppendCommandStrings(nil, "HELLO", peerProtocol, n.cfg.Name, n.cfg.Datacenter, n.cfg.Rack, n.cfg.Listen, n.cfg.StatsListen)
	return func(c net.Conn, rd *resp.Reader) error {
		if _, err := c.Write(hello); err != nil {
			return err
		}
		v, err := rd.ReadValue()
		if err != nil {
			return err
		}
		if v.IsError() {
			return fmt.Errorf("handshake refused: %s", v.Str)
		}
		if len(v.Elems) != 6 || string(v.Elems[0].Str) != peerProtocol {
			return fmt.Errorf("handshake: peer speaks another protocol (%s)", v)
		}
		info := peerInfo{Name: string(v.Elems[1].Str), DC: string(v.Elems[2].Str), Rack: string(v.Elems[3].Str),
			Listen: string(v.Elems[4].Str), Stats: string(v.Elems[5].Str)}
		if info.DC != m.dc || info.Rack != m.rack {
			return fmt.Errorf("handshake: node at %s is in %s/%s, but dyn_seeds says %s/%s", m.peerAddr, info.DC, info.Rack, m.dc, m.rack)
		}
		m.mu.Lock()
		m.info = info
		m.mu.Unlock()
		n.heartbeat(m, time.Now()) // a completed handshake is a sign of life
		return nil
	}
}

// servePeer serves one connection from a peer node; secure says whether it
// came over TLS.
func (n *Node) servePeer(c net.Conn, secure bool) {
	sess := &session{readLevel: -1, writeLevel: -1, closed: make(chan struct{})}
	greeted := false
	handle := func(cmd resp.Command, s *slot, sess *session, b *batch) {
		args := cmd.Args
		op := strings.ToUpper(string(args[0]))
		if !greeted {
			if op != "HELLO" || len(args) != 7 {
				sess.quit = true
				s.complete(resp.AppendError(nil, "ERR troop peer protocol: HELLO first"))
				return
			}
			if string(args[1]) != peerProtocol {
				sess.quit = true
				s.complete(resp.AppendError(nil, "ERR troop peer protocol: version "+peerProtocol+" only"))
				return
			}
			if dc, rack := string(args[3]), string(args[4]); !secure && n.cfg.PeerTLS(dc, rack) {
				n.refusePeer(c, fmt.Sprintf("plain connection from a peer in %s/%s, and secure_server_option %s encrypts that link", dc, rack, n.cfg.SecureServerOption))
				sess.quit = true
				s.complete(resp.AppendError(nil, fmt.Sprintf("ERR troop peer protocol: secure_server_option is %s here: a peer in %s/%s connects with TLS", n.cfg.SecureServerOption, dc, rack)))
				return
			}
			greeted = true
			s.complete(resp.AppendCommandStrings(nil, peerProtocol, n.cfg.Name, n.cfg.Datacenter, n.cfg.Rack, n.cfg.Listen, n.cfg.StatsListen))
			return
		}
		var tr *trace
		if op == "FIT" {
			if len(args) < 4 {
				s.complete(resp.AppendError(nil, "ERR troop peer protocol: FIT wants a scope and a request"))
				return
			}
			var err error
			if tr, err = peerTrace(args[1]); err != nil {
				s.complete(resp.AppendError(nil, "ERR troop peer protocol: FIT: "+err.Error()))
				return
			}
			args = args[2:]
			op = strings.ToUpper(string(args[0]))
			if op != "LOCAL" && op != "READ" && op != "VERSION" && op != "WRITE" && op != "FWD" && op != "STAMP" && op != "PREPARE" && op != "ACCEPT" && op != "DECIDE" {
				s.complete(resp.AppendError(nil, fmt.Sprintf("ERR troop peer protocol: FIT carries LOCAL, READ, VERSION, WRITE, FWD, STAMP, PREPARE, ACCEPT or DECIDE, not '%s'", resp.Printable(args[0]))))
				return
			}
		}
		n.handlePeer(tr, op, args, s, b)
	}
	if tc, plain := c.(*net.TCPConn); plain {
		if err := n.pickLoop().serve(tc, sess, handle, n.cfg.MaxInflight, nil); err != nil {
			n.log.Debug("peer connection", "err", err)
		}
		return
	}
	n.serveConn(c, n.cfg.MaxInflight, sess, handle)
}

// handlePeer serves one peer request; tr is non-nil when it came with FIT.
func (n *Node) handlePeer(tr *trace, op string, args [][]byte, s *slot, b *batch) {
	done := func(raw []byte, err error) {
		if err != nil { // our datastore is down: to the caller, this replica is unreachable
			n.countFailure(err)
			raw = resp.AppendError(nil, unreachableCode+" "+err.Error())
		}
		s.complete(raw)
	}
	switch {
	case op == "PING":
		s.complete(resp.AppendSimple(nil, "PONG"))
	case op == "LOCAL" && len(args) >= 3:
		n.toStoreCommand(b, tr, n.storeFor(args[2]), args[1:], done)
	case op == "READ" && len(args) >= 3:
		_, keys, bad := peerCommand(args[1:])
		if bad != "" {
			s.complete(resp.AppendError(nil, bad))
			return
		}
		n.readLocal(tr, keys, args[1:], b, func(version, reply []byte, err error) {
			if isLocked(err) { // not a failure: the coordinator reads by consensus
				s.complete(resp.AppendError(nil, lockedError))
				return
			}
			if err != nil {
				done(nil, err)
				return
			}
			out := resp.AppendArrayHeader(nil, 2)
			out = resp.AppendBulk(out, version)
			done(append(out, reply...), nil)
		})
	case op == "VERSION" && len(args) == 2:
		n.localVersion(b, tr, args[1], func(version []byte, err error, _ *batch) {
			if err != nil {
				done(nil, err)
				return
			}
			s.complete(resp.AppendBulk(nil, version))
		})
	case op == "DECIDE" && len(args) >= 4:
		n.serveDecide(tr, args, s)
	case op == "DECIDETX":
		n.serveDecideTx(args, s)
	case (op == "PREPARE" || op == "ACCEPT") && len(args) >= 3:
		n.serveAcceptor(tr, op, args, b, done)
	case op == "STAMP" && len(args) >= 5:
		n.serveStamp(tr, args, s, b)
	case (op == "WRITE" || op == "FWD") && len(args) >= 4:
		version := args[1]
		if _, ok := hlc.Decode(version); !ok && (len(version) > 0 || n.cfg.Versions) {
			s.complete(resp.AppendError(nil, "ERR troop peer protocol: bad version"))
			return
		}
		cmdArgs := args[2:]
		c, keys, bad := peerCommand(cmdArgs)
		if bad != "" {
			s.complete(resp.AppendError(nil, bad))
			return
		}
		if len(keys) > 0 {
			n.versions.prefetch(keys[0]) // as for a client's write (handleClient)
		}
		n.clock.Observe(version)
		n.applyWrite(b, tr, n.view(), version, c, keys, cmdArgs, done)
		if op == "FWD" {
			n.fanOut(tr, keys[0], version, cmdArgs, b)
		}
	case op == "SCRIPT" && len(args) >= 5:
		version := args[1]
		if _, ok := hlc.Decode(version); !ok && (len(version) > 0 || n.cfg.Versions) {
			s.complete(resp.AppendError(nil, "ERR troop peer protocol: bad version"))
			return
		}
		c, keys, bad := peerCommand(args[2:])
		if bad == "" && ((c.kind != kindScript && c.kind != kindCopied) || !c.writes() || len(keys) == 0) {
			bad = "ERR troop peer protocol: SCRIPT carries EVAL, EVALSHA, FCALL with keys, or a stream write"
		}
		if bad != "" {
			s.complete(resp.AppendError(nil, bad))
			return
		}
		n.clock.Observe(version)
		n.localScript(b, version, keys, args[2:], done)
	case (op == "PUBLISH" || op == "SPUBLISH") && len(args) == 3:
		s.complete(resp.AppendInt(nil, n.pubsub.deliver(op == "SPUBLISH", args[1], args[2])))
	case op == "SETTINGS" && len(args) >= 3 && len(args)%2 == 1:
		n.applySettings(b, args[1:], done)
	case op == "KILL" && len(args) == 2 && (string(args[1]) == "SCRIPT" || string(args[1]) == "FUNCTION"):
		n.killLocal(string(args[1]), done)
	case op == "PUBSUB" && len(args) >= 2:
		s.complete(n.pubsub.local(args[1:]))
	case op == "SCRIPTFLUSH" && len(args) == 1:
		n.flushScriptsLocal(b, done)
	case op == "TX" || op == "TXFWD":
		version, wkeys, tokens, cmds, bad := parseTxRequest(args[1:])
		if bad == "" && len(version) > 0 {
			if _, ok := hlc.Decode(version); !ok {
				bad = "ERR troop peer protocol: bad version"
			}
		}
		if bad != "" {
			s.complete(resp.AppendError(nil, bad))
			return
		}
		n.clock.Observe(version)
		n.localTx(b, version, wkeys, tokens, cmds, done)
		if op == "TXFWD" {
			n.fanOutTx(version, cmds, b)
		}
	case op == "KEYCOUNT" && len(args) == 1:
		go func() { // a scan of the whole keyspace: not on the connection's reader
			c, err := n.localKeyCount()
			if err != nil {
				done(nil, err)
				return
			}
			s.complete(appendKeyCount(c))
		}()
	case op == "FETCH" && len(args) == 2:
		b.send(n.storeFor(args[1]), appendFetch(nil, args[1]), done)
	case (op == "REPAIR" || op == "HANDOFF") && len(args) == 6: // HANDOFF: a membership change's copy, never mirrored
		pttl, err1 := strconv.ParseInt(string(args[4]), 10, 64)
		vpttl, err2 := strconv.ParseInt(string(args[5]), 10, 64)
		if _, ok := hlc.Decode(args[2]); !ok || err1 != nil || err2 != nil {
			s.complete(resp.AppendError(nil, "ERR troop peer protocol: bad REPAIR arguments"))
			return
		}
		n.clock.Observe(args[2])
		n.repairLocal(b, args[1], repair.Copy{Version: args[2], Dump: args[3], PTTL: pttl, VPTTL: vpttl}, op == "REPAIR", done)
	case op == "MEMBERSHIP":
		n.serveMembership(args, s)
	case op == "TREE" || op == "TREENODES" || op == "ENTRIES":
		n.serveAntiEntropy(op, args, s)
	default:
		s.complete(resp.AppendError(nil, fmt.Sprintf("ERR troop peer protocol: unknown request '%s'", resp.Printable(args[0]))))
	}
}

// unreachableCode starts the error a peer answers when its own datastore
// cannot be reached, so that the coordinator counts that replica as
// unreachable rather than as having answered with an error.
const unreachableCode = "UNREACHABLE"

// fromPeer turns a peer's UNREACHABLE answer back into an error.
func fromPeer(done func([]byte, error)) func([]byte, error) {
	return func(raw []byte, err error) {
		if err == nil && len(raw) > len(unreachableCode)+1 && raw[0] == '-' && string(raw[1:1+len(unreachableCode)]) == unreachableCode {
			err = errors.New(strings.TrimSpace(string(raw[2+len(unreachableCode):])))
			raw = nil
		}
		done(raw, err)
	}
}

// peerCommand finds a forwarded command and its keys.
func peerCommand(args [][]byte) (*command, [][]byte, string) {
	c := lookup(args[0])
	if c == nil || !c.arityOK(len(args)) || c.kind == kindLocal || c.kind == kindUnsupported {
		return nil, nil, fmt.Sprintf("ERR troop peer protocol: cannot run '%s'", resp.Printable(args[0]))
	}
	if c.keys == nil || c.kind == kindSplit { // split commands arrive one key at a time
		return c, args[1:2], ""
	}
	keys, bad := c.keys(args)
	if bad != "" {
		return nil, nil, "ERR " + bad
	}
	return c, keys, ""
}

// fanOutTx replicates a transaction that arrived from another datacenter
// to its replicas in the other racks of this one, asynchronously.
func (n *Node) fanOutTx(version []byte, cmds [][][]byte, b *batch) {
	var route []byte
	for _, c := range cmds {
		if k, _, _ := txCommand(lookup(c[0]), c); len(k) > 0 {
			route = k[0]
			break
		}
	}
	req := appendTxRequest(nil, "TX", version, nil, nil, cmds)
	for _, m := range n.replicas(route) {
		if !m.self {
			n.sendWrite(b, nil, m, req, n.asyncDone)
		}
	}
}

// fanOut replicates a write that arrived from another datacenter to the
// key's owners in the other racks of this one, asynchronously.
func (n *Node) fanOut(tr *trace, key, version []byte, args [][]byte, b *batch) {
	req := appendPeerRequest(nil, "WRITE", version, args)
	for _, m := range n.replicas(key) {
		if !m.self {
			n.sendWrite(b, tr, m, req, n.asyncDone)
		}
	}
}
