package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/executor/server"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/store"
)

func (c *cli) cmdStop(args []string) int {
	fs := c.flags("stop")
	sigName := fs.String("signal", "", "`signal` to send first (default: the task's kill_signal, else SIGTERM)")
	timeout := fs.Duration("timeout", 0, "grace before SIGKILL (default: the task's kill_timeout, else 5s)")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("stop takes one task id or name")
		return exitUsage
	}
	var sig syscall.Signal
	if *sigName != "" {
		var err error
		if sig, err = parseSignal(*sigName); err != nil {
			c.errorf("--signal: %v", err)
			return exitUsage
		}
	}
	if *timeout < 0 {
		c.errorf("--timeout must not be negative")
		return exitUsage
	}
	ctx := context.Background()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	s, info, code, ok := c.openTask(ctx, fs.Arg(0))
	if !ok {
		return code
	}
	defer c.closeSession(s)
	if a := info.Spec.Alloc; a != nil && !c.groupOver(ctx, s, info) {
		return c.stopGroup(ctx, s, info, sig, *timeout, sigs)
	}
	if info.State.Terminal() {
		fmt.Fprintf(c.stderr, "tether: %s is already %s\n", info.ID, describeEnd(info.Task))
		return exitOK
	}
	// Ctrl-C during the grace escalates: SIGKILL now.
	go func() {
		if _, ok := <-sigs; ok {
			fmt.Fprintf(c.stderr, "tether: %s: interrupted, killing the task now\n", info.ID)
			_, _ = s.d.StopTask(ctx, info.ID, syscall.SIGKILL, time.Nanosecond)
		}
	}()
	final, err := s.d.StopTask(ctx, info.ID, sig, *timeout)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "%s %s\n", info.ID, describeEnd(final))
	return exitOK
}

func (c *cli) cmdRecover(args []string) int {
	fs := c.flags("recover")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		c.errorf("recover takes no arguments")
		return exitUsage
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	// One recovery of the state directory at a time: a second one waits
	// for the first (and says so), then reconciles what is left.
	other := "" // the recovery this one waited for
	release, err := driver.LockRecovery(ctx, c.stateDir, func(holder int) {
		other = describeProcess(holder)
		fmt.Fprintf(c.stderr, "tether: %s is recovering this state directory; waiting for it to finish\n", other)
	})
	if err != nil {
		c.closeSession(s)
		return c.fail(err)
	}
	rep, rerr := s.d.Recover(ctx)
	c.resumeGroups(ctx, s)
	release()
	c.closeSession(s)
	if len(rep.Tasks) == 0 {
		if rerr != nil {
			return c.fail(rerr)
		}
		if other != "" {
			fmt.Fprintf(c.stdout, "no live tasks left: %s recovered them ('tether status --all' and 'tether events ID' show what it did)\n", other)
			return exitOK
		}
		fmt.Fprintln(c.stdout, "no live tasks; nothing to recover")
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFROM -> TO\tACTION")
	for _, t := range rep.Tasks {
		action := t.Action
		if t.Err != nil {
			action += fmt.Sprintf(" (error: %v)", t.Err)
		}
		fmt.Fprintf(tw, "%s\t%s -> %s\t%s\n", t.ID, t.From, t.To, clikit.Printable(action))
	}
	if err := tw.Flush(); err != nil {
		return c.fail(err)
	}
	if rerr != nil {
		c.errorf("recovery left problems (above); run 'tether recover' again, or check the executor logs under %s/tasks/ID", c.stateDir)
		return exitError
	}
	return exitOK
}

func (c *cli) cmdGraph(args []string) int {
	fs := c.flags("graph")
	format := fs.String("format", "mermaid", "`format`: mermaid or dot")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		c.errorf("graph takes no arguments")
		return exitUsage
	}
	var f fsm.GraphFormat
	switch *format {
	case "mermaid":
		f = fsm.Mermaid
	case "dot", "graphviz":
		f = fsm.Graphviz
	default:
		c.errorf("--format %q: use mermaid or dot", *format)
		return exitUsage
	}
	out, err := fsm.Lifecycle.Graph(f)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprint(c.stdout, out)
	if !strings.HasSuffix(out, "\n") {
		fmt.Fprintln(c.stdout)
	}
	return exitOK
}

func (c *cli) cmdCheck(args []string) int {
	fs := c.flags("check")
	salvage := fs.Bool("salvage", false, "copy every readable task into a new store, kill the processes of the live tasks that cannot be read, and put the new store in place (the damaged file is kept beside it)")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		c.errorf("check takes no arguments")
		return exitUsage
	}
	path := c.dbPath()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(c.stdout, "%s: no store yet; nothing to check\n", path)
		return exitOK
	}
	ctx := context.Background()
	if *salvage {
		return c.salvage(ctx, path)
	}
	// CheckFile reads the file page by page, so it reports on a file that
	// Open refuses.
	rep, err := store.CheckFile(ctx, path, c.storeOptions())
	if err != nil {
		return c.fail(fmt.Errorf("check could not finish: %w", err))
	}
	for _, line := range strings.Split(rep.String(), "\n") {
		fmt.Fprintln(c.stdout, clikit.Printable(line))
	}
	if !rep.OK() {
		c.errorf("the store %s is damaged: %d problems (above)", path, len(rep.Problems))
		fmt.Fprintln(c.stderr, "  'tether check --salvage' copies every readable task into a new store, kills what it cannot keep under control, and keeps the damaged file")
		return exitError
	}
	return exitOK
}

