package taskfile

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Limits bound what reading one file may cost, so that no file, whatever
// its source (the CLI, a --config-dir file, a spec from etcd, a request to
// the agent), can exhaust the memory or the time of the process that reads
// it. Each is checked before the work or the allocation it bounds: a file
// past one is refused with a diagnostic naming where (file:line:column,
// the expression) and which limit. A zero field takes its default
// (DefaultLimits); docs/jobfiles.md lists them.
//
// Sizes are tether's estimate of a value's memory: a string's bytes plus
// 16, a number 64 plus its decimal digits, 8 more for every element of a
// collection and 16 plus the key for every attribute of a map or object.
type Limits struct {
	// SourceBytes bounds the size of the file (and of each var file and
	// -var value).
	SourceBytes int
	// Tokens bounds the number of HCL tokens of the file: HCL's parser
	// takes about 1 KB of memory a token.
	Tokens int
	// Nesting bounds the depth of brackets, string templates and prefix
	// operators (and of a jsondecode'd document): HCL's parser recurses
	// about 10 KB of stack a level.
	Nesting int
	// StringCost bounds, for each run of text of a string or a heredoc,
	// its pieces times its bytes: HCL's parser joins a run's pieces (its
	// lines, and its text around each $ and %) one at a time, copying the
	// run so far each time (a 200 KB heredoc of 4,000 lines costs it 400
	// MB).
	StringCost int64
	// ValueBytes bounds the size of any one value an expression makes:
	// a function's result (estimated from its arguments before it runs),
	// a string template's, a for expression's, a variable's.
	ValueBytes int64
	// Elements bounds the number of elements of any one collection.
	Elements int
	// Work bounds the work of evaluating the whole file, in the units of
	// sizes: each expression evaluated (1,024), each value measured (128 an element), each value made or measured,
	// each function's estimated cost, charged before it is done.
	Work int64
	// TotalBytes bounds the sum of the sizes of the file's evaluated
	// attributes: the whole evaluated file.
	TotalBytes int64
}

// DefaultLimits are the limits a zero Limits field takes.
var DefaultLimits = Limits{
	SourceBytes: 1 << 20,
	Tokens:      65536,
	Nesting:     64,
	StringCost:  64 << 20,
	ValueBytes:  2 << 20,
	Elements:    16384,
	Work:        64 << 20,
	TotalBytes:  16 << 20,
}

// DefaultMaxCount is the number of copies of a group (its count) a file
// may ask for when Options.MaxCount is not set.
const DefaultMaxCount = 1000

// withDefaults fills the zero (or negative) fields of l.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.SourceBytes > 0 {
		d.SourceBytes = l.SourceBytes
	}
	if l.Tokens > 0 {
		d.Tokens = l.Tokens
	}
	if l.Nesting > 0 {
		d.Nesting = l.Nesting
	}
	if l.StringCost > 0 {
		d.StringCost = l.StringCost
	}
	if l.ValueBytes > 0 {
		d.ValueBytes = l.ValueBytes
	}
	if l.Elements > 0 {
		d.Elements = l.Elements
	}
	if l.Work > 0 {
		d.Work = l.Work
	}
	if l.TotalBytes > 0 {
		d.TotalBytes = l.TotalBytes
	}
	return d
}

// maxCount is the bound on a group's count that opts asks for.
func (o Options) maxCount() int {
	if o.MaxCount > 0 {
		return o.MaxCount
	}
	return DefaultMaxCount
}

// limitSummary is the summary of every diagnostic of a limit.
const limitSummary = "Parse limit exceeded"

// IsLimit reports whether d is a refusal for one of the Limits (or the
// bound on count).
func IsLimit(d *hcl.Diagnostic) bool { return d != nil && d.Summary == limitSummary }

