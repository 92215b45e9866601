package cluster

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The package's promises (doc.go, docs/fleet.md), each with the tests
// that hold it:
//
//	the mirror: every committed event
//	  once, in order, never ahead of the
//	  local log, across crashes, member
//	  kills, outages and lost replies       TestMirror_EveryEventExactlyOnceInOrder, TestMirror_LostReplyIsNotWrittenTwice, TestMirror_LinearizableUnderMemberKillsAndCrashes, TestE2E_CrashAtEveryPointConvergesExactlyOnce, TestE2E_FullOutageLocalSideGoesOnMirrorCatchesUpExactlyOnce
//	a writer that lost the node writes
//	  nothing (the lease fence)             TestMirror_WriterThatLostTheNodeIsFenced, TestNode_WriteVerdictIsFencedByItsLease
//	environment values never reach etcd    TestMirror_EnvironmentValuesNeverReachEtcd, TestEncodeEvent_RoundTripsEveryEventWithEnvRedacted
//	liveness: one agent holds a node;
//	  its own successor takes over at
//	  once; a stopped agent renews
//	  nothing, its node shows down          TestRegister_SecondAgentIsRefusedNamingTheHolder, TestRegister_EarlierAgentOfTheSameStateDirectoryIsTakenOver, TestNode_ShowsDownWithinTheLeaseTTLOnceItsAgentStops, TestE2E_SIGKILLedAgentShowsDownWithinTheLeaseTTL
//	a task stopped just before its agent
//	  exits is shown stopped, not unknown   TestNode_TaskStoppedJustBeforeTheAgentExitsIsMirroredStopped
//	the desired state: delivered, kept
//	  locally, untrusted keys refused       TestDesired_StartChangeStopAreDelivered, TestDesired_LocalCopyRunsWhatTheNodeWasLastToldWithoutEtcd, TestDesired_UntrustedKeysAreRefusedNotRun
//	a node registers its fingerprint,
//	  meta, capacity (never over the
//	  host's) and remote drivers with its
//	  liveness key, in one transaction      TestRegister_WritesTheNodesFingerprintWithItsLivenessKey, TestFingerprint_Defaults, TestFingerprint_RefusesWhatTheHostDoesNotHave, TestParseCapacityAndMeta
//	placement, a pure function: every
//	  placement feasible, no node over
//	  capacity, count honoured when
//	  feasible, deterministic, the reason
//	  of a copy not placed names the
//	  constraint and the resource           TestPlace_Properties, TestPlace_ReasonNamesTheConstraintAndTheResource, TestPlace_ExactFitIsFeasibleOneMoreIsNot, TestPlace_CapacityCountsEveryJobsPlacedCopies, TestPlace_DriverNotAllowedIsTheReason
//	constraints, distinct_hosts and
//	  distinct_property at their scopes     TestPlace_ConstraintOnMetaLandsOnlyOnMatchingNodes, TestPlace_DistinctHostsJobAndGroupScopes, TestPlace_DistinctPropertyLimit
//	ranking: bin packing, job
//	  anti-affinity, affinity, spread       TestPlace_BinPackingPrefersTheFullerNode, TestPlace_AntiAffinityProperty, TestPlace_AntiAffinitySpreadsCopiesOverEqualNodes, TestPlace_AffinityPrefersAndAntiAffinityAvoids, TestPlace_SpreadByTargetPercentages, TestPlace_EvenSpreadOverDatacenters
//	one scheduler: a deposed one's write
//	  fails whole; a copy is under one
//	  node at every revision; a crash at
//	  any step leaves a fleet the next
//	  leader settles                        TestScheduler_DeposedSchedulersWriteFailsWhole, TestScheduler_SimulatedFleetProperty, TestScheduler_KilledLeadersAgentIsReplacedWithinItsLease, TestScheduler_ConcurrentRunFailsThePassNotTheCopies
//	a lost node's copies placed elsewhere
//	  at once, after max_client_disconnect
//	  where given; a frozen node's moved
//	  never                                 TestScheduler_LostNodesCopiesArePlacedElsewhereAtOnce, TestScheduler_MaxClientDisconnectKeepsCopiesUntilItPasses, TestScheduler_NodeFrozenUnderItsLeaseMovesNothing
//	a node back from lost is held off
//	  three lease TTLs, again after a new
//	  lapse                                 TestReconcileNodes_Transitions, TestScheduler_ReturningNodeIsHeldOffForThreeLeases, TestScheduler_LeaseLostAgainWithinTheHoldoffRestartsIt
//	a failed copy placed again under the
//	  reschedule policy, elsewhere; a
//	  verdict counts only for its
//	  placement revision                    TestScheduler_FailedCopyIsPlacedAgainAfterItsDelayElsewhere, TestNomadDefaultReschedule, TestPlace_FailedCopyAvoidsItsPreviousNode, TestScheduler_StaleVerdictSaysNothingOfANewPlacement
//	a placed copy is read on its node as
//	  one copy of its group, its
//	  placement in its digest; a driver
//	  not allowed remotely refused;
//	  stop_after_client_disconnect at its
//	  edges; a verdict written only about
//	  the copy's current placement, under
//	  the node's lease                      TestReadCopy_IsOneCopyOfItsGroupAtItsPlacement, TestReadCopy_RefusesADriverNotAllowedAndACopyPastTheCount, TestCopyPlan_StopAfterClientDisconnectAtItsEdges, TestCopyPlan_RefusedPlacementsAreNamedWithTheirRevision, TestVerdictOf_EveryStanding, TestNode_WriteVerdictIsFencedByItsLease
//	a changed job replaced max_parallel
//	  at a time; count down and stop
//	  remove copies                         TestScheduler_RollingUpdateMaxParallel, TestScheduler_StopAndCountDownRemoveCopies
//	a job file is refused before anything
//	  is written, as the scheduler would    TestParseJob_RefusesWhatTheSchedulerDoesNotPlace, TestParseJob_InputsAreThoseStored
//	a refused etcd is said at once, a
//	  silent one as a timeout               TestProbe_RefusedTimedOutAndAnswered
//	the etcd client stays out of what an
//	  embedder links                        TestDeps_EmbedderPackagesDoNotLinkEtcd

// TestContract_EveryListedTestExists holds the list above to the
// package's tests: a promise whose test was renamed or removed fails it.
func TestContract_EveryListedTestExists(t *testing.T) {
	src, err := os.ReadFile("contract_test.go")
	if err != nil {
		t.Fatal(err)
	}
	block, _, _ := strings.Cut(string(src), "// TestContract_EveryListedTestExists")
	listed := regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*`).FindAllString(block, -1)
	if len(listed) < 20 {
		t.Fatalf("only %d tests listed", len(listed))
	}
	have := map[string]bool{}
	files, _ := filepath.Glob("*_test.go")
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				have[fd.Name.Name] = true
			}
		}
	}
	for _, name := range listed {
		if !have[name] {
			t.Errorf("contract lists %s, which is no test of the package", name)
		}
	}
}
