// Package check judges histories of operations on a store. CheckRegisters
// decides whether each key's history of reads and writes is linearizable
// for a register (with porcupine), and counts stale reads. It is pure: the
// workloads that produce histories live in package suite.
package check

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Missing is the value a read of a key that holds nothing returns.
const Missing = -1

// Op is one operation of the history. Times are nanoseconds since the
// workload began.
type Op struct {
	Client int    `json:"client"`
	Key    string `json:"key"`
	Write  bool   `json:"write"`
	Value  int    `json:"value"` // written, or read (Missing for none)
	Call   int64  `json:"call_ns"`
	Return int64  `json:"return_ns"`
	// Failed: a write whose outcome is unknown (error reply, timeout): it
	// may have happened at any time after its call, or never. Failed reads
	// are not kept: they said nothing.
	Failed bool   `json:"failed,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (o Op) String() string {
	v := fmt.Sprint(o.Value)
	if o.Value == Missing {
		v = "nil"
	}
	ret := fmt.Sprintf("%.3f ms", float64(o.Return)/1e6)
	if o.Failed {
		ret = "unknown (" + o.Error + ")"
	}
	verb := fmt.Sprintf("GET %s -> %s", o.Key, v)
	if o.Write {
		verb = fmt.Sprintf("SET %s %s", o.Key, v)
	}
	return fmt.Sprintf("client %d  %-28s call %.3f ms  return %s", o.Client, verb, float64(o.Call)/1e6, ret)
}

// Verdict is what Check found in a history.
type Verdict struct {
	Ops    int `json:"ops"`
	Reads  int `json:"reads"`
	Writes int `json:"writes"`
	Failed int `json:"failed_writes"` // writes of unknown outcome
	// Result is porcupine's over every key: "Ok", "Illegal", or "Unknown"
	// when the check ran out of time.
	Result string `json:"result"`
	// StaleReads are reads that returned a value some acknowledged write
	// had already replaced before the read began (or nothing, after a write
	// was acknowledged).
	StaleReads     int             `json:"stale_reads"`
	StaleSamples   []string        `json:"stale_samples,omitempty"`
	Counterexample *Counterexample `json:"counterexample,omitempty"`
}

// Linearizable reports whether every key's history has a linearization.
func (v Verdict) Linearizable() bool { return v.Result == string(porcupine.Ok) }

// Problem is "" when every history is linearizable with no stale read;
// else the result, the stale reads and the counterexample's operations,
// one a line.
func (v Verdict) Problem() string {
	if v.Linearizable() && v.StaleReads == 0 {
		return ""
	}
	p := fmt.Sprintf("%s, %d stale reads", v.Result, v.StaleReads)
	if v.Counterexample != nil {
		for _, o := range v.Counterexample.Ops {
			p += "\n" + o.String()
		}
	}
	return p
}

// Counterexample is the shortest prefix (by call time) of one key's history
// that has no linearization, ending with the operation that made it so.
type Counterexample struct {
	Key string `json:"key"`
	// Ops are the last operations of that prefix in call order, then the
	// writes, called later, of values they read.
	Ops []Op `json:"ops"`
}

const maxStaleSamples = 10

// CheckRegisters decides whether the history is linearizable for a register per key,
// within timeout per key, and counts stale reads.
func CheckRegisters(history []Op, timeout time.Duration) Verdict {
	v := Verdict{Ops: len(history), Result: string(porcupine.Ok)}
	byKey := map[string][]Op{}
	for _, o := range history {
		byKey[o.Key] = append(byKey[o.Key], o)
		switch {
		case o.Write && o.Failed:
			v.Writes++
			v.Failed++
		case o.Write:
			v.Writes++
		default:
			v.Reads++
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ops := byKey[k]
		slices.SortFunc(ops, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
		for _, r := range staleReads(ops) {
			v.StaleReads++
			if len(v.StaleSamples) < maxStaleSamples {
				v.StaleSamples = append(v.StaleSamples, r)
			}
		}
		switch res := porcupine.CheckOperationsTimeout(registerModel, operations(ops), timeout); res {
		case porcupine.Illegal:
			if v.Counterexample == nil {
				v.Counterexample = counterexample(k, ops, timeout)
			}
			v.Result = string(porcupine.Illegal)
		case porcupine.Unknown:
			if v.Result == string(porcupine.Ok) {
				v.Result = string(porcupine.Unknown)
			}
		}
	}
	return v
}

type input struct {
	write bool
	value int
}

// registerModel is a single register whose initial state is Missing.
var registerModel = porcupine.Model{
	Init: func() any { return Missing },
	Step: func(state, in, out any) (bool, any) {
		i := in.(input)
		if i.write {
			return true, i.value
		}
		return out.(int) == state.(int), state
	},
}

// operations turns one key's ops into porcupine's. A write of unknown
// outcome may take effect at any time after its call, so it returns after
// everything else, on a client of its own.
func operations(ops []Op) []porcupine.Operation {
	var end int64
	for _, o := range ops {
		end = max(end, o.Return, o.Call)
	}
	out := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		ret, client := o.Return, o.Client
		if o.Failed {
			ret, client = end+1, 1_000_000+i
		}
		out[i] = porcupine.Operation{ClientId: client, Input: input{o.Write, o.Value}, Call: o.Call, Output: o.Value, Return: ret}
	}
	return out
}

// counterexampleOps is how many operations a counterexample shows.
const counterexampleOps = 8

// counterexample finds the shortest prefix, in call order, of a key's
// illegal history that is itself illegal, and returns its last operations.
// A prefix keeps, besides the operations called in it, the write of every
// value its reads returned: a read may return a write called after it
// (they overlap), and without that write the prefix would be illegal for
// no fault of the store. Dropping any other write keeps a linearizable
// history linearizable, so the prefix is illegal only where the store was.
func counterexample(key string, ops []Op, timeout time.Duration) *Counterexample {
	writes := writers(ops)
	// prefix returns ops[:n] and the writes, called later, that its reads read.
	prefix := func(n int) []Op {
		out := slices.Clone(ops[:n])
		added := map[int]bool{}
		for _, o := range ops[:n] {
			if i, ok := writes[o.Value]; !o.Write && ok && i >= n && !added[i] {
				added[i] = true
				out = append(out, ops[i])
			}
		}
		return out
	}
	illegal := func(n int) bool {
		return porcupine.CheckOperationsTimeout(registerModel, operations(prefix(n)), timeout) == porcupine.Illegal
	}
	n := len(ops)
	lo, hi := 1, n // the shortest illegal prefix is in [lo, hi]
	// The search is bounded like one check: past its deadline the shortest
	// illegal prefix found so far is shown.
	deadline := time.Now().Add(timeout)
	for lo < hi && time.Now().Before(deadline) {
		mid := (lo + hi) / 2
		if illegal(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	shown := slices.Clone(ops[max(0, hi-counterexampleOps):hi])
	// The writes, called later, of values read in what is shown go last:
	// they are part of the story.
	for _, o := range shown[:len(shown):len(shown)] {
		if i, ok := writes[o.Value]; !o.Write && ok && i >= hi && !slices.Contains(shown, ops[i]) {
			shown = append(shown, ops[i])
		}
	}
	return &Counterexample{Key: key, Ops: shown}
}

// writers maps each written value of ops to the index of its write.
func writers(ops []Op) map[int]int {
	out := map[int]int{}
	for i, o := range ops {
		if o.Write {
			out[o.Value] = i
		}
	}
	return out
}

// staleReads lists the reads of one key's ops that returned a value an
// acknowledged write had already replaced when the read was called: the
// initial Missing once any write was acknowledged, or a write w once another
// write called after w returned was acknowledged. Writes of unknown outcome
// may land at any time, so their values are never stale; a value no write
// wrote is porcupine's business, not a stale read.
func staleReads(ops []Op) []string {
	writes := writers(ops)
	var out []string
	for _, r := range ops {
		if r.Write {
			continue
		}
		var src *Op
		if i, ok := writes[r.Value]; ok {
			src = &ops[i]
		}
		if r.Value != Missing && (src == nil || src.Failed) {
			continue
		}
		for _, w := range ops {
			if !w.Write || w.Failed || w.Return >= r.Call || (src != nil && w.Call <= src.Return) {
				continue
			}
			out = append(out, fmt.Sprintf("%s: the write of %d had returned at %.3f ms", r, w.Value, float64(w.Return)/1e6))
			break
		}
	}
	return out
}
