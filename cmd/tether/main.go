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
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/internal/agentcmd"
	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
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
	c := &cli{stdout: os.Stdout, stderr: os.Stderr}
	if cmd := fleetCommand(os.Args[1:]); cmd != "" {
		// tether-fleet's command: handed over with everything this
		// process was given (tether-fleet closes what it must itself).
		os.Exit(c.handOver(cmd, os.Args[1:]))
	}
	// Nothing this process inherited passes to its executors (and from
	// them to tasks): see executor.CloseInheritedOnExec.
	if err := proc.CloseInheritedOnExec(); err != nil {
		fmt.Fprintf(os.Stderr, "tether: %v\n", err)
		os.Exit(exitError)
	}
	if len(os.Args) > 1 && os.Args[1] == groupDriverArg {
		c.logLevel, c.lockTimeout = "info", 10*time.Second
		os.Exit(c.cmdDriveGroup(os.Args[2:]))
	}
	os.Exit(c.main(os.Args[1:]))
}

// cli holds the global options and the output streams of one invocation.
type cli struct {
	stdout, stderr io.Writer

	// g are the global flags the agent's commands share with
	// tether-fleet's (internal/agentcmd), as given; setup resolves them
	// into stateDir and the allow lists.
	g           agentcmd.Globals
	stateDir    string
	logLevel    string
	lockTimeout time.Duration
	allowedCaps []string
	chroot      []string
	// noAgent makes the command work daemonless (--no-agent), refusing
	// while an agent holds the store.
	noAgent bool
	// command is the command being run, once its flags are parsed.
	command command
	// The seccomp allow list, the sandbox parts exec tasks may run
	// without, and the directories a job file's template may read
	// (--allow-seccomp, --allow-missing, --allow-read).
	allowSeccomp, allowMissing []string
	allowRead                  []string
	// The drivers tasks may use, the namespaces exec tasks may share with
	// the host, the bound on a group's count (--allow-drivers,
	// --allow-host-namespaces, --max-count).
	allowDrivers, allowHostNS []string
	maxCount                  int

	log   hclog.Logger
	hooks driver.Hooks

	// introspect makes a command stop at its parse, keeping its flag set
	// in flagsOf (commandFlags).
	introspect bool
	flagsOf    *flagSet
}

type command struct {
	name    string
	alias   string
	args    string // usage after the command name; one line per form
	summary string
	run     func(c *cli, args []string) int
	// line, when set, says whether the positional argument next (after
	// the positionals pos) starts a command line, which is then not
	// parsed for flags; afterDash is set past a "--".
	line func(pos []string, next string, afterDash bool) bool
	// startsTasks lists the capability allow list and the chroot
	// environment among the command's global flags.
	startsTasks bool
	more        string // help text after the flags
	// hidden leaves it out of help and completion (a tool of the build).
	hidden bool
}

