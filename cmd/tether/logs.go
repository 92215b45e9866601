package main

import (
	"container/heap"
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/logs"
	"github.com/tether-fsm/tether/store"
)

// logsMore is tether logs' help text after its flags.
const logsMore = `Both streams are printed, merged in the order their lines were read
(stdout and stderr alike to stdout), unless --stdout or --stderr picks
one; all of the retained output unless -n says how many of the last
lines. A line's time is when tether read it from the task's pipe, to the
millisecond (--timestamps prints it, RFC 3339 in the local zone; a line
written before times were kept has none, shown as -, and no --since or
--until keeps it). With several tasks (several names, or a group's
JOB.GROUP, or a job's name: every task of it) each line starts with its
task's name.

-f follows the output as it is written until the task ends; it follows a
name: when the task is restarted (tether restart), replaced (--replace,
or by the agent) or its desired entry starts a new one, -f says so on
stderr and goes on with the new task, until the name has no live task
and no desired entry that will start one. While it follows several
streams, a line is held up to 100ms so that the lines of all of them
come out in time order. Ctrl-C stops following (exit 0).

--since and --until take an RFC 3339 time (2026-01-02T15:04:05Z; without
a zone, the local one; a date alone is its midnight) or a duration ago
(10m, 1h30m, 2d): lines read at or after --since, at or before --until.`

// followHold is how long a line is held, when several streams are
// followed, for the lines of the others read at the same time to come
// out before it when they are older.
const followHold = 100 * time.Millisecond

// logsOptions are tether logs' flags, resolved.
type logsOptions struct {
	follow     bool
	tail       int // -1: all
	streams    []string
	timestamps bool
	since      time.Time // zero: none
	until      time.Time
}

// keeps reports whether a line read at t is within --since and --until.
func (o logsOptions) keeps(t time.Time) bool {
	if o.since.IsZero() && o.until.IsZero() {
		return true
	}
	if t.IsZero() {
		return false // no time: within no window
	}
	return (o.since.IsZero() || !t.Before(o.since)) && (o.until.IsZero() || !t.After(o.until))
}

// logSlot is one task whose output is printed (and, with -f, the name it
// stands for: followed to the task that replaces it).
type logSlot struct {
	task   driver.TaskInfo
	label  string // the prefix of its lines; "" when there is one slot
	byName bool   // named by its name (not its id): the next task of the name is followed
}

// logLine is a line to print.
type logLine struct {
	at    time.Time
	label string
	text  []byte // a copy, with or without its newline
	seq   uint64 // arrival order, among lines of the same time
}

