package topology

import (
	"bytes"
	"strings"

	"gopkg.in/yaml.v3"
)

// Marshal writes c in Dynomite's format: the pool key, then the keys in the
// order of Dynomite's example configs. The keys a node is usually read for
// (datacenter, rack, listeners, seeds, servers, tokens, data store,
// consistency, timeout) are always written; the others only when they differ
// from their defaults. Parse reads the result back to an identical Config
// (Source aside) when c is valid (see Validate).
func (c *Config) Marshal() []byte {
	body := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := range keys {
		k := &keys[i]
		if k.emit == nil {
			continue
		}
		if v := k.emit(c); v != nil {
			body.Content = append(body.Content, strNode(k.name), v)
		}
	}
	pool := c.Pool
	if pool == "" {
		pool = DefaultPool
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{strNode(pool), body}}
	validUTF8(root)

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		// Unreachable: the tree holds only valid UTF-8 scalars, sequences
		// and mappings built above.
		panic("topology: marshal: " + err.Error())
	}
	if err := enc.Close(); err != nil {
		panic("topology: marshal: " + err.Error())
	}
	return buf.Bytes()
}

// validUTF8 repairs strings of a Config built in code, which the YAML
// encoder would refuse; Validate reports them.
func validUTF8(n *yaml.Node) {
	n.Value = strings.ToValidUTF8(n.Value, "\uFFFD")
	for _, c := range n.Content {
		validUTF8(c)
	}
}
