package node

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/resp"
)

// SPOP through every node at once: the deciding replica draws, so no
// member is popped twice and none is lost, and every replica ends with
// the same set. At DC_ONE too, as the others follow what it drew.
func TestSpop(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	for _, level := range []string{"DC_QUORUM", "DC_ONE"} {
		t.Run(level, func(t *testing.T) {
			key := "spop:" + level
			const members = 200
			w := tc.client(0, "DC_QUORUM")
			args := []string{"SADD", key}
			for i := 0; i < members; i++ {
				args = append(args, fmt.Sprintf("m%03d", i))
			}
			if got := w.must(args...); got != fmt.Sprint(members) {
				t.Fatalf("SADD: %s", got)
			}
			var (
				mu     sync.Mutex
				popped []string
				errs   []string
				wg     sync.WaitGroup
			)
			for c := 0; c < 6; c++ {
				cl := tc.client(c%3, level)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						req := []string{"SPOP", key}
						if c%2 == 1 {
							req = append(req, "3")
						}
						v, err := cl.try(req...)
						mu.Lock()
						switch {
						case err != nil || v.IsError():
							errs = append(errs, fmt.Sprintf("%v: %v %s", req, err, v))
						case v.IsNull || (v.Type == resp.Array && len(v.Elems) == 0):
							mu.Unlock()
							return
						case v.Type == resp.Array:
							for _, e := range v.Elems {
								popped = append(popped, string(e.Str))
							}
						default:
							popped = append(popped, string(v.Str))
						}
						stop := len(errs) > 0
						mu.Unlock()
						if stop {
							return
						}
					}
				}()
			}
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("SPOP failed: %s", strings.Join(errs, "; "))
			}
			sort.Strings(popped)
			for i := 1; i < len(popped); i++ {
				if popped[i] == popped[i-1] {
					t.Fatalf("%s popped twice", popped[i])
				}
			}
			if len(popped) != members {
				t.Fatalf("%d members popped of %d", len(popped), members)
			}
			for _, tn := range tc.nodes {
				r := dial(t, tn.redis.Addr)
				eventually(t, 5*time.Second, func() string {
					if n := r.must("SCARD", key); n != "0" {
						return fmt.Sprintf("%s's redis-server still holds %s members of %s", tn.cfg.Name, n, key)
					}
					return ""
				})
			}
		})
	}
	c := tc.client(1, "")
	c.must("SET", "spop:string", "x")
	if v := c.do("SPOP", "spop:string"); !v.IsError() || !strings.HasPrefix(string(v.Str), "WRONGTYPE") {
		t.Errorf("SPOP of a string: %s, want WRONGTYPE", v)
	}
	if got := c.must("SPOP", "spop:missing"); got != "(nil)" {
		t.Errorf("SPOP of a missing key: %s", got)
	}
	c.must("MULTI") // the other replicas remove what it drew (TestWhatFrameworksNeed)
	if v := c.do("SPOP", "spop:missing"); string(v.Str) != "QUEUED" {
		t.Errorf("SPOP inside MULTI: %s", v)
	}
	if v := c.do("EXEC"); v.IsError() || len(v.Elems) != 1 || !v.Elems[0].IsNull {
		t.Errorf("EXEC of SPOP of a missing key: %s", v)
	}
}

// The members drawn are removed in the other datacenters too.
func TestSpopTwoDatacenters(t *testing.T) {
	tc := startCluster(t, clusterOpts{dcs: 2, racks: 2})
	c := tc.client(0, "DC_QUORUM")
	c.must("SADD", "spop:dc", "a", "b", "c", "d")
	v := c.do("SPOP", "spop:dc", "3")
	if v.IsError() || len(v.Elems) != 3 {
		t.Fatalf("SPOP spop:dc 3: %s", v)
	}
	left := c.do("SMEMBERS", "spop:dc")
	if len(left.Elems) != 1 {
		t.Fatalf("SMEMBERS after the pop: %s", left)
	}
	for _, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		eventually(t, 5*time.Second, func() string {
			if got := r.do("SMEMBERS", "spop:dc"); len(got.Elems) != 1 || string(got.Elems[0].Str) != string(left.Elems[0].Str) {
				return fmt.Sprintf("%s's redis-server holds %s, want %s", tn.cfg.Name, got, left)
			}
			return ""
		})
	}
}
