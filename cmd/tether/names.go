package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/store"
)

// resolve turns an id or a task name into a task, by the name rules of
// driver.Resolve: a name stands for its one live task, else its most
// recent one.
func (c *cli) resolve(ctx context.Context, s *session, arg string) (driver.TaskInfo, error) {
	return s.svc.Resolve(ctx, arg)
}

// nameTaken reports a start (or the restart of an ended task) refused
// because a task of its name is live, with what to do about it, and
// returns exitStartFail.
func (c *cli) nameTaken(err error, restart bool) int {
	var ne *driver.NameError
	if !errors.As(err, &ne) || len(ne.Tasks) == 0 {
		return c.fail(err)
	}
	now := time.Now()
	var live []string
	for _, t := range ne.Tasks {
		live = append(live, fmt.Sprintf("%s (%s since %s)", t.ID, t.State, clikit.Ago(now, t.UpdatedAt)))
	}
	c.errorf("a task named %s is live: %s; nothing was started", clikit.Printable(ne.Name), strings.Join(live, ", "))
	newest := ne.Tasks[len(ne.Tasks)-1].ID
	if restart {
		fmt.Fprintf(c.stderr, "  restart that one (tether restart %s), or stop it first\n", newest)
	} else {
		fmt.Fprintf(c.stderr, "  stop it first (tether stop %s), or give --replace to stop it and start this one\n", newest)
	}
	return exitStartFail
}

// target is one word of a command that takes several: what it stands for
// by the name rules (a task by id or name, else JOB.GROUP, else a job:
// driver.PickTarget), or why it stands for nothing.
type target struct {
	arg   string
	kind  driver.TargetKind
	tasks []driver.TaskInfo // oldest first; one for a task
	err   error
}

// label names the target in a message: the word as given, and for a group
// or a job what it is.
func (t target) label() string {
	if t.kind == driver.TargetGroup || t.kind == driver.TargetJob {
		return fmt.Sprintf("%s %s", t.kind, clikit.Printable(t.arg))
	}
	return clikit.Printable(t.arg)
}

// resolveTargets resolves each word of args by the name rules. A word
// that is a task's id or name costs what Resolve costs (what most
// commands are given); the group and job rules read every task of the
// store once, and only for a word that is no task's.
func (c *cli) resolveTargets(ctx context.Context, s *session, args []string) []target {
	var all []fsm.Task
	loaded := false
	out := make([]target, 0, len(args))
	for _, arg := range args {
		t := target{arg: arg, kind: driver.TargetTask}
		info, err := c.resolve(ctx, s, arg)
		switch {
		case err == nil:
			t.tasks = []driver.TaskInfo{info}
		case !errors.Is(err, driver.ErrUnknownTask):
			t.err = err
		default:
			if !loaded {
				scan, lerr := s.svc.LoadTasks(ctx, store.AllTasks)
				if lerr != nil {
					t.err = lerr
					break
				}
				all, loaded = scan.Tasks, true
			}
			picked, perr := driver.PickTarget(all, arg)
			if perr != nil {
				t.err = perr
				break
			}
			t.kind = picked.Kind
			for _, m := range picked.Tasks {
				info, ierr := s.svc.InspectTask(ctx, m.ID)
				if ierr != nil {
					t.err = ierr
					break
				}
				t.tasks = append(t.tasks, info)
			}
		}
		out = append(out, t)
	}
	return out
}

// worst is the exit code of a command that acted on several targets: the
// largest of theirs (an error, 1, outranks success; a task's own code, as
// wait returns it, outranks both when it is larger).
func worst(codes ...int) int {
	w := exitOK
	for _, c := range codes {
		w = max(w, c)
	}
	return w
}
