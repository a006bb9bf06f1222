package suite

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The report's configuration writes durations as durations, and reads back
// both them and the nanoseconds of older reports.
func TestConfigJSONDurations(t *testing.T) {
	cfg := QuickConfig()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"baseline":"5s"`, `"kill_at":"4s"`, `"register":{`, `"duration":"5s"`, `"nemesis":{`, `"fault":"4s"`, `"request_timeout":"11s"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config JSON lacks %s: %s", want, b)
		}
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	cfg.NodeCommand, cfg.Progress = nil, nil
	if !reflect.DeepEqual(back, cfg) {
		t.Fatalf("round trip:\n%+v\nwant\n%+v", back, cfg)
	}
	var old Config
	if err := json.Unmarshal([]byte(`{"baseline":20000000000,"register":{"duration":5000000000}}`), &old); err != nil || old.Baseline.Seconds() != 20 || old.Register.Duration.Seconds() != 5 {
		t.Fatalf("older report: %v %+v", err, old)
	}
}
