package node

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/resp"
)

func TestErrorCode(t *testing.T) {
	for _, tt := range []struct{ reply, want string }{
		{"-ERR syntax error\r\n", "ERR"},
		{"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", "WRONGTYPE"},
		{"-NOGROUP No such key\r\n", "NOGROUP"},
		{"-MY_ERR_CODE custom msg\r\n", "MY_ERR_CODE"},
		{"-ERR\r\n", "ERR"},                   // redis.error_reply(""): no space, so ERR
		{"-MYERR\r\n", "ERR"},                 // a code alone counts as ERR, as in Redis
		{"-MYERR\r\nwith space after", "ERR"}, // the space must be in the message
		{"- leading space\r\n", "ERR"},
		{"-" + strings.Repeat("X", 40) + " long\r\n", "ERR"}, // no space within 32 bytes
		{"-" + strings.Repeat("X", 30) + " fits\r\n", strings.Repeat("X", 30)},
	} {
		if got := string(errorCode([]byte(tt.reply))); got != tt.want {
			t.Errorf("errorCode(%q) = %q, want %q", tt.reply, got, tt.want)
		}
	}
}

func TestReplyModeNext(t *testing.T) {
	get, client, subscribe := commandTable["GET"], commandTable["CLIENT"], commandTable["SUBSCRIBE"]
	reply := func(arg string) [][]byte { return [][]byte{[]byte("CLIENT"), []byte("reply"), []byte(arg)} }
	getArgs := [][]byte{[]byte("GET"), []byte("k")}
	for _, tt := range []struct {
		name      string
		mode      replyMode
		c         *command
		args      [][]byte
		inTx      bool
		quiet     bool
		modeAfter replyMode
	}{
		{"a command, replies on", replyOn, get, getArgs, false, false, replyOn},
		{"OFF has no reply", replyOn, client, reply("off"), false, true, replyOff},
		{"a command, replies off", replyOff, get, getArgs, false, true, replyOff},
		{"an unknown command, replies off", replyOff, nil, getArgs, false, true, replyOff},
		{"ON answers", replyOff, client, reply("ON"), false, false, replyOn},
		{"SKIP has no reply", replyOn, client, reply("skip"), false, true, replySkip},
		{"the command skipped", replySkip, get, getArgs, false, true, replyOn},
		{"SKIP after SKIP skips the next too", replySkip, client, reply("SKIP"), false, true, replySkip},
		{"SKIP while off stays off", replyOff, client, reply("SKIP"), false, true, replyOff},
		{"ON while skipping answers", replySkip, client, reply("ON"), false, false, replyOn},
		{"a syntax error while on", replyOn, client, reply("maybe"), false, false, replyOn},
		{"a syntax error while off", replyOff, client, reply("maybe"), false, true, replyOff},
		{"a subscribe's reply is a push", replyOff, subscribe, [][]byte{[]byte("SUBSCRIBE"), []byte("ch")}, false, false, replyOff},
		{"a subscribe ends a skip", replySkip, subscribe, [][]byte{[]byte("SUBSCRIBE"), []byte("ch")}, false, false, replyOn},
		{"CLIENT REPLY queued in MULTI changes nothing", replyOn, client, reply("OFF"), true, false, replyOn},
		{"another CLIENT subcommand", replyOn, client, [][]byte{[]byte("CLIENT"), []byte("ID")}, false, false, replyOn},
	} {
		quiet, after := tt.mode.next(tt.c, tt.args, tt.inTx)
		if quiet != tt.quiet || after != tt.modeAfter {
			t.Errorf("%s: next = quiet %v, mode %d; want quiet %v, mode %d", tt.name, quiet, after, tt.quiet, tt.modeAfter)
		}
	}
}