// salvage is check --salvage: the way out of a damaged store that keeps
// the running tasks under control (driver.SalvageStore), under the store's
// lock from its read to its install, so that nothing another command
// appended meanwhile is left behind in the damaged file. It exits 1 when
// anything it reports was not fully done.
func (c *cli) salvage(ctx context.Context, path string) int {
	m, err := store.BeginMaintenance(ctx, path, c.storeOptions())
	if err != nil {
		return c.fail(fmt.Errorf("salvage: %w", err))
	}
	defer func() {
		if err := m.Release(); err != nil {
			c.errorf("warning: %v", err)
		}
	}()
	cmd, err := executorCommand()
	if err != nil {
		return c.fail(err)
	}
	world := &executor.Real{StateDir: c.stateDir, Command: cmd, Logger: c.log.Named("driver")}
	rep, err := driver.SalvageStore(ctx, m, world, c.hooks)
	if len(rep.Copied) > 0 || err == nil {
		fmt.Fprintf(c.stdout, "copied %d tasks into a new store", len(rep.Copied))
		if len(rep.HeadsRebuilt) > 0 {
			fmt.Fprintf(c.stdout, " (%d with a rebuilt head)", len(rep.HeadsRebuilt))
		}
		fmt.Fprintln(c.stdout)
	}
	for _, d := range rep.Damage {
		fmt.Fprintf(c.stdout, "damage not attributable to one task (tasks it held may be missing from every list): %s\n", clikit.Printable(d.Error()))
	}
	for i, l := range rep.Lost {
		what := "nothing done: the salvage stopped before it"
		if i < len(rep.Settled) {
			what = c.settled(l, rep.Settled[i])
		}
		fmt.Fprintf(c.stdout, "lost task %s (%s): %s\n  why: %s\n", clikit.Printable(l.ID), l.State, what, clikit.Printable(l.Err.Error()))
	}
	if err != nil {
		c.errorf("salvage: %v", err)
		if len(rep.Settled) > 0 {
			fmt.Fprintf(c.stderr, "  the damaged store is still %s; the kills above are done\n", path)
		}
		return exitError
	}
	fmt.Fprintf(c.stdout, "the salvaged store is in place; the damaged one is kept as %s\n", rep.Aside)
	if !rep.Done() {
		c.errorf("the salvage is not complete: see above")
		return exitError
	}
	return exitOK
}

// settled says what driver.SettleLost did about a task that could not be
// salvaged.
func (c *cli) settled(l store.LostTask, o driver.SettleOutcome) string {
	err := o.Err
	switch {
	case errors.Is(err, driver.ErrUnproven):
		return fmt.Sprintf("NOT killed: %v; look at %s", err, c.taskDir(l.ID))
	case errors.Is(err, driver.ErrTaskNotKilled):
		return "executor killed; NOT all of its task: " + err.Error()
	case err != nil:
		return "NOT killed: " + err.Error()
	case o.Ended:
		return "it had ended; nothing to kill"
	case o.Executor == nil:
		return "no executor with its spawn nonce is alive; whatever was left of its task (its cgroup, its process group) was killed"
	}
	return fmt.Sprintf("its executor (pid %d) and everything of its task were killed by proven identity", o.Executor.PID)
}

