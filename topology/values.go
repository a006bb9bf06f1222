package topology

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// maxNum bounds every number: Dynomite stores them in a C int.
const maxNum = math.MaxInt32

// parseNum reads a non-negative whole number written in decimal digits only,
// as Dynomite does: no sign, no 0x, no underscores, no fraction.
func parseNum(s, unit string) (int, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		if unit != "" {
			return 0, fmt.Errorf("%q is not a whole number of %s", s, unit)
		}
		return 0, fmt.Errorf("%q is not a whole number", s)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > maxNum {
		return 0, fmt.Errorf("%s is too large (at most %d)", s, maxNum)
	}
	return int(n), nil
}

// parseBool accepts YAML's true and false, in any case.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%q is not true or false", s)
}

// parseTokens reads one token or a comma-separated list of them. Dynomite
// accepts arbitrarily large tokens, but its ring (and troop's) hashes keys to
// 32 bits, so a larger token could never own a key.
func parseTokens(s string) ([]uint32, error) {
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("%q has an empty token (want numbers separated by commas)", s)
		}
		if strings.Trim(f, "0123456789") != "" {
			return nil, fmt.Errorf("token %q is not a whole number", f)
		}
		t, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("token %s does not fit in 32 bits (the ring runs from 0 to %d)", f, uint32(math.MaxUint32))
		}
		out = append(out, uint32(t))
	}
	return out, nil
}

// formatTokens is the inverse of parseTokens.
func formatTokens(ts []uint32) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = strconv.FormatUint(uint64(t), 10)
	}
	return strings.Join(parts, ",")
}

// checkTokens rejects an empty list and repeats: a node owns each of its
// tokens once.
func checkTokens(ts []uint32) error {
	if len(ts) == 0 {
		return fmt.Errorf("no tokens")
	}
	seen := make(map[uint32]bool, len(ts))
	for _, t := range ts {
		if seen[t] {
			return fmt.Errorf("token %d is listed twice", t)
		}
		seen[t] = true
	}
	return nil
}

// checkName accepts node names. The character set is narrow on purpose:
// names end up inside seed strings (where ':' and ',' are separators), file
// names, metric labels and URLs.
func checkName(s string) error {
	return checkNameLen(s, 255)
}

// checkPlace accepts datacenter and rack names: node names, short enough
// that the derived "<datacenter>-<rack>-<port>" is a node name too.
func checkPlace(s string) error {
	return checkNameLen(s, 120)
}

func checkNameLen(s string, max int) error {
	if s == "" {
		return fmt.Errorf("is empty")
	}
	if len(s) > max {
		return fmt.Errorf("is longer than %d characters", max)
	}
	for _, r := range s {
		if !isNameRune(r) {
			return fmt.Errorf("%q has %q; use letters, digits, '.', '_' and '-'", s, r)
		}
	}
	return nil
}

func isNameRune(r rune) bool {
	return r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-')
}

// checkText accepts the free-form strings troop keeps but does not use
// (env, key file paths): one line of printable text.
func checkText(s string) error {
	if len(s) > 4096 {
		return fmt.Errorf("is longer than 4096 characters")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%q has the unprintable character %U", s, r)
		}
	}
	return nil
}

// checkHashTag accepts Dynomite's hash_tag: two characters, the start and
// the end of the part of a key that places it, or none.
func checkHashTag(tag string) error {
	if tag == "" {
		return nil
	}
	if len(tag) != 2 || tag[0] < ' ' || tag[0] > '~' || tag[1] < ' ' || tag[1] > '~' {
		return fmt.Errorf("%q is not two printable ASCII characters, the start and the end of a key's tag (for example \"{}\")", tag)
	}
	return nil
}

// checkPool accepts any pool name Dynomite would: troop records it but
// gives it no meaning. It must still be printable for logs.
func checkPool(s string) error {
	if s == "" {
		return fmt.Errorf("the pool name (the top-level key) is empty")
	}
	if err := checkText(s); err != nil {
		return fmt.Errorf("the pool name %v", err)
	}
	return nil
}

// splitHostPort splits "host:port" at the last colon, as Dynomite does, so
// that both "[::1]:8101" and "::1:8101" name port 8101 on ::1. The host
// comes back without brackets.
func splitHostPort(s string) (host, port string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", fmt.Errorf("%q is not host:port", s)
	}
	host, port = s[:i], s[i+1:]
	if err := checkPort(port); err != nil {
		return "", "", fmt.Errorf("%q: %v", s, err)
	}
	h, err := checkHost(host)
	if err != nil {
		return "", "", fmt.Errorf("%q: %v", s, err)
	}
	n, _ := strconv.Atoi(port)
	return h, strconv.Itoa(n), nil
}

// joinHostPort writes an address the way Go's net package dials and listens
// on it (IPv6 hosts in brackets).
func joinHostPort(host, port string) string {
	return net.JoinHostPort(host, port)
}

// parseAddr validates "host:port" and returns its canonical form.
func parseAddr(s string) (string, error) {
	host, port, err := splitHostPort(s)
	if err != nil {
		return "", err
	}
	return joinHostPort(host, port), nil
}

// checkAddr accepts an address only in the canonical form parseAddr
// returns, so that what Marshal writes reads back as the same string.
func checkAddr(s string) error {
	canon, err := parseAddr(s)
	if err != nil {
		return err
	}
	if canon != s {
		return fmt.Errorf("%q is not in canonical form (write %q)", s, canon)
	}
	return nil
}

