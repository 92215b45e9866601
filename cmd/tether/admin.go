package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
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
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	info, err := c.resolve(ctx, s, fs.Arg(0))
	if err != nil {
		return c.fail(err)
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
	rep, rerr := s.d.Recover(ctx)
	c.closeSession(s)
	if len(rep.Tasks) == 0 {
		if rerr != nil {
			return c.fail(rerr)
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
		fmt.Fprintf(tw, "%s\t%s -> %s\t%s\n", t.ID, t.From, t.To, printable(action))
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
	opts := c.storeOptions()
	opts.ReadOnly = true
	st, err := store.Open(path, opts)
	if err != nil {
		return c.fail(err)
	}
	rep, err := st.Check(context.Background())
	if cerr := st.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return c.fail(fmt.Errorf("check could not finish: %w", err))
	}
	fmt.Fprintln(c.stdout, rep.String())
	if !rep.OK() {
		c.errorf("the store has %d problems (above); move the file aside to start afresh, or keep it for inspection", len(rep.Problems))
		return exitError
	}
	return exitOK
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
	removed, err := s.st.Remove(ctx, time.Now().Add(-*olderThan))
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
	before, after, err := s.st.Compact(ctx)
	if err != nil {
		return c.fail(fmt.Errorf("compact: %w", err))
	}
	if len(removed) == 0 {
		fmt.Fprintln(c.stdout, "no ended tasks to remove")
	} else {
		fmt.Fprintf(c.stdout, "removed %d tasks: %s\n", len(removed), strings.Join(removed, ", "))
	}
	fmt.Fprintf(c.stdout, "store compacted: %d -> %d bytes\n", before, after)
	return code
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
