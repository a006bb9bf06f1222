package node

import (
	"bytes"
	"strings"

	"github.com/troop-lab/troop/resp"
)

// A connection that said HELLO 3 gets replies in RESP3, as redis-server
// gives them: the node talks RESP2 to its redis-servers and peers, so it
// maps each reply by the command that asked for it. Nulls become RESP3's
// null, HGETALL a map, the set commands sets, scores doubles.

// resp3Reply maps a RESP2 reply to args (of command c) to RESP3.
func resp3Reply(c *command, args [][]byte, reply []byte) []byte {
	if len(reply) == 0 || reply[0] == '-' || reply[0] == '+' || reply[0] == ':' {
		return reply
	}
	if string(reply) == "$-1\r\n" || string(reply) == "*-1\r\n" {
		return []byte("_\r\n")
	}
	name := ""
	if c != nil {
		name = c.name
	}
	if reply[0] == '$' && name != "ZSCORE" && name != "ZINCRBY" && name != "ZADD" {
		return reply // a plain bulk string: by far the most common reply
	}
	v, err := resp.Parse(reply)
	if err != nil {
		return reply
	}
	v = nullsToRESP3(v)
	switch name {
	case "HGETALL":
		v.Type = resp.Map
	case "CONFIG":
		if v.Type == resp.Array {
			v.Type = resp.Map
		}
	case "SMEMBERS", "SINTER", "SUNION", "SDIFF":
		v.Type = resp.Set
	case "SPOP": // with a count: a set, even an empty one
		if v.Type == resp.Array {
			v.Type = resp.Set
		}
	case "ZSCORE", "ZINCRBY", "ZADD":
		v = toDouble(v)
	case "ZMSCORE":
		for i := range v.Elems {
			v.Elems[i] = toDouble(v.Elems[i])
		}
	case "ZPOPMIN", "ZPOPMAX":
		if len(args) > 2 {
			v = scorePairs(v)
		} else if len(v.Elems) == 2 {
			v.Elems[1] = toDouble(v.Elems[1])
		}
	case "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGE", "ZREVRANGEBYSCORE", "ZUNION", "ZINTER", "ZDIFF", "ZRANDMEMBER":
		if hasWord(args, "WITHSCORES") {
			v = scorePairs(v)
		}
	case "BZPOPMIN", "BZPOPMAX": // [key, member, score]
		if len(v.Elems) == 3 {
			v.Elems[2] = toDouble(v.Elems[2])
		}
	case "ZMPOP", "BZMPOP": // [key, [[member, score] ...]]
		if len(v.Elems) == 2 {
			for i, p := range v.Elems[1].Elems {
				if len(p.Elems) == 2 {
					v.Elems[1].Elems[i].Elems[1] = toDouble(p.Elems[1])
				}
			}
		}
	case "HRANDFIELD":
		if hasWord(args, "WITHVALUES") {
			v = pairs(v, false)
		}
	}
	return resp.AppendValue(nil, v)
}

// nullsToRESP3 turns RESP2's null bulk and null array, anywhere in v,
// into RESP3's null.
func nullsToRESP3(v resp.Value) resp.Value {
	if v.IsNull {
		return resp.Value{Type: resp.Null, IsNull: true}
	}
	for i := range v.Elems {
		v.Elems[i] = nullsToRESP3(v.Elems[i])
	}
	return v
}

// toDouble turns a score, a bulk string, into a RESP3 double.
func toDouble(v resp.Value) resp.Value {
	if v.Type != resp.BulkString || v.IsNull {
		return v
	}
	return resp.Value{Type: resp.Double, Str: v.Str}
}

// scorePairs turns a flat [member, score, ...] array into [[member, score], ...]
// with the scores as doubles, as redis-server does for RESP3.
func scorePairs(v resp.Value) resp.Value { return pairs(v, true) }

func pairs(v resp.Value, scores bool) resp.Value {
	if v.Type != resp.Array || len(v.Elems)%2 != 0 {
		return v
	}
	out := resp.Value{Type: resp.Array, Elems: make([]resp.Value, 0, len(v.Elems)/2)}
	for i := 0; i < len(v.Elems); i += 2 {
		second := v.Elems[i+1]
		if scores {
			second = toDouble(second)
		}
		out.Elems = append(out.Elems, resp.Value{Type: resp.Array, Elems: []resp.Value{v.Elems[i], second}})
	}
	return out
}

func hasWord(args [][]byte, word string) bool {
	for _, a := range args[1:] {
		if bytes.EqualFold(a, []byte(word)) {
			return true
		}
	}
	return false
}

// hello answers HELLO [protover [AUTH username password] [SETNAME name]].
func (n *Node) hello(args [][]byte, sess *session) []byte {
	proto := max(sess.proto, 2)
	if len(args) > 1 {
		switch string(args[1]) {
		case "2":
			proto = 2
		case "3":
			proto = 3
		default:
			return resp.AppendError(nil, "NOPROTO unsupported protocol version")
		}
	}
	name := sess.name
	var auth [][]byte // user and password
	for i := 2; i < len(args); i++ {
		switch {
		case strings.EqualFold(string(args[i]), "AUTH") && i+2 < len(args):
			auth = args[i+1 : i+3]
			i += 2
		case strings.EqualFold(string(args[i]), "SETNAME") && i+1 < len(args):
			if r := clientCommand([][]byte{[]byte("CLIENT"), []byte("SETNAME"), args[i+1]}, &session{}); r[0] == '-' {
				return r
			}
			name = string(args[i+1])
			i++
		default:
			return resp.AppendError(nil, "ERR Syntax error in HELLO option '"+resp.Printable(args[i])+"'")
		}
	}
	// As Redis: options first, then authentication, then the rest.
	if auth != nil {
		if reply := n.login(sess, string(auth[0]), string(auth[1])); reply != nil {
			return reply
		}
	}
	if n.auth != nil && sess.user == nil {
		return resp.AppendError(nil, helloAuthReply)
	}
	sess.proto, sess.name = proto, name
	sess.publish()
	var out []byte
	if proto == 3 {
		out = append(out, "%7\r\n"...)
	} else {
		out = resp.AppendArrayHeader(nil, 14)
	}
	for _, kv := range [][2]string{{"server", "troop"}, {"version", n.redisVersion()}} {
		out = resp.AppendBulkString(out, kv[0])
		out = resp.AppendBulkString(out, kv[1])
	}
	out = resp.AppendBulkString(out, "proto")
	out = resp.AppendInt(out, int64(proto))
	out = resp.AppendBulkString(out, "id")
	out = resp.AppendInt(out, sess.client.number())
	for _, kv := range [][2]string{{"mode", "standalone"}, {"role", "master"}} {
		out = resp.AppendBulkString(out, kv[0])
		out = resp.AppendBulkString(out, kv[1])
	}
	out = resp.AppendBulkString(out, "modules")
	return resp.AppendArrayHeader(out, 0)
}
