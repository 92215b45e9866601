//go:build linux

package cgroup

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// testHost is a hybrid layout like this machine's, built by hand.
func testHost() Host {
	return Host{Layout: LayoutHybrid, Hierarchies: []Hierarchy{
		{Key: "cpu", Version: V1, Controllers: []Controller{CPU}, Mount: "/sys/fs/cgroup/cpu", Root: "/", Path: "/", Parent: "/", Writable: true},
		{Key: "freezer", Version: V1, Controllers: []Controller{Freezer}, Mount: "/sys/fs/cgroup/freezer", Root: "/", Path: "/", Parent: "/", Writable: true},
		{Key: "memory", Version: V1, Controllers: []Controller{Memory}, Mount: "/sys/fs/cgroup/memory", Root: "/", Path: "/process_api/ab12", Parent: "/process_api/ab12", Writable: true},
		{Key: UnifiedKey, Version: V2, Mount: "/sys/fs/cgroup/unified", Root: "/", Path: "/", Parent: "/", Writable: true, Kill: true, Freeze: true, Events: true},
	}}
}

func TestLocation_RoundTrip(t *testing.T) {
	h := testHost()
	// Parents with bytes that must be escaped: space, ';', '=', '%'.
	h.Hierarchies[2].Parent = "/odd dir;x=1%/sub"
	loc, err := LocationFor(h, "web.1-a_b", "Nonce_12-xyz")
	if err != nil {
		t.Fatal(err)
	}
	s := loc.String()
	want := "tether-cgroup:1;cpu=/tether-web.1-a_b@Nonce_12-xyz;freezer=/tether-web.1-a_b@Nonce_12-xyz;" +
		"memory=/odd%20dir%3Bx%3D1%25/sub/tether-web.1-a_b@Nonce_12-xyz;unified=/tether-web.1-a_b@Nonce_12-xyz"
	if s != want {
		t.Fatalf("String\n got %s\nwant %s", s, want)
	}
	back, err := ParseLocation(s)
	if err != nil {
		t.Fatal(err)
	}
	if back.String() != s || back.Leaf() != "tether-web.1-a_b@Nonce_12-xyz" {
		t.Fatalf("round trip: %s, leaf %s", back, back.Leaf())
	}
	if got := back.Paths()["memory"]; got != "/odd dir;x=1%/sub/tether-web.1-a_b@Nonce_12-xyz" {
		t.Fatalf("memory path %q", got)
	}
	// JSON carries it as its string.
	b, err := json.Marshal(struct{ L Location }{back})
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ L Location }
	if err := json.Unmarshal(b, &v); err != nil || v.L.String() != s {
		t.Fatalf("json: %s -> %v, %v", b, v.L, err)
	}
	task, nonce, err := ParseLeaf(back.Leaf())
	if err != nil || task != "web.1-a_b" || nonce != "Nonce_12-xyz" {
		t.Fatalf("ParseLeaf = %q %q %v", task, nonce, err)
	}
}

func TestParseLocation_Garbage(t *testing.T) {
	leaf := "tether-web@abcdefgh"
	for _, s := range []string{
		"",
		"garbage",
		"/sys/fs/cgroup/memory/" + leaf,
		"tether-cgroup:2;memory=/" + leaf,                               // unknown version
		"tether-cgroup:1",                                               // no entry
		"tether-cgroup:1;",                                              // empty entry
		"tether-cgroup:1;memory",                                        // no '='
		"tether-cgroup:1;Memory=/" + leaf,                               // bad key
		"tether-cgroup:1;name=systemd=/" + leaf,                         // named hierarchy
		"tether-cgroup:1;memory=" + leaf,                                // relative
		"tether-cgroup:1;memory=/",                                      // the root
		"tether-cgroup:1;memory=/a/../" + leaf,                          // escape
		"tether-cgroup:1;memory=/a//" + leaf,                            // not clean
		"tether-cgroup:1;memory=/./" + leaf,                             // not clean
		"tether-cgroup:1;memory=/" + leaf + "/",                         // trailing slash
		"tether-cgroup:1;memory=/a%2F..%2F" + leaf,                      // escaped '/' is canonical? no: '/' is safe
		"tether-cgroup:1;memory=/a%2" + leaf,                            // bad escape
		"tether-cgroup:1;memory=/a%61/" + leaf,                          // escape of a safe byte
		"tether-cgroup:1;memory=/a%0A/" + leaf,                          // newline
		"tether-cgroup:1;memory=/a b/" + leaf,                           // unescaped space
		"tether-cgroup:1;memory=/" + leaf + ";cpu=/" + leaf,             // unsorted
		"tether-cgroup:1;cpu=/" + leaf + ";cpu=/" + leaf,                // repeated
		"tether-cgroup:1;cpu=/" + leaf + ";memory=/tether-web@zzzzzzzz", // leaves differ
		"tether-cgroup:1;memory=/docker/abc",                            // foreign cgroup
		"tether-cgroup:1;memory=/tether-web",                            // no nonce
		"tether-cgroup:1;memory=/tether-web@short",                      // nonce too short
		"tether-cgroup:1;memory=/tether-@abcdefgh",                      // empty task
		"tether-cgroup:1;memory=/tether-.web@abcdefgh",                  // task starts badly
		"tether-cgroup:1;memory=/tether-web@abc.defgh",                  // '.' in nonce
		"tether-cgroup:1;memory=/tether-we@b@abcdefgh",                  // two '@'
		"tether-cgroup:1;memory=/" + strings.Repeat("a/", 2100) + leaf,  // over PATH_MAX
	} {
		if l, err := ParseLocation(s); !errors.Is(err, ErrBadLocation) {
			t.Errorf("ParseLocation(%.80q) = %v, %v; want ErrBadLocation", s, l, err)
		}
	}
	var l Location
	if err := l.UnmarshalText([]byte("garbage")); !errors.Is(err, ErrBadLocation) {
		t.Errorf("UnmarshalText(garbage) = %v", err)
	}
	if err := l.UnmarshalText(nil); err != nil || !l.IsZero() {
		t.Errorf("UnmarshalText(empty) = %v, %v", l, err)
	}
}