func (c *cli) cmdLogs(args []string) int {
	fs := c.flags("logs")
	onlyStderr := fs.Bool("stderr", false, "print only the task's stderr (default: both streams, merged)")
	onlyStdout := fs.Bool("stdout", false, "print only the task's stdout (default: both streams, merged)")
	follow := fs.BoolP("follow", "f", false, "follow the output as it is written, across the task's restarts and replacements, until the name has no live task")
	tail := fs.IntP("tail", "n", -1, "print only the last `N` lines (default: all of them; 0: none, with -f only what comes next)")
	stamps := fs.Bool("timestamps", false, "start each line with the time it was read (RFC 3339, to the millisecond, in the local zone)")
	since := fs.String("since", "", "only lines read at or after this `time` (RFC 3339, or a duration ago: 10m)")
	until := fs.String("until", "", "only lines read at or before this `time` (RFC 3339, or a duration ago: 10m)")
	fs.Lookup("tail").DefValue = "" // all: said in its usage
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		c.errorf("logs takes task ids or names (a group's JOB.GROUP, a job's name): tether logs NAME...")
		return exitUsage
	}
	now := time.Now()
	o := logsOptions{follow: *follow, tail: *tail, timestamps: *stamps}
	for _, t := range []struct {
		flag, value string
		into        *time.Time
	}{{"--since", *since, &o.since}, {"--until", *until, &o.until}} {
		if t.value == "" {
			continue
		}
		at, err := parseWhen(t.value, now)
		if err != nil {
			c.errorf("%s %s: %v", t.flag, clikit.Printable(t.value), err)
			return exitUsage
		}
		*t.into = at
	}
	if o.tail < -1 {
		c.errorf("-n %d: give a number of lines, 0 or more", o.tail)
		return exitUsage
	}
	switch {
	case *onlyStdout && !*onlyStderr:
		o.streams = []string{stdoutFile}
	case *onlyStderr && !*onlyStdout:
		o.streams = []string{stderrFile}
	default:
		o.streams = []string{stdoutFile, stderrFile}
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	code := exitOK
	var slots []*logSlot
	seen := map[string]bool{}
	for _, t := range c.resolveTargets(ctx, s, fs.Args()) {
		if t.err != nil {
			code = worst(code, c.fail(t.err))
			continue
		}
		for _, info := range t.tasks {
			if !seen[info.ID] {
				seen[info.ID] = true
				slots = append(slots, &logSlot{task: info, byName: t.arg != info.ID})
			}
		}
	}
	labelSlots(slots)
	if len(slots) == 0 {
		return code
	}
	// A Ctrl-C ends a follow from its first line on, the lines printed of
	// the history included (a signal before Notify would kill the command
	// instead: an exit by SIGINT, not 0).
	sigs := make(chan os.Signal, 1)
	if o.follow {
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	p := &linePrinter{w: c.stdout, stamps: o.timestamps}
	readers, err := c.printHistory(slots, o, p)
	if err != nil {
		closeReaders(readers)
		return worst(code, c.fail(err))
	}
	if !o.follow {
		closeReaders(readers)
		return code
	}
	// Follow until every name has ended, or Ctrl-C (or SIGTERM), or
	// --until; without holding the store.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !o.until.IsZero() {
		var cancelAt context.CancelFunc
		fctx, cancelAt = context.WithDeadline(fctx, o.until)
		defer cancelAt()
	}
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-fctx.Done():
		}
	}()
	lines := make(chan logLine, 256)
	var wg sync.WaitGroup
	for i, slot := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.followSlot(fctx, s, slot, readers[i], o, lines)
		}()
	}
	go func() {
		wg.Wait()
		close(lines)
	}()
	hold := time.Duration(0)
	if len(slots)*len(o.streams) > 1 {
		hold = followHold
	}
	p.run(lines, hold)
	return code
}

// labelSlots gives each slot its lines' prefix when there are several:
// the task's name, or its id where two slots share a name.
func labelSlots(slots []*logSlot) {
	if len(slots) < 2 {
		return
	}
	count := map[string]int{}
	for _, s := range slots {
		count[nameOf(s.task.Task)]++
	}
	for _, s := range slots {
		s.label = nameOf(s.task.Task)
		if count[s.label] > 1 {
			s.label = s.task.ID
		}
	}
}

func nameOf(t fsm.Task) string {
	if t.Spec != nil && t.Spec.Name != "" {
		return t.Spec.Name
	}
	return t.ID
}

// parseWhen reads --since's and --until's time: RFC 3339 (the local zone
// when it names none; a date alone is its midnight), or a duration ago.
func parseWhen(s string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	d, err := clikit.ParseDuration(s)
	if err != nil {
		return time.Time{}, errors.New("give an RFC 3339 time (2026-01-02T15:04:05Z, or a date), or a duration ago (10m, 2h, 1d)")
	}
	return now.Add(-d), nil
}

// streamReader is a cursor on one stream of a slot's task, and the lines
// it read.
type streamReader struct {
	cur  *logs.Cursor
	name string
}

func closeReaders(readers [][]*streamReader) {
	for _, rs := range readers {
		for _, r := range rs {
			r.cur.Close()
		}
	}
}

