//go:build linux

package executor

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// flakyServer serves /file ("payload") from its n-th request on, and 503
// before (an artifact a sidecar serves once it is up); hits counts them.
func flakyServer(t *testing.T, n int32) (url string, hits *atomic.Int32) {
	t.Helper()
	hits = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) < n {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("payload"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/file", hits
}

// TestLaunch_ArtifactFetchRetriedUnderTheRestartPolicy: a failed artifact
// fetch is a recoverable failure, as in Nomad: with a restart policy the
// executor tries again after its delay, the tries counting in the policy's
// interval, until the fetch succeeds (the launch then says how many tries
// failed) or the policy gives up (the launch fails, saying so); without a
// policy the first failure fails the launch. The tries are no runs: the
// journal has no restart for them, and the runs' restarts go on from the
// count they left.
func TestLaunch_ArtifactFetchRetriedUnderTheRestartPolicy(t *testing.T) {
	launch := func(t *testing.T, m marker, url string, rp *fsm.RestartPolicy, script string) (*Client, wire.Status, error) {
		c := spawn(t, m, "")
		l := shellTask(m, wire.ModeRawExec, script)
		l.Alloc = allocOf(t, "web")
		l.Restart = rp
		l.Artifacts = []fsm.Artifact{{Source: url, Destination: "local/file", Mode: fsm.ArtifactFile}}
		st, err := c.Launch(testCtx(t), l)
		return c, st, err
	}
	t.Run("served at the third try", func(t *testing.T) {
		m := newMarker(t)
		url, hits := flakyServer(t, 3)
		rp := &fsm.RestartPolicy{Attempts: 3, Interval: time.Hour, Delay: 10 * time.Millisecond, Mode: fsm.RestartFail}
		c, st, err := launch(t, m, url, rp, "cat local/file; exit 1")
		if err != nil {
			t.Fatalf("Launch: %v (after %d fetches)", err, hits.Load())
		}
		if hits.Load() != 3 || len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0].Text, "fetched at try 3, after 2 that failed") || !strings.Contains(st.Warnings[0].Text, "503") {
			t.Fatalf("%d fetches, warnings %v; want 3, the launch saying 2 failed (503)", hits.Load(), st.Warnings)
		}
		// Two tries failed of the three restarts in the interval: the run's
		// exit is restarted once more (restart 3 of 3), then the policy is
		// done. The journal numbers that restart 1.
		entries := watchUntil(t, c, 2)
		if in := entries[0]; in.Attempt != 1 || !strings.Contains(in.Reason, "restart 3 of 3") {
			t.Fatalf("the run's restart: attempt %d %q, want attempt 1, restart 3 of 3", in.Attempt, in.Reason)
		}
		x, err := c.Wait(testCtx(t))
		if err != nil || x.Code != 1 {
			t.Fatalf("Wait: %+v %v", x, err)
		}
		if st, err := c.Status(testCtx(t)); err == nil && st.Journal != 2 {
			t.Fatalf("journal of %d entries, want the one restart's 2", st.Journal)
		}
	})
	t.Run("the policy gives up", func(t *testing.T) {
		m := newMarker(t)
		url, hits := flakyServer(t, 100)
		rp := &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Delay: 10 * time.Millisecond, Mode: fsm.RestartFail}
		_, _, err := launch(t, m, url, rp, "exit 0")
		if !errors.Is(err, wire.ErrArtifact) || !strings.Contains(err.Error(), "try 2") || !strings.Contains(err.Error(), "tries no more") || hits.Load() != 2 {
			t.Fatalf("Launch: %v after %d fetches; want ErrArtifact after 2 tries, naming the policy", err, hits.Load())
		}
	})
	t.Run("a getter tether does not have is not tried again", func(t *testing.T) {
		// The policy would wait 20 minutes between tries: the launch fails
		// at once, naming the getter, for no try can go otherwise.
		m := newMarker(t)
		rp := &fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Delay: 20 * time.Minute, Mode: fsm.RestartFail}
		_, _, err := launch(t, m, "git::https://example.invalid/repo", rp, "exit 0")
		if !errors.Is(err, wire.ErrArtifact) || !strings.Contains(err.Error(), `the "git" getter is not supported`) || strings.Contains(err.Error(), "try ") {
			t.Fatalf("Launch: %v; want ErrArtifact naming the git getter, at the first try", err)
		}
	})
	t.Run("no restart policy", func(t *testing.T) {
		m := newMarker(t)
		url, hits := flakyServer(t, 2)
		_, _, err := launch(t, m, url, nil, "exit 0")
		if !errors.Is(err, wire.ErrArtifact) || hits.Load() != 1 {
			t.Fatalf("Launch: %v after %d fetches; want ErrArtifact at the first", err, hits.Load())
		}
	})
}
