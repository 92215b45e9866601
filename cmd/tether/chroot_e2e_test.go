package main

import (
	"os"
	"slices"
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
	r := e.tether("--chroot-env", entries, "run", "--driver", "exec", "--", "/bin/ls", "-A", "/")
	if r.code != 0 {
		t.Fatalf("exec with --chroot-env: %s", r)
	}
	root := strings.Fields(r.stdout)
	// Exactly the entries and what the executor makes: nothing of its
	// own (such as the file masking /etc/shadow) shows at /.
	want := []string{"alloc", "dev", "local", "proc", "secrets", "tmp"}
	for _, e := range strings.Split(entries, ",") {
		want = append(want, strings.TrimPrefix(e, "/"))
	}
	slices.Sort(want)
	if got := slices.Sorted(slices.Values(root)); !slices.Equal(got, want) {
		t.Errorf("ls -A / inside the task: %v, want exactly %v", got, want)
	}
	if tmp := e.tether("--chroot-env", entries, "run", "--driver", "exec", "--", "/bin/ls", "-ld", "/tmp"); tmp.code != 0 || !strings.HasPrefix(tmp.stdout, "drwxrwxrwt") {
		t.Errorf("/tmp inside the task: want drwxrwxrwt (1777, as /tmp): %s", tmp)
	}
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
	// With /etc, /etc/shadow is masked; the mask does not show at /.
	env := e.tetherEnv([]string{"TETHER_CHROOT_ENV=" + entries + ",/etc"}, "run", "--driver", "exec", "--", "/bin/ls", "-A", "/")
	if env.code != 0 || !slices.Contains(strings.Fields(env.stdout), "etc") || strings.Contains(env.stdout, ".") {
		t.Errorf("TETHER_CHROOT_ENV with /etc: want etc, and no dot file at /: %s", env)
	}
	bad := e.tether("--chroot-env", "/bin,/no/such/dir", "run", "--driver", "exec", "--", "/bin/true")
	if bad.code != exitUsage && bad.code != exitError || !strings.Contains(bad.stderr, "/no/such/dir") || !strings.Contains(bad.stderr, "--chroot-env") {
		t.Errorf("a missing chroot entry: want a clear error naming it\n%s", bad)
	}
	if st := e.tether("status", "--all"); strings.Count(st.stdout, " ls ") != 3 {
		t.Errorf("the refused run recorded a task:\n%s", st)
	}
}
