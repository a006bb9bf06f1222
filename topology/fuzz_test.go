package topology

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, and that every config it accepts
// is valid and survives Marshal: it parses back to the same Config and
// writes the same bytes again.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		base,
		with("  dyn_listen: '[::1]:8101'\n  dyn_seeds:\n  - ::2:8101:r:d:1,2 name\n"),
		with("  troop_node_name: n1\n  timeout: 1\n  env: \"a b\"\n"),
		with("  secure_server_option: all\n  troop_tls_cert: a\n  troop_tls_key: b\n  troop_tls_ca: c\n  troop_tls_client: true\n  troop_tls_admin: true\n  dyn_seeds:\n  - 127.0.0.9:8101:r2:localdc:0\n"),
		with("  requirepass: x\n  redis_requirepass: y\n  troop_redis_user: u\n  troop_users: ['a:full:b:c', 'r:readonly:#5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8']\n"),
		"'~':\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:2:0]\n  tokens: 0\n",
		"dyn_o_mite: {listen: a:1, tokens: 1}\n",
		"",
		"- x\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz")
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a config and an error: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config Validate rejects: %v\n%q", err, data)
		}
		out := c.Marshal()
		back, err := Parse(out, "fuzz")
		if err != nil {
			t.Fatalf("Marshal output does not parse: %v\ninput %q\noutput:\n%s", err, data, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip changed the config\n got  %+v\n want %+v\ninput %q\noutput:\n%s", back, c, data, out)
		}
		if again := back.Marshal(); string(again) != string(out) {
			t.Fatalf("Marshal is not stable\n%s\n---\n%s", out, again)
		}
	})
}
