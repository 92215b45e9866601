package template

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// serverFuncs are consul-template's functions that query a server, and
// what each needs.
var serverFuncs = map[string]string{
	"key": "Consul's KV store", "keyExists": "Consul's KV store", "keyOrDefault": "Consul's KV store",
	"ls": "Consul's KV store", "safeLs": "Consul's KV store", "tree": "Consul's KV store", "safeTree": "Consul's KV store",
	"service": "Consul's catalog", "services": "Consul's catalog", "connect": "Consul's catalog",
	"node": "Consul's catalog", "nodes": "Consul's catalog", "datacenters": "Consul's catalog",
	"caLeaf": "Consul Connect's CA", "caRoots": "Consul Connect's CA", "partitions": "Consul Enterprise",
	"peerings": "Consul's peering API", "exportedServices": "Consul's catalog",
	"secret": "Vault", "secrets": "Vault", "pkiCert": "Vault",
	"nomadVar": "Nomad's variables API", "nomadVarList": "Nomad's variables API",
	"nomadVarListSafe": "Nomad's variables API", "nomadVarExists": "Nomad's variables API",
	"nomadService": "Nomad's service discovery", "nomadServices": "Nomad's service discovery",
}

// unsupportedFuncs are consul-template functions tether does not offer,
// and why.
var unsupportedFuncs = map[string]string{
	"plugin":          "it runs a host command from the renderer",
	"writeToFile":     "it writes files outside the template's destination",
	"sockaddr":        "it reads the host's network layout through go-sockaddr; use ${attr.unique.network.ip-address} in env instead",
	"executeTemplate": "named sub-templates are not supported",
	"toYAML":          "YAML output is not supported", "parseYAML": "YAML input is not supported",
	"toTOML":    "TOML output is not supported",
	"spew_dump": "debug dumps are not supported", "spew_sdump": "debug dumps are not supported", "spew_printf": "debug dumps are not supported",
}

// refusedFunc names the error for a server or unsupported function.
func refusedFunc(name string) error {
	if what, ok := serverFuncs[name]; ok {
		return fmt.Errorf("%w: %q needs %s, and tether renders templates with no Consul, Vault or Nomad server: put the value in the task's env, a file beneath its directory, or a variable", ErrServerFunction, name, what)
	}
	if why, ok := unsupportedFuncs[name]; ok {
		return fmt.Errorf("%w: %q: %s", ErrUnsupportedFunction, name, why)
	}
	if strings.HasPrefix(name, "sprig_") {
		if _, ok := sprigFuncs[strings.TrimPrefix(name, "sprig_")]; !ok {
			return fmt.Errorf("%w: %q: tether offers only these sprig_ functions: %s", ErrUnsupportedFunction, name, strings.Join(sortedKeys(sprigFuncs), ", "))
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sprigFuncs are the sprig functions offered under consul-template's
// sprig_ prefix (those that need no host, network or randomness).
var sprigFuncs = map[string]any{
	"default": func(def any, v ...any) any {
		if len(v) == 0 || empty(v[0]) {
			return def
		}
		return v[0]
	},
	"quote":   func(s any) string { return strconv.Quote(fmt.Sprint(s)) },
	"squote":  func(s any) string { return "'" + fmt.Sprint(s) + "'" },
	"upper":   strings.ToUpper,
	"lower":   strings.ToLower,
	"trim":    strings.TrimSpace,
	"replace": func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
	"repeat":  func(n int, s string) string { return strings.Repeat(s, max(n, 0)) },
	"nospace": func(s string) string { return strings.Join(strings.Fields(s), "") },
	"b64enc":  func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
	"list":    func(v ...any) []any { return v },
	"dict": func(kv ...any) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, fmt.Errorf("dict needs key and value pairs")
		}
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[fmt.Sprint(kv[i])] = kv[i+1]
		}
		return m, nil
	},
	"ternary": func(a, b any, cond bool) any {
		if cond {
			return a
		}
		return b
	},
}

func empty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return rv.Len() == 0
	case reflect.Bool:
		return !rv.Bool()
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Int16, reflect.Int8:
		return rv.Int() == 0
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint16, reflect.Uint8:
		return rv.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return rv.Float() == 0
	case reflect.Pointer, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// funcCtx carries what functions need: the renderer, the files read, and
// the first refusal (text/template wraps errors, the caller wants ours).
type funcCtx struct {
	r    *Renderer
	deps []string
	err  error
}

func (c *funcCtx) fail(err error) error {
	if c.err == nil {
		c.err = err
	}
	return err
}