// infoLines are the lines of INFO's section that start with prefix.
func infoLines(c *client, section, prefix string) []string {
	c.t.Helper()
	var out []string
	for _, line := range strings.Split(c.must("INFO", section), "\r\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return out
}

// TestInfoErrorStats sends a node commands that answer errors of several
// codes, that fail and that are refused before running, and reads them
// back from INFO errorstats, commandstats and stats, in Redis's format,
// then CONFIG RESETSTAT.
func TestInfoErrorStats(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2})
	c := tc.client(0, "")
	c.must("CONFIG", "RESETSTAT")
	c.must("SET", "k", "v")
	for _, tt := range []struct {
		args []string
		want string // the error's start
	}{
		{[]string{"LPUSH", "k", "x"}, "WRONGTYPE "},
		{[]string{"GET"}, "ERR wrong number of arguments"},
		{[]string{"NOSUCHCOMMAND", "x"}, "ERR unknown command"},
		{[]string{"EVALSHA", strings.Repeat("0", 40), "0"}, "NOSCRIPT "},
		{[]string{"XREADGROUP", "GROUP", "g", "c", "STREAMS", "nostream", ">"}, "NOGROUP "},
		{[]string{"LPUSH", "k", "y"}, "WRONGTYPE "},
	} {
		if v := c.do(tt.args...); !v.IsError() || !strings.HasPrefix(string(v.Str), tt.want) {
			t.Fatalf("%v = %s, want an error starting %q", tt.args, v, tt.want)
		}
	}
	// Inside MULTI: a command refused as it is queued is rejected.
	c.must("MULTI")
	if v := c.do("GET"); !v.IsError() {
		t.Fatalf("GET with no key in MULTI = %s, want an error", v)
	}
	c.do("DISCARD")
	// Inside EXEC's reply: the error is LPUSH's, as in Redis.
	c.must("MULTI")
	c.must("GET", "k")
	c.must("LPUSH", "k", "w")
	if v := c.do("EXEC"); len(v.Elems) != 2 || !v.Elems[1].IsError() || !strings.HasPrefix(string(v.Elems[1].Str), "WRONGTYPE ") {
		t.Fatalf("EXEC of GET and LPUSH on a string = %s, want its second reply WRONGTYPE", v)
	}

	wantErrors := []string{"errorstat_ERR:count=3", "errorstat_NOGROUP:count=1", "errorstat_NOSCRIPT:count=1", "errorstat_WRONGTYPE:count=3"}
	if got := infoLines(c, "errorstats", "errorstat_"); strings.Join(got, "\n") != strings.Join(wantErrors, "\n") {
		t.Errorf("INFO errorstats:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantErrors, "\n"))
	}
	if got := infoLines(c, "stats", "total_error_replies:"); len(got) != 1 || got[0] != "total_error_replies:8" {
		t.Errorf("INFO stats total_error_replies: %q, want total_error_replies:8", got)
	}
	stats := strings.Join(infoLines(c, "commandstats", "cmdstat_"), "\n")
	for _, want := range []string{
		`cmdstat_lpush:calls=3,usec=\d+,usec_per_call=[0-9.]+,rejected_calls=0,failed_calls=3`,
		`cmdstat_exec:calls=1,usec=\d+,usec_per_call=[0-9.]+,rejected_calls=0,failed_calls=0`,
		`cmdstat_get:calls=1,usec=\d+,usec_per_call=[0-9.]+,rejected_calls=2,failed_calls=0`,
		`cmdstat_set:calls=1,usec=\d+,usec_per_call=[0-9.]+,rejected_calls=0,failed_calls=0`,
		`cmdstat_evalsha:calls=1,usec=\d+,usec_per_call=[0-9.]+,rejected_calls=0,failed_calls=1`,
		`cmdstat_xreadgroup:calls=1,usec=\d+,usec_per_call=[0-9.]+,rejected_calls=0,failed_calls=1`,
	} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(stats) {
			t.Errorf("INFO commandstats has no line %s:\n%s", want, stats)
		}
	}
	if strings.Contains(stats, "nosuchcommand") {
		t.Errorf("INFO commandstats counts an unknown command:\n%s", stats)
	}

	c.must("CONFIG", "RESETSTAT")
	if got := infoLines(c, "errorstats", "errorstat_"); len(got) != 0 {
		t.Errorf("INFO errorstats after CONFIG RESETSTAT: %q, want none", got)
	}
	if got := infoLines(c, "stats", "total_error_replies:"); len(got) != 1 || got[0] != "total_error_replies:0" {
		t.Errorf("total_error_replies after CONFIG RESETSTAT: %q", got)
	}
	if stats := strings.Join(infoLines(c, "commandstats", "cmdstat_"), "\n"); strings.Contains(stats, "cmdstat_lpush") || strings.Contains(stats, "cmdstat_get:") {
		t.Errorf("INFO commandstats after CONFIG RESETSTAT still has the calls before it:\n%s", stats)
	}
	if v := c.do("LPUSH", "k", "z"); !v.IsError() {
		t.Fatalf("LPUSH on a string = %s", v)
	}
	if got := infoLines(c, "commandstats", "cmdstat_lpush:"); len(got) != 1 || !strings.HasPrefix(got[0], "cmdstat_lpush:calls=1,") || !strings.HasSuffix(got[0], ",rejected_calls=0,failed_calls=1") {
		t.Errorf("cmdstat_lpush after the reset and one more: %q", got)
	}
}

