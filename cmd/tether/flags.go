package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agext/levenshtein"
	"github.com/spf13/pflag"
)

// Flags are GNU-style (github.com/spf13/pflag): long ones with two dashes
// (--name web, --name=web), short ones with one (-f, -n 20, -n20), and
// accepted anywhere among a command's arguments: before or after the task
// and its other arguments, and before the command's name too. A "--" ends
// them, and so does the start of a command line (run's and start's
// `-- CMD ARGS`, exec's `ID CMD ARGS`): what follows belongs to the
// command and is never parsed.

// globalAnnotation marks a flag as global (listed in its own section).
const globalAnnotation = "tether-global"

// flagSet is one command's flags (its own and the global ones) and what
// parsing them left: the positional arguments and the command line.
type flagSet struct {
	*pflag.FlagSet
	cmd command
	// pos are the positional arguments, in order, without the flags;
	// line is the command line (run, start: after "--" or from the first
	// argument that is not a task file; exec: after the task).
	pos  []string
	line []string
	// dash is set when a "--" ended the flags.
	dash bool
	// given are the arguments parsed, for messages.
	given []string
}

// Args returns the positional arguments.
func (f *flagSet) Args() []string { return f.pos }

// NArg returns the number of positional arguments.
func (f *flagSet) NArg() int { return len(f.pos) }

// Arg returns the i-th positional argument, or "".
func (f *flagSet) Arg(i int) string {
	if i < 0 || i >= len(f.pos) {
		return ""
	}
	return f.pos[i]
}

// Duration defines a duration flag that refuses a bare number (see
// durationValue).
func (f *flagSet) Duration(name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	f.DurationVar(p, name, value, usage)
	return p
}

// DurationVar is Duration with a given variable.
func (f *flagSet) DurationVar(p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	f.Var((*durationValue)(p), name, usage)
	f.Lookup(name).DefValue = durationText(value)
}

// durationValue is a duration flag: Go's syntax (300ms, 5s, 1m30s, 24h)
// plus days (7d). A bare number other than 0 is refused with the value it
// probably meant: "5" is not taken as 5 nanoseconds.
type durationValue time.Duration

func (d *durationValue) String() string { return durationText(time.Duration(*d)) }

func (d *durationValue) Type() string { return "duration" }

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// parseDuration reads a duration flag's value.
func parseDuration(s string) (time.Duration, error) {
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

// durationText prints a duration as Go does, without the trailing zero
// units ("1m0s" is "1m", "24h0m0s" is "24h").
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// flags returns the flag set of a command, with the global flags on it.
func (c *cli) flags(name string) *flagSet {
	cmd, _ := lookup(name)
	fs := &flagSet{FlagSet: pflag.NewFlagSet("tether "+name, pflag.ContinueOnError), cmd: cmd}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // help is printed by parse
	fs.SetInterspersed(false)
	c.globalFlags(fs, cmd.startsTasks)
	return fs
}

// globalFlags registers the global flags on fs. The capability allow list
// and the chroot environment are listed only for the commands that start
// tasks (they are accepted by all, as they always were).
func (c *cli) globalFlags(fs *flagSet, startsTasks bool) {
	fs.Func("state-dir", "state `directory` (env TETHER_STATE_DIR; default $XDG_STATE_HOME/tether or ~/.local/state/tether); an existing one must be private and yours", func(v string) error {
		c.stateDir, c.stateDirSet = v, true
		return nil
	})
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log `level`: trace, debug, info, warn, error or off; debug also logs the whole chain of an error")
	fs.DurationVar(&c.lockTimeout, "lock-timeout", c.lockTimeout, "how long to wait while another tether holds the store without letting go (commands queued behind each other wait their turn)")
	fs.StringVar(&c.allowCaps, "allow-caps", c.allowCaps, "capability allow `list` for exec tasks, comma-separated (env TETHER_ALLOW_CAPS; default Nomad's exec list, without net_raw)")
	fs.StringVar(&c.chrootEnv, "chroot-env", c.chrootEnv, "what an exec task's root is made of: `entries` SRC or SRC:DST, comma-separated, each bound read-only (env TETHER_CHROOT_ENV; default Nomad's chroot_env)")
	fs.StringVar(&c.allowSeccompFlag, "allow-seccomp", c.allowSeccompFlag, "what an exec task's seccomp may name besides \"default\": `list` of unconfined and profile paths, comma-separated (env TETHER_ALLOW_SECCOMP; default none); unconfined also runs exec tasks unfiltered on a host without seccomp")
	fs.StringVar(&c.allowMissingFlag, "allow-missing", c.allowMissingFlag, "sandbox `parts` exec tasks may run without where the host lacks them: cgroupns, keyring, comma-separated (env TETHER_ALLOW_MISSING; default none: such a host refuses exec tasks)")
	fs.StringVar(&c.allowReadDirs, "allow-read", c.allowReadDirs, "host `directories`, comma-separated, a job file's template (source, file) or local artifact may read besides the task's own and its group's (env TETHER_ALLOW_READ; default none)")
	for _, name := range []string{"state-dir", "log-level", "lock-timeout", "allow-caps", "chroot-env", "allow-seccomp", "allow-missing", "allow-read"} {
		_ = fs.SetAnnotation(name, globalAnnotation, nil)
	}
	if !startsTasks {
		for _, name := range []string{"allow-caps", "chroot-env", "allow-seccomp", "allow-missing", "allow-read"} {
			_ = fs.MarkHidden(name)
		}
	}
}

// parse parses a command's arguments: flags anywhere, up to a "--" or a
// command line (see startsLine). It returns an exit code when the command
// should end at once (help, or a bad flag).
func (c *cli) parse(fs *flagSet, args []string) (int, bool) {
	if err := fs.parseAnywhere(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			c.commandHelp(c.stdout, fs)
			return exitOK, false
		}
		c.flagError(fs, err)
		return exitUsage, false
	}
	if err := c.setup(); err != nil {
		c.errorf("%v", err)
		return exitUsage, false
	}
	return 0, true
}

