package logflag

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestLogger(t *testing.T) {
	for _, c := range []struct {
		args []string
		want func(string) bool
		err  string
	}{
		{nil, func(s string) bool { return strings.HasPrefix(s, "time=") && strings.Contains(s, "msg=hello n=1") }, ""},
		{[]string{"--log-format", "json"}, func(s string) bool {
			var rec map[string]any
			return json.Unmarshal([]byte(s), &rec) == nil && rec["msg"] == "hello" && rec["n"] == 1.0
		}, ""},
		{[]string{"--log-level", "warn"}, func(s string) bool { return s == "" }, ""},
		{[]string{"--log-format", "logfmt"}, nil, `--log-format "logfmt": want text or json`},
		{[]string{"--log-level", "loud"}, nil, `--log-level "loud": want debug, info, warn or error`},
	} {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		f := Add(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		log, err := f.Logger(&buf)
		if c.err != "" {
			if err == nil || err.Error() != c.err || f.Check() == nil {
				t.Errorf("%v: error %v, want %s", c.args, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		log.Info("hello", "n", 1)
		if got := strings.TrimSpace(buf.String()); !c.want(got) {
			t.Errorf("%v: logged %q", c.args, got)
		}
	}
}