// readWithin reads c's next reply, failing the test if none comes within d.
func readWithin(c *client, d time.Duration) resp.Value {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(d))
	v, err := c.rd.ReadValue()
	if err != nil {
		c.t.Fatalf("reading a reply: %v", err)
	}
	return v
}

// send writes commands without reading their replies.
func send(c *client, cmds ...[]string) {
	c.t.Helper()
	var req []byte
	for _, cmd := range cmds {
		req = resp.AppendCommandStrings(req, cmd...)
	}
	c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.c.Write(req); err != nil {
		c.t.Fatal(err)
	}
}

// TestClientReply checks CLIENT REPLY OFF, ON and SKIP through a node: the
// replies it drops never come (the next reply read is the one after
// them), and pub/sub replies and messages come whatever the mode, in
// RESP2 and RESP3.
func TestClientReply(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2})
	c := tc.client(0, "")
	send(c, []string{"CLIENT", "REPLY", "OFF"}, []string{"SET", "a", "1"}, []string{"GET", "a"}, []string{"NOSUCHCOMMAND"}, []string{"CLIENT", "REPLY", "ON"})
	if v := readWithin(c, 15*time.Second); v.IsError() || string(v.Str) != "OK" {
		t.Fatalf("the first reply after CLIENT REPLY OFF, three commands and ON = %s, want ON's OK", v)
	}
	send(c, []string{"CLIENT", "REPLY", "SKIP"}, []string{"SET", "b", "2"}, []string{"GET", "b"})
	if v := readWithin(c, 15*time.Second); string(v.Str) != "2" {
		t.Fatalf("the first reply after CLIENT REPLY SKIP, SET and GET = %s, want GET's 2", v)
	}
	if got := c.must("GET", "a"); got != "1" {
		t.Fatalf("GET a = %q: the SET sent with replies off did not run", got)
	}
	if v := c.do("CLIENT", "REPLY", "SOMETIMES"); !v.IsError() || string(v.Str) != "ERR syntax error" {
		t.Fatalf("CLIENT REPLY SOMETIMES = %s, want ERR syntax error", v)
	}
	// QUIT with replies off closes the connection with no reply, as
	// Redis does: a dropped reply leaves nothing waiting to be written.
	quitter := tc.client(0, "")
	send(quitter, []string{"CLIENT", "REPLY", "OFF"}, []string{"QUIT"})
	quitter.c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if k, err := quitter.c.Read(make([]byte, 64)); k != 0 || err != io.EOF {
		t.Fatalf("after CLIENT REPLY OFF and QUIT, a read gave %d bytes and %v, want the connection closed", k, err)
	}

	for _, proto := range []string{"2", "3"} {
		t.Run("pubsub RESP"+proto, func(t *testing.T) {
			sub, pub := tc.client(0, ""), tc.client(0, "")
			sub.t, pub.t = t, t
			sub.do("HELLO", proto)
			send(sub, []string{"CLIENT", "REPLY", "OFF"}, []string{"SUBSCRIBE", "ch" + proto})
			if v := readWithin(sub, 15*time.Second); len(v.Elems) != 3 || string(v.Elems[0].Str) != "subscribe" || v.Elems[2].Int != 1 {
				t.Fatalf("SUBSCRIBE with replies off = %s, want its confirmation", v)
			}
			eventually(t, 10*time.Second, func() string {
				if n := pub.do("PUBLISH", "ch"+proto, "hello"); n.Int != 1 {
					return fmt.Sprintf("PUBLISH = %s, want 1 subscriber", n)
				}
				return ""
			})
			if v := readWithin(sub, 15*time.Second); len(v.Elems) != 3 || string(v.Elems[0].Str) != "message" || string(v.Elems[2].Str) != "hello" {
				t.Fatalf("the message with replies off = %s", v)
			}
			send(sub, []string{"UNSUBSCRIBE", "ch" + proto})
			if v := readWithin(sub, 15*time.Second); len(v.Elems) != 3 || string(v.Elems[0].Str) != "unsubscribe" {
				t.Fatalf("UNSUBSCRIBE with replies off = %s, want its confirmation", v)
			}
		})
	}
}

