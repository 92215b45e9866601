//go:build linux

package executor

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// spawnJournalled is spawn with the executor's journal at sock.
func spawnJournalled(t *testing.T, m marker, dir, sock string) *Client {
	t.Helper()
	c, err := Spawn(testCtx(t), SpawnConfig{Command: []string{testBinary(t), "executor-journal", m.arg(), sock}, TaskDir: dir, Nonce: randHex(t, 12)})
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	id := c.Identity()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Shutdown(ctx); err != nil && !errors.Is(err, wire.ErrClosed) {
			t.Errorf("Shutdown: %v", err)
		}
		c.Close()
		waitDead(t, id)
		removeTaskCgroup(t, id)
	})
	return c
}

// journalFields parses one datagram of journald's native protocol (text
// fields only: the executor's values hold no newline).
func journalFields(b []byte) map[string]string {
	out := map[string]string{}
	for _, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if k, v, ok := bytes.Cut(l, []byte("=")); ok {
			out[string(k)] = string(v)
		}
	}
	return out
}

// TestOutput_ForwardedToTheJournal: with logs { journald = true } each line
// of the task's stdout and stderr is an entry of the journal (the socket
// the executor is pointed at, read here as journald would), with the
// task's id (its directory's name), its name, its stream and the stream's
// priority, the last line without a newline included; the files hold the
// output as they do without it. Without a journal the task runs, its
// output in its files, and the launch warns once, naming the socket.
func TestOutput_ForwardedToTheJournal(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	sock := filepath.Join(t.TempDir(), "journal")
	jc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer jc.Close()
	dir := filepath.Join(t.TempDir(), "web-a1b2c3")
	c := spawnJournalled(t, m, dir, sock)
	l := wire.Launch{Spec: fsm.Spec{Name: "web", Driver: wire.ModeRawExec, Command: "/bin/sh",
		Args: []string{"-c", "echo out1; echo err1 >&2; echo out2; printf tail"},
		Env:  map[string]string{"TETHER_TEST_MARKER": string(m)}, Logs: fsm.LogConfig{Journald: true}}}
	st, err := c.Launch(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Warnings) != 0 {
		t.Errorf("launch warnings with a journal: %v", st.Warnings)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v", x, err)
	}
	got := map[string]map[string]string{}
	buf := make([]byte, 64<<10)
	for len(got) < 4 {
		_ = jc.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := jc.Read(buf)
		if err != nil {
			t.Fatalf("the journal got %d entries (%v), want 4: %v", len(got), got, err)
		}
		e := journalFields(buf[:n])
		got[e["MESSAGE"]] = e
	}
	for msg, stream := range map[string]string{"out1": "stdout", "out2": "stdout", "tail": "stdout", "err1": "stderr"} {
		e, ok := got[msg]
		if !ok {
			t.Errorf("no entry %q in %v", msg, got)
			continue
		}
		prio := map[string]string{"stdout": "6", "stderr": "3"}[stream]
		for k, v := range map[string]string{"TETHER_TASK_ID": "web-a1b2c3", "TETHER_TASK_NAME": "web", "SYSLOG_IDENTIFIER": "web",
			"TETHER_STREAM": stream, "PRIORITY": prio} {
			if e[k] != v {
				t.Errorf("entry %q: %s=%q, want %q", msg, k, e[k], v)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, statedir.StdoutFile)); err != nil || string(b) != "out1\nout2\ntail" {
		t.Errorf("stdout's file: %q, %v; want the output as without the journal", b, err)
	}

	// No journal: the task runs, its output in its files, one warning.
	missing := filepath.Join(t.TempDir(), "no-journal")
	dir2 := filepath.Join(t.TempDir(), "web-d4e5f6")
	c2 := spawnJournalled(t, m, dir2, missing)
	l.Args = []string{"-c", "echo kept"}
	st, err = c2.Launch(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0].Text, missing) || !strings.Contains(st.Warnings[0].Text, "journald") {
		t.Errorf("launch warnings without a journal: %v, want one naming %s", st.Warnings, missing)
	}
	if x, err := c2.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v", x, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir2, statedir.StdoutFile)); err != nil || string(b) != "kept\n" {
		t.Errorf("stdout's file without a journal: %q, %v", b, err)
	}
}
