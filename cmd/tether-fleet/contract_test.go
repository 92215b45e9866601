package main

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

// The fleet commands' promises (docs/fleet.md, "The cluster commands";
// the agent's are with its tests), each with the tests that hold it:
//
//	status: every node's tasks with its
//	  liveness; a down node's live task
//	  unknown, an ended one as it ended     TestCluster_StatusShowsEveryNodesTasksWithTheirNodesLiveness, TestDocs_FleetJSONFieldsAreDocumented
//	nodes: liveness, tasks, mirror lag      TestCluster_NodesShowLivenessTasksAndMirrorLag
//	events: the node's lines, names
//	  resolved per node, -f once each
//	  until the end, across a leader kill   TestCluster_EventsAreWhatTetherEventsPrintsOnTheNode, TestCluster_EventsResolveNamesOnEachNode, TestCluster_EventsFollowPrintsEachEventOnceUntilTheTaskEnds, TestCluster_EventsFollowJSONIsOneObjectALineAndCtrlCEndsIt, TestE2E_CommandsAndAFollowAcrossALeaderKill
//	start/stop --node: a file refused
//	  before anything is written            TestCluster_StartAndStopTellANodeWhatToRun, TestCluster_StartRefusesABadFileBeforeEtcdIsAsked
//	run: a job file refused before
//	  anything is written; placed on the
//	  nodes that can hold it; without
//	  --detach it waits for every copy to
//	  run, or fails naming why a copy
//	  cannot be placed                      TestCluster_RunRefusesAFileBeforeAnythingIsWritten, TestCluster_RunPlacesAJobAndStatusShowsWhereEachCopyIs, TestCluster_RunFailsNamingWhyNoNodeCanHoldACopy
//	stop JOB, status JOB (and its JSON,
//	  documented both ways)                 TestCluster_StopWithoutNodeStopsAJobAndSaysWhenThereIsNone, TestDocs_FleetJobJSONFieldsAreDocumented
//	a refused etcd fails a command at
//	  once, a silent one is a timeout said
//	  as one; after an outage the catch-up
//	  shows                                 TestCluster_RefusedEtcdFailsACommandAtOnce, TestCluster_UnansweringEtcdIsATimeoutSaidAsOne, TestE2E_FullOutageCommandsSayEtcdIsUnavailableThenSeeTheCatchUp
//	plaintext only on the loopback;
//	  mutual TLS                            TestCluster_PlaintextOnlyOnLoopbackAndMutualTLS
//	flags anywhere, help per command,
//	  usage errors exit 2                   TestCluster_FlagsAnywhereHelpAndUsageErrors
//	placed jobs on the nodes: a copy runs
//	  on its node through the one job
//	  path, only on nodes its constraint
//	  matches; the node's verdict is its
//	  agent's standing of the current
//	  placement; a node that comes back
//	  stops what it no longer owns before
//	  it starts anything, and trusts no
//	  local copy of its placements; a
//	  dead node's copies run elsewhere
//	  within the lease plus 2s; nothing
//	  runs twice once quiet                 TestFleet_PlacedJobRunsOnMatchingNodesMovesWhenANodeDiesAndNeverRunsTwice, TestNodeFeed_StopsWhatItNoLongerOwnsBeforeItStartsAnything, TestNodeFeed_LocalCopysPlacementsLeaveCopiesAsTheyAre, TestNodeFeed_VerdictIsTheStandingOfTheCurrentPlacement, TestNodeFeed_DeclaresNothingBeforeTheAgentsStatus
//	stop_after_client_disconnect: the
//	  node stops its copies once etcd is
//	  away that long, and runs them again
//	  only on placements read after        TestNodeFeed_StopAfterClientDisconnectStopsAndWaitsForFreshPlacements, TestFleet_StopAfterClientDisconnectStopsTheCopyOnItsNodeWithoutEtcd
//	run fails at once on a node's refusal
//	  of a copy, naming node and reason     TestCluster_RunFailsNamingANodesRefusalAndItsReason
//	the README's fleet tour runs as
//	  written                               TestREADME_FleetTourRunsAsWritten, TestREADME_FleetTourExpectationsMatchItsLines

// TestContract_EveryListedTestExists holds the list above to the
// package's tests.
func TestContract_EveryListedTestExists(t *testing.T) {
	src, err := os.ReadFile("contract_test.go")
	if err != nil {
		t.Fatal(err)
	}
	block, _, _ := strings.Cut(string(src), "// TestContract_EveryListedTestExists")
	listed := regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*`).FindAllString(block, -1)
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
