package topology

import (
	"errors"
	"strconv"
	"strings"
)

// Error is one problem found in a config. Its text reads
// "source:line: key: message", the form editors and terminals link to a
// file position; line and key are left out when they are not known (a
// Config built in code and checked with Validate has no lines).
type Error struct {
	Source string
	Line   int    // 1-based; 0 when unknown
	Key    string // the config key, e.g. "listen"; "" for whole-file problems
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
	} else {
		b.WriteString("config")
	}
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// atLine returns an error for a value whose line is more precise than its
// key's, such as one entry of a list.
func atLine(line int, msg string) error {
	return &Error{Line: line, Msg: msg}
}

// joinErrors returns nil, the single error, or all of them joined one per line.
func joinErrors(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}
