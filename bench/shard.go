package bench

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Shard is this process's part of a run that several troop bench
// processes (on several machines) drive together, --shard I/N. The zero
// Shard is a whole run.
//
// Shard I of N takes, in every group of workers, the workers w with
// w mod N = I-1: the same workers, with the same random streams and the
// same send times (Intended), that a whole run would have had, so the N
// shards together issue the whole run's rate, evenly spaced, and its
// requests. Keys are split into N disjoint ranges, shard I taking
// [Keys*(I-1)/N, Keys*I/N): every shard's model of acknowledged writes
// then sees every write to its keys, and its reads are checked as a whole
// run's are. Each key distribution is drawn over the shard's own range:
// uniform and hotspot keep their shape over the whole key set, while a
// zipfian (and latest) run of N shards has N hot spots, the k-th most
// popular key of each shard getting 1/N of the share the k-th key of a
// whole run would get.
type Shard struct {
	Index int `json:"index"` // 1 to Count
	Count int `json:"count"`
}

// ParseShard reads "I/N", such as 2/3.
func ParseShard(s string) (Shard, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("%q is not I/N, such as 2/3 for the second of three shards", s)
	}
	sh := Shard{i, n}
	return sh, sh.check()
}

// validate accepts the zero Shard (a whole run) and every shard check does.
func (s Shard) validate() error {
	if s == (Shard{}) {
		return nil
	}
	return s.check()
}

func (s Shard) check() error {
	if s.Count < 1 || s.Index < 1 || s.Index > s.Count {
		return fmt.Errorf("--shard %d/%d: I must lie between 1 and N, and N be at least 1", s.Index, s.Count)
	}
	return nil
}

func (s Shard) String() string {
	if s == (Shard{}) {
		return "none" // a whole run, as bench compare shows it
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// of is the number of shards, 1 for a whole run.
func (s Shard) of() int { return max(s.Count, 1) }

// owns says whether worker w of a group is this shard's.
func (s Shard) owns(w int) bool { return w%s.of() == max(s.Index-1, 0) }

// workers is how many of a group's workers are this shard's.
func (s Shard) workers(total int) int {
	return (total - max(s.Index-1, 0) + s.of() - 1) / s.of()
}

// keyRange is this shard's keys: n of them from first on.
func (s Shard) keyRange(keys uint64) (first, n uint64) {
	i, c := uint64(max(s.Index-1, 0)), uint64(s.of())
	first, end := mulDiv(keys, i, c), mulDiv(keys, i+1, c)
	return first, end - first
}

// mulDiv is a*b/c for b <= c, without overflow.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}
