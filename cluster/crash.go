package cluster

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Crash points: every durable step of the node's side, named, so that a
// test (or an operator, through TETHER_CLUSTER_CRASHPOINT) can kill the
// agent there and watch the mirror recover. They cost one nil check when
// disabled.
const (
	// CrashMirrorBeforeTxn: a batch of events is read from the local log
	// and its guarded transaction built, not sent.
	CrashMirrorBeforeTxn = "mirror:before-txn"
	// CrashMirrorAfterTxn: etcd committed the batch; the mirror has not
	// seen the answer (a reply lost in flight looks the same).
	CrashMirrorAfterTxn = "mirror:after-txn"
	// CrashMirrorBeforePrune: a task gone from the local log is about to
	// be deleted from the mirror.
	CrashMirrorBeforePrune = "mirror:before-prune"
	// CrashMirrorAfterPrune: it was.
	CrashMirrorAfterPrune = "mirror:after-prune"
	// CrashLivenessAfterGrant: a lease is granted and recorded in the
	// state directory, the liveness key not yet created under it.
	CrashLivenessAfterGrant = "liveness:after-grant"
	// CrashLivenessAfterCreate: the liveness key exists under the new
	// lease; the node has not started to use it.
	CrashLivenessAfterCreate = "liveness:after-create"
	// CrashDesiredBeforeCopy: a desired set is about to be written to the
	// local copy.
	CrashDesiredBeforeCopy = "desired:before-copy"
	// CrashDesiredAfterCopy: the local copy is durable, the set not yet
	// delivered.
	CrashDesiredAfterCopy = "desired:after-copy"
	// CrashPlacedBeforeCopy: the node's placements are about to be
	// written to their local copy.
	CrashPlacedBeforeCopy = "placed:before-copy"
	// CrashPlacedAfterCopy: that copy is durable, the placements not yet
	// delivered.
	CrashPlacedAfterCopy = "placed:after-copy"
)

// CrashPoints lists every crash point, in the order a node meets them.
func CrashPoints() []string {
	return []string{
		CrashLivenessAfterGrant, CrashLivenessAfterCreate,
		CrashMirrorBeforeTxn, CrashMirrorAfterTxn, CrashMirrorBeforePrune, CrashMirrorAfterPrune,
		CrashDesiredBeforeCopy, CrashDesiredAfterCopy, CrashPlacedBeforeCopy, CrashPlacedAfterCopy,
	}
}

// Hooks let tests crash the node at named points. The zero value
// disables them.
type Hooks struct {
	// Crash is called at every crash point. A real-process test's Crash
	// SIGKILLs the process (HooksFromEnv); a simulation's may panic or
	// block.
	Crash func(point string)
}

func (h Hooks) crash(point string) {
	if h.Crash != nil {
		h.Crash(point)
	}
}

// EnvCrashPoint names a crash point for HooksFromEnv: POINT or POINT:N
// (SIGKILL self at its N-th hit, default the first).
const EnvCrashPoint = "TETHER_CLUSTER_CRASHPOINT"

// HooksFromEnv builds hooks from TETHER_CLUSTER_CRASHPOINT: a node's
// point (CrashPoints) or its scheduler's (SchedulerCrashPoints). An
// unknown point is an error, so a typo cannot silently disable a test.
func HooksFromEnv() (Hooks, error) {
	v := os.Getenv(EnvCrashPoint)
	if v == "" {
		return Hooks{}, nil
	}
	name, n := v, 1
	if i := strings.LastIndexByte(v, ':'); i > 0 {
		if k, err := strconv.Atoi(v[i+1:]); err == nil {
			name, n = v[:i], k
		}
	}
	known := append(CrashPoints(), SchedulerCrashPoints()...)
	if !slices.Contains(known, name) || n < 1 {
		return Hooks{}, fmt.Errorf("%s=%q: unknown crash point or count; known points: %s", EnvCrashPoint, v, strings.Join(known, ", "))
	}
	var mu sync.Mutex
	hits := 0
	return Hooks{Crash: func(point string) {
		if point != name {
			return
		}
		mu.Lock()
		hits++
		fire := hits == n
		mu.Unlock()
		if fire {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never go on past a crash point
		}
	}}, nil
}
