package chaos

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestDocExample checks that the config in docs/chaos.md parses to the same
// Config as testdata/chaos.yml, so the two cannot drift apart.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/chaos.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	if !ok {
		t.Fatal("no yaml block in docs/chaos.md")
	}
	block, _, _ := strings.Cut(rest, "```")
	read := func(name string) ([]byte, error) { return os.ReadFile("testdata/" + name) }
	fromDoc, err := ParseConfig([]byte(block), "docs/chaos.md", read)
	if err != nil {
		t.Fatal(err)
	}
	want, err := LoadConfig("testdata/chaos.yml")
	if err != nil {
		t.Fatal(err)
	}
	fromDoc.Source = want.Source
	if !reflect.DeepEqual(fromDoc, want) {
		t.Errorf("the doc's example and testdata/chaos.yml differ:\n%+v\n%+v", fromDoc, want)
	}
}
