package health

import (
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// lines hands each log line written to it to the test, decoded.
type lines chan map[string]any

func (l lines) Write(p []byte) (int, error) {
	var rec map[string]any
	if err := json.Unmarshal(p, &rec); err != nil {
		return 0, err
	}
	l <- rec
	return len(p), nil
}

// Changes within the gap since the last line are summed up in one line when
// the gap has passed, saying the state at that time.
func TestReachabilityRateLimited(t *testing.T) {
	logs := make(lines, 10)
	r := NewReachability(slog.New(slog.NewJSONHandler(logs, nil)), "down", "up")
	r.gap = 200 * time.Millisecond
	r.Set(false, errors.New("connection refused"))
	for range 5 {
		r.Set(true, nil)
		r.Set(false, errors.New("connection refused"))
	}
	r.Set(true, nil, "name", "dc1-rack2-1")
	if first := <-logs; first["msg"] != "down" || len(logs) != 0 {
		t.Fatalf("first line %v and %d more within the gap, want one line saying down", first, len(logs))
	}
	select {
	case up := <-logs:
		if up["msg"] != "up" || up["changes"] != float64(11) || up["name"] != "dc1-rack2-1" {
			t.Errorf("line after the gap %v: want up, changes 11 and the last change's name", up)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no line after the gap")
	}
	r.Stop()
}
