package clikit

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Flags are GNU-style (github.com/spf13/pflag): long ones with two dashes
// (--name web, --name=web), short ones with one (-f, -n 20, -n20), and
// accepted anywhere among a command's arguments: before or after the task
// and its other arguments, and before the command's name too. A "--" ends
// them, and so does the start of a command line (tether run's and start's
// `-- CMD ARGS`, exec's `ID CMD ARGS`): what follows belongs to the
// command and is never parsed.

// GlobalAnnotation marks a flag as global: help lists it in a section of
// its own, and FindCommand knows its value from a command's name.
const GlobalAnnotation = "tether-global"

// LineRule says whether the positional argument next, after the
// positionals pos, starts a command line (which is then not parsed for
// flags); afterDash is set past a "--".
type LineRule func(pos []string, next string, afterDash bool) bool

// FlagSet is one command's flags (its own and the global ones) and what
// parsing them left: the positional arguments and the command line.
type FlagSet struct {
	*pflag.FlagSet
	// Line is the command's rule for its command line; nil: it has none.
	Line LineRule
	// pos are the positional arguments, in order, without the flags;
	// line is the command line.
	pos  []string
	line []string
	// dash is set when a "--" ended the flags.
	dash bool
	// given are the arguments parsed, for messages.
	given []string
}

// NewFlagSet returns an empty flag set named name (its usage and errors
// are the caller's to print: see Usages and FlagError).
func NewFlagSet(name string, line LineRule) *FlagSet {
	fs := &FlagSet{FlagSet: pflag.NewFlagSet(name, pflag.ContinueOnError), Line: line}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SetInterspersed(false)
	return fs
}

// Args returns the positional arguments.
func (f *FlagSet) Args() []string { return f.pos }

// NArg returns the number of positional arguments.
func (f *FlagSet) NArg() int { return len(f.pos) }

// Arg returns the i-th positional argument, or "".
func (f *FlagSet) Arg(i int) string {
	if i < 0 || i >= len(f.pos) {
		return ""
	}
	return f.pos[i]
}

// CommandLine returns the command line (nil: none was given).
func (f *FlagSet) CommandLine() []string { return f.line }

// Dashed reports whether a "--" ended the flags (the command line is a
// command, whatever its words).
func (f *FlagSet) Dashed() bool { return f.dash }

// MarkGlobal marks the named flags as global.
func (f *FlagSet) MarkGlobal(names ...string) {
	for _, n := range names {
		_ = f.SetAnnotation(n, GlobalAnnotation, nil)
	}
}

// Split returns the command's own flags and the global ones.
func (f *FlagSet) Split() (own, global []*pflag.Flag) {
	f.VisitAll(func(fl *pflag.Flag) {
		if _, ok := fl.Annotations[GlobalAnnotation]; ok {
			global = append(global, fl)
		} else {
			own = append(own, fl)
		}
	})
	return own, global
}

// ParseAnywhere parses flags wherever they are among args: pflag stops at
// the first positional argument, which is taken and the parse resumed
// after it, until a "--" or the start of a command line. -h and --help
// give pflag.ErrHelp.
func (f *FlagSet) ParseAnywhere(args []string) error {
	f.pos, f.line, f.dash, f.given = nil, nil, false, args
	for {
		if err := f.Parse(args); err != nil {
			return err
		}
		rest := f.FlagSet.Args()
		if len(rest) == 0 {
			return nil
		}
		if f.ArgsLenAtDash() == 0 {
			f.dash = true
			if f.Line == nil {
				f.pos = append(f.pos, rest...)
				return nil
			}
			// After "--": the positionals still missing, then the command line.
			for len(rest) > 0 && !f.Line(f.pos, rest[0], true) {
				f.pos, rest = append(f.pos, rest[0]), rest[1:]
			}
			f.line = rest
			return nil
		}
		if f.Line != nil && f.Line(f.pos, rest[0], false) {
			f.line = rest
			return nil
		}
		f.pos, args = append(f.pos, rest[0]), rest[1:]
	}
}

// FindCommand finds a command's name among args: the first argument that
// is neither a flag nor a flag's value (a flag of flags given without "="
// takes the next argument for its value unless it is a bool). A command's
// own flags, which flags does not know, may come before its name too: a
// word after such a flag that isName refuses is taken for its value. at is
// the index of the name, or of the word that should have been one (-1:
// none before a "--" or the end); ok whether isName took it.
func FindCommand(args []string, flags *pflag.FlagSet, isName func(string) bool) (at int, ok bool) {
	maybe := -1 // the first word taken for a flag's value
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if isName(a) {
				return i, true
			}
			prev := ""
			if i > 0 {
				prev = args[i-1]
			}
			if !strings.HasPrefix(prev, "-") || strings.Contains(prev, "=") {
				return i, false
			}
			if maybe < 0 {
				maybe = i
			}
			continue
		}
		if strings.HasPrefix(a, "--") && !strings.Contains(a, "=") {
			if f := flags.Lookup(a[2:]); f != nil && f.Value.Type() != "bool" {
				i++ // its value
			}
		}
	}
	return maybe, false
}

// Duration defines a duration flag that refuses a bare number (see
// ParseDuration).
func (f *FlagSet) Duration(name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	f.DurationVar(p, name, value, usage)
	return p
}

// DurationVar is Duration with a given variable.
func (f *FlagSet) DurationVar(p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	f.Var((*durationValue)(p), name, usage)
	f.Lookup(name).DefValue = DurationText(value)
}

// durationValue is a duration flag (ParseDuration).
type durationValue time.Duration

func (d *durationValue) String() string { return DurationText(time.Duration(*d)) }

func (d *durationValue) Type() string { return "duration" }

func (d *durationValue) Set(s string) error {
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// ParseDuration reads a duration flag's value: Go's syntax (300ms, 5s,
// 1m30s, 24h) plus days (7d). A bare number other than 0 is refused with
// the value it probably meant: "5" is not taken as 5 nanoseconds.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("a duration needs a unit: did you mean %ss?", s)
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseFloat(days, 64); err == nil && n >= 0 && n*24 < float64(1<<63-1)/float64(time.Hour) {
			return time.Duration(n * 24 * float64(time.Hour)), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration: use a number with a unit, like 300ms, 5s, 1m30s, 24h or 7d")
	}
	if d < 0 {
		return 0, errors.New("a duration must not be negative")
	}
	return d, nil
}

// DurationText prints a duration as Go does, without the trailing zero
// units ("1m0s" is "1m", "24h0m0s" is "24h").
func DurationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
