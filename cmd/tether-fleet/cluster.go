package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

// envEndpoints is the default of --endpoints.
const envEndpoints = "TETHER_CLUSTER_ENDPOINTS"

// defaultTimeout bounds a command's calls to etcd (--command-timeout).
const defaultTimeout = 10 * time.Second

// clusterCommands are `tether cluster`'s.
func clusterCommands() []command {
	return []command{
		{name: "status", args: "[flags] [JOB]", summary: "list every node's tasks from the mirror, with their nodes' liveness (live tasks unless --all); with a job, its copies: where each is placed and what its node says", run: (*fleet).cmdStatus, more: statusMore},
		{name: "nodes", args: "[flags]", summary: "list the nodes: liveness, tasks, and how far each node's mirror lags its log", run: (*fleet).cmdNodes},
		{name: "events", args: "[flags] ID|NAME", summary: "show a task's events as its node recorded them (-f: follow them as they come)", run: (*fleet).cmdEvents, more: eventsMore},
		{name: "run", args: "[flags] FILE", summary: "run a job file on the fleet: its groups' copies placed on the nodes by the fleet's scheduler, and moved when a node is lost", run: (*fleet).cmdRun, more: runMore},
		{name: "start", args: "--node NODE [flags] FILE", summary: "tell a node to run a task file's task: the node's agent starts it and keeps it running", run: (*fleet).cmdStart, more: startMore},
		{name: "stop", args: "[--node NODE] [flags] NAME|ID", summary: "stop a job run with 'cluster run' (its copies removed from every node); with --node, a task the node was told to run with 'cluster start'", run: (*fleet).cmdStop, more: stopMore},
	}
}

const nameRules = `A task is named by its id or by its name, resolved on each node by the rules
of 'tether help': its one live task there, else its most recent one. A name
on several nodes is ambiguous: --node picks one.`

const statusMore = `A live task of a node that is down is shown 'unknown (node down since …)':
nobody else reconciles it (a pid means nothing on another machine, and a
node cut off from etcd still runs its tasks). --json prints one object per
task and one per node with none listed (docs/fleet.md lists the fields).

With a JOB (run with 'tether cluster run'), one row per task of each copy:
the node it is placed on and its state as its node last said (placed:
no word yet; unplaced, with why no node can hold it; unknown while its
node is down, unless it ended before). --json prints those rows as
objects (job, copy, node, task, state, reason...: docs/fleet.md).`

const runMore = `The file is a Nomad job file: each group's count copies are placed by the
fleet's scheduler (one of the agents, elected through etcd) on nodes that
meet its constraints, allow its drivers (--allow-remote-drivers on the
agent) and have its resources left, by bin packing, spread and affinity.
It is checked here as the scheduler will read it, and refused before
anything is written. -var, --var-file and NOMAD_VAR_* are stored with the
file; --meta is a parameterized job's dispatch meta (on 'tether agent',
--meta is the node's meta). Run again with a changed file, the copies are
replaced max_parallel at a time (its update block); with the same file,
nothing changes.

Without --detach, run waits until every copy runs (ready, where its task
has readiness), as its node says, and prints the copies; it fails at once,
naming each copy's reason, when a copy cannot be placed. --detach returns
once the job is written.`

const stopMore = `Without --node, NAME is a job run with 'tether cluster run': it is
stopped, its copies removed from their nodes (each node stops them).
With --node, NAME|ID is a task the node was told to run with 'tether
cluster start': only those can be stopped through the cluster.`

const eventsMore = `-f prints the events so far, then each new one as the node's agent mirrors
it, until the task ends (or Ctrl-C). --json prints a JSON array, or with -f
one JSON object per line.

` + nameRules

const startMore = `The task file is checked here as the node will read it (the task file
parser with no -var inputs, the spec's rules, no relative path) before
anything is written; the node's allow lists (capabilities, chroot) are
the node's to apply. The task's name is the desired entry's: a second start
of it is refused unless --replace. The file's text is what is stored.`

