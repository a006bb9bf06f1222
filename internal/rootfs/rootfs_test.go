package rootfs

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

func entries(t *testing.T, fs *FS) map[string]*tar.Header {
	t.Helper()
	var buf bytes.Buffer
	if err := fs.WriteTar(&buf); err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	r := tar.NewReader(&buf)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

// The tar lists every parent directory before what it holds, keeps the
// modes given, and is the same bytes for the same files.
func TestWriteTar(t *testing.T) {
	build := func() *FS {
		fs := New()
		fs.AddFile("/etc/troop/node.yml", []byte("x"), 0o644)
		fs.AddDir("/tmp", 0o1777)
		fs.AddFile("/usr/bin/tool", []byte("#!"), 0o755)
		return fs
	}
	var a, b bytes.Buffer
	if err := build().WriteTar(&a); err != nil {
		t.Fatal(err)
	}
	build().WriteTar(&b)
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same files made different tars")
	}
	var names []string
	r := tar.NewReader(&a)
	for {
		h, err := r.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	want := "etc/ etc/troop/ etc/troop/node.yml tmp/ usr/ usr/bin/ usr/bin/tool"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("entries %q, want %q", got, want)
	}
	e := entries(t, build())
	if e["tmp/"].Mode != 0o1777 || e["usr/bin/tool"].Mode != 0o755 || e["etc/troop/node.yml"].Size != 1 {
		t.Errorf("modes or sizes lost: %+v %+v %+v", e["tmp/"], e["usr/bin/tool"], e["etc/troop/node.yml"])
	}

	bad := New()
	bad.AddFile("relative/path", nil, 0o644)
	if err := bad.WriteTar(io.Discard); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Errorf("a relative path: %v", err)
	}
}

// A dynamically linked program comes with its loader and libraries; a
// static check refuses it.
func TestAddProgram(t *testing.T) {
	path, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this host")
	}
	fs := New()
	if err := fs.AddProgram("/usr/bin/bash", "bash"); err != nil {
		t.Fatal(err)
	}
	var libc, loader bool
	fs.Files(func(p string, _ []byte) {
		libc = libc || strings.Contains(p, "/libc.so")
		loader = loader || strings.Contains(p, "/ld-linux")
	})
	if !libc || !loader {
		t.Errorf("bash without its libc (%v) or loader (%v)", libc, loader)
	}
	if err := CheckStatic(path); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("CheckStatic(%s) = %v, want dynamically linked", path, err)
	}
	if err := fs.AddProgram("/usr/bin/none", "no-such-program-here"); err == nil {
		t.Error("a missing program was added")
	}
}
