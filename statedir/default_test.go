package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Default's rules, each row with the variables that a rule above it
// would take, and root with and without the system directory.
func TestDefault_EnvThenRootsSystemDirThenXDGThenHome(t *testing.T) {
	env := func(vars map[string]string, euid int, system bool) DefaultEnv {
		return DefaultEnv{Getenv: func(k string) string { return vars[k] }, Euid: euid, Home: "/home/u",
			IsDir: func(p string) bool { return system && p == SystemDir }}
	}
	both := map[string]string{"TETHER_STATE_DIR": "/from/env", "XDG_STATE_HOME": "/xdg"}
	xdg := map[string]string{"XDG_STATE_HOME": "/xdg"}
	for _, c := range []struct {
		name                string
		e                   DefaultEnv
		wantDir, wantPassed string
	}{
		{"TETHER_STATE_DIR first, for root too", env(both, 0, true), "/from/env", ""},
		{"root with the system dir: it, over XDG", env(xdg, 0, true), SystemDir, "/xdg/tether"},
		{"root with the system dir: it, over home", env(nil, 0, true), SystemDir, "/home/u/.local/state/tether"},
		{"root without it: XDG", env(xdg, 0, false), "/xdg/tether", ""},
		{"root without it: home", env(nil, 0, false), "/home/u/.local/state/tether", ""},
		{"a user: XDG, whatever exists", env(xdg, 1000, true), "/xdg/tether", ""},
		{"a user: home", env(nil, 1000, true), "/home/u/.local/state/tether", ""},
		{"a relative XDG is not taken", env(map[string]string{"XDG_STATE_HOME": "rel"}, 1000, false), "/home/u/.local/state/tether", ""},
	} {
		dir, passed, err := Default(c.e)
		if err != nil || dir != c.wantDir || passed != c.wantPassed {
			t.Errorf("%s: %q, passed over %q, %v; want %q, %q", c.name, dir, passed, err, c.wantDir, c.wantPassed)
		}
	}
	noHome := env(nil, 1000, false)
	noHome.Home, noHome.HomeErr = "", errors.New("$HOME is not defined")
	if dir, _, err := Default(noHome); err == nil || dir != "" {
		t.Errorf("no home, nothing set: %q, %v; want an error", dir, err)
	}
	// root with the system dir and no home: the system dir.
	noHome.Euid, noHome.IsDir = 0, func(p string) bool { return p == SystemDir }
	if dir, passed, err := Default(noHome); err != nil || dir != SystemDir || passed != "" {
		t.Errorf("root, no home: %q, %q, %v", dir, passed, err)
	}
}

func TestPassedOver_OnlyAStoreCounts(t *testing.T) {
	dir := t.TempDir()
	if PassedOver(dir) || PassedOver("") {
		t.Fatal("an empty directory (or none) holds no store")
	}
	if err := os.WriteFile(filepath.Join(dir, StoreFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !PassedOver(dir) {
		t.Fatal("a directory with a store is passed over")
	}
}
