// Package logflag gives the long-running verbs (the node, the chaos daemon,
// the lab's supervisor) their --log-format and --log-level flags, and the
// slog.Logger the flags ask for.
package logflag

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
)

// Flags are a verb's log flags.
type Flags struct {
	Format string // "text" (logfmt) or "json"
	Level  string // debug, info, warn or error
}

// Add defines --log-format and --log-level on fs.
func Add(fs *pflag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.Format, "log-format", "text", "log line format: text (logfmt, key=value) or json (one object a line)")
	fs.StringVar(&f.Level, "log-level", "info", "log level: debug, info, warn or error")
	return f
}

// Check reports a bad value, naming its flag.
func (f *Flags) Check() error {
	_, err := f.handler(io.Discard)
	return err
}

// Logger returns a logger that writes to w as the flags say.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	h, err := f.handler(w)
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

func (f *Flags) handler(w io.Writer) (slog.Handler, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.Level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.Format {
	case "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.Format)
}