func TestLocation_CheckRefusesOthers(t *testing.T) {
	h := testHost()
	loc, err := LocationFor(h, "web", "abcdefgh")
	if err != nil {
		t.Fatal(err)
	}
	if err := loc.Check("web", "abcdefgh"); err != nil {
		t.Fatalf("own location refused: %v", err)
	}
	for _, tc := range []struct{ task, nonce string }{
		{"web2", "abcdefgh"}, {"we", "abcdefgh"}, {"web", "abcdefgi"}, {"web", "abcdefghi"},
	} {
		if err := loc.Check(tc.task, tc.nonce); !errors.Is(err, ErrNotOurs) {
			t.Errorf("Check(%q, %q) = %v; want ErrNotOurs", tc.task, tc.nonce, err)
		}
	}
	// With '-' as the separator these two would share a name.
	a, _ := LeafName("a-b", "cdefghij")
	b, _ := LeafName("a", "b-cdefghij")
	if a == b {
		t.Fatalf("leaf names collide: %s", a)
	}
	if err := loc.Check("bad/id", "abcdefgh"); !errors.Is(err, ErrBadLocation) {
		t.Errorf("Check(bad id) = %v; want ErrBadLocation", err)
	}
	if err := (Location{}).Check("web", "abcdefgh"); !errors.Is(err, ErrNotOurs) {
		t.Errorf("zero location Check = %v; want ErrNotOurs", err)
	}
}

func TestLeafName_Bounds(t *testing.T) {
	long, err := LeafName(strings.Repeat("t", 63), strings.Repeat("n", 128))
	if err != nil || len(long) != 199 {
		t.Fatalf("longest leaf: %d bytes, %v", len(long), err)
	}
	for _, tc := range []struct{ task, nonce string }{
		{"", "abcdefgh"}, {strings.Repeat("t", 64), "abcdefgh"}, {"-x", "abcdefgh"}, {"a/b", "abcdefgh"},
		{"web", "abcdefg"}, {"web", strings.Repeat("n", 129)}, {"web", "abc defgh"}, {"web", "abcd@efgh"},
	} {
		if _, err := LeafName(tc.task, tc.nonce); !errors.Is(err, ErrBadLocation) {
			t.Errorf("LeafName(%q, %q) = %v; want ErrBadLocation", tc.task, tc.nonce, err)
		}
	}
	h := testHost()
	h.Hierarchies[2].Parent = "/" + strings.Repeat("d/", 2100)
	if _, err := LocationFor(h, "web", "abcdefgh"); !errors.Is(err, ErrBadLocation) || !strings.Contains(err.Error(), "PATH_MAX") {
		t.Fatalf("LocationFor below a deep parent = %v; want PATH_MAX error", err)
	}
}

func FuzzParseLocation(f *testing.F) {
	loc, _ := LocationFor(testHost(), "web", "abcdefgh")
	f.Add(loc.String())
	f.Add("tether-cgroup:1;memory=/a%20b/tether-x@12345678")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLocation(s)
		if err != nil {
			return
		}
		if l.String() != s {
			t.Fatalf("parsed %q, prints %q", s, l)
		}
		for _, p := range l.Paths() {
			if strings.Contains(p, "/../") || !strings.HasSuffix(p, "/"+l.Leaf()) {
				t.Fatalf("accepted path %q", p)
			}
		}
	})
}
