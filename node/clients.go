package node

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/resp"
)

// CLIENT LIST, INFO, KILL and UNBLOCK answer for the node's own client
// connections, as redis-server does for its own: each node keeps a registry
// of them, with ids unique within the node (Redis's ids are unique within
// one server too). A client of another node is not this node's to list or
// kill.

// clientConn is a client connection as the other connections see it: what
// its own goroutine changes (name, protocol, user, transaction, last
// command) is published here, under mu or atomically.
type clientConn struct {
	id          int64
	addr, laddr string
	created     time.Time

	lastCmd atomic.Pointer[command]
	lastAt  atomic.Int64 // UnixNano of the last command's arrival

	mu      sync.Mutex
	kill    func()            // ends the connection; nil until it is served
	push    func([]byte) bool // writes a pub/sub message; nil until it is served
	sub     *subscriber       // its subscriptions; nil before the first (pubsub.go)
	name    string
	proto   int
	user    string
	multi   int         // commands queued between MULTI and EXEC; -1 outside
	blocked int         // blocking commands waiting
	unblock chan []byte // CLIENT UNBLOCK's reply for the blocked command
}

// clientRegistry holds a node's client connections by id.
type clientRegistry struct {
	mu     sync.Mutex
	lastID int64
	byID   map[int64]*clientConn
}

// add registers a new connection and gives it the next id.
func (r *clientRegistry) add(addr, laddr string, now time.Time) *clientConn {
	c := &clientConn{addr: addr, laddr: laddr, created: now, multi: -1, unblock: make(chan []byte, 1)}
	c.lastAt.Store(now.UnixNano())
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[int64]*clientConn{}
	}
	r.lastID++
	c.id = r.lastID
	r.byID[c.id] = c
	return c
}

func (r *clientRegistry) remove(c *clientConn) {
	r.mu.Lock()
	delete(r.byID, c.id)
	r.mu.Unlock()
}

// all returns the connections in id order.
func (r *clientRegistry) all() []*clientConn {
	r.mu.Lock()
	out := make([]*clientConn, 0, len(r.byID))
	for _, c := range r.byID {
		out = append(out, c)
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (r *clientRegistry) get(id int64) *clientConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// number is the connection's id; 0 for a connection that is not a client's.
func (c *clientConn) number() int64 {
	if c == nil {
		return 0
	}
	return c.id
}

// attach gives the connection's ways to end it and to write a message to
// it, once it is served.
func (c *clientConn) attach(kill func(), push func([]byte) bool) {
	c.mu.Lock()
	c.kill, c.push = kill, push
	c.mu.Unlock()
}

// publish copies what the session changed to what other connections see.
func (sess *session) publish() {
	c := sess.client
	if c == nil {
		return
	}
	user := "default"
	if sess.user != nil {
		user = sess.user.name
	}
	multi := -1
	if sess.tx != nil {
		multi = sess.tx.count
	}
	c.mu.Lock()
	c.name, c.proto, c.user, c.multi = sess.name, max(sess.proto, 2), user, multi
	c.mu.Unlock()
}

// blockStarted and blockEnded count a blocking command's wait; the end
// takes back a CLIENT UNBLOCK that came too late to matter.
func (c *clientConn) blockStarted() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.blocked++
	c.mu.Unlock()
}

func (c *clientConn) blockEnded() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.blocked--
	if c.blocked == 0 {
		select {
		case <-c.unblock:
		default:
		}
	}
	c.mu.Unlock()
}

// unblocked is where a blocked command of the connection hears CLIENT
// UNBLOCK; nil (never) for a connection that is not a client's.
func (c *clientConn) unblocked() <-chan []byte {
	if c == nil {
		return nil
	}
	return c.unblock
}

// line is the connection's line of CLIENT LIST, in Redis's format.
func (c *clientConn) line(now time.Time) string {
	c.mu.Lock()
	name, proto, user, multi, blocked := c.name, c.proto, c.user, c.multi, c.blocked
	c.mu.Unlock()
	if proto == 0 {
		proto, user = 2, "default"
	}
	flags := ""
	if blocked > 0 {
		flags += "b"
	}
	if multi >= 0 {
		flags += "x"
	}
	if flags == "" {
		flags = "N"
	}
	cmd := "NULL"
	if last := c.lastCmd.Load(); last != nil {
		cmd = strings.ToLower(last.name)
	}
	idle := now.Sub(time.Unix(0, c.lastAt.Load()))
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=-1 name=%s age=%d idle=%d flags=%s db=0 sub=0 psub=0 ssub=0 multi=%d qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=%s user=%s redir=-1 resp=%d\n",
		c.id, c.addr, c.laddr, name, int64(now.Sub(c.created).Seconds()), max(int64(idle.Seconds()), 0), flags, multi, cmd, user, proto)
}

