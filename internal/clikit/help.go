package clikit

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agext/levenshtein"
	"github.com/spf13/pflag"
)

// HelpFlag is -h, --help, which pflag handles without a definition: help
// lists it among a command's flags.
var HelpFlag = &pflag.Flag{Name: "help", Shorthand: "h", Usage: "print this help", Value: new(BoolFlag)}

// BoolFlag is the value of a flag listed in help but handled before any
// parse (--help, --version).
type BoolFlag bool

func (b *BoolFlag) String() string   { return strconv.FormatBool(bool(*b)) }
func (b *BoolFlag) Set(string) error { return nil }
func (b *BoolFlag) Type() string     { return "bool" }

// HelpWidth is the width help text is wrapped to.
const HelpWidth = 100

// Usages lists flags, one a line (the visible ones, sorted by name),
// their usage wrapped to HelpWidth beside them.
func Usages(flags []*pflag.Flag) string {
	flags = slices.DeleteFunc(slices.Clone(flags), func(f *pflag.Flag) bool { return f.Hidden })
	slices.SortFunc(flags, func(a, b *pflag.Flag) int { return strings.Compare(a.Name, b.Name) })
	heads := make([]string, len(flags))
	width := 0
	for i, f := range flags {
		h := "      --" + f.Name
		if f.Shorthand != "" {
			h = "  -" + f.Shorthand + ", --" + f.Name
		}
		if name, _ := pflag.UnquoteUsage(f); name != "" && f.Value.Type() != "bool" {
			h += " " + strings.ToUpper(name)
		}
		heads[i] = h
		width = max(width, len(h))
	}
	var b strings.Builder
	for i, f := range flags {
		_, usage := pflag.UnquoteUsage(f)
		switch d := f.DefValue; {
		case f.Value.Type() == "bool", d == "", d == "0", d == "0s", d == "[]", strings.Contains(usage, "(default"):
		default:
			usage += " (default " + d + ")"
		}
		fmt.Fprintf(&b, "%-*s  %s\n", width, heads[i], WrapText(usage, HelpWidth-width-2, width+2))
	}
	return b.String()
}

// WrapText wraps s at spaces to lines of at most width, indenting the
// lines after the first by indent.
func WrapText(s string, width, indent int) string {
	width = max(width, 30)
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && line+1+len(word) > width {
			b.WriteString("\n" + strings.Repeat(" ", indent))
			line = 0
		} else if i > 0 {
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// FlagError says what is wrong with a flag of the command name, in one
// line safe to print: a flag it has not (as typed, with the closest one it
// has), a flag without its value, a value refused and why.
func FlagError(fs *FlagSet, name string, err error) string {
	var (
		notExist *pflag.NotExistError
		needs    *pflag.ValueRequiredError
		invalid  *pflag.InvalidValueError
	)
	switch {
	case errors.As(err, &notExist):
		given := "--" + notExist.GetSpecifiedName()
		typed := notExist.GetSpecifiedName()
		if short := notExist.GetSpecifiedShortnames(); short != "" {
			// A group of short flags, or a long one given with one dash
			// ("-follow"): say the argument as it was typed.
			given, typed = "-"+notExist.GetSpecifiedName(), short
			for _, a := range fs.given {
				if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.HasSuffix(a, short) {
					given, typed = a, strings.TrimPrefix(a, "-")
					break
				}
			}
		}
		msg := fmt.Sprintf("%s has no flag %s", name, given)
		if s := SuggestFlag(fs, typed); s != "" {
			msg += "; did you mean " + s + "?"
		}
		return Printable(msg)
	case errors.As(err, &needs):
		return flagName(needs.GetFlag()) + " needs a value"
	case errors.As(err, &invalid):
		return fmt.Sprintf("%s %s: %v", flagName(invalid.GetFlag()), Printable(invalid.GetValue()), errors.Unwrap(invalid))
	}
	return Printable(err.Error())
}

func flagName(f *pflag.Flag) string {
	if f == nil {
		return "a flag"
	}
	return "--" + f.Name
}

// SuggestFlag returns the flag (with its dashes) closest to what was
// typed, or "" when none is close. typed may be a long name given with
// one dash ("-follow"), which pflag reads as a group of short flags.
func SuggestFlag(fs *FlagSet, typed string) string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	names = append(names, "help")
	if slices.Contains(names, typed) {
		return "--" + typed // a long flag given with one dash
	}
	if s := Closest(typed, names); s != "" {
		return "--" + s
	}
	return ""
}

// Closest returns the candidate nearest to s by edit distance (an
// adjacent transposition counting as one edit, the commonest typo), if it
// is near enough to be what was meant (or starts with s), else "". Ties
// go to the candidate of the length nearest to s's.
func Closest(s string, candidates []string) string {
	best, bestDist, bestLen := "", 0, 0
	for _, c := range candidates {
		d := levenshtein.Distance(s, c, nil)
		if transposed(s, c) || len(s) >= 2 && strings.HasPrefix(c, s) {
			d = min(d, 1)
		}
		l := abs(len(c) - len(s))
		if best == "" || d < bestDist || d == bestDist && l < bestLen {
			best, bestDist, bestLen = c, d, l
		}
	}
	if best == "" || bestDist > max(1, min(3, len(s)/3)) {
		return ""
	}
	return best
}

// transposed reports whether a and b differ by one swap of two adjacent
// characters.
func transposed(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	i := 0
	for i < len(a) && a[i] == b[i] {
		i++
	}
	return i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
