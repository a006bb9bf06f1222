package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Levels are the read and write consistency levels a node applies to the
// requests of clients that do not set their own.
type Levels struct {
	Read  string `json:"read"`
	Write string `json:"write"`
}

// String is "DC_QUORUM" when both are the same, else "read DC_ONE, write
// DC_QUORUM".
func (l Levels) String() string {
	if l.Read == l.Write {
		return l.Read
	}
	return fmt.Sprintf("read %s, write %s", l.Read, l.Write)
}

// knownLevels are the levels troop's and Dynomite's nodes name.
var knownLevels = []string{"DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM", "DC_EACH_SAFE_QUORUM"}

// ParseLevel accepts a level's name in any case and returns it as the
// nodes spell it (DC_QUORUM).
func ParseLevel(s string) (string, error) {
	for _, l := range knownLevels {
		if strings.EqualFold(s, l) {
			return l, nil
		}
	}
	return "", fmt.Errorf("unknown consistency level %q (want %s)", s, strings.Join(knownLevels, ", "))
}

// ParseLevels reads a node's answer to GET /get_consistency: troop's JSON
// ({"read": "DC_ONE", "write": "DC_QUORUM"}) or Dynomite's plain text
// ("Read Consistency: DC_ONE\r\nWrite Consistency: DC_QUORUM\r\n").
// source names the answer in errors.
func ParseLevels(data []byte, source string) (Levels, error) {
	var l Levels
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		if err := json.Unmarshal(trimmed, &l); err != nil {
			return Levels{}, fmt.Errorf("%s: not a get_consistency answer of troop ({\"read\": ..., \"write\": ...}): %w", source, err)
		}
	} else {
		for _, line := range strings.Split(string(trimmed), "\n") {
			line = strings.TrimSpace(line)
			name, value, ok := strings.Cut(line, ":")
			var into *string
			switch name = strings.TrimSpace(name); {
			case line == "":
				continue
			case ok && strings.EqualFold(name, "Read Consistency"):
				into = &l.Read
			case ok && strings.EqualFold(name, "Write Consistency"):
				into = &l.Write
			default:
				return Levels{}, fmt.Errorf("%s: line %q is not Dynomite's \"Read Consistency: LEVEL\" or \"Write Consistency: LEVEL\"", source, clip(line))
			}
			if *into != "" {
				return Levels{}, fmt.Errorf("%s: %s given twice", source, name)
			}
			if *into = strings.TrimSpace(value); *into == "" {
				return Levels{}, fmt.Errorf("%s: %s has no level", source, name)
			}
		}
	}
	var err error
	for _, f := range []struct {
		what  string
		level *string
	}{{"read", &l.Read}, {"write", &l.Write}} {
		if *f.level == "" {
			return Levels{}, fmt.Errorf("%s: no %s consistency in the answer %q", source, f.what, clip(string(trimmed)))
		}
		if *f.level, err = ParseLevel(*f.level); err != nil {
			return Levels{}, fmt.Errorf("%s: %s consistency: %w", source, f.what, err)
		}
	}
	return l, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	const most = 80
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// GetLevels asks the admin API at adminAddr for the node's levels (GET
// /get_consistency), troop's or Dynomite's.
func GetLevels(ctx context.Context, adminAddr string) (Levels, error) {
	source := "get_consistency at " + adminAddr
	body, err := adminGet(ctx, adminAddr, "/get_consistency")
	if err != nil {
		return Levels{}, fmt.Errorf("%s: %w", source, err)
	}
	return ParseLevels(body, source)
}

// adminGet is the body of GET path on the admin API at adminAddr, which
// must answer 200 OK.
func adminGet(ctx context.Context, adminAddr, path string) ([]byte, error) {
	req, err := NewAdminRequest(ctx, http.MethodGet, "http://"+adminAddr+path)
	if err != nil {
		return nil, err
	}
	return Fetch(req)
}

// Fetch sends req and returns the body of its answer, 16 MB at most,
// which must be 200 OK: any other status is an error with the body's
// start.
func Fetch(req *http.Request) ([]byte, error) {
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", res.Status, clip(strings.TrimSpace(string(body))))
	}
	return body, nil
}

// Store names the store behind a node's admin API and its version: a
// Dynomite's /info says {"service": "dynomite", "version": ...}; a troop
// node's /info has no version, and is told apart by its "read_consistency".
func Store(ctx context.Context, adminAddr string) (name, version string, err error) {
	body, err := adminGet(ctx, adminAddr, "/info")
	if err != nil {
		return "", "", fmt.Errorf("info at %s: %w", adminAddr, err)
	}
	var info struct {
		Service string  `json:"service"`
		Version string  `json:"version"`
		Read    *string `json:"read_consistency"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return "", "", fmt.Errorf("info at %s: not JSON: %w", adminAddr, err)
	}
	switch {
	case strings.EqualFold(info.Service, "dynomite"):
		return "Dynomite", info.Version, nil
	case info.Read != nil:
		return "troop", "", nil
	}
	return "", "", errors.New("info at " + adminAddr + ": neither a troop node's nor a Dynomite's answer")
}
