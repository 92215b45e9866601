package cluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestConfig_PlaintextOnlyToLoopback(t *testing.T) {
	for _, c := range []struct {
		ep  string
		tls bool
		err error
	}{
		{"http://127.0.0.1:2379", false, nil},
		{"http://127.8.0.1:2379", false, nil},
		{"http://[::1]:2379", false, nil},
		{"http://localhost:2379", false, nil},
		{"127.0.0.1:2379", false, nil},
		{"unix:///run/etcd.sock", false, nil},
		{"http://10.0.0.5:2379", false, ErrInsecure},
		{"10.0.0.5:2379", false, ErrInsecure},
		{"http://etcd.example:2379", false, ErrInsecure},
		{"http://127.0.0.1.example:2379", false, ErrInsecure},
		{"https://10.0.0.5:2379", false, ErrInsecure}, // TLS without a client certificate
		{"https://10.0.0.5:2379", true, nil},
		{"10.0.0.5:2379", true, nil},
		{"http://10.0.0.5:2379", true, ErrEndpoint}, // TLS files with an http URL
		{"ftp://10.0.0.5:2379", false, ErrEndpoint},
		{"http://:2379", false, ErrEndpoint},
		{"nonsense", false, ErrEndpoint},
	} {
		cfg := Config{Endpoints: []string{c.ep}}
		if c.tls {
			cfg.TLS = TLS{CA: "ca", Cert: "c", Key: "k"}
		}
		_, err := cfg.endpoints()
		if c.err == nil && err != nil || c.err != nil && !errors.Is(err, c.err) {
			t.Errorf("%s (tls %v): %v, want %v", c.ep, c.tls, err, c.err)
		}
	}
	_, err := Dial(Config{Endpoints: []string{"http://192.0.2.1:2379"}})
	if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "--cluster-tls") {
		t.Errorf("Dial of a remote plaintext endpoint: %v, want ErrInsecure naming the TLS flags", err)
	}
	if _, err := Dial(Config{}); !errors.Is(err, ErrEndpoint) {
		t.Errorf("Dial with no endpoint: %v", err)
	}
}

func TestConfig_TLSNeedsAllThreeFilesAndAPrivateKey(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeTestPKI(t, dir)
	if _, err := (Config{TLS: TLS{CA: ca, Cert: cert}}).tlsConfig(); !errors.Is(err, ErrTLSConfig) {
		t.Errorf("no key: %v", err)
	}
	tc, err := (Config{TLS: TLS{CA: ca, Cert: cert, Key: key}}).tlsConfig()
	if err != nil || len(tc.Certificates) != 1 || tc.RootCAs == nil {
		t.Fatalf("a whole configuration: %v, %v", tc, err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (Config{TLS: TLS{CA: ca, Cert: cert, Key: key}}).tlsConfig(); !errors.Is(err, ErrTLSConfig) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable key: %v, want ErrTLSConfig saying chmod 600", err)
	}
	if _, err := (Config{TLS: TLS{CA: cert + ".missing", Cert: cert, Key: key}}).tlsConfig(); !errors.Is(err, ErrTLSConfig) {
		t.Errorf("a missing CA: %v", err)
	}
}

// writeTestPKI makes a CA and a client certificate signed by it with
// openssl, or skips where openssl is absent.
func writeTestPKI(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed (Debian package openssl): it makes the test certificates")
	}
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	caKey, csr := filepath.Join(dir, "ca.key"), filepath.Join(dir, "client.csr")
	for _, args := range [][]string{
		{"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", caKey, "-out", ca, "-days", "1", "-subj", "/CN=test-ca"},
		{"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=node"},
		{"x509", "-req", "-in", csr, "-CA", ca, "-CAkey", caKey, "-CAcreateserial", "-out", cert, "-days", "1"},
	} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	return ca, cert, key
}

func TestValidateNodeName_TheTaskIDRule(t *testing.T) {
	for name, ok := range map[string]bool{
		"n1": true, "node-3.dc1": true, "A_b": true, strings.Repeat("x", 63): true,
		"": false, "..": false, ".n": false, "-n": false, "a/b": false, "a b": false, "né": false, strings.Repeat("x", 64): false,
	} {
		if err := ValidateNodeName(name); (err == nil) != ok || err != nil && !errors.Is(err, ErrInvalidNode) {
			t.Errorf("ValidateNodeName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

func TestNewKeys_Prefix(t *testing.T) {
	for p, ok := range map[string]bool{"": true, "/tether/": true, "/a/b/": true, "tether/": false, "/tether": false, "/te ther/": false, "/x\x00/": false} {
		if _, err := NewKeys(p); (err == nil) != ok {
			t.Errorf("NewKeys(%q) = %v, want ok %v", p, err, ok)
		}
	}
	k, _ := NewKeys("")
	if got := k.event("n1", "t1", 42); got != "/tether/event/n1/t1/00000000000000000042" {
		t.Errorf("event key %q", got)
	}
}

// TestDeps_EmbedderPackagesDoNotLinkEtcd fails if the etcd client (or
// gRPC, protobuf or zap, which come with it) enters the packages an
// embedder imports, or the plain tether binary: that binary is the CLI,
// the executor and the init shim, started up to three times a task start,
// and the etcd client's initialisers would double each start (its fleet
// commands are tether-fleet's). go.etcd.io/bbolt is the store's own, and
// allowed. tether-fleet is checked to link the client, so that the test
// cannot pass by matching nothing.
func TestDeps_EmbedderPackagesDoNotLinkEtcd(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		if gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go"); os.Getenv("GOROOT") == "" {
			t.Skip("the go command is not on PATH")
		}
	}
	deps := func(pkg string) []string {
		out, err := exec.Command(gobin, "list", "-deps", "-test=false", "github.com/tether-fsm/tether/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	fleetOnly := []string{"go.etcd.io/etcd/", "go.etcd.io/raft", "google.golang.org/grpc", "google.golang.org/protobuf",
		"github.com/golang/protobuf", "github.com/gogo/protobuf", "go.uber.org/zap", "github.com/tether-fsm/tether/cluster"}
	matches := func(dep string) bool {
		return slices.ContainsFunc(fleetOnly, func(p string) bool { return strings.HasPrefix(dep, p) })
	}
	for _, pkg := range []string{"fsm", "store", "driver", "executor", "executor/server", "executor/shim", "agent", "internal/agentcmd", "cmd/tether", "cmd/tether-executor"} {
		if bad := slices.DeleteFunc(deps(pkg), func(d string) bool { return !matches(d) }); len(bad) > 0 {
			t.Errorf("%s depends on %d packages of the fleet's client (%s, ...): it must stay out of the embedder's packages and the plain tether binary",
				pkg, len(bad), strings.Join(bad[:min(3, len(bad))], ", "))
		}
	}
	fleet := deps("cmd/tether-fleet")
	if !slices.Contains(fleet, "go.etcd.io/etcd/client/v3") || !slices.ContainsFunc(fleet, matches) {
		t.Errorf("cmd/tether-fleet does not link go.etcd.io/etcd/client/v3: the check above matches nothing")
	}
}