// parseAnywhere parses flags wherever they are among args: pflag stops at
// the first positional argument, which is taken and the parse resumed
// after it, until a "--" or the start of a command line.
func (f *flagSet) parseAnywhere(args []string) error {
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
			if f.cmd.line == nil {
				f.pos = append(f.pos, rest...)
				return nil
			}
			// After "--": the positionals still missing, then the command line.
			for len(rest) > 0 && !f.cmd.line(f.pos, rest[0], true) {
				f.pos, rest = append(f.pos, rest[0]), rest[1:]
			}
			f.line = rest
			return nil
		}
		if f.cmd.line != nil && f.cmd.line(f.pos, rest[0], false) {
			f.line = rest
			return nil
		}
		f.pos, args = append(f.pos, rest[0]), rest[1:]
	}
}

// commandHelp prints a command's usage, its own flags and the global ones.
func (c *cli) commandHelp(w io.Writer, fs *flagSet) {
	cmd := fs.cmd
	for i, u := range strings.Split(cmd.args, "\n") {
		lead := "Usage:"
		if i > 0 {
			lead = "      "
		}
		fmt.Fprintf(w, "%s tether %s %s\n", lead, cmd.name, u)
	}
	fmt.Fprintf(w, "\n%s.\n", upperFirst(cmd.summary))
	if cmd.alias != "" {
		fmt.Fprintf(w, "Also: tether %s.\n", cmd.alias)
	}
	var own, global []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[globalAnnotation]; ok {
			global = append(global, f)
		} else {
			own = append(own, f)
		}
	})
	own = append(own, helpFlag)
	fmt.Fprintf(w, "\nFlags:\n%s", flagUsages(own))
	fmt.Fprintf(w, "\nGlobal flags:\n%s", flagUsages(global))
	if cmd.more != "" {
		fmt.Fprintf(w, "\n%s\n", cmd.more)
	}
}

// helpFlag is -h, --help, which pflag handles without a definition.
var helpFlag = &pflag.Flag{Name: "help", Shorthand: "h", Usage: "print this help", Value: new(boolFlag)}

type boolFlag bool

func (b *boolFlag) String() string   { return strconv.FormatBool(bool(*b)) }
func (b *boolFlag) Set(string) error { return nil }
func (b *boolFlag) Type() string     { return "bool" }

// flagUsages lists flags, one a line (the visible ones, sorted by name),
// their usage wrapped to helpWidth beside them.
func flagUsages(flags []*pflag.Flag) string {
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
		fmt.Fprintf(&b, "%-*s  %s\n", width, heads[i], wrapText(usage, helpWidth-width-2, width+2))
	}
	return b.String()
}

// wrapText wraps s at spaces to lines of at most width, indenting the
// lines after the first by indent.
func wrapText(s string, width, indent int) string {
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

// helpWidth is the width help text is wrapped to.
const helpWidth = 100

// flagError says what is wrong with a flag, in at most three lines.
func (c *cli) flagError(fs *flagSet, err error) {
	var (
		notExist *pflag.NotExistError
		needs    *pflag.ValueRequiredError
		invalid  *pflag.InvalidValueError
	)
	name, help := fs.cmd.name, fmt.Sprintf("'tether %s -h' lists its flags", fs.cmd.name)
	if name == "" {
		name, help = "tether", "'tether help' lists the commands and the global flags"
	}
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
		if s := suggestFlag(fs, typed); s != "" {
			msg += "; did you mean " + s + "?"
		}
		c.errorf("%s", printable(msg))
	case errors.As(err, &needs):
		c.errorf("%s needs a value", flagName(needs.GetFlag()))
	case errors.As(err, &invalid):
		c.errorf("%s %s: %v", flagName(invalid.GetFlag()), printable(invalid.GetValue()), errors.Unwrap(invalid))
	default:
		c.errorf("%s", printable(err.Error()))
	}
	fmt.Fprintf(c.stderr, "  %s\n", help)
}

func flagName(f *pflag.Flag) string {
	if f == nil {
		return "a flag"
	}
	return "--" + f.Name
}

// suggestFlag returns the flag (with its dashes) closest to what was
// typed, or "" when none is close. typed may be a long name given with
// one dash ("-follow"), which pflag reads as a group of short flags.
func suggestFlag(fs *flagSet, typed string) string {
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
	if s := closest(typed, names); s != "" {
		return "--" + s
	}
	return ""
}

// closest returns the candidate nearest to s by edit distance (an
// adjacent transposition counting as one edit, the commonest typo), if it
// is near enough to be what was meant (or starts with s), else "". Ties
// go to the candidate of the length nearest to s's.
func closest(s string, candidates []string) string {
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

// version is set at build time (-ldflags "-X main.version=v1.2.3"); when
// empty, the Go build information says what was built.
var version string

// versionText is what `tether version` prints.
func versionText() string {
	v := version
	rev, modified := "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(development build)"
	}
	s := "tether " + v
	if rev != "" && !strings.Contains(v, rev[:min(12, len(rev))]) {
		s += ", commit " + rev[:min(12, len(rev))]
		if modified {
			s += " with local changes"
		}
	}
	return fmt.Sprintf("%s (%s %s/%s)", s, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
