package node

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the command table of docs/store.md from the code")

const (
	docFile     = "../docs/store.md"
	docTableTop = "<!-- the command table is generated: go test ./node -run TestCommandDoc -update-docs -->\n"
	docTableEnd = "<!-- end of the generated command table -->\n"
)

// The command table in docs/store.md is the code's: this test fails when
// they differ, and -update-docs rewrites it.
func TestCommandDoc(t *testing.T) {
	raw, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	top, end := strings.Index(doc, docTableTop), strings.Index(doc, docTableEnd)
	if top < 0 || end < top {
		t.Fatalf("%s has no generated command table between %q and %q", docFile, docTableTop, docTableEnd)
	}
	want := commandDoc()
	if got := doc[top+len(docTableTop) : end]; got != want {
		if !*updateDocs {
			t.Fatalf("the command table in %s differs from the code; run go test ./node -run TestCommandDoc -update-docs", docFile)
		}
		doc = doc[:top+len(docTableTop)] + want + doc[end:]
		if err := os.WriteFile(docFile, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