// clusterFlags returns the flag set of `tether cluster name` with the
// global flags on it.
func (f *fleet) clusterFlags(name string) *clikit.FlagSet {
	fs := clikit.NewFlagSet("tether cluster "+name, nil)
	fs.StringVar(&f.logLevel, "log-level", f.logLevel, "log `level`: trace, debug, info, warn, error or off; debug also logs the whole chain of an error")
	fs.StringVar(&f.endpoints, "endpoints", f.endpoints, "etcd's client `URLs`, comma-separated (env "+envEndpoints+"); plaintext only on this machine's loopback, else https:// with the TLS flags")
	fs.StringVar(&f.tlsCA, "cluster-tls-ca", f.tlsCA, "`file` of the CA that signed etcd's certificates")
	fs.StringVar(&f.tlsCert, "cluster-tls-cert", f.tlsCert, "`file` of this client's certificate")
	fs.StringVar(&f.tlsKey, "cluster-tls-key", f.tlsKey, "`file` of this client's private key (mode 0600)")
	if f.timeout == 0 {
		f.timeout = defaultTimeout
	}
	fs.DurationVar(&f.timeout, "command-timeout", f.timeout, "how long to wait for etcd to answer a command (not a stream of -f)")
	fs.MarkGlobal("log-level", "endpoints", "cluster-tls-ca", "cluster-tls-cert", "cluster-tls-key", "command-timeout")
	return fs
}

// cmdCluster is `tether cluster COMMAND`.
func (f *fleet) cmdCluster(args []string) int {
	cmds := clusterCommands()
	at, ok := clikit.FindCommand(args, f.clusterFlags("").FlagSet, func(a string) bool {
		_, known := lookupIn(cmds, a)
		return known || a == "help"
	})
	if !ok {
		for _, a := range args {
			switch a {
			case "-h", "--help":
				f.usage(f.stdout)
				return exitOK
			case "--version":
				fmt.Fprintln(f.stdout, versionText())
				return exitOK
			}
		}
		if at >= 0 {
			msg := fmt.Sprintf("cluster has no command %q", clikit.Printable(args[at]))
			if s := clikit.Closest(args[at], append(names(cmds), "help")); s != "" {
				msg += "; did you mean " + s + "?"
			}
			f.errorf("%s", msg)
			fmt.Fprintln(f.stderr, "  'tether cluster -h' lists its commands")
			return exitUsage
		}
		f.usage(f.stderr)
		return exitUsage
	}
	rest := append(slices.Clone(args[:at]), args[at+1:]...)
	if args[at] == "help" {
		if len(rest) == 0 {
			f.usage(f.stdout)
			return exitOK
		}
		return f.cmdCluster(append(rest, "--help"))
	}
	cmd, _ := lookupIn(cmds, args[at])
	return cmd.run(f, rest)
}

// parse parses a cluster command's arguments: flags anywhere. It returns
// an exit code when the command should end at once (help, a bad flag).
func (f *fleet) parse(fs *clikit.FlagSet, name string, args []string) (int, bool) {
	if err := fs.ParseAnywhere(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			cmd, _ := lookupIn(clusterCommands(), name)
			f.commandHelp(fs, "tether cluster", cmd)
			return exitOK, false
		}
		f.flagError(fs, "cluster "+name, err)
		return exitUsage, false
	}
	if err := f.setup(); err != nil {
		f.errorf("%v", err)
		return exitUsage, false
	}
	return 0, true
}

// dial connects to the fleet's etcd (it does not wait for an answer).
func (f *fleet) dial() (*cluster.Fleet, func(), int, bool) {
	eps := f.endpoints
	if eps == "" {
		eps = os.Getenv(envEndpoints)
	}
	var list []string
	for _, e := range strings.Split(eps, ",") {
		if e = strings.TrimSpace(e); e != "" {
			list = append(list, e)
		}
	}
	if len(list) == 0 {
		f.errorf("no etcd endpoints: give --endpoints URLS (or set %s), such as --endpoints http://127.0.0.1:2379", envEndpoints)
		return nil, nil, exitUsage, false
	}
	cfg := cluster.Config{Endpoints: list, TLS: cluster.TLS{CA: f.tlsCA, Cert: f.tlsCert, Key: f.tlsKey}}
	cli, err := cluster.Dial(cfg)
	if err != nil {
		return nil, nil, f.fail(err), false
	}
	// A refused connection fails the command at once: the client would
	// retry it until --command-timeout.
	pctx, cancel := f.command()
	err = cluster.Probe(pctx, cfg)
	cancel()
	if err != nil {
		cli.Close()
		return nil, nil, f.fail(err), false
	}
	fl, err := cluster.NewFleet(cli, "")
	if err != nil {
		cli.Close()
		return nil, nil, f.fail(err), false
	}
	return fl, func() { _ = cli.Close() }, 0, true
}

