package client

// commandKey finds the key a command is routed by: its first key. Most
// commands name it first (GET key, MGET key1 key2, ...); the exceptions
// below name it later or have none. A command the table does not know is
// routed by its first argument, which is its key for every data command
// troop serves.
func commandKey(args [][]byte) (key []byte, ok bool) {
	if len(args) < 2 {
		return nil, false
	}
	var buf [32]byte
	name := args[0]
	if len(name) > len(buf) {
		return args[1], true
	}
	up := buf[:len(name)]
	for i, c := range name {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up[i] = c
	}
	switch string(up) {
	case "PING", "ECHO", "INFO", "TIME", "SELECT", "HELLO", "AUTH", "QUIT", "CLIENT", "CONFIG", "COMMAND",
		"TROOP", "DYNO_CONFIG:CONN_CONSISTENCY",
		"DBSIZE", "FLUSHALL", "FLUSHDB", "KEYS", "SCAN", "RANDOMKEY", "MULTI", "EXEC", "DISCARD", "UNWATCH",
		"SCRIPT", "FUNCTION", "SAVE", "BGSAVE", "LASTSAVE", "SHUTDOWN", "DEBUG", "MONITOR", "SLOWLOG",
		"LATENCY", "ROLE", "WAIT", "SWAPDB", "ACL", "MODULE", "MEMORY", "RESET":
		return nil, false
	case "BITOP", "OBJECT": // BITOP op destkey key...; OBJECT ENCODING key
		if len(args) > 2 {
			return args[2], true
		}
		return nil, false
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO": // script numkeys key...
		if len(args) > 3 && !(len(args[2]) == 1 && args[2][0] == '0') {
			return args[3], true
		}
		return nil, false
	}
	return args[1], true
}
