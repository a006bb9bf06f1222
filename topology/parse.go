package topology

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// parser collects every problem in one pass so that a user fixes a file in
// one round rather than one error per run.
type parser struct {
	source   string
	lines    map[string]int // key, or "key.N" for a list entry, to its line; nil for a Config built in code
	derived  map[string]bool
	poolLine int
	errs     []*Error
}

func (p *parser) add(line int, key, msg string) {
	p.errs = append(p.errs, &Error{Source: p.source, Line: line, Key: key, Msg: msg})
}

// addErr records err against key, keeping the line of a value-level Error
// (a list entry) when it has one.
func (p *parser) addErr(line int, key string, err error) {
	var e *Error
	if errors.As(err, &e) {
		if e.Line == 0 {
			e.Line = line
		}
		e.Source, e.Key = p.source, key
		p.errs = append(p.errs, e)
		return
	}
	p.add(line, key, err.Error())
}

// line is where key is set, or the pool's line for keys the file lacks.
func (p *parser) line(key string) int {
	if p.lines == nil {
		return 0
	}
	if l, ok := p.lines[key]; ok {
		return l
	}
	return p.poolLine
}

// err returns the problems found, in file order.
func (p *parser) err() error {
	sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
	return joinErrors(p.errs)
}

func (p *parser) parse(data []byte) *Config {
	key, body := p.document(data)
	if body == nil {
		return nil
	}
	c := Default()
	c.Source = p.source
	c.Pool = key.Value
	p.poolLine = key.Line
	for i := 0; i+1 < len(body.Content); i += 2 {
		p.field(c, body.Content[i], body.Content[i+1])
	}
	if len(p.errs) > 0 {
		return nil
	}
	p.derive(c)
	p.validate(c)
	return c
}

// derive fills in the keys whose defaults depend on other keys.
func (p *parser) derive(c *Config) {
	if c.Listen == "" {
		return // reported as missing by validate
	}
	if c.DynListen == "" && len(c.Seeds) == 0 {
		c.DynListen = deriveDynListen(c)
		p.derived = map[string]bool{"dyn_listen": true}
	}
	// A bad datacenter or rack is reported under its own key; a name made
	// from it would only repeat the error.
	if c.Name == "" && checkPlace(c.Datacenter) == nil && checkPlace(c.Rack) == nil {
		c.Name = deriveName(c)
	}
}

// document decodes data and returns the pool's key and its mapping of keys,
// or nil after recording why the file does not have that shape.
func (p *parser) document(data []byte) (key, body *yaml.Node) {
	docs, err := decodeYAML(data)
	if err != nil {
		p.yamlError(err)
		return nil, nil
	}
	if len(docs) > 1 {
		p.add(docs[1].Line, "", "a second YAML document; a config holds exactly one")
		return nil, nil
	}
	if len(docs) == 0 || len(docs[0].Content) == 0 {
		p.add(0, "", "the config is empty; want one top-level key, the pool name (e.g. dyn_o_mite:), with the keys under it")
		return nil, nil
	}
	root := docs[0].Content[0]
	if !p.plain(root, "") {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode || len(root.Content) == 0 {
		p.add(root.Line, "", "want one top-level key, the pool name (e.g. dyn_o_mite:), with the keys under it")
		return nil, nil
	}
	key, body = root.Content[0], root.Content[1]
	if len(root.Content) > 2 {
		extra := root.Content[2]
		p.add(extra.Line, "", fmt.Sprintf("%q is a second top-level key; a config has exactly one, the pool name %q (indent %q under it?)",
			extra.Value, key.Value, extra.Value))
		return nil, nil
	}
	if !p.plain(key, "") || !p.plain(body, key.Value) {
		return nil, nil
	}
	if key.Kind != yaml.ScalarNode {
		p.add(key.Line, "", "the pool name (the top-level key) must be a string")
		return nil, nil
	}
	if err := checkPool(key.Value); err != nil {
		p.add(key.Line, "", err.Error())
		return nil, nil
	}
	if body.Kind != yaml.MappingNode {
		p.add(key.Line, key.Value, "want the node's keys under the pool name, indented")
		return nil, nil
	}
	return key, body
}

// yamlLine picks the line out of yaml.v3's messages ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (p *parser) yamlError(err error) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		p.add(line, "", "invalid YAML: "+m[2])
		return
	}
	p.add(0, "", "invalid YAML: "+strings.TrimPrefix(msg, "yaml: "))
}

