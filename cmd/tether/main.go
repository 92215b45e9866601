// Command tether runs and supervises tasks through executor processes, with
// every lifecycle step written ahead to an embedded event log: no daemon,
// and no executor left behind.
//
// Usage:
//
//	tether run examples/hello.hcl
//	tether run --name web -- python3 -m http.server
//	tether start examples/service.hcl
//	tether status
//	tether logs web -f
//	tether stop web
//
// `tether help` lists every command. The same binary serves as the
// executor: the driver re-executes it as `tether executor ...`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/store"
)

// Exit codes of tether itself; a task's own exit code passes through run
// and wait.
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitStartFail = 125 // tether could not start the task
	exitCannotRun = 126 // the command exists but cannot be executed
	exitNotFound  = 127 // the command does not exist
)

// executorArg is the argument that puts the binary in executor mode.
const executorArg = "executor"

func main() {
	if len(os.Args) > 1 && os.Args[1] == executorArg {
		os.Exit(serveExecutor(os.Args[2:]))
	}
	// Nothing this process inherited passes to its executors (and from
	// them to tasks): see executor.CloseInheritedOnExec.
	if err := proc.CloseInheritedOnExec(); err != nil {
		fmt.Fprintf(os.Stderr, "tether: %v\n", err)
		os.Exit(exitError)
	}
	c := &cli{stdout: os.Stdout, stderr: os.Stderr}
	os.Exit(c.main(os.Args[1:]))
}

// cli holds the global options and the output streams of one invocation.
type cli struct {
	stdout, stderr io.Writer

	stateDir    string
	stateDirSet bool // --state-dir was given (an empty one is an error, not the default)
	logLevel    string
	lockTimeout time.Duration
	allowCaps   string
	allowedCaps []string
	chrootEnv   string
	chroot      []string

	log   hclog.Logger
	hooks driver.Hooks
}

type command struct {
	name    string
	alias   string
	args    string // usage after the command name
	summary string
	run     func(c *cli, args []string) int
}

func commands() []command {
	return []command{
		{name: "run", args: "[flags] FILE.hcl | [flags] -- CMD [ARGS...]", summary: "start a task, stream its output, wait, exit with its code", run: (*cli).cmdRun},
		{name: "start", args: "[flags] FILE.hcl | [flags] -- CMD [ARGS...]", summary: "start a task in the background and print its id", run: (*cli).cmdStart},
		{name: "status", alias: "ps", args: "[--all] [--json] [ID]", summary: "list tasks (live ones unless --all)", run: (*cli).cmdStatus},
		{name: "events", args: "[--json] ID", summary: "show a task's event history", run: (*cli).cmdEvents},
		{name: "logs", args: "[--stderr] [-f] ID", summary: "print a task's output", run: (*cli).cmdLogs},
		{name: "stats", args: "[--json] ID", summary: "show a running task's memory, CPU and process counts from its cgroup", run: (*cli).cmdStats},
		{name: "signal", args: "[--main] ID SIGNAL", summary: "send a signal to a running task's process group (--main: to its main process only)", run: (*cli).cmdSignal},
		{name: "exec", args: "[-t] ID [--] CMD [ARGS...]", summary: "run a command inside a running task (its cgroup, namespaces, user; -t for a terminal) and exit with its code", run: (*cli).cmdExec},
		{name: "stop", args: "[--signal SIG] [--timeout DUR] ID", summary: "stop a task: signal, grace, then SIGKILL", run: (*cli).cmdStop},
		{name: "wait", args: "ID", summary: "wait for a task and exit with its code", run: (*cli).cmdWait},
		{name: "recover", args: "", summary: "replay the store and reconcile it with the process table", run: (*cli).cmdRecover},
		{name: "graph", args: "[--format mermaid|dot]", summary: "print the lifecycle graph (kill-executor edges marked)", run: (*cli).cmdGraph},
		{name: "check", args: "", summary: "verify the store: checksums, legal paths, index", run: (*cli).cmdCheck},
		{name: "gc", args: "[--older-than DUR]", summary: "remove terminal tasks and their directories, compact the store", run: (*cli).cmdGC},
		{name: "debug", args: "crashpoints|faultpoints|host", summary: "list the crash or fault injection points, or what the host can contain", run: (*cli).cmdDebug},
	}
}

