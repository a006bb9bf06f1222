package check

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The commands Redis users build coordination on, and what each checker
// asks of their histories:
//
//   - CheckLocks: SET key me NX [PX ms] as a lock's acquire, one key per
//     round: mutual exclusion, at most one acquire acknowledged per key.
//   - CheckIDs: INCR of one key as an id generator: no number handed out
//     twice, and a final value that counts every acknowledged INCR.
//   - CheckList: RPUSH of unique elements and LRANGE reads of one key, as
//     Elle's list-append model has it: every read, and every replica's
//     final read, a prefix of one order.
//   - CheckCounter: INCRBY and DECRBY of one key, with reads (counter.go).
//   - CheckSet: SADD of unique elements and SMEMBERS reads, a grow-only
//     set (set.go).
//   - CheckQueue: RPUSH and LPOP of one key as a queue (queue.go).
//   - CheckCAS: WATCH/GET/MULTI/SET/EXEC increments, redis-py's
//     transaction() pattern (cas.go).
//
// An operation of unknown outcome (an error reply, a timeout) may have
// taken effect or not: the checkers count it as possibly applied, never as
// acknowledged.

// Command names of the histories these checkers read.
const (
	SetNX    = "SET NX"
	Incr     = "INCR"
	RPush    = "RPUSH"
	LRange   = "LRANGE"
	Get      = "GET"
	IncrBy   = "INCRBY" // Delta is the amount, negative for DECRBY
	DecrBy   = "DECRBY"
	SAdd     = "SADD"
	SMembers = "SMEMBERS"
	LPop     = "LPOP"
	// CAS is one WATCH k, GET k, MULTI, SET k read+1, EXEC attempt:
	// Number is the value GET read, Acquired whether EXEC committed.
	CAS = "WATCH CAS"
)

// Command is one operation of a history these checkers read. Times are
// nanoseconds since the workload began.
type Command struct {
	Client int    `json:"client"`
	Node   string `json:"node,omitempty"` // the node it went through, or the redis-server read directly
	Key    string `json:"key"`
	Name   string `json:"name"`          // one of the command names above
	Arg    string `json:"arg,omitempty"` // SET NX's value, RPUSH's and SADD's element, LPOP's reply ("" for nil)
	// Delta is what an INCRBY or DECRBY adds (negative for DECRBY).
	Delta int64 `json:"delta,omitempty"`
	// The reply: SET NX's (true for OK; EXEC's for CAS), INCR's, INCRBY's
	// and GET's number (the value read, for CAS), LRANGE's and SMEMBERS's
	// elements.
	Acquired bool     `json:"acquired,omitempty"`
	Number   int64    `json:"number,omitempty"`
	List     []string `json:"list,omitempty"`
	Call     int64    `json:"call_ns"`
	Return   int64    `json:"return_ns"`
	// Final marks the reads taken after the workload's writes ended (and
	// the replicas had time to settle): they must agree with each other.
	Final bool `json:"final,omitempty"`
	// Focus is the position of List an anomaly is at: a line shows the
	// elements around it.
	Focus  int    `json:"focus,omitempty"`
	Failed bool   `json:"failed,omitempty"` // outcome unknown
	Error  string `json:"error,omitempty"`
}

// maxShownElements is how many elements of a list a line shows, around
// where it matters.
const maxShownElements = 8