// clientFilter is CLIENT KILL's filter form, or CLIENT LIST's options.
type clientFilter struct {
	ids          map[int64]bool // nil: any
	addr, laddr  string
	user, typ    string
	skipMe       bool
	maxAge       int64 // seconds; 0: any
	typeFiltered bool
}

func (f *clientFilter) matches(c *clientConn, now time.Time) bool {
	if f.ids != nil && !f.ids[c.id] {
		return false
	}
	if f.addr != "" && f.addr != c.addr || f.laddr != "" && f.laddr != c.laddr {
		return false
	}
	if f.maxAge > 0 && int64(now.Sub(c.created).Seconds()) < f.maxAge {
		return false
	}
	c.mu.Lock()
	user := c.user
	c.mu.Unlock()
	if user == "" {
		user = "default"
	}
	if f.user != "" && f.user != user {
		return false
	}
	// Every client is of type normal: the node has no replicas, masters or
	// subscribers of its own.
	return !f.typeFiltered || f.typ == "normal"
}

// parseClientType checks a TYPE option's value.
func parseClientType(v []byte) (string, string) {
	t := strings.ToLower(string(v))
	switch t {
	case "normal", "master", "replica", "slave", "pubsub":
		return t, ""
	}
	return "", "ERR Unknown client type '" + resp.Printable(v) + "'"
}

// clientAdmin answers CLIENT LIST, INFO, KILL and UNBLOCK; handled says
// whether sub is one of them.
func (n *Node) clientAdmin(args [][]byte, sess *session) (reply []byte, handled bool) {
	if len(args) < 2 {
		return nil, false // clientCommand says what is missing
	}
	now := time.Now()
	switch strings.ToUpper(string(args[1])) {
	case "LIST":
		f := clientFilter{}
		for i := 2; i < len(args); i++ {
			switch {
			case strings.EqualFold(string(args[i]), "TYPE") && i+1 < len(args):
				t, bad := parseClientType(args[i+1])
				if bad != "" {
					return resp.AppendError(nil, bad), true
				}
				f.typ, f.typeFiltered = t, true
				i++
			case strings.EqualFold(string(args[i]), "ID") && i+1 < len(args):
				f.ids = map[int64]bool{}
				for i++; i < len(args); i++ {
					id, err := strconv.ParseInt(string(args[i]), 10, 64)
					if err != nil || id <= 0 {
						return resp.AppendError(nil, "ERR Invalid client ID"), true
					}
					f.ids[id] = true
				}
			default:
				return resp.AppendError(nil, "ERR syntax error"), true
			}
		}
		var b strings.Builder
		for _, c := range n.clients.all() {
			if f.matches(c, now) {
				b.WriteString(c.line(now))
			}
		}
		return resp.AppendBulkString(nil, b.String()), true
	case "INFO":
		if len(args) != 2 || sess.client == nil {
			return resp.AppendError(nil, "ERR wrong number of arguments for 'client|info' command"), true
		}
		return resp.AppendBulkString(nil, sess.client.line(now)), true
	case "KILL":
		return n.clientKill(args, sess, now), true
	case "UNBLOCK":
		return n.clientUnblock(args), true
	}
	return nil, false
}