func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, `tether runs tasks through executor processes that are never leaked.

Usage: tether [global flags] COMMAND [flags] [args]

Commands:
`)
	for _, cmd := range commands() {
		name := cmd.name
		if cmd.alias != "" {
			name += ", " + cmd.alias
		}
		fmt.Fprintf(w, "  %-12s %s\n", name, cmd.summary)
	}
	fmt.Fprint(w, `
Global flags (also accepted after the command):
  --state-dir DIR       state directory (env TETHER_STATE_DIR; default
                        $XDG_STATE_HOME/tether or ~/.local/state/tether);
                        an existing one must be private and yours
  --allow-caps LIST     capability allow list for exec tasks, comma-separated
                        (env TETHER_ALLOW_CAPS; default Nomad's exec list)
  --chroot-env LIST     what an exec task's root is made of: SRC or SRC:DST
                        entries, comma-separated, each bound read-only (env
                        TETHER_CHROOT_ENV; default Nomad's chroot_env list)
  --log-level LEVEL     trace, debug, info, warn, error or off (default warn)
  --lock-timeout DUR    how long to wait while another tether holds the
                        store without letting go (default 10s; commands
                        queued behind each other wait their turn)

Environment: TETHER_CRASHPOINT and TETHER_FAULT inject crashes and faults
(see tether debug crashpoints).

Run 'tether COMMAND -h' for a command's flags.
`)
}

// globalFlags registers the global flags on fs, so that they are accepted
// before and after the command name.
func (c *cli) globalFlags(fs *flag.FlagSet) {
	fs.Func("state-dir", "state `directory` (env TETHER_STATE_DIR)", func(v string) error {
		c.stateDir, c.stateDirSet = v, true
		return nil
	})
	fs.StringVar(&c.allowCaps, "allow-caps", c.allowCaps, "comma-separated capability allow `list` for exec tasks (env TETHER_ALLOW_CAPS; default Nomad's exec list, without net_raw)")
	fs.StringVar(&c.chrootEnv, "chroot-env", c.chrootEnv, "comma-separated `entries` (SRC or SRC:DST) an exec task's root is bound from, read-only (env TETHER_CHROOT_ENV; default Nomad's chroot_env)")
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log `level`: trace, debug, info, warn, error, off")
	fs.DurationVar(&c.lockTimeout, "lock-timeout", c.lockTimeout, "how long to wait while another tether holds the store without letting go")
}

func (c *cli) main(args []string) int {
	c.logLevel = "warn"
	c.lockTimeout = 10 * time.Second
	fs := flag.NewFlagSet("tether", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.globalFlags(fs)
	help := fs.Bool("help", false, "")
	fs.BoolVar(help, "h", false, "")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(c.stderr, "tether: %v\n\n", err)
		c.usage(c.stderr)
		return exitUsage
	}
	args = fs.Args()
	if *help || len(args) == 0 || args[0] == "help" {
		if len(args) > 1 {
			if cmd, ok := lookup(args[1]); ok {
				return cmd.run(c, []string{"-h"})
			}
		}
		c.usage(c.stdout)
		if len(args) == 0 && !*help {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "version" || args[0] == "--version" {
		fmt.Fprintln(c.stdout, "tether (development build)")
		return exitOK
	}
	cmd, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(c.stderr, "tether: unknown command %q\n\n", args[0])
		c.usage(c.stderr)
		return exitUsage
	}
	return cmd.run(c, args[1:])
}

func lookup(name string) (command, bool) {
	for _, cmd := range commands() {
		if cmd.name == name || (cmd.alias != "" && cmd.alias == name) {
			return cmd, true
		}
	}
	return command{}, false
}

// flags returns a flag set for a command, with the global flags on it.
func (c *cli) flags(name string) *flag.FlagSet {
	cmd, _ := lookup(name)
	fs := flag.NewFlagSet("tether "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: tether %s %s\n\n%s.\n\nFlags:\n", name, cmd.args, upperFirst(cmd.summary))
		fs.PrintDefaults()
	}
	c.globalFlags(fs)
	return fs
}

// parse parses a command's flags; it returns an exit code when the
// command should end at once (help or a bad flag).
func (c *cli) parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	if err := c.setup(); err != nil {
		c.errorf("%v", err)
		return exitUsage, false
	}
	return 0, true
}