func (c Command) String() string {
	var what string
	switch c.Name {
	case SetNX:
		what = fmt.Sprintf("SET %s %s NX -> nil", c.Key, c.Arg)
		if c.Acquired {
			what = fmt.Sprintf("SET %s %s NX -> OK", c.Key, c.Arg)
		}
	case Incr:
		what = fmt.Sprintf("INCR %s -> %d", c.Key, c.Number)
	case Get:
		what = fmt.Sprintf("GET %s -> %d", c.Key, c.Number)
	case IncrBy, DecrBy:
		what = fmt.Sprintf("%s %s %d -> %d", c.Name, c.Key, max(c.Delta, -c.Delta), c.Number)
	case RPush:
		what = fmt.Sprintf("RPUSH %s %s", c.Key, c.Arg)
	case SAdd:
		what = fmt.Sprintf("SADD %s %s", c.Key, c.Arg)
	case LPop:
		what = fmt.Sprintf("LPOP %s -> %s", c.Key, cmp.Or(c.Arg, "nil"))
	case LRange:
		what = fmt.Sprintf("LRANGE %s -> %d elements %s", c.Key, len(c.List), shownList(c.List, c.Focus))
	case SMembers:
		what = fmt.Sprintf("SMEMBERS %s -> %d elements %s", c.Key, len(c.List), shownList(c.List, c.Focus))
	case CAS:
		what = fmt.Sprintf("WATCH %s, GET -> %d, MULTI, SET %d, EXEC -> nil", c.Key, c.Number, c.Number+1)
		if c.Acquired {
			what = strings.TrimSuffix(what, "nil") + "OK"
		}
	default:
		what = c.Name + " " + c.Key
	}
	if c.Failed {
		what = strings.TrimSuffix(strings.TrimSuffix(what, " -> nil"), " -> OK")
		if i := strings.LastIndex(what, " -> "); c.Name != CAS && i >= 0 {
			what = what[:i] // a reply it did not get
		}
		what += " -> unknown (" + c.Error + ")"
	}
	via := ""
	if c.Node != "" {
		via = " via " + c.Node
	}
	return fmt.Sprintf("client %d%s  %s  call %.3f ms  return %.3f ms", c.Client, via, what, float64(c.Call)/1e6, float64(c.Return)/1e6)
}

// shownList shows at most maxShownElements of list, from around position
// from on.
func shownList(list []string, from int) string {
	lo := max(0, min(from-2, len(list)-maxShownElements))
	hi := min(len(list), lo+maxShownElements)
	s := "[" + strings.Join(list[lo:hi], " ") + "]"
	if lo > 0 {
		s = fmt.Sprintf("[%d before] ", lo) + s
	}
	if hi < len(list) {
		s += fmt.Sprintf(" [%d after]", len(list)-hi)
	}
	return s
}

// Anomaly is one thing a checker found wrong, with the operations that
// show it.
type Anomaly struct {
	Kind string    `json:"kind"` // one of the Anomaly kinds below
	What string    `json:"what"`
	Ops  []Command `json:"ops"`
}

// The kinds of anomaly.
const (
	SeveralWinners   = "several winners"     // of one lock
	NoWinner         = "no winner"           // of a fresh lock, every acquire refused
	DuplicateID      = "duplicate id"        // a number handed out twice
	ImpossibleID     = "impossible id"       // a number past every INCR that may have happened
	WrongFinal       = "wrong final value"   // a counter's final value that lost or made up INCRs
	OrderDiffers     = "order differs"       // a list read that is not a prefix of the longest
	MissingElement   = "missing element"     // an acknowledged element a later read lacks
	DuplicateElement = "duplicate element"   // an element twice in one read
	UnknownElement   = "unknown element"     // an element that no RPUSH pushed
	ReplicasDiffer   = "final reads differ"  // final reads, through nodes or on replicas, not equal
	OutOfBounds      = "value out of bounds" // a counter's value no order of the INCRBYs could give
	DeliveredTwice   = "delivered twice"     // a queue's element popped twice
	LostElement      = "lost element"        // an acknowledged element a drained queue never delivered
	LostUpdate       = "lost update"         // two committed CAS that read the same value
	StaleCAS         = "stale read"          // a committed CAS that read less than one committed before it began
)

// Finding is a checker's verdict on a history.
type Finding struct {
	Checker   string         `json:"checker"`
	Ops       int            `json:"ops"`
	Unknown   int            `json:"unknown"`   // operations of unknown outcome
	Anomalies int            `json:"anomalies"` // how many were found
	ByKind    map[string]int `json:"by_kind,omitempty"`
	Samples   []Anomaly      `json:"samples,omitempty"` // the first of each kind
}

