//go:build linux

package server

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The package's documented promises (doc.go and each file's head), each
// with the tests that hold it: those of this package, and those of package
// executor (its client), which run a real executor process.
//
//	peers of the executor's uid or root only   TestAllowPeer_Decision, executor.TestPeerCred_OtherUIDRefused
//	lease: no client, or the driver gone
//	  before launch, and the executor exits    executor.TestLease_NoClientExits, executor.TestLease_DriverKilledBeforeLaunch
//	stop: signal, grace, SIGKILL of the
//	  whole cgroup                             executor.TestStop_Grace, executor.TestStop_ForcedKill, executor.TestContain_StopKillsTheWholeCgroup
//	nothing of a run outlives it               executor.TestStop_GrandchildrenLeaveNothing, executor.TestContain_DescendantsKilledWhenTaskExits
//	tasks start with umask 022; the
//	  executor's own files private by
//	  explicit modes                           executor.TestLaunch_TasksStartWithUmask022, executor.TestExecutorFiles_PrivateByExplicitModes
//	restarts by the policy, each journalled
//	  ahead, its outcome too (errors too)      executor.TestRestart_FailModeExhaustsTheAttempts, executor.TestRestart_FailedRelaunchIsJournalled
//	the journal: checksummed frames, a torn
//	  tail ignored, damage reported, by
//	  version (ready entries from version 2)   TestJournal_RoundTrip, TestJournal_TornTailDamageAndLinks, TestJournal_ReadyEntriesByVersion, TestPowerLoss_RestartJournal
//	each run's readiness journalled before
//	  anyone is told (READY=1, a check's
//	  first pass), at its place, naming it     executor.TestNotify_EachRunsReadinessJournalledBeforeItIsTold, executor.TestCheck_TCPReadyOnceListening
//	which notify lines count                   TestParseNotice_WhichLinesCount
//	a datagram counts only from the task's
//	  processes; a sender judged once, its
//	  verdict kept while it lives              executor.TestNotify_StrangerIgnoredChildAccepted, executor.TestNotify_AbstractFallbackStrangerIgnored, TestFromTask_VerdictKeptWhileTheSenderLives, TestFromTask_KeepsAtMostMaxSenders
//	a notify flood is the task's cost: at
//	  most notifyRate datagrams a second,
//	  logged once a minute                     TestLimiter_BurstThenRate, TestRateLog_OncePerPeriodWithTheCount, executor.TestNotify_FloodCostsTheTaskNotTheExecutor
//	a watchdog miss is a restart with its
//	  reason                                   executor.TestWatchdog_MissRestarts, executor.TestWatchdog_PingsKeepTheTask
//	check_restart counts consecutive
//	  failures past its grace; its restart
//	  is journalled with the check's reason    TestChecker_CountsConsecutiveFailuresPastTheGrace, executor.TestCheck_RestartAfterLimit
//	http checks read the status line           TestHTTPGet_Status, TestProbe_HTTPClasses
//	a failed artifact fetch is tried again
//	  under the restart policy                 executor.TestLaunch_ArtifactFetchRetriedUnderTheRestartPolicy
//	preparation fails a launch naming it       executor.TestLaunch_PreparationFailures
//	the join shim's argument holds no
//	  environment                              TestJoinConfig_EnvNotInArguments
func TestContract_ListedTestsExist(t *testing.T) {
	b, err := os.ReadFile("contract_test.go")
	if err != nil {
		t.Fatal(err)
	}
	head := string(b[:strings.Index(string(b), "func TestContract_ListedTestsExist")])
	sources := map[string]string{} // package dir -> its tests' text
	for _, dir := range []string{".", ".."} {
		files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		var all strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			all.Write(b)
		}
		sources[dir] = all.String()
	}
	n := 0
	for _, m := range regexp.MustCompile(`(executor\.)?(Test[A-Za-z0-9_]+)`).FindAllStringSubmatch(head, -1) {
		dir := "."
		if m[1] != "" {
			dir = ".."
		}
		n++
		if !strings.Contains(sources[dir], "func "+m[2]+"(") {
			t.Errorf("the contract names %s%s, which no test file of its package declares", m[1], m[2])
		}
	}
	if n < 20 {
		t.Fatalf("the contract names %d tests", n)
	}
}