// setup resolves the global options once the flags are parsed.
func (c *cli) setup() error {
	level := hclog.LevelFromString(c.logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("--log-level %q: use trace, debug, info, warn, error or off", c.logLevel)
	}
	c.log = hclog.New(&hclog.LoggerOptions{Name: "tether", Level: level, Output: c.stderr})
	if c.lockTimeout <= 0 {
		return fmt.Errorf("--lock-timeout %s: must be positive", c.lockTimeout)
	}
	if c.stateDirSet && strings.TrimSpace(c.stateDir) == "" {
		return errors.New("--state-dir is empty: give a directory, or leave the flag out for the default")
	}
	caps := c.allowCaps
	if caps == "" {
		caps = os.Getenv("TETHER_ALLOW_CAPS")
	}
	c.allowedCaps = nil
	if caps != "" {
		for _, n := range strings.Split(caps, ",") {
			if n = strings.TrimSpace(n); n != "" {
				c.allowedCaps = append(c.allowedCaps, n)
			}
		}
		if err := executor.ValidateCaps(nil, nil, c.allowedCaps); err != nil {
			return fmt.Errorf("--allow-caps: %w", err)
		}
	}
	chroot := c.chrootEnv
	if chroot == "" {
		chroot = os.Getenv("TETHER_CHROOT_ENV")
	}
	c.chroot = nil
	if chroot != "" {
		for _, e := range strings.Split(chroot, ",") {
			if e = strings.TrimSpace(e); e != "" {
				c.chroot = append(c.chroot, e)
			}
		}
		if err := executor.ValidateChroot(c.chroot); err != nil {
			return fmt.Errorf("--chroot-env: %w; give existing host paths as SRC or SRC:DST", err)
		}
	}
	dir, err := stateDir(c.stateDir)
	if err != nil {
		return err
	}
	c.stateDir = dir
	hooks, err := driver.HooksFromEnv()
	if err != nil {
		return fmt.Errorf("%w; unset the variable or pick a listed point", err)
	}
	c.hooks = hooks
	return nil
}

// stateDir picks the state directory: the flag, then TETHER_STATE_DIR,
// then $XDG_STATE_HOME/tether, then ~/.local/state/tether.
func stateDir(flagValue string) (string, error) {
	dir := flagValue
	if dir == "" {
		dir = os.Getenv("TETHER_STATE_DIR")
	}
	if dir == "" {
		if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
			dir = filepath.Join(x, "tether")
		}
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no state directory: %w; pass --state-dir or set TETHER_STATE_DIR", err)
		}
		dir = filepath.Join(home, ".local", "state", "tether")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("state directory %s: %w", dir, err)
	}
	return abs, nil
}

func (c *cli) errorf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "tether: "+format+"\n", args...)
}

// fail prints err with what to do about it, and returns exitError.
func (c *cli) fail(err error) int {
	c.errorf("%v", err)
	if hint := hint(err); hint != "" {
		fmt.Fprintf(c.stderr, "  %s\n", hint)
	}
	return exitError
}

// hint says what to do about an error, when there is something to say.
func hint(err error) string {
	switch {
	case errors.Is(err, store.ErrLocked):
		return "another tether command has held the store that long without letting go: see what it is doing and retry when it is done, or raise --lock-timeout"
	case errors.Is(err, store.ErrNotStore):
		return "" // the store's message says what to do
	case errors.Is(err, store.ErrCorrupt):
		return "the store is damaged: 'tether check' says where, and 'tether check --salvage' copies what is readable into a new store and takes the running tasks along"
	case errors.Is(err, store.ErrSchema), errors.Is(err, store.ErrVersion):
		return "the store was written by another tether version; use a matching tether"
	case errors.Is(err, driver.ErrUnknownTask):
		return "'tether status --all' lists the tasks"
	case errors.Is(err, os.ErrPermission):
		return "check the permissions of the state directory, or pick another with --state-dir"
	case errors.Is(err, driver.ErrStateDir):
		return "" // the error says what to do
	}
	return ""
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