func (c *cli) cmdGC(args []string) int {
	fs := c.flags("gc")
	olderThan := fs.Duration("older-than", 0, "remove only tasks that ended longer ago than this `duration`")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		c.errorf("gc takes no arguments")
		return exitUsage
	}
	if *olderThan < 0 {
		c.errorf("--older-than must not be negative")
		return exitUsage
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	cutoff := time.Now().Add(-*olderThan)
	removed, err := s.st.Remove(ctx, cutoff)
	if errors.Is(err, store.ErrCorrupt) {
		// A damaged freelist refuses writes; compaction rewrites the file
		// from its (checked) tree, and the removal can then proceed.
		c.errorf("warning: %v; compacting first", err)
		if _, _, cerr := s.st.Compact(ctx); cerr != nil {
			return c.fail(fmt.Errorf("compact: %w", cerr))
		}
		removed, err = s.st.Remove(ctx, cutoff)
	}
	if err != nil {
		return c.fail(err)
	}
	code := exitOK
	for _, id := range removed {
		if driver.ValidateTaskID(id) != nil {
			continue // never a path outside the state directory
		}
		if err := os.RemoveAll(c.taskDir(id)); err != nil {
			c.errorf("removing the directory of task %s: %v", id, err)
			code = exitError
		}
	}
	orphans, busy, err := c.removeOrphanDirs(ctx, s)
	if busy {
		code = exitError // an executor runs for a task the store does not know: said above
	}
	if err != nil {
		c.errorf("looking for task directories the store does not know: %v", err)
		code = exitError
	}
	allocs, err := c.removeAllocDirs(ctx, s)
	if err != nil {
		c.errorf("removing the directories of ended groups: %v", err)
		code = exitError
	}
	before, after, err := s.st.Compact(ctx)
	if err != nil {
		return c.fail(fmt.Errorf("compact: %w", err))
	}
	if len(orphans) > 0 {
		fmt.Fprintf(c.stdout, "removed %d task directories the store does not know: %s\n", len(orphans), strings.Join(orphans, ", "))
	}
	if len(allocs) > 0 {
		fmt.Fprintf(c.stdout, "removed %d group directories (allocs/) no task in the store has: %s\n", len(allocs), strings.Join(allocs, ", "))
	}
	if len(removed) == 0 {
		fmt.Fprintln(c.stdout, "no ended tasks to remove")
	} else {
		fmt.Fprintf(c.stdout, "removed %d tasks: %s\n", len(removed), strings.Join(removed, ", "))
	}
	fmt.Fprintf(c.stdout, "store compacted: %d -> %d bytes\n", before, after)
	return code
}

// removeOrphanDirs removes the task directories the store does not know
// (left by a start that crashed before it recorded the task, or by a
// salvage); executor.Real.RemoveOrphanDir keeps the ones in use.
//
// busy is set when a directory was kept because an executor runs in it
// for a task the store does not know: something gc could not finish.
func (c *cli) removeOrphanDirs(ctx context.Context, s *session) (out []string, busy bool, err error) {
	ents, err := os.ReadDir(c.layout().Tasks())
	if err != nil {
		return nil, false, err
	}
	cmd, err := executorCommand()
	if err != nil {
		return nil, false, err
	}
	world := &executor.Real{StateDir: c.stateDir, Command: cmd, Logger: c.log.Named("driver")}
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || driver.ValidateTaskID(id) != nil {
			continue // never a path outside the state directory
		}
		unknown := func() (bool, error) {
			_, err := s.st.LoadTask(ctx, id)
			if errors.Is(err, store.ErrUnknownTask) {
				return true, nil
			}
			return false, nil // known, or unreadable: not ours to judge
		}
		if still, _ := unknown(); !still {
			continue
		}
		removed, kept, err := world.RemoveOrphanDir(id, unknown)
		if err != nil {
			return out, busy, err
		}
		if !removed {
			if errors.Is(kept, executor.ErrBusy) {
				c.errorf("task directory %s is unknown to the store but kept: %v; 'tether stop' cannot reach it: kill that executor (it is not in the store)", id, kept)
				busy = true
			}
			c.log.Debug("task directory kept", "task_id", id, "why", fmt.Sprint(kept))
			continue
		}
		out = append(out, id)
	}
	return out, busy, nil
}

func (c *cli) cmdDebug(args []string) int {
	fs := c.flags("debug")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	var points []string
	switch fs.Arg(0) {
	case "crashpoints":
		points = driver.CrashPoints()
	case "faultpoints":
		points = driver.FaultPoints()
	case "host":
		if fs.NArg() != 1 {
			c.errorf("debug host takes no arguments")
			return exitUsage
		}
		h, err := cgroup.Probe()
		if err != nil {
			return c.fail(err)
		}
		fmt.Fprint(c.stdout, h.String())
		fmt.Fprintln(c.stdout, "exec sandbox:")
		for _, l := range server.HostFeatures() {
			fmt.Fprintf(c.stdout, "  %s\n", l)
		}
		return exitOK
	default:
		c.errorf("debug: use 'tether debug crashpoints', 'tether debug faultpoints' or 'tether debug host'")
		return exitUsage
	}
	if fs.NArg() != 1 {
		c.errorf("debug %s takes no arguments", fs.Arg(0))
		return exitUsage
	}
	for _, p := range points {
		fmt.Fprintln(c.stdout, p)
	}
	return exitOK
}

// describeProcess names a process for a message: "process 1234 (tether
// recover)", from its command line, or "another process" when its pid is
// not known.
func describeProcess(pid int) string {
	if pid <= 0 {
		return "another process"
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return fmt.Sprintf("process %d", pid)
	}
	args := strings.Fields(strings.ReplaceAll(string(b), "\x00", " "))
	if len(args) > 0 {
		args[0] = filepath.Base(args[0])
	}
	cmdline := strings.Join(args, " ")
	if len(cmdline) > 80 {
		cmdline = cmdline[:77] + "..."
	}
	return fmt.Sprintf("process %d (%s)", pid, clikit.Printable(cmdline))
}
