package main

import (
	"os"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/internal/etcdtest"
)

// Flags go anywhere, before `cluster` too, as tether's own do; mistakes
// get a suggestion; help is per command, its global flags apart.
func TestCluster_FlagsAnywhereHelpAndUsageErrors(t *testing.T) {
	ep := etcdtest.Embedded(t)
	for _, args := range [][]string{
		{"cluster", "status", "--endpoints", ep},
		{"--endpoints", ep, "cluster", "status"},
		{"cluster", "--endpoints=" + ep, "status", "--json"},
		{"--log-level", "debug", "cluster", "--all", "status", "--endpoints", ep},
		{"cluster", "nodes", "--command-timeout", "5s", "--endpoints", ep},
	} {
		if r := tether(t, args...); r.code != 0 {
			t.Errorf("tether %q: %s", args, r)
		}
	}
	cmd := tetherCmd(ctxT(t), "cluster", "status", "--json")
	cmd.Env = append(cmd.Env, envEndpoints+"="+ep)
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "[]" {
		t.Errorf("endpoints from %s: %v\n%s", envEndpoints, err, out)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"cluster", "status"}, "give --endpoints URLS (or set " + envEndpoints + ")"},
		{[]string{"cluster", "stauts", "--endpoints", ep}, `cluster has no command "stauts"; did you mean status?`},
		{[]string{"cluster", "status", "--jsn", "--endpoints", ep}, "cluster status has no flag --jsn; did you mean --json?"},
		{[]string{"cluster", "--endpoints", ep, "--command-timeout", "5", "nodes"}, "did you mean 5s?"},
		{[]string{"cluster", "--endpoints", ep, "events"}, "events takes one task id or name"},
		{[]string{"cluster", "--endpoints", ep, "start", "web.hcl"}, "start takes --node NODE and one task file"},
		{[]string{"cluster", "--endpoints", ep, "stop", "--node", "../n1", "web"}, "invalid node name"},
		{[]string{"cluster", "--endpoints", ep, "status", "web", "extra"}, "status takes at most one job name"},
		{[]string{"cluster", "--endpoints", ep, "status", "my job"}, `job "my job"`},
		{[]string{"cluster", "--endpoints", ep, "run"}, "run takes one job file"},
		{[]string{"cluster", "--endpoints", ep, "run", "--timeout", "0s", "web.nomad"}, "--timeout 0s: must be positive"},
		{[]string{"cluster", "--endpoints", ep, "stop"}, "stop takes one job name"},
		{[]string{"cluster"}, "Usage: tether cluster COMMAND"},
	} {
		r := tether(t, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.says) {
			t.Errorf("tether %q: want exit 2 saying %q:\n%s", c.args, c.says, r)
		}
	}
	for _, args := range [][]string{{"cluster", "-h"}, {"help", "cluster"}, {"cluster", "help"}} {
		r := must(t, args...)
		for _, want := range []string{"\n  status ", "\n  nodes ", "\n  events ", "\n  run ", "\n  start ", "\n  stop ", "--endpoints URLS", "--cluster-tls-ca FILE"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("tether %q lacks %q:\n%s", args, want, r.stdout)
			}
		}
	}
	for _, cmd := range clusterCommands() {
		for _, args := range [][]string{{"cluster", cmd.name, "-h"}, {"cluster", "help", cmd.name}, {"--endpoints", "x", "cluster", cmd.name, "--help"}} {
			r := must(t, args...)
			own, global, ok := strings.Cut(r.stdout, "\nGlobal flags:\n")
			if !ok || !strings.HasPrefix(r.stdout, "Usage: tether cluster "+cmd.name+" ") || r.stderr != "" {
				t.Errorf("tether %q:\n%s", args, r)
				continue
			}
			if strings.Contains(own, "--endpoints") || !strings.Contains(global, "--endpoints") || !strings.Contains(own, "--help") {
				t.Errorf("tether %q: its own flags and the global ones are not apart:\n%s", args, r.stdout)
			}
		}
	}
	r := must(t, "cluster", "start", "-h")
	for _, want := range []string{"--node NODE", "--task TASK", "--replace"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("start -h lacks %s:\n%s", want, r.stdout)
		}
	}
	r = must(t, "cluster", "run", "-h")
	for _, want := range []string{"--var NAME=VALUE", "--var-file FILE", "--meta KEY=VALUE", "on 'tether agent', --meta is the node's meta", "--detach", "--timeout"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run -h lacks %s:\n%s", want, r.stdout)
		}
	}
	v := must(t, "cluster", "--version")
	if !strings.HasPrefix(v.stdout, "tether-fleet ") {
		t.Errorf("--version: %s", v)
	}
}

// Whoever can write to etcd tells nodes what to run: plaintext is refused
// off the loopback, and over TLS both ends prove who they are.
func TestCluster_PlaintextOnlyOnLoopbackAndMutualTLS(t *testing.T) {
	r := tether(t, "cluster", "--endpoints", "http://192.0.2.1:2379", "status")
	if r.code != exitError || !strings.Contains(r.stderr, "not on this machine's loopback") || !strings.Contains(r.stderr, "--cluster-tls-cert") {
		t.Errorf("plaintext to another host:\n%s", r)
	}
	p := etcdtest.NewPKI(t)
	ep := etcdtest.EmbeddedTLS(t, p)
	ok := must(t, "cluster", "--endpoints", ep, "--cluster-tls-ca", p.CA, "--cluster-tls-cert", p.ClientCert, "--cluster-tls-key", p.ClientKey, "status", "--json")
	if strings.TrimSpace(ok.stdout) != "[]" {
		t.Errorf("status over mutual TLS: %s", ok)
	}
	for _, c := range []struct {
		what string
		args []string
		says string
	}{
		{"no client certificate", []string{"--endpoints", ep}, "no client certificate is given"},
		{"half the files", []string{"--endpoints", ep, "--cluster-tls-ca", p.CA}, "give all three"},
		{"http with TLS files", []string{"--endpoints", strings.Replace(ep, "https", "http", 1), "--cluster-tls-ca", p.CA, "--cluster-tls-cert", p.ClientCert, "--cluster-tls-key", p.ClientKey}, "use https://"},
		{"another CA's certificate", []string{"--endpoints", ep, "--command-timeout", "3s", "--cluster-tls-ca", p.CA, "--cluster-tls-cert", p.StrangerCert, "--cluster-tls-key", p.Stranger}, "etcd unavailable"},
	} {
		r := tether(t, append(append([]string{"cluster"}, c.args...), "status")...)
		if r.code != exitError || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%s: want exit 1 saying %q:\n%s", c.what, c.says, r)
		}
	}
	if err := os.Chmod(p.ClientKey, 0o644); err != nil {
		t.Fatal(err)
	}
	r = tether(t, "cluster", "--endpoints", ep, "--cluster-tls-ca", p.CA, "--cluster-tls-cert", p.ClientCert, "--cluster-tls-key", p.ClientKey, "status")
	if r.code != exitError || !strings.Contains(r.stderr, "chmod 600") {
		t.Errorf("a key others can read:\n%s", r)
	}
}