// checkPort accepts 1 to 65535. Port 0 ("any free port") is refused: peers
// and clients must be able to find the node from its config alone.
func checkPort(p string) error {
	if p == "" || strings.Trim(p, "0123456789") != "" {
		return fmt.Errorf("port %q is not a number", p)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %s is out of range (1 to 65535)", p)
	}
	return nil
}

// checkHost accepts an IP address (IPv6 with or without brackets) or a DNS
// name, and returns it without brackets. Names are not resolved here.
func checkHost(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("the host is empty (use 0.0.0.0 to listen on every interface)")
	}
	if strings.HasPrefix(h, "[") || strings.HasSuffix(h, "]") {
		inner := strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if len(inner) != len(h)-2 || !strings.Contains(inner, ":") || net.ParseIP(inner) == nil {
			return "", fmt.Errorf("host %q is not a bracketed IPv6 address", h)
		}
		return inner, nil
	}
	if net.ParseIP(h) != nil {
		return h, nil
	}
	if err := checkHostname(h); err != nil {
		return "", err
	}
	return h, nil
}

// checkHostname accepts DNS names: dot-separated labels of letters, digits,
// '-' and '_'. A name whose last label is all digits must be an IP address,
// so "127.0.0.300" is refused rather than looked up.
func checkHostname(h string) error {
	bad := fmt.Errorf("host %q is neither an IP address nor a host name", h)
	if len(h) > 253 {
		return bad
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return bad
		}
		for _, r := range l {
			if r >= unicode.MaxASCII || !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_') {
				return bad
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return bad
	}
	return nil
}

// isWildcard reports whether a listener host means every interface.
func isWildcard(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// isLoopback reports whether host names this machine through loopback.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseSeed reads "host:port:rack:dc:tokens". Like Dynomite it splits from
// the end, so an unbracketed IPv6 host works, and it drops an optional
// " name" suffix, which Dynomite only uses in its logs.
func parseSeed(s string) (Seed, error) {
	body := dropName(s)
	parts := splitFromEnd(body, 4)
	if parts == nil {
		return Seed{}, fmt.Errorf("%q is not host:port:rack:dc:tokens", s)
	}
	addr, err := parseAddr(parts[0] + ":" + parts[1])
	if err != nil {
		return Seed{}, err
	}
	if err := checkPlace(parts[2]); err != nil {
		return Seed{}, fmt.Errorf("%q: rack %v", s, err)
	}
	if err := checkPlace(parts[3]); err != nil {
		return Seed{}, fmt.Errorf("%q: datacenter %v", s, err)
	}
	tokens, err := parseTokens(parts[4])
	if err != nil {
		return Seed{}, fmt.Errorf("%q: %v", s, err)
	}
	return Seed{Addr: addr, Rack: parts[2], DC: parts[3], Tokens: tokens}, nil
}

// String writes the seed as dyn_seeds lists it.
func (s Seed) String() string {
	return fmt.Sprintf("%s:%s:%s:%s", s.Addr, s.Rack, s.DC, formatTokens(s.Tokens))
}

// parseServer reads "host:port:weight" (with an optional " name" suffix,
// which Dynomite ignores for its single datastore too).
func parseServer(s string) (Server, error) {
	body := dropName(s)
	if strings.HasPrefix(body, "/") {
		return Server{}, fmt.Errorf("%q: unix socket datastores are not supported by troop yet (use host:port:weight)", s)
	}
	parts := splitFromEnd(body, 2)
	if parts == nil {
		return Server{}, fmt.Errorf("%q is not host:port:weight", s)
	}
	addr, err := parseAddr(parts[0] + ":" + parts[1])
	if err != nil {
		return Server{}, err
	}
	w, err := parseNum(parts[2], "")
	if err != nil {
		return Server{}, fmt.Errorf("%q: weight %v", s, err)
	}
	return Server{Addr: addr, Weight: w}, nil
}

// String writes the server as servers lists it.
func (s Server) String() string {
	return fmt.Sprintf("%s:%d", s.Addr, s.Weight)
}

// dropName removes Dynomite's optional " name" suffix.
func dropName(s string) string {
	if i := strings.LastIndexByte(s, ' '); i >= 0 {
		return strings.TrimRight(s[:i], " ")
	}
	return s
}

// splitFromEnd splits s at its last n colons into n+1 parts; the first part
// keeps any colons of its own. It returns nil when s has fewer colons.
func splitFromEnd(s string, n int) []string {
	parts := make([]string, n+1)
	for k := n; k > 0; k-- {
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			return nil
		}
		parts[k] = s[i+1:]
		s = s[:i]
	}
	parts[0] = s
	return parts
}

// msOf converts a count of milliseconds.
func msOf(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// checkMillis accepts durations that are whole milliseconds in [min, maxNum]
// ms: the file stores milliseconds, so anything finer would not survive
// Marshal.
func checkMillis(d time.Duration, min int) error {
	if d%time.Millisecond != 0 {
		return fmt.Errorf("%v is not a whole number of milliseconds", d)
	}
	ms := d / time.Millisecond
	if ms < time.Duration(min) || ms > maxNum {
		return fmt.Errorf("%d ms is out of range (%d to %d)", ms, min, maxNum)
	}
	return nil
}

// checkRange accepts min <= n <= max.
func checkRange(n, min, max int) error {
	if n < min || n > max {
		return fmt.Errorf("%d is out of range (%d to %d)", n, min, max)
	}
	return nil
}
