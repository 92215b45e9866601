//go:build linux

package server

import (
	"os"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// Restarts.
//
// A task with a restart policy (fsm.Spec.Restart) is restarted by its
// executor, the process that is there when the task exits, whether a
// driver is attached or not. When a run has ended and everything of it is
// gone (its cgroup empty and removed, its output copied), the executor asks
// the policy (fsm.RestartPolicy.Next, a pure function of the policy, the
// restart state and the exit) and, for a restart, journals the intent
// (JournalFile, fsynced) before it waits out the delay and relaunches the
// task in a fresh cgroup; the relaunch's outcome (launched, or
// launch-failed) is journalled too. A stop or shutdown during the delay
// ends the task for good. A task whose cgroup could not be emptied is not
// restarted (something of the last run may be alive).
//
// Crash points (TETHER_CRASHPOINT, see driver.CrashPoints): the executor
// SIGKILLs itself at "executor:before-journal:restart-intent",
// "executor:after-journal:restart-intent" and "executor:after-relaunch".
// Killed there, it leaves the journal as far as it got; the driver folds
// it and finds the executor gone, and the task (a relaunched one too) is
// killed with its cgroup: nothing is started twice (only the executor
// ever relaunches) and nothing leaks.

// crash SIGKILLs the executor if TETHER_CRASHPOINT names point (tests of
// the restart path; the driver's own points are checked by the driver).
func crash(point string) {
	if os.Getenv("TETHER_CRASHPOINT") == point {
		killSelf()
	}
}

// restarts is the executor's restart state for its task (its journal is
// the server's: s.jn).
type restarts struct {
	policy fsm.RestartPolicy
	state  fsm.RestartState
	timer  *time.Timer // the delay before a relaunch; nil: none pending
	reason string      // why the last run was not restarted
}

// startRestarts sets up the journal and restarts for a task first
// launched now with spec: restarts by its restart policy, and by a
// template whose change restarts it (which needs the journal too, with or
// without a policy); the journal also for a task whose readiness is
// awaited (each run's ready entry). The error is the journal's, for a
// task that has restarts (they are then off); a task without restarts
// whose journal cannot be made only has its readiness recorded by whoever
// waits for it.
func (s *server) startRestarts(ls wire.Launch) error {
	s.spec = ls
	policy := ls.Restart
	if policy == nil {
		for _, t := range ls.Templates {
			if t.ChangeMode == fsm.ChangeRestart {
				policy = &fsm.RestartPolicy{Mode: fsm.RestartFail} // no restart of its own on an exit
				break
			}
		}
	}
	if policy == nil && !ls.Readiness.Waits() {
		return nil
	}
	j, err := createJournal(s.taskDir, s.id)
	switch {
	case err != nil && policy == nil:
		s.log.Warn("no journal: the runs' readiness is not journalled", "err", err)
		return nil
	case err != nil:
		return err
	}
	s.jn = j
	if policy != nil {
		s.rs = &restarts{policy: *policy, state: fsm.RestartState{WindowStart: time.Now().UnixNano()}}
		if s.prepState != nil {
			s.rs.state = *s.prepState // the failed fetches count in the interval
		}
	}
	return nil
}

// forceRestart restarts the running task at once, outside its restart
// policy (a template it reads changed; Nomad's change_mode restart does not
// count against the policy's attempts either): its run is stopped with its
// kill signal and grace, and once it is over and drained, restartNext
// journals the restart and relaunches it without delay.
func (s *server) forceRestart(reason string) {
	switch {
	case s.rs == nil:
		s.log.Warn("cannot restart the task: it has no restart journal", "why", reason)
		return
	case s.ending != endNone || s.checkRunning() != nil:
		s.log.Info("not restarting the task: it is not running", "why", reason)
		return
	case s.forced != "":
		return // one restart is under way already
	}
	s.forced = reason
	sig, grace := syscall.SIGTERM, defaultKillGrace
	if s.spec.KillSignal > 0 {
		sig = syscall.Signal(s.spec.KillSignal)
	}
	if s.spec.KillTimeout > 0 {
		grace = s.spec.KillTimeout
	}
	s.log.Info("restarting the task", "why", reason, "signal", sig, "grace", grace)
	if s.undeliverable(sig) {
		s.killAll()
		return
	}
	s.signalGroup(sig)
	s.armKill(grace)
}

// defaultKillGrace is the grace of a restart a template asked for, for a
// task whose spec sets no kill_timeout (the driver's default stop grace).
const defaultKillGrace = 5 * time.Second

// restartNext is called once a run has ended and everything of it is
// gone. It journals a restart and arms its delay, and reports whether it
// did; otherwise the task is over.
func (s *server) restartNext() bool {
	rs := s.rs
	if rs == nil || s.ending != endNone || s.cgKill == cgGaveUp {
		return false
	}
	now := time.Now()
	exit := s.task.exit
	var d fsm.RestartDecision
	if s.forced != "" {
		rs.state.Attempts++ // numbered among the restarts; not counted in the policy's interval
		d = fsm.RestartDecision{Restart: true, Attempt: rs.state.Attempts, Reason: s.forced}
		s.forced = ""
	} else {
		state, dd := rs.policy.Next(rs.state, exit, now.UnixNano())
		rs.state, d = state, dd
	}
	if !d.Restart {
		if s.rd.missed != "" {
			d.Reason = s.rd.missed + "; " + d.Reason
		}
		rs.reason = d.Reason
		s.log.Info("not restarting the task", "reason", d.Reason)
		return false
	}
	if s.rd.missed != "" {
		d.Reason = s.rd.missed + "; " + d.Reason
	}
	ev := fsm.Event{Type: fsm.EventRestartIntent, Time: now.UnixNano(), Attempt: d.Attempt, Exit: &exit, Delay: d.Delay, Reason: d.Reason}
	crash(wire.CrashBeforeRestartIntent)
	if err := s.jn.append(ev); err != nil {
		s.log.Error("could not journal the restart; not restarting", "err", err)
		rs.reason = "the restart could not be journalled: " + err.Error()
		return false
	}
	crash(wire.CrashAfterRestartIntent)
	rs.timer = time.NewTimer(d.Delay)
	s.log.Info("restarting the task", "attempt", d.Attempt, "delay", d.Delay, "reason", d.Reason)
	s.notifyWatchers()
	return true
}

// restartC is the delay's channel, nil when no restart is pending.
func (s *server) restartC() <-chan time.Time {
	if s.rs == nil || s.rs.timer == nil {
		return nil
	}
	return s.rs.timer.C
}

// restarting reports whether a restart is pending, or may be: a run of a
// task with a restart policy has exited and the policy has not been asked
// yet (completeTask asks once the run's tree is gone).
func (s *server) restarting() bool {
	if s.rs == nil {
		return false
	}
	if s.rs.timer != nil {
		return true
	}
	undecided := s.task != nil && s.task.exited && !s.task.done
	return undecided && s.ending == endNone && s.cgKill != cgGaveUp
}

// over reports whether the task is over for good: its last run has ended
// and drained, and no restart of it is pending (or the executor is ending).
func (s *server) over() bool {
	return s.lease == leaseDone || s.task != nil && s.task.done && !s.restartPending()
}

// restartPending reports whether a restart's delay runs.
func (s *server) restartPending() bool { return s.rs != nil && s.rs.timer != nil }

// cancelRestart drops a pending restart (a stop or shutdown during the
// delay) and ends the task with the last run's exit.
func (s *server) cancelRestart() {
	if !s.restartPending() {
		return
	}
	s.rs.timer.Stop()
	s.rs.timer = nil
	s.log.Info("pending restart cancelled")
	s.writeExit()
}

// relaunch starts the task again once the delay is over, and journals the
// outcome. A failed relaunch ends the task.
func (s *server) relaunch() {
	rs := s.rs
	rs.timer = nil
	s.cgKill, s.cgTries, s.noChildren = cgLive, 0, false
	// No task while the next run starts: the last run is over and drained,
	// and nothing (a reap while the shim starts) may complete it again.
	last := s.task
	s.task = nil
	s.resetReadiness()
	l, err := s.startTask(s.spec)
	now := time.Now().UnixNano()
	if err != nil {
		s.task = last
		s.log.Warn("relaunch failed", "err", err)
		ev := fsm.Event{Type: fsm.EventLaunchFailed, Time: now, Reason: err.Error()}
		if jerr := s.jn.append(ev); jerr != nil {
			s.log.Error("could not journal the failed relaunch", "err", jerr)
		}
		s.notifyWatchers()
		s.writeExit()
		return
	}
	crash(wire.CrashAfterRelaunch)
	s.task = &taskState{pid: l.pid, start: l.start, nsInit: l.nsInit, join: l.join}
	s.outs = l.outs
	rec := wire.LaunchRecord{Nonce: s.nonce, BootID: s.id.BootID, PID: l.pid, StartTime: l.start}
	if err := wire.WriteFile(s.taskDir, statedir.LaunchFile, rec, false); err != nil {
		s.log.Warn("writing the launch record failed", "err", err)
	}
	ev := fsm.Event{Type: fsm.EventLaunched, Time: now, TaskPID: l.pid, TaskStartTime: l.start}
	if err := s.jn.append(ev); err != nil {
		// The task runs, in its cgroup: a driver that cannot learn its
		// pid still kills it with the cgroup.
		s.log.Error("could not journal the relaunch", "err", err)
	}
	s.log.Info("task relaunched", "task_pid", l.pid, "attempt", rs.state.Attempts)
	s.startCheck()
	s.notifyWatchers()
	s.reap() // it may already have exited
}

// watcher is a watch request waiting for the journal to grow past since,
// or for the task's end.
type watcher struct {
	c     *sconn
	id    uint64
	since int
}

// watch answers a watch now if the journal holds entries past since or
// the task is over, or when it does.
func (s *server) watch(sc *sconn, id uint64, since int) {
	if s.journalLen() > since || s.over() {
		s.answerWatch(watcher{sc, id, since})
		return
	}
	s.watchers = append(s.watchers, watcher{sc, id, since})
}

func (s *server) answerWatch(w watcher) {
	st := s.status()
	var entries []fsm.Event
	if s.jn != nil && w.since >= 0 && w.since < len(s.jn.entries) {
		entries = s.jn.entries[w.since:]
	}
	s.send(w.c, wire.Response{ID: w.id, Status: &st, Journal: entries})
}

// notifyWatchers answers the watches the journal (or the task's end) has
// moved past.
func (s *server) notifyWatchers() {
	keep := s.watchers[:0]
	for _, w := range s.watchers {
		if s.journalLen() > w.since || s.over() {
			s.answerWatch(w)
			continue
		}
		keep = append(keep, w)
	}
	s.watchers = keep
}

// killSelf SIGKILLs the executor (a crash point).
func killSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not deliverable late; never go on
}
