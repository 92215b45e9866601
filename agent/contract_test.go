package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The package's promises (doc.go, README's agent section, docs/cli.md's
// status), each with the tests that hold it: those of this package, those
// of package driver that the agent's owner relies on, and those of the
// tether command (cmd/tether) that run a real agent process.
//
//	one agent per state directory: a second
//	  fails at once naming the first's pid     TestAgent_SecondAgentFailsAtOnceNamingTheFirstsPID, TestLockAgent_LiveHolderRefusedAtOnce, TestLockAgent_DeadHoldersLockIsWaitedFor, tether.TestAgent_SecondAgentRefusedNamingTheFirst
//	peers of root or the state directory's
//	  owner only; versions named on mismatch   TestServer_RefusesAPeerOfAnotherUID, TestClient_VersionMismatchNamesBothVersions
//	no request widens the allow lists          TestAgent_AllowListAppliesToEveryRequest, tether.TestAgent_CLIPolicyAndInjectionRefusedThroughTheAgent
//	a wedged agent is reported within the
//	  client's deadline; a dead socket is no
//	  agent at once                            TestClient_WedgedAgentReportedWithinItsDeadline, TestClient_NoSocketIsNoAgent, TestAgent_KilledAgentsSocketIsNoAgentThenRemoved, tether.TestAgent_CLIFallsBackAtOnceOnADeadSocket
//	a command prints and exits the same
//	  through an agent as daemonless           TestClient_AnswersAsTheDriverInProcess, tether.TestAgent_CLIPrintsAndExitsAsDaemonless
//	desired entries converge: a file or an
//	  enable starts its job, a change
//	  replaces it, a removal stops it          TestDecide_Property, TestDecide_NewFileRecordsNewAllocations, TestDecide_ChangedFileRetiresStopsThenMakesNewAllocations, TestDecide_RemovedFileRetiresStopsThenForgets, TestAgent_ConfigDirFilesStartReplaceAndStop, TestAgent_EnableKillStopStartDisable, TestAgent_FeedConvergesAsTheConfigDirDoes, tether.TestAgent_FileChangedReplacesRemovedStops, tether.TestDesired_PrestartSidecarMainAsStartRunsThem
//	every source runs what tether start
//	  runs (dir, enable, start)                tether.TestSources_EveryNomadJobTheSameThreeWays, tether.TestDesired_EnvTemplateAndTheAgentsAllowRead
//	a refused file is listed with its reason,
//	  its tasks left alone, nothing recorded   TestDecide_RefusedNewFileIsShownNotRecorded, TestDecide_RefusedFileLeavesItsTasksAlone, TestScanConfigDir_ReadsTaskFilesRefusesUnsafeOnes, TestOpenConfigDir_RefusesASharedDir, TestStatus_OriginsAndRefusals
//	an entry stands where its worst copy
//	  does; restarting says its next attempt
//	  (the soonest), down its reason and
//	  since when (the latest end)              TestStatus_CopyStandings, TestStatus_EntryStandsWhereItsWorstCopyDoes, TestStatus_EntryTimesAreItsCopiesSoonestAndLatest
//	a service whose restarts are spent is
//	  shown down with its reason and started
//	  again by its reschedule block            TestDecide_CopiesNobodyDrivesAreDriven, TestDecide_OverWithNothingToFollowIsLeft, TestCopyOf_IDsDeriveFromTheAllocationAndGeneration, tether.TestDesired_CrashLoopIsRescheduledThenDown, tether.TestAgent_PolicyGivesUpStaysDown
//	a stop on request stays stopped until
//	  the entry changes or is started again    TestDecide_DisabledStopsThenForgets, tether.TestAgent_EnableAndDisable
//	ready is recorded when it happens, with
//	  no CLI waiting (the executor journals
//	  it; the owner's supervisor records it)   driver.TestReady_RecordedFromTheJournalWithNobodyWaiting, driver.TestReady_TheSupervisorRecordsIt, driver.TestReady_DriverCrashBetweenTheReadyAndItsRecord, tether.TestDesired_WebServiceWithItsCheckRunsAndComesBack
//	the agent reaps every child it spawned,
//	  whoever killed it (no zombie executor)   tether.TestDesired_KilledExecutorsLeaveNoZombie, tether.TestAgent_ServiceComesBackAfterItsExecutorAndTaskAreKilled
//	at most one task per desired task is
//	  live across any crash (every durable
//	  step a crash point); nothing is stopped
//	  when the agent ends, the next adopts it  tether.TestAgent_CrashPoints, tether.TestAgent_TermStopsNothingOnceAdopts, tether.TestAgent_PowerCutNewAgentBringsItBackOldTaskLost
//	a group a stop ends in its restart delay
//	  from another process is seen stopped
//	  by the group's driver (no spin)          driver.TestRestart_StopFromAnotherDriverDuringTheDelay
func TestContract_ListedTestsExist(t *testing.T) {
	b, err := os.ReadFile("contract_test.go")
	if err != nil {
		t.Fatal(err)
	}
	head := string(b[:strings.Index(string(b), "func TestContract_ListedTestsExist")])
	dirs := map[string]string{"": ".", "driver.": "../driver", "tether.": "../cmd/tether"}
	sources := map[string]string{}
	for prefix, dir := range dirs {
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
		sources[prefix] = all.String()
	}
	n := 0
	for _, m := range regexp.MustCompile(`\b(driver\.|tether\.)?(Test[A-Za-z0-9_]+)`).FindAllStringSubmatch(head, -1) {
		n++
		if !strings.Contains(sources[m[1]], "func "+m[2]+"(") {
			t.Errorf("the contract lists %s%s, which %s has no test of that name", m[1], m[2], dirs[m[1]])
		}
	}
	if n < 20 {
		t.Fatalf("the contract lists %d tests: the comment above was not read", n)
	}
}
