package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// cmdStop stops tasks, each with its kill signal and grace (or --signal
// and --timeout), then SIGKILL:
//
//	tether stop web
//	tether stop web db cache    # each stopped at once, reported in order
//	tether stop app.web         # a group, stopped as a group
//	tether stop app             # a job: each of its groups
//
// A task of a group that is not over stops its group, as Nomad stops an
// allocation (driver.StopGroup: the leader first, the sidecars last, then
// the poststop tasks run); a group or a job stops each of its live
// allocations so. The stops run at once; each task's end is printed on a
// line of its own, in the order of the arguments. The exit code is the
// worst of them (0 when every one is stopped or had ended already). A
// Ctrl-C during the grace escalates: SIGKILL now, for everything.
func (c *cli) cmdStop(args []string) int {
	fs := c.flags("stop")
	sigName := fs.String("signal", "", "`signal` to send first (default: the task's kill_signal, else SIGTERM)")
	timeout := fs.Duration("timeout", 0, "grace before SIGKILL (default: the task's kill_timeout, else 5s)")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		c.errorf("stop takes task ids or names (a group's JOB.GROUP, a job's name): tether stop NAME...")
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
	ctx := context.Background()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	code := exitOK
	var units []stopUnit
	seen := map[string]bool{}
	for _, t := range c.resolveTargets(ctx, s, fs.Args()) {
		if t.err != nil {
			code = worst(code, c.fail(t.err))
			continue
		}
		for _, info := range t.tasks {
			u := stopUnit{task: info}
			if info.Spec != nil && info.Spec.Alloc != nil && !c.groupOver(ctx, s, info) {
				u.group = info.Spec.Alloc
			}
			if k := u.key(); !seen[k] {
				seen[k] = true
				units = append(units, u)
			}
		}
	}
	// Ctrl-C (or SIGTERM) during the graces escalates every stop: SIGKILL
	// now.
	kill := make(chan struct{})
	go func() {
		if _, ok := <-sigs; ok {
			close(kill)
		}
	}()
	type result struct {
		stdout, stderr stopOutput
		code           int
	}
	done := make([]chan *result, len(units))
	for i, u := range units {
		done[i] = make(chan *result, 1)
		go func() {
			r := &result{}
			uc := *c
			uc.stdout, uc.stderr = &r.stdout, &r.stderr
			r.code = uc.stopOne(ctx, s, u, sig, *timeout, kill)
			done[i] <- r
		}()
	}
	for i := range units {
		r := <-done[i]
		_, _ = c.stdout.Write(r.stdout.bytes())
		_, _ = c.stderr.Write(r.stderr.bytes())
		code = worst(code, r.code)
	}
	return code
}

// stopOutput is a stop's output, written by the stop and by its
// escalation.
type stopOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *stopOutput) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *stopOutput) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// stopUnit is what one stop stops: a task, or a group (all its tasks).
type stopUnit struct {
	task  driver.TaskInfo
	group *fsm.Alloc
}

// key tells units apart: a group by its allocation, a task by its id.
func (u stopUnit) key() string {
	if u.group != nil {
		return "alloc " + u.group.ID
	}
	return "task " + u.task.ID
}

// stopOne stops a task or a group and prints how each task ended; kill
// closed escalates to SIGKILL at once.
func (c *cli) stopOne(ctx context.Context, s *session, u stopUnit, sig syscall.Signal, grace time.Duration, kill <-chan struct{}) int {
	finished := make(chan struct{})
	defer close(finished)
	if u.group != nil {
		// stopGroup takes its escalation as a signal.
		interrupt := make(chan os.Signal, 1)
		go func() {
			select {
			case <-kill:
				interrupt <- os.Interrupt
			case <-finished:
			}
		}()
		return c.stopGroup(ctx, s, u.task, sig, grace, interrupt)
	}
	info := u.task
	if info.State.Terminal() {
		fmt.Fprintf(c.stderr, "tether: %s is already %s\n", info.ID, describeEnd(info.Task))
		return exitOK
	}
	go func() {
		select {
		case <-kill:
			fmt.Fprintf(c.stderr, "tether: %s: interrupted, killing the task now\n", info.ID)
			_, _ = s.svc.StopTask(ctx, info.ID, syscall.SIGKILL, time.Nanosecond)
		case <-finished:
		}
	}()
	final, err := s.svc.StopTask(ctx, info.ID, sig, grace)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "%s %s\n", info.ID, describeEnd(final))
	return exitOK
}
