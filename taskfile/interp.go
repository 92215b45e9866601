package taskfile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Scope is what a run-time ${...} can name, as Nomad interpolates a task
// about to run:
//
//	${NAME}            the task's environment (NOMAD_ALLOC_DIR, NOMAD_PORT_http, its env block)
//	${env["NAME"]}     the same (env.NAME too)
//	${attr.KEY}        this host's attribute (attr.kernel.name, attr.cpu.arch...)
//	${node.KEY}        this node (node.unique.name, node.datacenter, node.class...)
//	${meta.KEY}        the task's meta (job, group and task merged), then the node's
//
// A reference Scope cannot resolve is an error naming it
// (ErrUnknownReference), never left in place; "$${" is a literal "${".
type Scope struct {
	Env  map[string]string
	Host *Host
	Meta map[string]string
	// NoEnv refuses ${NAME}, env and meta references (a constraint sees
	// only the node).
	NoEnv bool

	// made bounds what the scope's interpolations make (nil: each string
	// at most DefaultLimits.ValueBytes).
	made *madeBound
}

// madeBound is what a Scope's interpolations may make: each string at most
// each bytes, all of them together at most total.
type madeBound struct {
	each, total, used int64
}

// grow checks that a string of n bytes, growing by more, stays within the
// bounds.
func (sc *Scope) grow(n, more int) error {
	each, total, used := DefaultLimits.ValueBytes, int64(math.MaxInt64), int64(0)
	if sc.made != nil {
		each, total, used = sc.made.each, sc.made.total, sc.made.used
	}
	switch {
	case int64(n)+int64(more) > each:
		return fmt.Errorf("%w: interpolating would make a string of more than %s; a value may be at most %s (tether's limit on one value)", ErrLimit, byteSize(float64(n+more)), byteSize(float64(each)))
	case used+int64(more) > total:
		return fmt.Errorf("%w: interpolating would make more than %s for one task (tether's limit on one value)", ErrLimit, byteSize(float64(total)))
	}
	if sc.made != nil {
		sc.made.used += int64(more)
	}
	return nil
}

// Interpolate resolves every reference in s. What it makes is bounded
// (ErrLimit): a string of references to a long value is refused before it
// is spelled out.
func (sc *Scope) Interpolate(s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := refEnd(s, i+2)
			if end < 0 {
				return "", fmt.Errorf("%w: %q has a ${ with no closing }", ErrUnknownReference, s)
			}
			ref := strings.TrimSpace(s[i+2 : end])
			v, err := sc.Lookup(ref)
			if err != nil {
				return "", err
			}
			if err := sc.grow(b.Len(), len(v)); err != nil {
				return "", fmt.Errorf("${%s}: %w", ref, err)
			}
			b.WriteString(v)
			i = end + 1
		default:
			if err := sc.grow(b.Len(), 1); err != nil {
				return "", err
			}
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// refEnd finds the } closing a reference that starts at i, skipping
// quoted index keys.
func refEnd(s string, i int) int {
	inQuote := false
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case c == '}' && !inQuote:
			return i
		}
	}
	return -1
}

// splitRef splits "attr.kernel.name" or `env["HOME"]` into its root and key.
func splitRef(ref string) (root, key string, ok bool) {
	if i := strings.IndexAny(ref, ".["); i > 0 {
		root, rest := ref[:i], ref[i:]
		if rest[0] == '.' {
			return root, rest[1:], rest[1:] != ""
		}
		if strings.HasSuffix(rest, "]") {
			k, err := strconv.Unquote(rest[1 : len(rest)-1])
			if err != nil {
				return "", "", false
			}
			return root, k, true
		}
		return "", "", false
	}
	return "", ref, ref != ""
}

// Lookup resolves one reference (the text between ${ and }).
func (sc *Scope) Lookup(ref string) (string, error) {
	root, key, ok := splitRef(ref)
	if !ok {
		return "", fmt.Errorf("%w: ${%s} is not a reference tether reads (use ${NAME}, ${env[\"NAME\"]}, ${attr.KEY}, ${node.KEY} or ${meta.KEY})", ErrUnknownReference, ref)
	}
	switch root {
	case "", "env":
		if sc.NoEnv {
			return "", fmt.Errorf("%w: ${%s}: a constraint sees only this host's attr.*, node.* and meta.*", ErrUnknownReference, ref)
		}
		if v, ok := sc.Env[key]; ok {
			return v, nil
		}
		return "", fmt.Errorf("%w: ${%s}: the task's environment has no %s", ErrUnknownReference, ref, key)
	case "attr":
		if sc.Host != nil {
			if v, ok := sc.Host.Attrs[key]; ok {
				return v, nil
			}
		}
		return "", fmt.Errorf("%w: ${%s}: this host has no attribute %q (tether knows: %s)", ErrUnknownReference, ref, key, listOr(sc.Host.attrNames(), "none"))
	case "node":
		if sc.Host != nil {
			if v, ok := sc.Host.Node[key]; ok {
				return v, nil
			}
		}
		return "", fmt.Errorf("%w: ${%s}: tether knows no node.%s (it knows: %s)", ErrUnknownReference, ref, key, listOr(sc.Host.nodeNames(), "none"))
	case "meta":
		if !sc.NoEnv {
			if v, ok := sc.Meta[key]; ok {
				return v, nil
			}
		}
		if sc.Host != nil {
			if v, ok := sc.Host.Meta[key]; ok {
				return v, nil
			}
		}
		return "", fmt.Errorf("%w: ${%s}: no meta key %q in the job, group, task or node", ErrUnknownReference, ref, key)
	}
	return "", fmt.Errorf("%w: ${%s}: %q is not something tether interpolates (NOMAD_* and env vars, env[...], attr.*, node.*, meta.*)", ErrUnknownReference, ref, root)
}

// firstRef returns the first unescaped reference in a parsed string.
func firstRef(s string) (string, bool) {
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := refEnd(s, i+2)
			if end < 0 {
				return s[i+2:], true
			}
			return s[i+2 : end], true
		default:
			i++
		}
	}
	return "", false
}

// interpolateAll interpolates each string of l.
func (sc *Scope) interpolateAll(what string, l []string) ([]string, error) {
	if l == nil {
		return nil, nil
	}
	out := make([]string, len(l))
	for i, s := range l {
		v, err := sc.Interpolate(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out[i] = v
	}
	return out, nil
}

// interpolateMap interpolates the values (and keys) of m.
func (sc *Scope) interpolateMap(what string, m map[string]string) (map[string]string, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		kk, err := sc.Interpolate(k)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		vv, err := sc.Interpolate(v)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", what, kk, err)
		}
		out[kk] = vv
	}
	return out, nil
}