// command bounds a command's calls to etcd by --command-timeout.
func (f *fleet) command() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), f.timeout)
}

// fail prints err with what to do about it, and returns exitError.
func (f *fleet) fail(err error) int {
	f.errorf("%v", err)
	if h := f.hint(err); h != "" {
		fmt.Fprintf(f.stderr, "  %s\n", h)
	}
	return exitError
}

func (f *fleet) hint(err error) string {
	switch {
	case errors.Is(err, cluster.ErrRefused):
		return "start etcd there, or check --endpoints (and $" + envEndpoints + ")"
	case errors.Is(err, cluster.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("etcd did not answer within --command-timeout %s: check that it runs, and --endpoints", clikit.DurationText(f.timeout))
	case errors.Is(err, cluster.ErrUnknownJob):
		return "'tether cluster run FILE' runs a job; a task told to one node with 'cluster start' is stopped with --node NODE"
	case errors.Is(err, cluster.ErrJobChanged):
		return "another run or stop of the job came in between: nothing was written"
	case errors.Is(err, cluster.ErrUnknownTask):
		return "'tether cluster status --all' lists the mirrored tasks"
	case errors.Is(err, cluster.ErrAmbiguous):
		return "pick one with --node NODE, or give its id"
	}
	return ""
}

func (f *fleet) printJSON(v any) int {
	enc := json.NewEncoder(f.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return f.fail(err)
	}
	return exitOK
}

func (f *fleet) cmdStatus(args []string) int {
	fs := f.clusterFlags("status")
	all := fs.BoolP("all", "a", false, "include ended tasks")
	asJSON := fs.Bool("json", false, "print a JSON array")
	if code, ok := f.parse(fs, "status", args); !ok {
		return code
	}
	if fs.NArg() > 1 {
		f.errorf("status takes at most one job name: without one it lists every node ('tether cluster events ID|NAME' shows one task)")
		return exitUsage
	}
	if fs.NArg() == 1 {
		if *all {
			f.errorf("--all lists every node's ended tasks too; a job's status shows all its copies")
			return exitUsage
		}
		return f.jobStatus(fs.Arg(0), *asJSON)
	}
	fl, done, code, ok := f.dial()
	if !ok {
		return code
	}
	defer done()
	ctx, cancel := f.command()
	defer cancel()
	rows, err := fl.Status(ctx)
	if err != nil {
		return f.fail(err)
	}
	if !*all {
		rows = cluster.LiveRows(rows)
	}
	if *asJSON {
		if rows == nil {
			rows = []cluster.StatusRow{}
		}
		return f.printJSON(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(f.stderr, "no node has registered: run `tether agent --node NAME --cluster URLS` on each node")
		return exitOK
	}
	if err := printStatus(f.stdout, rows, time.Now()); err != nil {
		return f.fail(err)
	}
	return exitOK
}

// printStatus prints status rows as a table, and a line counting them.
func printStatus(w io.Writer, rows []cluster.StatusRow, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tLIVENESS\tID\tNAME\tSTATE\tRESTARTS\tUPDATED")
	var live, unknown, ended int
	nodes, down := map[string]bool{}, map[string]bool{}
	for _, r := range rows {
		nodes[r.Node] = true
		if r.Liveness == cluster.Down {
			down[r.Node] = true
		}
		if r.Task == nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\n", r.Node, r.Liveness)
			continue
		}
		t := r.Task
		switch {
		case !r.Known():
			unknown++
		case t.Live():
			live++
		default:
			ended++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Node, r.Liveness, t.ID, clikit.Printable(t.Name), r.StateText(),
			t.Restarts, clikit.Ago(now, t.Updated.UnixNano()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := fmt.Sprintf("%d live", live)
	if unknown > 0 {
		s += fmt.Sprintf(", %d unknown", unknown)
	}
	if ended > 0 {
		s += fmt.Sprintf(", %d ended", ended)
	}
	s += fmt.Sprintf("; %d nodes", len(nodes))
	if len(down) > 0 {
		s += fmt.Sprintf(", %d down", len(down))
	}
	_, err := fmt.Fprintln(w, s)
	return err
}

func (f *fleet) cmdNodes(args []string) int {
	fs := f.clusterFlags("nodes")
	asJSON := fs.Bool("json", false, "print a JSON array")
	if code, ok := f.parse(fs, "nodes", args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		f.errorf("nodes takes no arguments")
		return exitUsage
	}
	fl, done, code, ok := f.dial()
	if !ok {
		return code
	}
	defer done()
	ctx, cancel := f.command()
	defer cancel()
	rows, err := fl.Nodes(ctx)
	if err != nil {
		return f.fail(err)
	}
	if *asJSON {
		if rows == nil {
			rows = []cluster.NodeRow{}
		}
		return f.printJSON(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(f.stderr, "no node has registered: run `tether agent --node NAME --cluster URLS` on each node")
		return exitOK
	}
	now := time.Now()
	tw := tabwriter.NewWriter(f.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tLIVENESS\tSINCE\tSEEN\tHOST\tPID\tTASKS\tMIRROR LAG")
	for _, r := range rows {
		pid := "-"
		if r.PID != 0 {
			pid = fmt.Sprint(r.PID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d events, %.1fs\n", r.Node, r.Liveness, agoTime(now, r.Since), agoTime(now, r.Seen),
			clikit.Printable(or(r.Host, "-")), pid, r.Tasks, r.LagEvents, r.LagSeconds)
	}
	if err := tw.Flush(); err != nil {
		return f.fail(err)
	}
	return exitOK
}

func agoTime(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return clikit.Ago(now, t.UnixNano())
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (f *fleet) cmdEvents(args []string) int {
	fs := f.clusterFlags("events")
	node := fs.String("node", "", "the `node` of the task, when its name is on several")
	follow := fs.BoolP("follow", "f", false, "follow the events until the task ends")
	asJSON := fs.Bool("json", false, "print a JSON array (with -f: one object a line)")
	if code, ok := f.parse(fs, "events", args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		f.errorf("events takes one task id or name")
		return exitUsage
	}
	// Ctrl-C or SIGTERM ends a follow (exit 0), from the start: the
	// events printed so far are the whole answer.
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if !*follow {
		stop()
	}
	fl, done, code, ok := f.dial()
	if !ok {
		return code
	}
	defer done()
	ctx, cancel := f.command()
	defer cancel()
	t, err := fl.Resolve(ctx, fs.Arg(0), *node)
	if err != nil {
		return f.fail(err)
	}
	evs, _, err := fl.Events(ctx, t.Node, t.ID)
	if err != nil {
		return f.fail(err)
	}
	out := newEventPrinter(f.stdout, t.ID, *asJSON, *follow)
	if err := out.head(); err != nil {
		return f.fail(err)
	}
	for _, e := range evs {
		if err := out.event(e); err != nil {
			return f.fail(err)
		}
	}
	last := evs[len(evs)-1]
	if !*follow || foldState(evs).Terminal() {
		return out.end(f)
	}
	if rows, err := fl.Nodes(ctx); err == nil {
		for _, r := range rows {
			if r.Node == t.Node && r.Liveness == cluster.Down {
				f.errorf("node %s is down (last seen %s): its events come when its agent is back", t.Node, agoTime(time.Now(), r.Since))
			}
		}
	}
	// Follow until the task ends, Ctrl-C or SIGTERM, from the last event
	// printed (Follow folds from the first and yields those after it:
	// nothing is missed, nothing printed twice).
	for e, err := range fl.Follow(sctx, t.Node, t.ID, last.Seq) {
		if err != nil {
			if sctx.Err() != nil {
				return exitOK
			}
			return f.fail(err)
		}
		if err := out.event(e); err != nil {
			return f.fail(err)
		}
	}
	return exitOK
}

// foldState is the state a task's events lead to.
func foldState(evs []fsm.Event) fsm.State {
	st := fsm.StateNone
	for _, e := range evs {
		next, err := fsm.Next(st, e)
		if err != nil {
			break
		}
		st = next
	}
	return st
}

// eventPrinter prints events as `tether events` does: the table's lines,
// a JSON array, or (following) one JSON object a line.
type eventPrinter struct {
	w      io.Writer
	table  *clikit.EventTable
	task   string // the id of the task whose events they are
	array  []clikit.TaskEventJSON
	asJSON bool
	lines  bool
}

func newEventPrinter(w io.Writer, task string, asJSON, follow bool) *eventPrinter {
	return &eventPrinter{w: w, task: task, table: clikit.NewEventTable(w), asJSON: asJSON, lines: asJSON && follow, array: []clikit.TaskEventJSON{}}
}

func (p *eventPrinter) head() error {
	if p.asJSON {
		return nil
	}
	return p.table.Header()
}

func (p *eventPrinter) event(e fsm.Event) error {
	switch {
	case p.lines:
		b, err := json.Marshal(clikit.TaskEventJSON{Task: p.task, EventJSON: clikit.NewEventJSON(e)})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	case p.asJSON:
		p.array = append(p.array, clikit.TaskEventJSON{Task: p.task, EventJSON: clikit.NewEventJSON(e)})
		return nil
	}
	return p.table.Line(e)
}

// end prints what is held back (the JSON array).
func (p *eventPrinter) end(f *fleet) int {
	if p.asJSON && !p.lines {
		return f.printJSON(p.array)
	}
	return exitOK
}

func (f *fleet) cmdStart(args []string) int {
	fs := f.clusterFlags("start")
	node := fs.String("node", "", "the `node` to run it on")
	task := fs.String("task", "", "the `task` to start from a task file holding several (GROUP.TASK where names repeat)")
	replace := fs.Bool("replace", false, "replace the file the node was told to run under this name: its agent stops that task, then starts this one")
	if code, ok := f.parse(fs, "start", args); !ok {
		return code
	}
	if fs.NArg() != 1 || *node == "" {
		f.errorf("start takes --node NODE and one task file: tether cluster start --node n1 web.hcl")
		return exitUsage
	}
	if err := cluster.ValidateNodeName(*node); err != nil {
		f.errorf("--node: %v", err)
		return exitUsage
	}
	file := fs.Arg(0)
	src, err := readSpec(file)
	if err != nil {
		return f.fail(err)
	}
	p, err := cluster.ParseDesired(file, *task, src)
	for _, n := range p.Notes {
		fmt.Fprintln(f.stderr, clikit.Printable(n))
	}
	if err != nil {
		f.errorf("%v", err)
		fmt.Fprintln(f.stderr, "  nothing was written: fix the file and start it again")
		return exitError
	}
	fl, done, code, ok := f.dial()
	if !ok {
		return code
	}
	defer done()
	ctx, cancel := f.command()
	defer cancel()
	rev, err := fl.Start(ctx, *node, p.Name, src, *replace)
	if err != nil {
		return f.fail(err)
	}
	fmt.Fprintln(f.stdout, p.Name)
	where := "its agent starts it"
	if rows, err := fl.Nodes(ctx); err == nil {
		for _, r := range rows {
			if r.Node == *node && r.Liveness == cluster.Down {
				where = "node " + *node + " is down: its agent starts it when it is back"
			}
		}
	}
	f.errorf("%s: desired on node %s (etcd revision %d); %s", p.Name, *node, rev, where)
	return exitOK
}

// readSpec reads a task file for start, refusing one larger than a
// desired spec may be before reading it all.
func readSpec(file string) ([]byte, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, cluster.MaxSpecBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > cluster.MaxSpecBytes {
		return nil, fmt.Errorf("%w %s: larger than %d bytes, the most a desired task file may be", cluster.ErrInvalidSpec, file, cluster.MaxSpecBytes)
	}
	return b, nil
}

func (f *fleet) cmdStop(args []string) int {
	fs := f.clusterFlags("stop")
	node := fs.String("node", "", "the `node` of a task told to it with 'cluster start' (without it, NAME is a job run with 'cluster run')")
	if code, ok := f.parse(fs, "stop", args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		f.errorf("stop takes one job name (tether cluster stop web), or --node NODE and a task name or id (tether cluster stop --node n1 web)")
		return exitUsage
	}
	if *node == "" {
		return f.stopJob(fs.Arg(0))
	}
	if err := cluster.ValidateNodeName(*node); err != nil {
		f.errorf("--node: %v", err)
		return exitUsage
	}
	fl, done, code, ok := f.dial()
	if !ok {
		return code
	}
	defer done()
	ctx, cancel := f.command()
	defer cancel()
	if err := fl.Stop(ctx, *node, fs.Arg(0)); err != nil {
		return f.fail(err)
	}
	f.errorf("%s: no longer desired on node %s; its agent stops it", clikit.Printable(fs.Arg(0)), *node)
	return exitOK
}

func (f *fleet) cmdRun(args []string) int {
	fs := f.clusterFlags("run")
	vars := fs.StringArray("var", nil, "`NAME=VALUE` for a job file's variable (repeatable; as nomad job run -var)")
	varFiles := fs.StringArray("var-file", nil, "`file` of variable values, HCL (repeatable, a later one wins; as nomad job run -var-file)")
	meta := fs.StringArray("meta", nil, "`KEY=VALUE` dispatch meta of a parameterized job (repeatable; as nomad job dispatch -meta; on 'tether agent', --meta is the node's meta)")
	detach := fs.Bool("detach", false, "return once the job is written, without waiting for its copies to run")
	wait := fs.Duration("timeout", 5*time.Minute, "how long to wait for every copy to run (without --detach)")
	if code, ok := f.parse(fs, "run", args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		f.errorf("run takes one job file: tether cluster run web.nomad")
		return exitUsage
	}
	if *wait <= 0 {
		f.errorf("--timeout %s: must be positive", clikit.DurationText(*wait))
		return exitUsage
	}
	file := fs.Arg(0)
	spec, code, ok := f.jobSpec(file, *vars, *varFiles, *meta)
	if !ok {
		return code
	}
	job, err := cluster.ParseJob(spec)
	if job != nil {
		for _, n := range job.Notes {
			fmt.Fprintln(f.stderr, clikit.Printable(n))
		}
	}
	if err != nil {
		f.errorf("%v", err)
		fmt.Fprintln(f.stderr, "  nothing was written: fix the file and run it again")
		return exitError
	}
	for _, s := range job.Skipped {
		fmt.Fprintf(f.stderr, "tether: %s: not run: %s\n", job.Name, clikit.Printable(s))
	}
	fl, done, code, ok := f.dial()
	if !ok {
		return code
	}
	defer done()
	ctx, cancel := f.command()
	res, err := fl.Run(ctx, spec, time.Now())
	cancel()
	if err != nil {
		return f.fail(err)
	}
	fmt.Fprintln(f.stdout, res.Job.Name)
	what := fmt.Sprintf("version %d written (%d copies in %d groups); the fleet's scheduler places them", res.Version, res.Job.Copies(), len(res.Job.Groups))
	if !res.Changed {
		what = fmt.Sprintf("unchanged: version %d already runs this file", res.Version)
	}
	f.errorf("%s: %s", res.Job.Name, what)
	if *detach {
		return exitOK
	}
	wctx, wcancel := context.WithTimeout(context.Background(), *wait)
	defer wcancel()
	sctx, stop := signal.NotifyContext(wctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	said := ""
	st, err := fl.WaitJob(sctx, res.Job.Name, func(st *cluster.JobStatus) {
		if line := progress(st); line != said {
			said = line
			f.errorf("%s: %s", res.Job.Name, line)
		}
	})
	var np *cluster.NotPlacedError
	switch {
	case errors.As(err, &np):
		f.errorf("job %s: %d of its copies cannot be placed:", np.Job, len(np.Copies))
		for _, u := range np.Copies {
			fmt.Fprintf(f.stderr, "  %s: %s\n", u.Copy, clikit.Printable(u.Reason))
		}
		fmt.Fprintf(f.stderr, "  the job is written and its other copies run; 'tether cluster stop %s' removes it\n", np.Job)
		return exitError
	case err != nil && wctx.Err() != nil:
		f.errorf("job %s: not every copy runs after --timeout %s (%s)", res.Job.Name, clikit.DurationText(*wait), said)
		fmt.Fprintf(f.stderr, "  'tether cluster status %s' shows each copy; the job stays written\n", res.Job.Name)
		return exitError
	case err != nil && sctx.Err() != nil:
		f.errorf("job %s: stopped waiting; the job stays written ('tether cluster status %s')", res.Job.Name, res.Job.Name)
		return exitOK
	case err != nil:
		return f.fail(err)
	}
	if err := printJobStatus(f.stdout, st); err != nil {
		return f.fail(err)
	}
	return exitOK
}

// progress says how far a job's copies are.
func progress(st *cluster.JobStatus) string {
	copies := map[string]string{}
	for _, r := range st.Rows {
		if cur, ok := copies[r.Copy]; !ok || cur == "running" || cur == "ready" {
			copies[r.Copy] = r.State
		}
	}
	placed, running := 0, 0
	for _, s := range copies {
		switch s {
		case "unplaced", "pending":
		default:
			placed++
		}
		if s == "running" || s == "ready" || s == "complete" {
			running++
		}
	}
	return fmt.Sprintf("%d of %d copies placed, %d running", placed, len(copies), running)
}

// jobSpec reads a job file and its inputs as run takes them: -var,
// --var-file, NOMAD_VAR_* of the environment, --meta.
func (f *fleet) jobSpec(file string, vars, varFiles, meta []string) (cluster.JobSpec, int, bool) {
	src, err := readSpec(file)
	if err != nil {
		return cluster.JobSpec{}, f.fail(err), false
	}
	spec := cluster.JobSpec{File: file, Text: string(src)}
	for _, kv := range vars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			f.errorf("--var %q: use NAME=VALUE", kv)
			return cluster.JobSpec{}, exitUsage, false
		}
		if spec.Inputs.Vars == nil {
			spec.Inputs.Vars = map[string]string{}
		}
		spec.Inputs.Vars[k] = v
	}
	for _, p := range varFiles {
		b, err := readSpec(p)
		if err != nil {
			f.errorf("--var-file: %v", err)
			return cluster.JobSpec{}, exitError, false
		}
		spec.Inputs.VarFiles = append(spec.Inputs.VarFiles, cluster.JobVarFile{Name: p, Text: string(b)})
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	spec.Inputs.Env = cluster.OnlyNomadVars(env)
	m, err := cluster.ParseMeta(meta)
	if err != nil {
		f.errorf("%v", err)
		return cluster.JobSpec{}, exitUsage, false
	}
	spec.Inputs.Meta = m
	return spec, 0, true
}

// jobStatus is `tether cluster status JOB`.
func (f *fleet) jobStatus(name string, asJSON bool) int {
	if err := cluster.ValidateJobName("job", name); err != nil {
		f.errorf("%v", err)
		return exitUsage
	}
	fl, done, code, ok := f.dial()
	if !ok {
		return code
	}
	defer done()
	ctx, cancel := f.command()
	defer cancel()
	st, err := fl.JobStatus(ctx, name)
	if err != nil {
		return f.fail(err)
	}
	if asJSON {
		rows := st.Rows
		if rows == nil {
			rows = []cluster.JobRow{}
		}
		return f.printJSON(rows)
	}
	if err := printJobStatus(f.stdout, st); err != nil {
		return f.fail(err)
	}
	return exitOK
}

// printJobStatus prints a job's copies as a table, and a line saying
// the job's version and state.
func printJobStatus(w io.Writer, st *cluster.JobStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COPY\tNODE\tTASK\tSTATE\tREASON")
	for _, r := range st.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Copy, or(r.Node, "-"), or(clikit.Printable(r.Task), "-"), r.State, or(clikit.Printable(r.Reason), "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	state := "running"
	if st.Head.Stopped {
		state = "stopped"
	}
	_, err := fmt.Fprintf(w, "job %s, version %d, %s; %s\n", st.Head.Job, st.Head.Version, state, progress(st))
	return err
}

// stopJob is `tether cluster stop NAME` without --node.
func (f *fleet) stopJob(name string) int {
	if err := cluster.ValidateJobName("job", name); err != nil {
		f.errorf("%v", err)
		return exitUsage
	}
	fl, done, code, ok := f.dial()
	if !ok {
		return code
	}
	defer done()
	ctx, cancel := f.command()
	defer cancel()
	if err := fl.StopJob(ctx, name); err != nil {
		return f.fail(err)
	}
	f.errorf("%s: stopped; the fleet's scheduler removes its copies and each node stops them", name)
	return exitOK
}