func commands() []command {
	return []command{
		{name: "run", args: "[flags] FILE.hcl\n[flags] -- CMD [ARGS...]", summary: "start a task, stream its output, wait, exit with its code", run: (*cli).cmdRun, line: taskLine, startsTasks: true, more: runMore},
		{name: "start", args: "[flags] FILE.hcl\n[flags] -- CMD [ARGS...]", summary: "start a task in the background and print its id once it is up", run: (*cli).cmdStart, line: taskLine, startsTasks: true, more: startMore},
		{name: "restart", args: "[flags] NAME...", summary: "stop tasks with their kill signal and grace, then start their specs again as new tasks", run: (*cli).cmdRestart, startsTasks: true, more: namesMore},
		{name: "status", alias: "ps", args: "[flags] [NAME...]", summary: "list tasks (live ones unless --all), or show the named ones", run: (*cli).cmdStatus, more: statusMore},
		{name: "events", args: "[flags] NAME...", summary: "show tasks' event histories", run: (*cli).cmdEvents, more: namesMore},
		{name: "logs", args: "[flags] NAME...", summary: "print tasks' output, both streams merged in time order; -f follows it across restarts", run: (*cli).cmdLogs, more: logsMore + "\n\n" + namesMore},
		{name: "stats", args: "[flags] ID|NAME", summary: "show a running task's memory, CPU and process counts from its cgroup", run: (*cli).cmdStats},
		{name: "signal", args: "[flags] NAME... SIGNAL", summary: "send a signal to running tasks' process groups (--main: to their main processes only)", run: (*cli).cmdSignal, more: namesMore},
		{name: "exec", args: "[flags] ID|NAME [--] CMD [ARGS...]", summary: "run a command inside a running task (its cgroup, namespaces, user; -t for a terminal) and exit with its code", run: (*cli).cmdExec, line: execLine},
		{name: "stop", args: "[flags] NAME...", summary: "stop tasks: signal, grace, then SIGKILL (a group's or a job's as groups)", run: (*cli).cmdStop, more: stopMore + "\n\n" + namesMore},
		{name: "wait", args: "[flags] NAME...", summary: "wait for tasks and exit with their code (the largest)", run: (*cli).cmdWait, more: namesMore},
		{name: "recover", args: "[flags]", summary: "replay the store and reconcile it with the process table", run: (*cli).cmdRecover},
		{name: "graph", args: "[flags]", summary: "print the lifecycle graph (kill-executor edges marked)", run: (*cli).cmdGraph},
		{name: "check", args: "[flags]", summary: "verify the store: checksums, legal paths, index", run: (*cli).cmdCheck},
		{name: "gc", args: "[flags]", summary: "remove terminal tasks and their directories, compact the store", run: (*cli).cmdGC},
		{name: "debug", args: "crashpoints|faultpoints|host", summary: "list the crash or fault injection points, or what the host can contain", run: (*cli).cmdDebug},
		{name: "agent", args: "[flags]", summary: "serve the state directory in the foreground and keep its desired tasks running", run: (*cli).cmdAgent, startsTasks: true,
			more: "With --node NAME --cluster URLS the agent is also the node NAME of a fleet on etcd (served by tether-fleet; 'tether agent --node NAME -h' lists its flags, docs/fleet.md says what it does)."},
		{name: "enable", args: "[flags] FILE.hcl", summary: "register a task file's task with the agent: started, and kept running", run: (*cli).cmdEnable},
		{name: "disable", args: "[flags] NAME", summary: "unregister a desired task; its task is stopped", run: (*cli).cmdDisable},
		{name: "version", args: "", summary: "print tether's version (also --version)", run: (*cli).cmdVersion},
		{name: "cluster", args: "COMMAND [flags]", summary: "the fleet's commands on etcd: status, nodes, events, start, stop (served by tether-fleet)", run: (*cli).cmdCluster},
		{name: "completion", args: "bash|zsh|fish", summary: "print the shell's completion script: commands, flags, and task names from the store or the agent", run: (*cli).cmdCompletion, more: completionMore},
		{name: "man", args: "DIR", summary: "write the manual pages (tether.1, tether-COMMAND.1) into DIR", run: (*cli).cmdMan, hidden: true},
	}
}

// A task is named by its id or its name: see driver.Resolve.
const nameRules = `A task is named by its id or by its name. A name stands for the task of
that name that is live (ambiguous only when several are), else the most
recent one that ended.`

// namesMore is the help of the commands that take several names
// (driver.PickTarget's rules).
const namesMore = nameRules + ` A word that is no task's id or name may be
JOB.GROUP, a group of a job file (its live tasks, else each name's latest),
or a job's name (every group of it). Each is reported on its own line; the
exit code is the worst of theirs.`

// stopMore is tether stop's help text after its flags.
const stopMore = `The stops run at once. A task of a group that is not over stops its
group, as Nomad stops an allocation: the leader first, the sidecars last,
then its poststop tasks run. A Ctrl-C (or SIGTERM) during the grace
escalates: SIGKILL now, for all of them.`

const runMore = `A first argument that is not a task file (.hcl, .nomad, or a file that
parses as one) starts the command line: tether run /bin/echo hi. A
non-executable file that is not a task file is refused; use
'tether run -- FILE' to run it anyway.
With a task of the same name live, run and start refuse; --replace stops
that task (with its kill signal and grace), then starts this one.
Ctrl-C (or SIGINT, SIGTERM) stops the task with its kill signal and grace;
another once that stop has begun (it is recorded) kills it at once. A
signal delivered to tether and to its process group at the same moment
(timeout(1) signals both; a terminal's Ctrl-C, a control group's kill)
is one request, counted once: the task's grace is honoured.
Exit codes: the task's own (128+signal when killed), 127 command not
found, 126 not executable, 125 tether could not start it.`