// decodeYAML returns the file's documents, at most two (one too many is
// enough to report). yaml.v3 has panicked on malformed input in the past;
// a config file must never crash the node, so a panic becomes an error.
func decodeYAML(data []byte) (docs []*yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			docs, err = nil, fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for len(docs) < 2 {
		var n yaml.Node
		if err := dec.Decode(&n); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		docs = append(docs, &n)
	}
	return docs, nil
}

// plain refuses YAML features Dynomite's parser refuses too and that have
// no use in a config: aliases, and tags other than YAML's own.
func (p *parser) plain(n *yaml.Node, key string) bool {
	switch {
	case n.Kind == yaml.AliasNode:
		p.add(n.Line, key, "YAML aliases (*name) are not supported in a config")
		return false
	case strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!"):
		p.add(n.Line, key, fmt.Sprintf("YAML tag %s is not supported in a config", n.Tag))
		return false
	}
	return true
}

// field handles one key of the pool.
func (p *parser) field(c *Config, k, v *yaml.Node) {
	if !p.plain(k, "") {
		return
	}
	if k.Kind != yaml.ScalarNode {
		p.add(k.Line, "", "keys must be plain names")
		return
	}
	name := k.Value
	spec := keyIndex[name]
	if spec == nil {
		msg := "unknown key"
		if s := suggest(name); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		p.add(k.Line, name, msg)
		return
	}
	if first, ok := p.lines[name]; ok {
		p.add(k.Line, name, fmt.Sprintf("set twice (first at line %d)", first))
		return
	}
	p.lines[name] = k.Line
	val, ok := p.value(spec, v)
	if !ok {
		return
	}
	if err := spec.set(c, val); err != nil {
		p.addErr(v.Line, name, err)
	}
}

// value checks a key's YAML shape against what the key wants.
func (p *parser) value(spec *keySpec, v *yaml.Node) (value, bool) {
	name := spec.name
	if !p.plain(v, name) {
		return value{}, false
	}
	switch v.Kind {
	case yaml.ScalarNode:
		if isEmpty(v) && spec.list {
			return value{line: v.Line}, true // an empty list: "dyn_seeds:" of a cluster of one node
		}
		if isEmpty(v) {
			p.add(v.Line, name, "has no value")
			return value{}, false
		}
		if spec.list {
			p.add(v.Line, name, fmt.Sprintf("want a list (one \"- entry\" per line), got %q", v.Value))
			return value{}, false
		}
		return value{text: v.Value, line: v.Line}, true
	case yaml.SequenceNode:
		if !spec.list {
			p.add(v.Line, name, "want a single value, got a list")
			return value{}, false
		}
		val := value{line: v.Line}
		for i, it := range v.Content {
			if !p.plain(it, name) {
				return value{}, false
			}
			if it.Kind != yaml.ScalarNode || isEmpty(it) {
				p.add(it.Line, name, "each entry must be a single non-empty value")
				return value{}, false
			}
			p.lines[fmt.Sprintf("%s.%d", name, i)] = it.Line
			val.items = append(val.items, item{text: it.Value, line: it.Line})
		}
		return val, true
	default:
		want := "a single value"
		if spec.list {
			want = "a list"
		}
		p.add(v.Line, name, fmt.Sprintf("want %s, got a mapping", want))
		return value{}, false
	}
}

// isEmpty reports a null or empty scalar, which Dynomite refuses too.
func isEmpty(n *yaml.Node) bool {
	return n.ShortTag() == "!!null" || n.Value == ""
}
