package check

import (
	"slices"
	"strings"
	"testing"
)

func acquire(c int, key string, ok bool, call, ret int64) Command {
	return Command{Client: c, Key: key, Name: SetNX, Arg: "me", Acquired: ok, Call: call, Return: ret}
}

func incr(c int, n int64, call, ret int64) Command {
	return Command{Client: c, Key: "id", Name: Incr, Number: n, Call: call, Return: ret}
}

func finalGet(n int64) Command {
	return Command{Client: 9, Key: "id", Name: Get, Number: n, Call: 1000, Return: 1010, Final: true}
}

func push(c int, e string, call, ret int64) Command {
	return Command{Client: c, Key: "l", Name: RPush, Arg: e, Call: call, Return: ret}
}

func lrange(c int, call, ret int64, list ...string) Command {
	return Command{Client: c, Key: "l", Name: LRange, List: list, Call: call, Return: ret}
}

func final(node string, list ...string) Command {
	c := lrange(9, 1000, 1010, list...)
	c.Node, c.Final = node, true
	return c
}

func change(c int, delta, reply int64, call, ret int64) Command {
	name := IncrBy
	if delta < 0 {
		name = DecrBy
	}
	return Command{Client: c, Key: "n", Name: name, Delta: delta, Number: reply, Call: call, Return: ret}
}

func read(c int, n int64, call, ret int64) Command {
	return Command{Client: c, Key: "n", Name: Get, Number: n, Call: call, Return: ret}
}

func sadd(c int, e string, call, ret int64) Command {
	return Command{Client: c, Key: "s", Name: SAdd, Arg: e, Call: call, Return: ret}
}

func smembers(c int, call, ret int64, elems ...string) Command {
	return Command{Client: c, Key: "s", Name: SMembers, List: elems, Call: call, Return: ret}
}

func finalSet(node string, elems ...string) Command {
	c := smembers(9, 1000, 1010, elems...)
	c.Node, c.Final = node, true
	return c
}

func enqueue(c int, e string, call, ret int64) Command {
	return Command{Client: c, Key: "q", Name: RPush, Arg: e, Call: call, Return: ret}
}

// pop is an LPOP that delivered e ("" for nil).
func pop(c int, e string, call, ret int64) Command {
	return Command{Client: c, Key: "q", Name: LPop, Arg: e, Call: call, Return: ret}
}

func drain() Command {
	c := pop(9, "", 1000, 1010)
	c.Final = true
	return c
}

// cas is a WATCH/GET/MULTI/SET/EXEC attempt that read n, committed or not.
func cas(c int, n int64, ok bool, call, ret int64) Command {
	return Command{Client: c, Key: "c", Name: CAS, Number: n, Acquired: ok, Call: call, Return: ret}
}

func casFinal(n int64) Command {
	return Command{Client: 9, Key: "c", Name: Get, Number: n, Call: 1000, Return: 1010, Final: true}
}

func unknown(c Command) Command {
	c.Failed, c.Error, c.Acquired = true, "timeout", false
	return c
}

