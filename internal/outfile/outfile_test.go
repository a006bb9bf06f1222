package outfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.json")
	if err := Write(p, func(w io.Writer) error { _, err := io.WriteString(w, "{}\n"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{}\n" {
		t.Fatalf("wrote %q", b)
	}
	boom := errors.New("boom")
	if err := Write(p, func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("the writer's error was lost: %v", err)
	}
	if err := Write(filepath.Join(p, "not-a-dir", "x"), func(io.Writer) error { return nil }); err == nil {
		t.Fatal("no error for a path that cannot be created")
	}
}