// OK reports whether the checker found nothing wrong.
func (f Finding) OK() bool { return f.Anomalies == 0 }

// Problem is "" when the finding is OK; else the count of anomalies, then
// the first of each kind with its operations, one a line.
func (f Finding) Problem() string {
	if f.OK() {
		return ""
	}
	p := fmt.Sprintf("%s: %d anomalies in %d operations (%d of unknown outcome)", f.Checker, f.Anomalies, f.Ops, f.Unknown)
	for _, a := range f.Samples {
		p += fmt.Sprintf("\n%s (%d): %s", a.Kind, f.ByKind[a.Kind], a.What)
		for _, o := range a.Ops {
			p += "\n  " + o.String()
		}
	}
	return p
}

func (f *Finding) add(kind, what string, ops ...Command) {
	f.Anomalies++
	if f.ByKind == nil {
		f.ByKind = map[string]int{}
	}
	if f.ByKind[kind]++; f.ByKind[kind] == 1 {
		f.Samples = append(f.Samples, Anomaly{Kind: kind, What: what, Ops: ops})
	}
}

// newFinding counts the history's operations, and those of unknown outcome.
func newFinding(checker string, history []Command) Finding {
	f := Finding{Checker: checker, Ops: len(history)}
	for _, c := range history {
		if c.Failed {
			f.Unknown++
		}
	}
	return f
}

// byKey groups the history's commands named name by key, in call order,
// keys sorted.
func byKey(history []Command, names ...string) (keys []string, ops map[string][]Command) {
	ops = map[string][]Command{}
	for _, c := range history {
		if slices.Contains(names, c.Name) {
			ops[c.Key] = append(ops[c.Key], c)
		}
	}
	for _, cs := range ops {
		slices.SortStableFunc(cs, func(a, b Command) int { return cmp.Compare(a.Call, b.Call) })
	}
	return slices.Sorted(maps.Keys(ops)), ops
}

// CheckLocks checks mutual exclusion: of the SET NX acquires of one key
// (one round of the lock), at most one is acknowledged as acquired. It
// also finds a round in which every acquire was acknowledged as refused,
// none of unknown outcome: the key was fresh, so the first SET NX must
// have succeeded.
func CheckLocks(history []Command) Finding {
	f := newFinding("lock", history)
	keys, ops := byKey(history, SetNX)
	for _, k := range keys {
		var winners []Command
		unknown := false
		for _, c := range ops[k] {
			switch {
			case c.Failed:
				unknown = true
			case c.Acquired:
				winners = append(winners, c)
			}
		}
		switch {
		case len(winners) > 1:
			f.add(SeveralWinners, fmt.Sprintf("%d clients were told they hold the lock %s", len(winners), k), winners...)
		case len(winners) == 0 && !unknown:
			f.add(NoWinner, fmt.Sprintf("no client got the fresh lock %s, and every acquire was refused", k), ops[k]...)
		}
	}
	return f
}

// CheckIDs checks INCR of a key as an id generator: no number is handed
// out twice among acknowledged INCRs; no number exceeds the INCRs that
// may have happened; and each final read (GET after the workload) is at
// least the number of acknowledged INCRs and at most that plus those of
// unknown outcome. The key starts missing (0).
func CheckIDs(history []Command) Finding {
	f := newFinding("unique ids", history)
	keys, ops := byKey(history, Incr, Get)
	for _, k := range keys {
		given := map[int64][]Command{}
		var acked, unknown int64
		for _, c := range ops[k] {
			switch {
			case c.Name != Incr:
			case c.Failed:
				unknown++
			default:
				acked++
				given[c.Number] = append(given[c.Number], c)
			}
		}
		for _, n := range slices.Sorted(maps.Keys(given)) {
			cs := given[n]
			switch {
			case len(cs) > 1:
				f.add(DuplicateID, fmt.Sprintf("%s: the number %d was handed out %d times", k, n, len(cs)), cs...)
			case n < 1 || n > acked+unknown:
				f.add(ImpossibleID, fmt.Sprintf("%s: the number %d is outside 1..%d, the INCRs that may have happened", k, n, acked+unknown), cs...)
			}
		}
		for _, c := range ops[k] {
			if c.Name == Get && !c.Failed && (c.Number < acked || c.Number > acked+unknown) {
				f.add(WrongFinal, fmt.Sprintf("%s: the final value %d is outside %d..%d: %d INCRs acknowledged, %d of unknown outcome",
					k, c.Number, acked, acked+unknown, acked, unknown), c)
			}
		}
	}
	return f
}