const startMore = `start waits --min-uptime for the task to stay up (supervisord's
startsecs): a task that ends sooner makes start fail with its exit status
and its last output; one that its restart policy is restarting at that
moment counts as up. The default is 1s, and 0 for a batch job's task.
With a task of the same name live, start refuses; --replace stops that
task (with its kill signal and grace), then starts this one.`

const statusMore = `UPTIME is how long a live task's current process has run; ENDED when an
ended one ended, and REASON how. MEM is its cgroup's memory now. The last
line counts the tasks listed. --json prints every field (README.md lists
them). One task's id or name shows that task alone; several words list
their tasks in the order given.

` + namesMore

func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, `tether runs tasks through executor processes that are never leaked.

Usage: tether COMMAND [flags] [args]

Commands:
`)
	for _, cmd := range commands() {
		if cmd.hidden {
			continue
		}
		name := cmd.name
		if cmd.alias != "" {
			name += ", " + cmd.alias
		}
		fmt.Fprintf(w, "  %-12s %s\n", name, cmd.summary)
	}
	var global []*pflag.Flag
	c.flags("help").VisitAll(func(f *pflag.Flag) {
		f.Hidden = false
		global = append(global, f)
	})
	global = append(global, clikit.HelpFlag, &pflag.Flag{Name: "version", Usage: "print tether's version", Value: new(clikit.BoolFlag)})
	fmt.Fprintf(w, "\nGlobal flags, accepted anywhere:\n%s", clikit.Usages(global))
	fmt.Fprint(w, `
`+nameRules+`

Environment: TETHER_CRASHPOINT and TETHER_FAULT inject crashes and faults
(see tether debug crashpoints).

Run 'tether COMMAND -h' for a command's flags.
`)
}

func (c *cli) main(args []string) int {
	c.logLevel = "warn"
	c.lockTimeout = 10 * time.Second
	at, cmd, ok := findCommand(args, c.flags("help"))
	if !ok {
		// No command: global flags, help or version only.
		for _, a := range args {
			switch a {
			case "-h", "--help":
				c.usage(c.stdout)
				return exitOK
			case "--version":
				fmt.Fprintln(c.stdout, versionText())
				return exitOK
			}
		}
		if at >= 0 {
			msg := fmt.Sprintf("unknown command %q", clikit.Printable(args[at]))
			if s := suggestCommand(args[at]); s != "" {
				msg += "; did you mean " + s + "?"
			} else if classifyFirst(args[at]) == argTaskFile {
				msg += fmt.Sprintf("; to run the task file, tether run %s", clikit.Printable(args[at]))
			}
			c.errorf("%s", msg)
			fmt.Fprintln(c.stderr, "  'tether help' lists the commands")
			return exitUsage
		}
		fs := c.flags("help")
		if err := fs.ParseAnywhere(args); err != nil && !errors.Is(err, pflag.ErrHelp) {
			c.flagError(fs, err)
			return exitUsage
		}
		c.usage(c.stderr)
		return exitUsage
	}
	rest := append(slices.Clone(args[:at]), args[at+1:]...)
	if cmd.name == "help" {
		return c.cmdHelp(rest)
	}
	return cmd.run(c, rest)
}

// findCommand finds the command's name among args (clikit.FindCommand):
// at is the index of the name, or of the word that should have been one
// (-1: none); ok whether it names a command (help included).
func findCommand(args []string, global *flagSet) (at int, cmd command, ok bool) {
	at, ok = clikit.FindCommand(args, global.FlagSet.FlagSet, func(a string) bool {
		_, known := lookup(a)
		return known || a == "help"
	})
	if !ok {
		return at, command{}, false
	}
	if args[at] == "help" {
		return at, command{name: "help"}, true
	}
	cmd, _ = lookup(args[at])
	return at, cmd, true
}

