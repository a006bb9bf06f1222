package fit

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseScope(t *testing.T) {
	s, err := ParseScope("playlist/cache=delay:200ms,api->ratings=error,api->bookmarks=timeout")
	if err != nil {
		t.Fatal(err)
	}
	want := []Fault{{Point: "playlist/cache", Kind: Delay, Delay: 200 * time.Millisecond}, {Point: "api->ratings", Kind: Error}, {Point: "api->bookmarks", Kind: Timeout}}
	if len(s.Faults) != len(want) {
		t.Fatalf("faults %+v", s.Faults)
	}
	for i := range want {
		if s.Faults[i] != want[i] {
			t.Errorf("fault %d: %+v, want %+v", i, s.Faults[i], want[i])
		}
	}
	if got := s.String(); got != "api->bookmarks=timeout,api->ratings=error,playlist/cache=delay:200ms" {
		t.Errorf("String: %s", got)
	}
	if empty, err := ParseScope(""); err != nil || len(empty.Faults) != 0 {
		t.Errorf("empty scope: %+v, %v", empty, err)
	}
}

func TestParseScopeKinds(t *testing.T) {
	s, err := ParseScope("api->ratings=status:503,api->grpc=code:ResourceExhausted,api->x=reset,n1->n2=hold")
	if err != nil {
		t.Fatal(err)
	}
	want := []Fault{{Point: "api->ratings", Kind: Status, Status: 503}, {Point: "api->grpc", Kind: Code, Code: "ResourceExhausted"}, {Point: "api->x", Kind: Reset}, {Point: "n1->n2", Kind: Hold}}
	if !slices.Equal(s.Faults, want) {
		t.Errorf("faults %+v, want %+v", s.Faults, want)
	}
	if got := s.String(); got != "api->grpc=code:ResourceExhausted,api->ratings=status:503,api->x=reset,n1->n2=hold" {
		t.Errorf("String: %s", got)
	}
}

func TestParseScopeErrors(t *testing.T) {
	for text, want := range map[string]string{
		"api->ratings":             "want POINT=ACTION",
		"ratings=error":            "want SERVICE/POINT or CALLER->CALLEE",
		"a/b=explode":              `unknown action "explode"`,
		"a->b=status:200":          "from 400 to 599",
		"a->b=status:0503":         "from 400 to 599",
		"a->b=status:":             "from 400 to 599",
		"a->b=code:OK":             "other than OK",
		"a->b=code:unavailable":    "other than OK",
		"a->b=reset:1":             "takes no argument",
		"a->b=hold:1s":             "takes no argument",
		"a/b=delay:-1s":            "positive duration",
		"a/b=delay":                "positive duration",
		"a/b=error:3":              "takes no argument",
		"a/b=error,a/b=timeout":    "appears twice",
		"a b/c=error":              "want SERVICE/POINT",
		"a->b->c=error":            "want SERVICE/POINT",
		"a/b=error,":               "fault 2",
		strings.Repeat("x", 10000): "limit",
	} {
		_, err := ParseScope(text)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseScope(%.40q): %v, want an error containing %q", text, err, want)
		}
	}
}

// FuzzParseScope: any text either fails to parse with an error, or parses to
// a scope whose text form parses back to the same scope.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"", "a/b=error", "a->b=timeout,c/d=delay:1.5s", "a/b=delay:1h", "x=y", ",,",
		"a->b=status:503,a->c=code:Unavailable,a->d=reset", "a->b=status:4290", "a->b=code:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseScope(text)
		if err != nil {
			return
		}
		again, err := ParseScope(s.String())
		if err != nil {
			t.Fatalf("%q parsed, its encoding %q does not: %v", text, s.String(), err)
		}
		if again.String() != s.String() {
			t.Fatalf("%q: encoding %q re-encodes as %q", text, s.String(), again.String())
		}
	})
}