// printHistory prints the output retained so far, the streams merged in
// time order, and returns each slot's cursors at its end (for -f).
func (c *cli) printHistory(slots []*logSlot, o logsOptions, p *linePrinter) ([][]*streamReader, error) {
	readers := make([][]*streamReader, len(slots))
	var all [][]logLine // one ordered run of lines a stream
	for i, slot := range slots {
		for _, name := range o.streams {
			cur, err := logs.NewCursor(c.taskDir(slot.task.ID), name)
			if err != nil {
				return readers, err
			}
			readers[i] = append(readers[i], &streamReader{cur: cur, name: name})
			// -n N: the last N lines of the merge are among each stream's
			// last N (an --until window may end earlier: read it all).
			switch {
			case o.tail == 0:
				err = cur.SeekEnd()
			case o.tail > 0 && o.until.IsZero():
				err = cur.SeekLines(o.tail)
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return readers, err
			}
			if o.tail == 0 {
				continue
			}
			var run []logLine
			collect := func(l logs.Line) error {
				if o.keeps(l.Time) {
					run = append(run, logLine{at: l.Time, label: slot.label, text: slices.Clone(l.Text)})
				}
				return nil
			}
			if err := readLines(c, cur, collect); err != nil {
				return readers, err
			}
			// A task that has ended wrote its last line: one it never
			// ended is printed as a line of its own (and so is a line
			// not ended yet, without -f).
			if slot.task.State.Terminal() || !o.follow {
				if err := cur.FlushLine(collect); err != nil {
					return readers, err
				}
			}
			all = append(all, run)
		}
	}
	merged := mergeRuns(all)
	if o.tail > 0 && len(merged) > o.tail {
		merged = merged[len(merged)-o.tail:]
	}
	for _, l := range merged {
		p.print(l)
	}
	return readers, nil
}

// readLines reads a cursor's lines to the end of its stream, past any gap
// (said on stderr).
func readLines(c *cli, cur *logs.Cursor, fn func(logs.Line) error) error {
	for {
		err := cur.ReadLines(fn)
		if errors.Is(err, logs.ErrGap) {
			c.errorf("%v", err)
			continue
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
}

// mergeRuns merges runs of lines (each in its stream's order) into one in
// time order: a k-way merge, so that no stream's own order changes (even
// where its clock stepped back); a line without a time goes where its
// stream has it; ties go to the earlier run.
func mergeRuns(runs [][]logLine) []logLine {
	var out []logLine
	pos := make([]int, len(runs))
	for {
		best := -1
		for i, r := range runs {
			if pos[i] == len(r) {
				continue
			}
			if best < 0 || r[pos[i]].at.Before(runs[best][pos[best]].at) {
				best = i
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, runs[best][pos[best]])
		pos[best]++
	}
}

// followSlot follows a slot's task's streams from the readers' positions
// until the task ends, then the task that replaced it (a restart, a
// replacement, its desired entry's next task), and so on, until its name
// has none or ctx ends. Each move to a new task is said on stderr.
func (c *cli) followSlot(ctx context.Context, s *session, slot *logSlot, readers []*streamReader, o logsOptions, out chan<- logLine) {
	task := slot.task
	for {
		c.followTask(ctx, s, task, slot.label, readers, o, out)
		closeReaders([][]*streamReader{readers})
		if ctx.Err() != nil {
			return
		}
		final, err := s.svc.InspectTask(ctx, task.ID)
		if err == nil {
			task = final
		}
		next, ok := c.successor(ctx, s, task, slot.byName)
		if !ok {
			return
		}
		c.errorf("%s: %s ended (%s); following %s, which replaces it", clikit.Printable(nameOf(task.Task)), task.ID, describeEnd(task.Task), next.ID)
		task = next
		readers = nil
		for _, name := range o.streams {
			cur, err := logs.NewCursor(c.taskDir(task.ID), name)
			if err != nil {
				c.errorf("%v", err)
				return
			}
			readers = append(readers, &streamReader{cur: cur, name: name})
		}
	}
}

// followTask copies a task's lines to out as they are written until the
// task has ended (its end recorded, by this process's driver if by no
// other's) or ctx ends, then what is left, and a last line never ended.
func (c *cli) followTask(ctx context.Context, s *session, task driver.TaskInfo, label string, readers []*streamReader, o logsOptions, out chan<- logLine) {
	if waitsForTurn(task.Task) {
		var ok bool
		if task, ok = c.waitTurn(ctx, s, task); !ok {
			return
		}
	}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send := func(l logs.Line) error {
				if o.keeps(l.Time) {
					out <- logLine{at: l.Time, label: label, text: slices.Clone(l.Text)}
				}
				return nil
			}
			for {
				err := logs.FollowLines(fctx, r.cur, send)
				if errors.Is(err, logs.ErrGap) {
					c.errorf("%v", err)
					continue
				}
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					c.log.Debug("stopped following the task's "+r.name, "task_id", task.ID, "err", err)
				}
				return
			}
		}()
	}
	if !task.State.Terminal() {
		if _, err := s.svc.WaitTask(ctx, task.ID); err != nil && ctx.Err() == nil {
			c.log.Debug("stopped waiting for the task", "task_id", task.ID, "err", err)
		}
	}
	cancel()
	wg.Wait()
}