// byteSize prints n bytes for a message: "2 MiB", "1.5 GiB", "300 bytes".
func byteSize(n float64) string {
	switch {
	case n >= 1<<40:
		return fmt.Sprintf("%.3g TiB", n/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.3g GiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.3g MiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.3g KiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0f bytes", n)
}

// parseBounded is hclsyntax.ParseConfig behind the source, token and
// nesting limits: scanSource first (no allocation per token), then HCL's
// own lexer to confirm (its tokens now bounded), then the parser.
func parseBounded(filename string, src []byte, lim Limits) (*hcl.File, hcl.Diagnostics) {
	if d := checkSource(filename, src, lim); d != nil {
		return nil, hcl.Diagnostics{d}
	}
	return hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
}

// parseExprBounded is hclsyntax.ParseExpression behind the same limits.
func parseExprBounded(filename string, src []byte, lim Limits) (hclsyntax.Expression, hcl.Diagnostics) {
	if d := checkSource(filename, src, lim); d != nil {
		return nil, hcl.Diagnostics{d}
	}
	return hclsyntax.ParseExpression(src, filename, hcl.InitialPos)
}

// CheckSyntax reports whether src is HCL that tether would read as a file
// (its syntax only, not what it says), within DefaultLimits' bounds on
// size, tokens and nesting, without evaluating anything. It is for a
// caller that must judge text before it keeps it (a spec from etcd): HCL's
// parser alone, given a file of nested brackets, recurses until the
// process dies.
func CheckSyntax(filename string, src []byte) hcl.Diagnostics {
	_, diags := parseBounded(filename, src, DefaultLimits)
	return diags
}

// checkSource checks src against the limits on size, tokens and nesting,
// as HCL would tokenize it, before HCL does: first with scanSource, a
// mirror of HCL's lexer that allocates nothing per token, then (its count
// within the bounds) with HCL's lexer itself.
func checkSource(filename string, src []byte, lim Limits) *hcl.Diagnostic {
	lim = lim.withDefaults()
	start := hcl.Range{Filename: filename, Start: hcl.InitialPos, End: hcl.InitialPos}
	if len(src) > lim.SourceBytes {
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: limitSummary, Subject: &start,
			Detail: fmt.Sprintf("The file is %s; tether reads at most %s (its limit on a file's size).", byteSize(float64(len(src))), byteSize(float64(lim.SourceBytes)))}
	}
	sc := scanSource(src, lim)
	if sc.tokens > lim.Tokens {
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: limitSummary, Subject: &start,
			Detail: fmt.Sprintf("The file has more than %d HCL tokens (tether's limit on a file's tokens).", lim.Tokens)}
	}
	if sc.heredocAt >= 0 {
		at := offsetRange(filename, src, sc.heredocAt)
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported heredoc marker", Subject: &at,
			Detail: "A heredoc's marker must be ASCII letters, digits, '_' and '-' (as in <<EOT)."}
	}
	if sc.deepAt >= 0 {
		at := offsetRange(filename, src, sc.deepAt)
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: limitSummary, Subject: &at,
			Detail: fmt.Sprintf("Brackets, string templates and prefix operators nest here more than %d deep (tether's limit on nesting).", lim.Nesting)}
	}
	// HCL's own lexer, now that it is bounded, has the last word.
	toks, _ := hclsyntax.LexConfig(src, filename, hcl.InitialPos)
	if len(toks) > lim.Tokens+2 {
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: limitSummary, Subject: &start,
			Detail: fmt.Sprintf("The file has more than %d HCL tokens (tether's limit on a file's tokens).", lim.Tokens)}
	}
	if i := stringCost(toks, lim.StringCost); i >= 0 {
		return stringCostDiag(toks[i].Range.Ptr(), lim)
	}
	if i := tokenDepth(toks, lim.Nesting); i >= 0 {
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: limitSummary, Subject: toks[i].Range.Ptr(),
			Detail: fmt.Sprintf("Brackets, string templates and prefix operators nest here more than %d deep (tether's limit on nesting).", lim.Nesting)}
	}
	return nil
}

// stringCostDiag is the refusal of a string whose pieces cost HCL's
// parser more than the limit.
func stringCostDiag(at *hcl.Range, lim Limits) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: limitSummary, Subject: at,
		Detail: fmt.Sprintf("This string or heredoc has too many pieces (lines, and text around each $ and %%) for its length: HCL's parser would copy more than %s joining them (tether's limit on a string's pieces times its bytes). Split it, or read it from a file (template source).",
			byteSize(float64(lim.StringCost)))}
}

// stringCost returns the index of the token (a string's or heredoc's
// opening) at which a run of literal pieces of a template costs more than
// limit (its pieces times its bytes), or -1.
func stringCost(toks hclsyntax.Tokens, limit int64) int {
	open := -1
	var pieces, size int64
	for i, t := range toks {
		switch t.Type {
		case hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc:
			open, pieces, size = i, 0, 0
		case hclsyntax.TokenQuotedLit, hclsyntax.TokenStringLit:
			pieces++
			size += int64(len(t.Bytes))
			if open >= 0 && pieces*size > limit {
				return open
			}
		default:
			pieces, size = 0, 0
		}
	}
	return -1
}