func (c *funcCtx) funcs() template.FuncMap {
	m := template.FuncMap{
		"env": func(k string) string { return c.r.Env[k] },
		"envOrDefault": func(k, def string) string {
			if v, ok := c.r.Env[k]; ok && v != "" {
				return v
			}
			return def
		},
		"file": func(p string) (string, error) {
			b, host, err := c.r.read(p)
			if err != nil {
				return "", c.fail(err)
			}
			c.deps = append(c.deps, host)
			return string(b), nil
		},
		"base64Encode":    func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
		"base64Decode":    decoder(base64.StdEncoding),
		"base64URLEncode": func(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) },
		"base64URLDecode": decoder(base64.URLEncoding),
		"toJSON":          func(v any) (string, error) { return toJSON(v, "", true) },
		"toJSONPretty":    func(v any) (string, error) { return toJSON(v, "  ", true) },
		"toUnescapedJSON": func(v any) (string, error) { return toJSON(v, "", false) },
		"toUnescapedJSONPretty": func(v any) (string, error) {
			return toJSON(v, "  ", false)
		},
		"parseJSON": func(s string) (any, error) {
			if strings.TrimSpace(s) == "" {
				return map[string]any{}, nil
			}
			var v any
			if err := json.Unmarshal([]byte(s), &v); err != nil {
				return nil, fmt.Errorf("parseJSON: %w", err)
			}
			return v, nil
		},
		"parseBool":  func(s string) (bool, error) { return strconv.ParseBool(strings.TrimSpace(s)) },
		"parseInt":   func(s string) (int64, error) { return strconv.ParseInt(strings.TrimSpace(s), 10, 64) },
		"parseUint":  func(s string) (uint64, error) { return strconv.ParseUint(strings.TrimSpace(s), 10, 64) },
		"parseFloat": func(s string) (float64, error) { return strconv.ParseFloat(strings.TrimSpace(s), 64) },
		"split": func(sep, s string) []string {
			s = strings.TrimSpace(s)
			if s == "" {
				return []string{}
			}
			return strings.Split(s, sep)
		},
		"join": func(sep string, v any) (string, error) {
			l, err := strList(v)
			return strings.Join(l, sep), err
		},
		"toLower":    strings.ToLower,
		"toUpper":    strings.ToUpper,
		"toTitle":    title,
		"replaceAll": func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"trimSpace":  strings.TrimSpace,
		"trim":       func(cut, s string) string { return strings.Trim(s, cut) },
		"trimPrefix": func(p, s string) string { return strings.TrimPrefix(s, p) },
		"trimSuffix": func(p, s string) string { return strings.TrimSuffix(s, p) },
		"contains":   func(needle, hay any) (bool, error) { return contains(hay, needle) },
		"containsAll": func(needles, hay any) (bool, error) {
			return containsN(hay, needles, func(hit, n int) bool { return hit == n })
		},
		"containsAny": func(needles, hay any) (bool, error) {
			return containsN(hay, needles, func(hit, n int) bool { return hit > 0 })
		},
		"containsNone": func(needles, hay any) (bool, error) {
			return containsN(hay, needles, func(hit, n int) bool { return hit == 0 })
		},
		"containsNotAll": func(needles, hay any) (bool, error) {
			return containsN(hay, needles, func(hit, n int) bool { return hit < n })
		},
		"in": func(hay, needle any) (bool, error) { return contains(hay, needle) },
		"indent": func(n int, s string) (string, error) {
			if n < 0 {
				return "", fmt.Errorf("indent: %d is negative", n)
			}
			pad := strings.Repeat(" ", n)
			return pad + strings.ReplaceAll(s, "\n", "\n"+pad), nil
		},
		"loop": func(args ...int) ([]int, error) {
			var from, to int
			switch len(args) {
			case 1:
				to = args[0]
			case 2:
				from, to = args[0], args[1]
			default:
				return nil, fmt.Errorf("loop takes 1 or 2 integers")
			}
			if to-from > 1<<20 {
				return nil, fmt.Errorf("loop of %d steps is too long", to-from)
			}
			var out []int
			for i := from; i < to; i++ {
				out = append(out, i)
			}
			return out, nil
		},
		"add":      arith(func(a, b float64) float64 { return a + b }),
		"subtract": arith(func(a, b float64) float64 { return a - b }),
		"multiply": arith(func(a, b float64) float64 { return a * b }),
		"divide": func(b, a any) (any, error) {
			if f, _ := num(b); f == 0 {
				return nil, fmt.Errorf("divide by zero")
			}
			return arith(func(a, b float64) float64 { return a / b })(b, a)
		},
		"modulo": func(b, a any) (any, error) {
			bi, err1 := num(b)
			ai, err2 := num(a)
			if err1 != nil || err2 != nil || bi == 0 {
				return nil, fmt.Errorf("modulo needs two numbers, the divisor not zero")
			}
			return int64(ai) % int64(bi), nil
		},
		"minimum": func(b, a any) (any, error) {
			return arith(func(a, b float64) float64 { return min(a, b) })(b, a)
		},
		"maximum": func(b, a any) (any, error) {
			return arith(func(a, b float64) float64 { return max(a, b) })(b, a)
		},
		"regexMatch": func(re, s string) (bool, error) { return regexp.MatchString(re, s) },
		"regexReplaceAll": func(re, repl, s string) (string, error) {
			x, err := regexp.Compile(re)
			if err != nil {
				return "", err
			}
			return x.ReplaceAllString(s, repl), nil
		},
		"sha256Hex": func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) },
		"md5sum":    func(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) },
		"timestamp": func(f ...string) string {
			now := time.Now().UTC()
			if len(f) > 0 && f[0] != "" {
				return now.Format(f[0])
			}
			return now.Format(time.RFC3339)
		},
	}
	for name := range serverFuncs {
		m[name] = func(...any) (any, error) { return nil, c.fail(refusedFunc(name)) }
	}
	for name := range unsupportedFuncs {
		m[name] = func(...any) (any, error) { return nil, c.fail(refusedFunc(name)) }
	}
	for name, f := range sprigFuncs {
		m["sprig_"+name] = f
	}
	return m
}