// clientKill is CLIENT KILL addr (OK, or an error when no client has that
// address) and CLIENT KILL filter value ... (how many it killed).
func (n *Node) clientKill(args [][]byte, sess *session, now time.Time) []byte {
	if len(args) < 3 {
		return resp.AppendError(nil, "ERR wrong number of arguments for 'client|kill' command")
	}
	old := len(args) == 3
	f := clientFilter{skipMe: true}
	if old {
		f.addr, f.skipMe = string(args[2]), false
	} else {
		if len(args)%2 != 0 {
			return resp.AppendError(nil, "ERR syntax error")
		}
		for i := 2; i < len(args); i += 2 {
			v := args[i+1]
			switch strings.ToUpper(string(args[i])) {
			case "ID":
				id, err := strconv.ParseInt(string(v), 10, 64)
				if err != nil || id <= 0 {
					return resp.AppendError(nil, "ERR client-id should be greater than 0")
				}
				f.ids = map[int64]bool{id: true}
			case "ADDR":
				f.addr = string(v)
			case "LADDR":
				f.laddr = string(v)
			case "USER":
				f.user = string(v)
			case "TYPE":
				t, bad := parseClientType(v)
				if bad != "" {
					return resp.AppendError(nil, bad)
				}
				f.typ, f.typeFiltered = t, true
			case "SKIPME":
				switch strings.ToLower(string(v)) {
				case "yes":
					f.skipMe = true
				case "no":
					f.skipMe = false
				default:
					return resp.AppendError(nil, "ERR syntax error")
				}
			case "MAXAGE":
				age, err := strconv.ParseInt(string(v), 10, 64)
				if err != nil || age < 0 {
					return resp.AppendError(nil, "ERR value is not an integer or out of range")
				}
				f.maxAge = age
			default:
				return resp.AppendError(nil, "ERR syntax error")
			}
		}
	}
	killed := 0
	for _, c := range n.clients.all() {
		if !f.matches(c, now) || (f.skipMe && c == sess.client) {
			continue
		}
		killed++
		if c == sess.client {
			sess.quit = true // after this reply, as Redis closes it
			continue
		}
		c.mu.Lock()
		kill := c.kill
		c.mu.Unlock()
		if kill != nil {
			kill()
		}
	}
	if old {
		if killed == 0 {
			return resp.AppendError(nil, "ERR No such client")
		}
		return resp.AppendSimple(nil, "OK")
	}
	return resp.AppendInt(nil, int64(killed))
}

// clientUnblock is CLIENT UNBLOCK id [TIMEOUT|ERROR]: a client blocked in
// a blocking pop through this node gets its timeout's reply, or an error.
func (n *Node) clientUnblock(args [][]byte) []byte {
	if len(args) < 3 || len(args) > 4 {
		return resp.AppendError(nil, "ERR wrong number of arguments for 'client|unblock' command")
	}
	id, err := strconv.ParseInt(string(args[2]), 10, 64)
	if err != nil {
		return resp.AppendError(nil, "ERR value is not an integer or out of range")
	}
	reply := resp.AppendNullArray(nil)
	if len(args) == 4 {
		switch strings.ToUpper(string(args[3])) {
		case "TIMEOUT":
		case "ERROR":
			reply = resp.AppendError(nil, "UNBLOCKED client unblocked via CLIENT UNBLOCK")
		default:
			return resp.AppendError(nil, "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
		}
	}
	c := n.clients.get(id)
	if c == nil {
		return resp.AppendInt(nil, 0)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blocked == 0 {
		return resp.AppendInt(nil, 0)
	}
	select {
	case c.unblock <- reply:
	default: // unblocked already, and not yet woken
	}
	return resp.AppendInt(nil, 1)
}

// replyMode is a connection's CLIENT REPLY state, as Redis keeps it.
type replyMode uint8

const (
	replyOn   replyMode = iota
	replyOff            // no replies until CLIENT REPLY ON
	replySkip           // no reply to the command now coming
)

// subscribeReplies are the commands whose replies Redis sends as pushes,
// which CLIENT REPLY OFF and SKIP leave alone (networking.c's
// prepareClientToWrite lets a pushing client write).
var subscribeReplies = map[string]bool{"SUBSCRIBE": true, "PSUBSCRIBE": true, "SSUBSCRIBE": true,
	"UNSUBSCRIBE": true, "PUNSUBSCRIBE": true, "SUNSUBSCRIBE": true}

// next says whether the reply to command c with args, coming in mode m, is
// dropped, and the mode after it, as Redis's CLIENT REPLY has it: OFF and
// SKIP get no reply themselves, ON answers OK at once, a skip lasts one
// command, and pub/sub replies go whatever the mode. Inside MULTI, CLIENT
// REPLY is refused as it is queued (it changes the connection), so it
// changes nothing.
func (m replyMode) next(c *command, args [][]byte, inTx bool) (quiet bool, after replyMode) {
	quiet, after = m != replyOn && (c == nil || !subscribeReplies[c.name]), m
	if after == replySkip {
		after = replyOn
	}
	if c == nil || c.name != "CLIENT" || inTx || len(args) != 3 || !strings.EqualFold(string(args[1]), "REPLY") {
		return quiet, after
	}
	switch mode, ok := replyModes[strings.ToUpper(string(args[2]))]; {
	case !ok:
		return quiet, after // a syntax error, answered as the mode says
	case mode == replyOn:
		return false, replyOn
	case mode == replySkip && m != replyOff:
		return true, replySkip
	}
	return true, replyOff // OFF, or SKIP while off
}

// replyModes are CLIENT REPLY's arguments.
var replyModes = map[string]replyMode{"ON": replyOn, "OFF": replyOff, "SKIP": replySkip}