// CheckList checks RPUSHes of unique elements and LRANGE reads of each
// key, after Elle's list-append model: the reads must all be views of one
// order. So:
//
//   - no read holds an element twice, or one that no RPUSH pushed;
//   - every read is a prefix of the longest read (the order that the
//     others are compared with);
//   - every read that began after an RPUSH was acknowledged holds its
//     element;
//   - the final reads (Command.Final: through each node, or on each
//     replica directly, after the writes) are equal.
func CheckList(history []Command) Finding {
	f := newFinding("list append", history)
	keys, ops := byKey(history, RPush, LRange)
	for _, k := range keys {
		pushed := map[string]Command{}
		var reads, finals []Command
		var longest Command
		for _, c := range ops[k] {
			switch {
			case c.Name == RPush:
				pushed[c.Arg] = c
			case c.Failed:
			default:
				reads = append(reads, c)
				if len(c.List) > len(longest.List) {
					longest = c
				}
				if c.Final {
					finals = append(finals, c)
				}
			}
		}
		for _, r := range reads {
			checkRead(&f, k, r, pushed, longest)
		}
		for _, r := range finals[min(1, len(finals)):] {
			if !slices.Equal(r.List, finals[0].List) {
				at := diverge(r.List, finals[0].List)
				f.add(ReplicasDiffer, fmt.Sprintf("%s: final reads differ from position %d on", k, at), withList(finals[0], at), withList(r, at))
			}
		}
	}
	return f
}

// checkRead adds what is wrong with one read of key k.
func checkRead(f *Finding, k string, r Command, pushed map[string]Command, longest Command) {
	seen := make(map[string]int, len(r.List))
	for i, e := range r.List {
		p, ok := pushed[e]
		switch {
		case !ok:
			f.add(UnknownElement, fmt.Sprintf("%s: a read holds %q, which no RPUSH pushed", k, e), withList(r, i))
		case seen[e] > 0:
			f.add(DuplicateElement, fmt.Sprintf("%s: a read holds %s twice, at positions %d and %d", k, e, seen[e]-1, i), p, withList(r, i))
		}
		seen[e] = i + 1
	}
	if at := diverge(r.List, longest.List); at < len(r.List) {
		f.add(OrderDiffers, fmt.Sprintf("%s: two reads disagree on the order at position %d: one is not a prefix of the other", k, at),
			withList(longest, at), withList(r, at))
	}
	var missing []Command
	for _, p := range pushed {
		if !p.Failed && p.Return < r.Call && seen[p.Arg] == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		slices.SortFunc(missing, func(a, b Command) int { return cmp.Compare(a.Return, b.Return) })
		f.add(MissingElement, fmt.Sprintf("%s: a read misses %d acknowledged elements pushed before it began; the first is %s", k, len(missing), missing[0].Arg),
			missing[0], withList(r, len(r.List)))
	}
}

// diverge is the first position at which a and b differ, or the shorter
// one's length when one is a prefix of the other.
func diverge(a, b []string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// withList returns c with its focus at position at of its list.
func withList(c Command, at int) Command {
	c.Focus = at
	return c
}