// waitTurnPoll is how often logs -f reads again the state of a task that
// waits for its turn in its group: its group's driver, in another process
// (an agent, a tether drive-group), starts it, and nothing tells this one.
const waitTurnPoll = 200 * time.Millisecond

// waitsForTurn reports whether t is a task of a group that waits for its
// turn: recorded, not started.
func waitsForTurn(t fsm.Task) bool {
	return t.State == fsm.StateCreated && t.Spec != nil && t.Spec.Alloc != nil
}

// waitTurn waits while task waits for its turn, and returns it once it no
// longer does (started, or settled without running); false when ctx ended
// or the task can no longer be read.
func (c *cli) waitTurn(ctx context.Context, s *session, task driver.TaskInfo) (driver.TaskInfo, bool) {
	c.log.Debug("the task waits for its turn in its group; following it once it starts", "task_id", task.ID)
	tick := time.NewTicker(waitTurnPoll)
	defer tick.Stop()
	for waitsForTurn(task.Task) {
		select {
		case <-ctx.Done():
			return task, false
		case <-tick.C:
		}
		info, err := s.svc.InspectTask(ctx, task.ID)
		if err != nil {
			c.log.Debug("stopped waiting for the task's turn", "task_id", task.ID, "err", err)
			return task, false
		}
		task = info
	}
	return task, true
}

// successor returns the task that goes on from an ended task under its
// name, waiting for one that is on its way: the task its stop named as
// its replacement (a restart, a --replace), once the name's lock is let
// go of (they hold it from their stop to the new task's record); else,
// for a task named by its name, the live task of the name started after
// it; else its desired entry's next task, waited for through the agent
// until the entry starts one, settles or goes away. ok is false when the
// name has none of these.
func (c *cli) successor(ctx context.Context, s *session, ended driver.TaskInfo, byName bool) (driver.TaskInfo, bool) {
	name := nameOf(ended.Task)
	if err := driver.WaitNameFree(ctx, c.stateDir, name); err != nil {
		c.log.Debug("waiting for the name's lock", "err", err)
	}
	if evs, err := s.svc.TaskEvents(ctx, ended.ID); err == nil {
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Type == fsm.EventStopRequested && evs[i].ReplacedBy != "" {
				if next, err := s.svc.InspectTask(ctx, evs[i].ReplacedBy); err == nil {
					return next, true
				}
				break
			}
		}
	}
	if byName {
		if next, ok := c.liveAfter(ctx, s, ended); ok {
			return next, true
		}
	}
	st, err := s.svc.Status(ctx)
	if err != nil {
		return driver.TaskInfo{}, false
	}
	e, ok := st.Entry(name)
	if !ok || entryOver(e) {
		return driver.TaskInfo{}, false
	}
	newTask := func(e agent.Entry) (driver.TaskInfo, bool) {
		if e.Task == "" || e.Task == ended.ID {
			return driver.TaskInfo{}, false
		}
		next, err := s.svc.InspectTask(ctx, e.Task)
		return next, err == nil && next.CreatedAt >= ended.CreatedAt
	}
	if next, ok := newTask(e); ok {
		return next, true
	}
	if s.agent == nil {
		c.errorf("%s has a desired entry, but no agent serves %s to start it again; stopped following", clikit.Printable(name), c.stateDir)
		return driver.TaskInfo{}, false
	}
	var next driver.TaskInfo
	found := false
	err = s.svc.WatchStatus(ctx, func(st agent.Status) bool {
		e, ok := st.Entry(name)
		if !ok || entryOver(e) {
			return true
		}
		next, found = newTask(e)
		return found
	})
	return next, err == nil && found
}