// tokenDepth returns the index of the first token at which the nesting of
// toks passes limit, or -1: every opening token (bracket, quote, heredoc,
// template sequence) is a level until its closing token, and every prefix
// operator in a run of them another.
func tokenDepth(toks hclsyntax.Tokens, limit int) int {
	depth, run := 0, 0
	for i, t := range toks {
		switch t.Type {
		case hclsyntax.TokenOParen, hclsyntax.TokenOBrack, hclsyntax.TokenOBrace, hclsyntax.TokenTemplateInterp,
			hclsyntax.TokenTemplateControl, hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc:
			depth++
		case hclsyntax.TokenCParen, hclsyntax.TokenCBrack, hclsyntax.TokenCBrace, hclsyntax.TokenTemplateSeqEnd,
			hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc:
			depth = max(depth-1, 0)
		}
		if t.Type == hclsyntax.TokenMinus || t.Type == hclsyntax.TokenBang {
			run++
		} else {
			run = 0
		}
		if depth+run > limit {
			return i
		}
	}
	return -1
}

// offsetRange is the range of the byte at off of src.
func offsetRange(filename string, src []byte, off int) hcl.Range {
	line := 1 + bytes.Count(src[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(src[:off], '\n')
	p := hcl.Pos{Line: line, Column: col, Byte: off}
	return hcl.Range{Filename: filename, Start: p, End: p}
}

// scanResult is what scanSource found: a count of tokens at least HCL's
// (it stops counting past the limit), and where the nesting first passed
// the limit (-1: nowhere).
type scanResult struct {
	tokens int
	deepAt int
	// heredocAt is where a heredoc's marker starts with a non-ASCII
	// character (-1: nowhere): HCL's identifiers take Unicode letters
	// from its own tables, which this scan does not mirror.
	heredocAt int
}

// scanSource walks src as HCL's lexer (hclsyntax's scan_tokens.rl) does,
// in its modes (code; a quoted string; a heredoc; a template sequence
// ${...} or %{...} inside either, which is code again, closed by the "}"
// that balances it), counting tokens and nesting without keeping them. It
// errs toward more: where its reading of a byte could differ from HCL's,
// it counts the byte as a token and an opening bracket as a level.
func scanSource(src []byte, lim Limits) scanResult {
	res := scanResult{deepAt: -1, heredocAt: -1}
	const (
		modeCode = iota
		modeQuoted
		modeHeredoc
	)
	type frame struct {
		mode        int
		marker      []byte // a heredoc's
		startOfLine bool   // a heredoc's: at the start of a line
	}
	modes := []frame{{mode: modeCode}}
	braces := 0
	var retBraces []int
	depth, run := 0, 0
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf"))
	deeper := func(at, by int) {
		if depth+by > lim.Nesting && res.deepAt < 0 {
			res.deepAt = at
		}
	}
	tok := func() { res.tokens++ }
	n := len(src)
	for i := 0; i < n && res.tokens <= lim.Tokens && res.deepAt < 0 && res.heredocAt < 0; {
		top := &modes[len(modes)-1]
		c := src[i]
		switch top.mode {
		case modeQuoted, modeHeredoc:
			if top.mode == modeHeredoc && top.startOfLine {
				end := bytes.IndexByte(src[i:], '\n')
				if end >= 0 {
					line := src[i : i+end]
					if !bytes.ContainsAny(line, "$%") && bytes.Equal(bytes.TrimSpace(line), top.marker) {
						tok()
						modes = modes[:len(modes)-1]
						depth = max(depth-1, 0)
						i += end // the newline is code's
						continue
					}
				}
				top.startOfLine = false
			}
			switch {
			case (c == '$' || c == '%') && i+2 < n && src[i+1] == c && src[i+2] == '{':
				tok() // "$${" is a literal "${"
				i += 3
			case (c == '$' || c == '%') && i+1 < n && src[i+1] == '{':
				tok()
				braces++
				retBraces = append(retBraces, braces)
				depth++
				deeper(i, 0)
				modes = append(modes, frame{mode: modeCode})
				i += 2
			case c == '$' || c == '%':
				tok()
				i++
			case c == '"' && top.mode == modeQuoted:
				tok()
				modes = modes[:len(modes)-1]
				depth = max(depth-1, 0)
				i++
			case c == '\n':
				tok()
				if top.mode == modeHeredoc {
					top.startOfLine = true
				}
				i++
			case c == '\\' && top.mode == modeQuoted && i+1 < n && src[i+1] != '\n' && src[i+1] != '\r':
				tok()
				i += 2
			default:
				// A run of literal text: one token.
				tok()
				i++
				for i < n && src[i] != '$' && src[i] != '%' && src[i] != '\n' && src[i] != '"' && src[i] != '\\' {
					i++
				}
			}
			continue
		}
		// Code.
		if c != '-' && c != '!' && c != ' ' && c != '\t' {
			run = 0
		}
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '\r' || c == '\n':
			tok()
			run = 0
			i++
		case c == '#' || (c == '/' && i+1 < n && src[i+1] == '/'):
			tok()
			if end := bytes.IndexByte(src[i:], '\n'); end >= 0 {
				i += end + 1
			} else {
				i = n
			}
		case c == '/' && i+1 < n && src[i+1] == '*' && bytes.Contains(src[i+2:], []byte("*/")):
			tok()
			i += 2 + bytes.Index(src[i+2:], []byte("*/")) + 2
		case c == '"':
			tok()
			depth++
			deeper(i, 0)
			modes = append(modes, frame{mode: modeQuoted})
			i++
		case c == '<' && i+1 < n && src[i+1] == '<' && heredocMarker(src[i+2:]) != nil:
			tok()
			m := heredocMarker(src[i+2:])
			depth++
			deeper(i, 0)
			modes = append(modes, frame{mode: modeHeredoc, marker: m, startOfLine: true})
			i += 2 + bytes.IndexByte(src[i+2:], '\n') + 1
		case c == '<' && i+2 < n && src[i+1] == '<' && (src[i+2] >= utf8.RuneSelf || (src[i+2] == '-' && i+3 < n && src[i+3] >= utf8.RuneSelf)):
			res.heredocAt = i
		case c == '(' || c == '[':
			tok()
			depth++
			deeper(i, 0)
			i++
		case c == ')' || c == ']':
			tok()
			depth = max(depth-1, 0)
			i++
		case c == '{':
			tok()
			braces++
			depth++
			deeper(i, 0)
			i++
		case c == '}' || (c == '~' && i+1 < n && src[i+1] == '}'):
			tok()
			if c == '~' {
				i++
			}
			i++
			if len(retBraces) > 0 && retBraces[len(retBraces)-1] == braces {
				retBraces = retBraces[:len(retBraces)-1]
				braces--
				depth = max(depth-1, 0)
				if len(modes) > 1 {
					modes = modes[:len(modes)-1]
				}
				continue
			}
			braces--
			depth = max(depth-1, 0)
		case c == '-' || c == '!':
			tok()
			run++
			deeper(i, run)
			i++
		case isIdentByte(c):
			tok()
			for i < n && isIdentByte(src[i]) {
				i++
			}
		case c >= utf8.RuneSelf:
			// Every byte of a non-ASCII character a token: more than HCL's.
			tok()
			i++
		default:
			tok()
			i++
		}
	}
	return res
}

// isIdentByte is an ASCII byte that continues an identifier or a number.
func isIdentByte(c byte) bool {
	return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// heredocMarker reads a heredoc's introduction after its "<<": an optional
// "-", an identifier and a newline. It returns the marker, or nil when b
// does not start one. Only an ASCII identifier is taken for one (HCL's
// identifiers take Unicode letters too; such a marker is not read as a
// heredoc here, and its text is counted as code: more tokens and levels,
// never fewer, and HCL's lexer has the last word).
func heredocMarker(b []byte) []byte {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	end := bytes.IndexByte(b, '\n')
	if end <= 0 {
		return nil
	}
	m := b[:end]
	if m[len(m)-1] == '\r' {
		m = m[:len(m)-1]
	}
	if len(m) == 0 || !(m[0] == '_' || (m[0] >= 'a' && m[0] <= 'z') || (m[0] >= 'A' && m[0] <= 'Z')) {
		return nil
	}
	for _, c := range m {
		if !(c == '_' || c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			return nil
		}
	}
	return m
}