// cmdHelp is 'tether help [COMMAND]'.
func (c *cli) cmdHelp(args []string) int {
	fs := c.flags("help")
	if err := fs.ParseAnywhere(args); err != nil && !errors.Is(err, pflag.ErrHelp) {
		c.flagError(fs, err)
		return exitUsage
	}
	if fs.NArg() == 0 {
		c.usage(c.stdout)
		return exitOK
	}
	cmd, ok := lookup(fs.Arg(0))
	if ok && cmd.name == "cluster" {
		return c.handOver("cluster", append([]string{"cluster", "--help"}, fs.Args()[1:]...))
	}
	if !ok {
		msg := fmt.Sprintf("no command %q", clikit.Printable(fs.Arg(0)))
		if s := suggestCommand(fs.Arg(0)); s != "" {
			msg += "; did you mean " + s + "?"
		}
		c.errorf("%s", msg)
		return exitUsage
	}
	// What `tether CMD -h` prints: the flag set the command parses with.
	c.commandHelp(c.stdout, commandFlags(cmd.name))
	return exitOK
}

func (c *cli) cmdVersion(args []string) int {
	fs := c.flags("version")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		c.errorf("version takes no arguments")
		return exitUsage
	}
	fmt.Fprintln(c.stdout, versionText())
	return exitOK
}

// suggestCommand returns the command closest to a mistyped one, or "".
func suggestCommand(typed string) string {
	var names []string
	for _, cmd := range commands() {
		if cmd.hidden {
			continue
		}
		names = append(names, cmd.name)
		if cmd.alias != "" {
			names = append(names, cmd.alias)
		}
	}
	return clikit.Closest(typed, append(names, "help"))
}

func lookup(name string) (command, bool) {
	for _, cmd := range commands() {
		if cmd.name == name || (cmd.alias != "" && cmd.alias == name) {
			return cmd, true
		}
	}
	return command{}, false
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
	set, err := c.g.Resolve()
	if err != nil {
		return err
	}
	c.stateDir, c.allowedCaps, c.chroot = set.StateDir, set.AllowedCaps, set.Chroot
	if !c.g.StateDirSet {
		c.notePassedOver()
	}
	c.allowSeccomp, c.allowMissing, c.allowRead = set.AllowSeccomp, set.AllowMissing, set.AllowRead
	c.allowDrivers, c.allowHostNS, c.maxCount = set.AllowDrivers, set.AllowHostNamespaces, set.MaxCount
	hooks, err := driver.HooksFromEnv()
	if err != nil {
		return fmt.Errorf("%w; unset the variable or pick a listed point", err)
	}
	c.hooks = hooks
	return nil
}

// notePassedOver says, when root's default state directory is the system
// agent's (/var/lib/tether) and the per-user one root used before holds a
// store, that the tasks there are reached with --state-dir: an upgrade
// must not leave them behind unsaid. TETHER_STATE_DIR (either directory)
// silences it.
func (c *cli) notePassedOver() {
	dir, perUser, err := statedir.Default(statedir.HostEnv())
	if err != nil || dir != c.stateDir || !statedir.PassedOver(perUser) {
		return
	}
	fmt.Fprintf(c.stderr, "tether: note: using %s (the system agent's state directory); %s holds the store root used before,\n"+
		"  whose tasks live on there: tether --state-dir %s status lists them (set TETHER_STATE_DIR to either to silence this)\n",
		dir, perUser, perUser)
}

// errorf prints an error for a person: without the package prefixes of
// the errors in it (the whole chain is logged at debug level).
func (c *cli) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if short := clikit.UserText(msg); short != msg {
		if c.log != nil {
			c.log.Debug("error chain", "err", msg)
		}
		msg = short
	}
	fmt.Fprintf(c.stderr, "tether: %s\n", msg)
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
	case errors.Is(err, driver.ErrAmbiguous):
		return "give one's id ('tether status' lists them)"
	case errors.Is(err, os.ErrPermission):
		return "check the permissions of the state directory, or pick another with --state-dir"
	case errors.Is(err, driver.ErrStateDir):
		return "" // the error says what to do
	}
	return ""
}

// agentError reports an error about the agent (or about what a command
// was given that an agent serving the state directory cannot honour),
// which says what to do itself.
func agentError(err error) bool {
	for _, e := range []error{errAgentServes, agent.ErrAgentRunning, agent.ErrWedged, agent.ErrVersion, agent.ErrPeerRefused, agent.ErrSocket} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
