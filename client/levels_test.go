package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// A get_consistency answer is read in either node's format: troop's JSON,
// Dynomite's plain text (as its stats server writes it, CRLF and all); a
// malformed one is an error naming the answer's source and what is wrong.
func TestParseLevels(t *testing.T) {
	for body, want := range map[string]Levels{
		`{"read": "DC_QUORUM", "write": "DC_QUORUM"}`:                      {"DC_QUORUM", "DC_QUORUM"},
		`{"read":"dc_one","write":"DC_SAFE_QUORUM"}` + "\n":                {"DC_ONE", "DC_SAFE_QUORUM"},
		"Read Consistency: DC_QUORUM\r\nWrite Consistency: DC_QUORUM\r\n":  {"DC_QUORUM", "DC_QUORUM"},
		"Write Consistency: DC_ONE\nRead Consistency: DC_EACH_SAFE_QUORUM": {"DC_EACH_SAFE_QUORUM", "DC_ONE"},
	} {
		got, err := ParseLevels([]byte(body), "test")
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", body, got, err, want)
		}
	}
	for body, want := range map[string]string{
		``:                                   "no read consistency",
		`{"read":"DC_ONE"}`:                  "no write consistency",
		`{"read":"DC_ONE",`:                  "not a get_consistency answer of troop",
		`{"read":"DC_TWO","write":"DC_ONE"}`: `read consistency: unknown consistency level "DC_TWO"`,
		"Read Consistency: DC_ONE\r\n":       "no write consistency",
		"Read Consistency: DC_ONE\r\nRead Consistency: DC_ONE\r\nWrite Consistency: DC_ONE": "Read Consistency given twice",
		"Read Consistency:\r\nWrite Consistency: DC_ONE":                                    "Read Consistency has no level",
		"Read Consistency: INVALID CONSISTENCY\r\nWrite Consistency: DC_ONE":                `unknown consistency level "INVALID CONSISTENCY"`,
		"<html>404</html>": `line "<html>404</html>" is not Dynomite's`,
	} {
		_, err := ParseLevels([]byte(body), "get_consistency at 10.0.0.1:22222")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "get_consistency at 10.0.0.1:22222: ") {
			t.Errorf("%q: %v, want an error naming the source and saying %q", body, err, want)
		}
	}
}

// GetLevels and Store ask a node's admin API: a Dynomite's answers name it
// and its version; a troop node's /info has no version; an answer that is
// neither is an error.
func TestGetLevelsAndStore(t *testing.T) {
	answers := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	answers["/get_consistency"] = "Read Consistency: DC_QUORUM\r\nWrite Consistency: DC_ONE\r\n"
	answers["/info"] = `{"service":"dynomite", "source":"h", "version":"2046b05", "uptime":3}`
	if l, err := GetLevels(ctx, addr); err != nil || l != (Levels{"DC_QUORUM", "DC_ONE"}) || l.String() != "read DC_QUORUM, write DC_ONE" {
		t.Errorf("Dynomite's levels: %+v %q, %v", l, l, err)
	}
	if name, version, err := Store(ctx, addr); name != "Dynomite" || version != "2046b05" || err != nil {
		t.Errorf("Dynomite's store: %q %q %v", name, version, err)
	}
	answers["/info"] = `{"name":"dc1-rack1-1","read_consistency":"DC_ONE"}`
	if name, version, err := Store(ctx, addr); name != "troop" || version != "" || err != nil {
		t.Errorf("troop's store: %q %q %v", name, version, err)
	}
	answers["/info"] = `{"hello":1}`
	if _, _, err := Store(ctx, addr); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("an unknown /info: %v", err)
	}
	delete(answers, "/get_consistency")
	if _, err := GetLevels(ctx, addr); err == nil || !strings.Contains(err.Error(), "404 Not Found") {
		t.Errorf("no get_consistency: %v", err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()
	if _, err := GetLevels(ctx, closed); err == nil || !strings.Contains(err.Error(), "get_consistency at "+closed) {
		t.Errorf("an admin address that does not answer: %v", err)
	}
}

func FuzzParseLevels(f *testing.F) {
	f.Add([]byte(`{"read":"DC_ONE","write":"DC_QUORUM"}`))
	f.Add([]byte("Read Consistency: DC_QUORUM\r\nWrite Consistency: DC_QUORUM\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLevels(data, "fuzz")
		if err != nil {
			if !utf8.ValidString(err.Error()) && utf8.Valid(data) {
				t.Errorf("error is not UTF-8: %q", err)
			}
			return
		}
		for _, level := range []string{l.Read, l.Write} {
			if got, err := ParseLevel(level); err != nil || got != level {
				t.Errorf("%q gave level %q, which is not a level's name", data, level)
			}
		}
	})
}