// liveAfter returns the one live task of ended's name created after it.
func (c *cli) liveAfter(ctx context.Context, s *session, ended driver.TaskInfo) (driver.TaskInfo, bool) {
	scan, err := s.svc.LoadTasks(ctx, store.LiveTasks)
	if err != nil {
		return driver.TaskInfo{}, false
	}
	var found []fsm.Task
	for _, t := range scan.Tasks {
		if t.ID != ended.ID && !t.State.Terminal() && nameOf(t) == nameOf(ended.Task) && t.CreatedAt >= ended.CreatedAt {
			found = append(found, t)
		}
	}
	if len(found) != 1 {
		return driver.TaskInfo{}, false // none, or several: no one successor
	}
	next, err := s.svc.InspectTask(ctx, found[0].ID)
	return next, err == nil
}

// linePrinter prints lines: the task's name first when there are
// several, then its time with --timestamps.
type linePrinter struct {
	w      io.Writer
	stamps bool
	seq    uint64
}

func (p *linePrinter) print(l logLine) {
	var b strings.Builder
	if l.label != "" {
		b.WriteString(clikit.Printable(l.label))
		b.WriteString(": ")
	}
	if p.stamps {
		ts := "-"
		if !l.at.IsZero() {
			ts = l.at.Local().Format(clikit.EventTimeLayout)
		}
		b.WriteString(ts)
		b.WriteByte(' ')
	}
	b.Write(l.text)
	if len(l.text) == 0 || l.text[len(l.text)-1] != '\n' {
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(p.w, b.String())
}

// run prints the lines that come on in until it is closed: at once when
// hold is 0, else each held until hold has passed since its time, so that
// a line of another stream read at about the same time and older comes
// out first; a line without a time is printed as it comes.
func (p *linePrinter) run(in <-chan logLine, hold time.Duration) {
	var pending lineHeap
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var due <-chan time.Time
		if len(pending) > 0 {
			timer.Reset(max(time.Until(pending[0].at.Add(hold)), 0))
			due = timer.C
		}
		select {
		case l, ok := <-in:
			if !ok {
				for len(pending) > 0 {
					p.print(heap.Pop(&pending).(logLine))
				}
				return
			}
			if hold == 0 || l.at.IsZero() {
				p.print(l)
				continue
			}
			p.seq++
			l.seq = p.seq
			heap.Push(&pending, l)
		case <-due:
			now := time.Now()
			for len(pending) > 0 && !pending[0].at.Add(hold).After(now) {
				p.print(heap.Pop(&pending).(logLine))
			}
		}
	}
}

// lineHeap orders held lines by time, then arrival.
type lineHeap []logLine

func (h lineHeap) Len() int { return len(h) }
func (h lineHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h lineHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *lineHeap) Push(x any)   { *h = append(*h, x.(logLine)) }
func (h *lineHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	*h = old[:len(old)-1]
	return l
}

// entryOver reports whether a desired entry will start no task again
// unless someone asks: given up, stopped on request, completed, refused,
// or being disabled.
func entryOver(e agent.Entry) bool {
	switch e.Standing {
	case agent.StandingDown, agent.StandingStopped, agent.StandingCompleted, agent.StandingRefused, agent.StandingStopping:
		return true
	}
	return e.Disabled
}