func decoder(enc *base64.Encoding) func(string) (string, error) {
	return func(s string) (string, error) {
		b, err := enc.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("base64 decode: %w", err)
		}
		return string(b), nil
	}
}

func toJSON(v any, indent string, escape bool) (string, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(escape)
	e.SetIndent("", indent)
	if err := e.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

func title(s string) string {
	prev := ' '
	return strings.Map(func(r rune) rune {
		defer func() { prev = r }()
		if prev == ' ' || prev == '\t' || prev == '\n' || prev == '-' || prev == '_' {
			return []rune(strings.ToUpper(string(r)))[0]
		}
		return r
	}, s)
}

func strList(v any) ([]string, error) {
	switch l := v.(type) {
	case []string:
		return l, nil
	case nil:
		return nil, nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, fmt.Errorf("join needs a list, not %T", v)
	}
	out := make([]string, rv.Len())
	for i := range out {
		out[i] = fmt.Sprint(rv.Index(i).Interface())
	}
	return out, nil
}

func contains(hay, needle any) (bool, error) {
	if s, ok := hay.(string); ok {
		return strings.Contains(s, fmt.Sprint(needle)), nil
	}
	rv := reflect.ValueOf(hay)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			if reflect.DeepEqual(rv.Index(i).Interface(), needle) || fmt.Sprint(rv.Index(i).Interface()) == fmt.Sprint(needle) {
				return true, nil
			}
		}
		return false, nil
	case reflect.Map:
		return rv.MapIndex(reflect.ValueOf(fmt.Sprint(needle))).IsValid(), nil
	case reflect.Invalid:
		return false, nil
	}
	return false, fmt.Errorf("contains: cannot search a %T", hay)
}

func containsN(hay, needles any, ok func(hit, n int) bool) (bool, error) {
	rv := reflect.ValueOf(needles)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return false, fmt.Errorf("needs a list of needles, not %T", needles)
	}
	hit := 0
	for i := 0; i < rv.Len(); i++ {
		in, err := contains(hay, rv.Index(i).Interface())
		if err != nil {
			return false, err
		}
		if in {
			hit++
		}
	}
	return ok(hit, rv.Len()), nil
}

func num(v any) (float64, error) {
	switch n := v.(type) {
	case int:
		return float64(n), nil
	case int64:
		return float64(n), nil
	case int32:
		return float64(n), nil
	case uint64:
		return float64(n), nil
	case uint:
		return float64(n), nil
	case float64:
		return n, nil
	case float32:
		return float64(n), nil
	case string:
		return strconv.ParseFloat(strings.TrimSpace(n), 64)
	}
	return 0, fmt.Errorf("%v (%T) is not a number", v, v)
}

func isInt(v any) bool {
	switch v := v.(type) {
	case int, int64, int32, uint64, uint:
		return true
	case string:
		_, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return err == nil
	}
	return false
}

// arith applies op to (a, b) for consul-template's pipeline order
// ({{ a | add b }} calls add(b, a)); whole numbers stay whole.
func arith(op func(a, b float64) float64) func(b, a any) (any, error) {
	return func(b, a any) (any, error) {
		fb, err := num(b)
		if err != nil {
			return nil, err
		}
		fa, err := num(a)
		if err != nil {
			return nil, err
		}
		r := op(fa, fb)
		if isInt(a) && isInt(b) && r == float64(int64(r)) {
			return int64(r), nil
		}
		return r, nil
	}
}
