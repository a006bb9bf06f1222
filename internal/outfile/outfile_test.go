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

// A file written over an earlier one replaces it whole; a failed write
// keeps the earlier one and leaves no temporary file.
func TestWriteKeepsEarlierOnFailure(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.json")
	if err := Write(p, func(w io.Writer) error { _, err := io.WriteString(w, "first"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, func(w io.Writer) error { io.WriteString(w, "half"); return errors.New("boom") }); err == nil {
		t.Fatal("no error")
	}
	if b, _ := os.ReadFile(p); string(b) != "first" {
		t.Fatalf("the earlier file became %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	if err := Check("--out", filepath.Join(dir, "r.json")); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("Check left %v behind", ents)
	}
	for _, bad := range []string{
		dir,                                   // a directory
		filepath.Join(dir, "nodir", "r.json"), // a missing directory
		filepath.Join("/proc", "r.json"),      // a directory that takes no file
	} {
		if err := Check("--out", bad); err == nil {
			t.Errorf("Check(%s): no error", bad)
		}
	}
	f := filepath.Join(dir, "file")
	os.WriteFile(f, nil, 0o644)
	if err := CheckDir("--out", f); err == nil {
		t.Error("CheckDir of a file: no error")
	}
	if err := CheckDir("--out", filepath.Join(dir, "a", "b")); err != nil {
		t.Errorf("CheckDir of a directory that can be made: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Error("CheckDir made a directory")
	}
	if err := CheckDir("--out", "/proc/troop-run"); err == nil {
		t.Error("CheckDir under /proc: no error")
	}
}