func TestCheckers(t *testing.T) {
	tests := []struct {
		name    string
		check   func([]Command) Finding
		history []Command
		kind    string // of an anomaly it must find; "" when the history is good
		want    string // in that anomaly's description
	}{
		{"one winner per round", CheckLocks, []Command{
			acquire(0, "r1", true, 0, 10), acquire(1, "r1", false, 0, 10), acquire(2, "r1", false, 5, 12),
			acquire(0, "r2", false, 20, 30), acquire(1, "r2", true, 20, 30),
		}, "", ""},
		{"an acquire of unknown outcome beside a winner", CheckLocks, []Command{
			acquire(0, "r1", true, 0, 10), unknown(acquire(1, "r1", false, 0, 10)),
		}, "", ""},
		{"a round won by nobody known, one unknown", CheckLocks, []Command{
			acquire(0, "r1", false, 0, 10), unknown(acquire(1, "r1", false, 0, 10)),
		}, "", ""},
		{"two winners", CheckLocks, []Command{
			acquire(0, "r1", true, 0, 10), acquire(1, "r1", false, 0, 10),
			acquire(0, "r2", true, 20, 30), acquire(1, "r2", true, 20, 30), acquire(2, "r2", false, 20, 30),
		}, SeveralWinners, "2 clients were told they hold the lock r2"},
		{"nobody won a fresh lock", CheckLocks, []Command{
			acquire(0, "r1", false, 0, 10), acquire(1, "r1", false, 0, 10),
		}, NoWinner, "no client got the fresh lock r1"},

		{"unique ids and a final value that counts them", CheckIDs, []Command{
			incr(0, 1, 0, 10), incr(1, 2, 0, 10), incr(0, 3, 20, 30), finalGet(3),
		}, "", ""},
		{"an INCR of unknown outcome may count or not", CheckIDs, []Command{
			incr(0, 1, 0, 10), unknown(incr(1, 0, 0, 10)), incr(0, 3, 20, 30), finalGet(3),
		}, "", ""},
		{"a number handed out twice", CheckIDs, []Command{
			incr(0, 1, 0, 10), incr(1, 1, 0, 10), incr(0, 2, 20, 30), finalGet(3),
		}, DuplicateID, "id: the number 1 was handed out 2 times"},
		{"a number past every INCR", CheckIDs, []Command{
			incr(0, 1, 0, 10), incr(1, 5, 0, 10),
		}, ImpossibleID, "the number 5 is outside 1..2"},
		{"a final value that lost an INCR", CheckIDs, []Command{
			incr(0, 1, 0, 10), incr(1, 2, 0, 10), incr(0, 3, 20, 30), finalGet(2),
		}, WrongFinal, "the final value 2 is outside 3..3"},

		{"reads are prefixes of one order", CheckList, []Command{
			push(0, "a", 0, 10), push(1, "b", 5, 15), lrange(2, 6, 8, "a"), lrange(2, 20, 25, "a", "b"),
			push(0, "c", 30, 40), lrange(1, 35, 38, "a", "b"), final("n1", "a", "b", "c"), final("n2", "a", "b", "c"),
		}, "", ""},
		{"an element of unknown outcome may show or not", CheckList, []Command{
			push(0, "a", 0, 10), unknown(push(1, "b", 5, 15)), lrange(2, 20, 25, "a"), lrange(2, 30, 35, "a", "b"),
		}, "", ""},
		{"two orders", CheckList, []Command{
			push(0, "a", 0, 10), push(1, "b", 0, 10), lrange(2, 20, 25, "a", "b"), lrange(2, 30, 35, "b", "a"),
		}, OrderDiffers, "l: two reads disagree on the order at position 0"},
		{"replicas end in different orders", CheckList, []Command{
			push(0, "a", 0, 10), push(1, "b", 0, 10), final("n1", "a", "b"), final("n2", "b", "a"),
		}, OrderDiffers, "l: two reads disagree"},
		{"an acknowledged element missed", CheckList, []Command{
			push(0, "a", 0, 10), push(1, "b", 0, 10), lrange(2, 20, 25, "a"),
		}, MissingElement, "a read misses 1 acknowledged elements pushed before it began; the first is b"},
		{"an element twice", CheckList, []Command{
			push(0, "a", 0, 10), push(1, "b", 0, 10), lrange(2, 20, 25, "a", "b", "a"),
		}, DuplicateElement, "a read holds a twice, at positions 0 and 2"},
		{"an element nobody pushed", CheckList, []Command{
			push(0, "a", 0, 10), lrange(2, 20, 25, "a", "z"),
		}, UnknownElement, `a read holds "z", which no RPUSH pushed`},
		{"final reads that are prefixes but not equal", CheckList, []Command{
			push(0, "a", 0, 10), unknown(push(1, "b", 0, 10)), final("n1", "a", "b"), final("n2", "a"),
		}, ReplicasDiffer, "l: final reads differ from position 1 on"},

		{"reads between what was acknowledged and what was begun", CheckCounter, []Command{
			change(0, 5, 5, 0, 10), change(1, -2, 3, 20, 30), read(2, 3, 31, 35),
			change(0, 4, 7, 40, 60), read(2, 3, 45, 50), read(2, 7, 45, 50), change(1, 1, 8, 70, 80), read(2, 8, 90, 95),
		}, "", ""},
		{"a change of unknown outcome may count or not", CheckCounter, []Command{
			unknown(change(0, 5, 0, 0, 10)), change(1, 1, 1, 20, 30), read(2, 6, 40, 45), read(2, 1, 50, 55),
		}, "", ""},
		{"a concurrent decrement may count", CheckCounter, []Command{
			change(0, 5, 5, 0, 10), change(1, -3, 2, 20, 40), read(2, 2, 25, 30), read(2, 5, 25, 30),
		}, "", ""},
		{"a read that misses an acknowledged increment", CheckCounter, []Command{
			change(0, 5, 5, 0, 10), change(1, 2, 7, 20, 30), read(2, 5, 40, 45),
		}, OutOfBounds, "n: read 5, outside 7..7"},
		{"a reply that misses another client's increment (one replica's count)", CheckCounter, []Command{
			change(0, 5, 5, 0, 10), change(1, 2, 2, 20, 30),
		}, OutOfBounds, "n: read 2, outside 7..7"},
		{"a read of an increment not yet begun", CheckCounter, []Command{
			change(0, 5, 5, 0, 10), read(2, 9, 20, 25), change(1, 4, 9, 30, 40),
		}, OutOfBounds, "n: read 9, outside 5..5"},

		{"every read holds what was added before it", CheckSet, []Command{
			sadd(0, "a", 0, 10), sadd(1, "b", 5, 15), smembers(2, 6, 8), smembers(2, 11, 20, "a"), smembers(2, 20, 25, "b", "a"),
			finalSet("n1", "a", "b"), finalSet("n2", "b", "a"),
		}, "", ""},
		{"an add of unknown outcome may show or not", CheckSet, []Command{
			sadd(0, "a", 0, 10), unknown(sadd(1, "b", 5, 15)), smembers(2, 20, 25, "a"), smembers(2, 30, 35, "a", "b"),
		}, "", ""},
		{"an acknowledged add missed", CheckSet, []Command{
			sadd(0, "a", 0, 10), sadd(1, "b", 0, 10), smembers(2, 20, 25, "b"),
		}, MissingElement, "s: a read misses 1 acknowledged elements added before it began; the first is a"},
		{"an element never added", CheckSet, []Command{
			sadd(0, "a", 0, 10), smembers(2, 20, 25, "a", "z"),
		}, UnknownElement, `s: a read holds "z", which no SADD added`},
		{"replicas end with different members", CheckSet, []Command{
			sadd(0, "a", 0, 10), unknown(sadd(1, "b", 0, 10)), finalSet("n1", "a", "b"), finalSet("n2", "a"),
		}, ReplicasDiffer, "s: final reads differ: 2 and 1 elements"},

		{"each element delivered once, the rest drained", CheckQueue, []Command{
			enqueue(0, "a", 0, 10), enqueue(1, "b", 0, 10), pop(2, "", 1, 3), pop(2, "b", 20, 25), pop(0, "a", 20, 25), drain(),
		}, "", ""},
		{"a pop of unknown outcome may have taken the missing one", CheckQueue, []Command{
			enqueue(0, "a", 0, 10), enqueue(1, "b", 0, 10), pop(2, "b", 20, 25), unknown(pop(0, "", 20, 25)), drain(),
		}, "", ""},
		{"not drained: nothing is lost yet", CheckQueue, []Command{
			enqueue(0, "a", 0, 10), enqueue(1, "b", 0, 10), pop(2, "b", 20, 25), pop(0, "", 20, 25),
		}, "", ""},
		{"an element delivered twice", CheckQueue, []Command{
			enqueue(0, "a", 0, 10), enqueue(1, "b", 0, 10), pop(2, "a", 20, 25), pop(0, "a", 20, 25), pop(1, "b", 30, 35), drain(),
		}, DeliveredTwice, "q: a was delivered 2 times"},
		{"an acknowledged element lost", CheckQueue, []Command{
			enqueue(0, "a", 0, 10), enqueue(1, "b", 0, 10), pop(2, "a", 20, 25), drain(),
		}, LostElement, "q: the drained queue never delivered 1 acknowledged elements, and only 0 LPOPs of unknown outcome may have taken any; the first is b"},
		{"an element delivered before it was pushed", CheckQueue, []Command{
			pop(2, "a", 0, 5), enqueue(0, "a", 10, 20),
		}, UnknownElement, "q: LPOP delivered a before its RPUSH began"},

		{"a chain of committed increments", CheckCAS, []Command{
			cas(0, 0, true, 0, 10), cas(1, 0, false, 0, 12), cas(1, 1, true, 15, 20), cas(0, 2, true, 21, 30), casFinal(3),
		}, "", ""},
		{"an EXEC of unknown outcome may have committed", CheckCAS, []Command{
			cas(0, 0, true, 0, 10), unknown(cas(1, 1, false, 11, 12)), cas(0, 2, true, 21, 30), casFinal(3),
		}, "", ""},
		{"two EXECs committed on one value", CheckCAS, []Command{
			cas(0, 0, true, 0, 10), cas(1, 1, true, 11, 20), cas(2, 1, true, 11, 20), casFinal(2),
		}, LostUpdate, "c: 2 EXECs committed on the same value read, 1: all but one of their updates lost"},
		{"a committed EXEC on a value already overwritten", CheckCAS, []Command{
			cas(0, 0, true, 0, 10), cas(0, 1, true, 11, 20), cas(1, 1, true, 30, 40),
		}, StaleCAS, "c: an EXEC committed on the value 1, though one that read 1 (and wrote 2) committed before its WATCH"},
		{"a final value that lost committed increments", CheckCAS, []Command{
			cas(0, 0, true, 0, 10), cas(1, 1, true, 11, 20), casFinal(1),
		}, WrongFinal, "c: the final value 1 is outside 2..2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.check(tc.history)
			if tc.kind == "" {
				if !f.OK() {
					t.Fatalf("good history flagged: %s", f.Problem())
				}
				return
			}
			i := slices.IndexFunc(f.Samples, func(a Anomaly) bool { return a.Kind == tc.kind })
			if i < 0 || !strings.Contains(f.Samples[i].What, tc.want) || len(f.Samples[i].Ops) == 0 {
				t.Fatalf("want a %s anomaly %q with its operations, got %+v", tc.kind, tc.want, f)
			}
			t.Logf("%s", f.Problem())
		})
	}
}

// A long list shows the elements around where two reads part, not all of
// them.
func TestListCounterexampleShowsWhereReadsPart(t *testing.T) {
	var h []Command
	var a, b []string
	for i := range 100 {
		e := string(rune('A'+i%26)) + strings.Repeat("x", i/26)
		h = append(h, push(0, e, int64(i), int64(i)+1))
		a, b = append(a, e), append(b, e)
	}
	b[50], b[51] = b[51], b[50]
	h = append(h, final("n1", a...), final("n2", b...))
	p := CheckList(h).Problem()
	if !strings.Contains(p, "[48 before] [") || !strings.Contains(p, "[44 after]") || strings.Count(p, "\n") != 6 {
		t.Fatalf("counterexample:\n%s", p)
	}
	t.Log(p)
}
