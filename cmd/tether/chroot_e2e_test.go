package main

import (
	"os"
	"strings"
	"testing"
)

// TestRun_ChrootEnvFlagShapesTheExecRoot: --chroot-env (and
// TETHER_CHROOT_ENV) set what an exec task's root is bound from; an entry
// that does not exist is refused before anything runs.
func TestRun_ChrootEnvFlagShapesTheExecRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("exec tasks need root (namespaces, pivot_root)")
	}
	e := newEnv(t)
	entries := "/bin,/lib,/usr"
	if _, err := os.Stat("/lib64"); err == nil {
		entries += ",/lib64"
	}
	r := e.tether("--chroot-env", entries, "run", "--driver", "exec", "--", "/bin/ls", "/")
	if r.code != 0 {
		t.Fatalf("exec with --chroot-env: %s", r)
	}
	root := strings.Fields(r.stdout)
	has := func(name string) bool {
		for _, n := range root {
			if n == name {
				return true
			}
		}
		return false
	}
	if has("etc") || has("sbin") {
		t.Errorf("the root has entries --chroot-env left out: %v", root)
	}
	for _, want := range []string{"bin", "usr", "proc", "dev", "local", "tmp"} {
		if !has(want) {
			t.Errorf("the root lacks %s: %v", want, root)
		}
	}
	env := e.tetherEnv([]string{"TETHER_CHROOT_ENV=" + entries + ",/etc"}, "run", "--driver", "exec", "--", "/bin/ls", "/")
	if env.code != 0 || !strings.Contains(env.stdout, "etc") {
		t.Errorf("TETHER_CHROOT_ENV with /etc: %s", env)
	}
	bad := e.tether("--chroot-env", "/bin,/no/such/dir", "run", "--driver", "exec", "--", "/bin/true")
	if bad.code != exitUsage && bad.code != exitError || !strings.Contains(bad.stderr, "/no/such/dir") || !strings.Contains(bad.stderr, "--chroot-env") {
		t.Errorf("a missing chroot entry: want a clear error naming it\n%s", bad)
	}
	if st := e.tether("status", "--all"); strings.Count(st.stdout, "\n") != 3 {
		t.Errorf("the refused run recorded a task:\n%s", st)
	}
}