// TestInfoCachedScripts reads INFO memory's script figures, which come
// from the node's redis-server less troop's own scripts.
func TestInfoCachedScripts(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2})
	c := tc.client(0, "")
	c.must("SCRIPT", "FLUSH")
	cached := func() string {
		got := infoLines(c, "memory", "number_of_cached_scripts:")
		if len(got) != 1 {
			t.Fatalf("INFO memory has %q, want one number_of_cached_scripts line", got)
		}
		return got[0]
	}
	if got := cached(); got != "number_of_cached_scripts:0" {
		t.Fatalf("after SCRIPT FLUSH: %s, want 0", got)
	}
	for i := range 5 {
		c.must("SCRIPT", "LOAD", fmt.Sprintf("return %d", i))
	}
	if got := cached(); got != "number_of_cached_scripts:5" {
		t.Fatalf("after 5 SCRIPT LOADs: %s, want 5", got)
	}
	if got := infoLines(c, "memory", "used_memory_scripts:"); len(got) != 1 || !regexp.MustCompile(`^used_memory_scripts:[1-9]\d*$`).MatchString(got[0]) {
		t.Fatalf("INFO memory's used_memory_scripts: %q", got)
	}
	c.must("SCRIPT", "FLUSH", "ASYNC")
	if got := cached(); got != "number_of_cached_scripts:0" {
		t.Fatalf("after SCRIPT FLUSH ASYNC: %s, want 0", got)
	}
}

func TestStoreMemory(t *testing.T) {
	info := fmt.Sprintf("# Memory\r\nused_memory:1000\r\nused_memory_scripts_eval:900\r\nnumber_of_cached_scripts:%d\r\nused_memory_scripts:1234\r\n", len(troopScripts)+3)
	want := "number_of_cached_scripts:3\r\nused_memory_scripts:1234\r\n"
	if got := storeMemory(resp.AppendBulkString(nil, info), nil); got != want {
		t.Errorf("storeMemory = %q, want %q", got, want)
	}
	// Fewer than troop's own (a redis-server that just restarted, not yet reloaded): none of the client's.
	few := resp.AppendBulkString(nil, "number_of_cached_scripts:1\r\n")
	if got := storeMemory(few, nil); got != "number_of_cached_scripts:0\r\n" {
		t.Errorf("storeMemory with fewer scripts than troop's = %q", got)
	}
	for _, raw := range [][]byte{resp.AppendError(nil, "ERR down"), []byte("garbage")} {
		if got := storeMemory(raw, nil); got != "" {
			t.Errorf("storeMemory(%q) = %q, want nothing", raw, got)
		}
	}
	if got := storeMemory(nil, fmt.Errorf("unreachable")); got != "" {
		t.Errorf("storeMemory of a failed call = %q, want nothing", got)
	}
}

// TestErrorCodesBounded: codes past maxErrorCodes count only in the total,
// and a code already counted keeps counting.
func TestErrorCodesBounded(t *testing.T) {
	s := newStats()
	r := &s.replies
	for i := range maxErrorCodes + 10 {
		r.errorReply(noCommand, []byte(fmt.Sprintf("-CODE%d message\r\n", i)))
	}
	r.errorReply(noCommand, []byte("-CODE0 again\r\n"))
	codes := r.codes()
	if len(codes) != maxErrorCodes || codes["CODE0"] != 2 || r.errors.Load() != maxErrorCodes+11 {
		t.Fatalf("%d codes, CODE0 counted %d, total %d; want %d codes, 2 and %d", len(codes), codes["CODE0"], r.errors.Load(), maxErrorCodes, maxErrorCodes+11)
	}
	r.reset(s.commands)
	if len(r.codes()) != 0 || r.errors.Load() != 0 {
		t.Fatalf("after reset: %v, total %d", r.codes(), r.errors.Load())
	}
}
