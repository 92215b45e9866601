package artifact

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// gzipped is data, gzip-compressed (a megabyte of zeros is a kilobyte).
func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestFetch_OptionMaxBytesBoundsTheUnpackedBytes: an archive whose entries
// unpack to exactly the artifact's own bound (OptionMaxBytes) is placed;
// one byte more is refused naming the bound, and nothing of the entry past
// it is left, for a tarball and a single compressed file alike; the
// option replaces the Fetcher's bound, smaller or larger.
func TestFetch_OptionMaxBytesBoundsTheUnpackedBytes(t *testing.T) {
	s := newSandbox(t)
	const bound = 4096
	exact := tarball(t, true, entry{name: "a", body: strings.Repeat("x", bound/2)}, entry{name: "b", body: strings.Repeat("y", bound/2)})
	over := tarball(t, true, entry{name: "a", body: strings.Repeat("x", bound/2)}, entry{name: "b", body: strings.Repeat("y", bound/2+1)})
	zeros := gzipped(t, make([]byte, bound+1))
	srv := serve(t, map[string][]byte{"/exact.tar.gz": exact, "/over.tar.gz": over, "/zeros.gz": zeros})
	opt := map[string]string{OptionMaxBytes: strconv.Itoa(bound)}
	ctx := context.Background()
	// The Fetcher's own bound is larger: the option lowers it.
	f := &Fetcher{Layout: s.layout, TempDir: t.TempDir(), Limits: Limits{MaxBytes: 1 << 20}}
	if err := f.Fetch(ctx, Artifact{Source: srv.URL + "/exact.tar.gz", Destination: "local/exact", Options: opt}); err != nil {
		t.Fatalf("an archive of exactly the bound: %v", err)
	}
	err := f.Fetch(ctx, Artifact{Source: srv.URL + "/over.tar.gz", Destination: "local/over", Options: opt})
	if !errors.Is(err, ErrArchive) || !strings.Contains(err.Error(), "more than 4096 bytes unpacked") {
		t.Fatalf("an archive a byte past the bound: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.layout.TaskDir, "local", "over", "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the entry past the bound was left: %v", err)
	}
	if err := f.Fetch(ctx, Artifact{Source: srv.URL + "/zeros.gz", Destination: "local/zeros", Mode: ModeFile, Options: opt}); err == nil {
		t.Fatal("a compressed file a byte past the bound was placed")
	}
	// The Fetcher's bound is smaller: the option raises it.
	f.Limits = Limits{MaxBytes: 100}
	if err := f.Fetch(ctx, Artifact{Source: srv.URL + "/exact.tar.gz", Destination: "local/raised", Options: opt}); err != nil {
		t.Fatalf("an archive within the option's bound, past the Fetcher's: %v", err)
	}
	if err := f.Fetch(ctx, Artifact{Source: srv.URL + "/exact.tar.gz", Destination: "local/small"}); !errors.Is(err, ErrSource) {
		t.Fatalf("without the option the Fetcher's 100 bytes hold: %v", err)
	}
}

// TestFetcher_Limits: without an option an artifact is bound to 300 MiB
// (Nomad's default ephemeral_disk) and 4096 entries; the option replaces
// the bytes, up to the ceiling of 100 GB; an option that is not a positive
// number of bytes is refused, naming it.
func TestFetcher_Limits(t *testing.T) {
	f := &Fetcher{}
	for _, c := range []struct {
		opt  string
		want int64
		bad  bool
	}{
		{"", 300 << 20, false},
		{"1", 1, false},
		{strconv.Itoa(10 << 30), 10 << 30, false},
		{strconv.FormatInt(MaxBytesCeiling, 10), MaxBytesCeiling, false},
		{strconv.FormatInt(MaxBytesCeiling+1, 10), MaxBytesCeiling, false},
		{"0", 0, true},
		{"-5", 0, true},
		{"1e9", 0, true},
	} {
		a := Artifact{Source: "x"}
		if c.opt != "" {
			a.Options = map[string]string{OptionMaxBytes: c.opt}
		}
		l, err := f.limits(a)
		switch {
		case c.bad && (err == nil || !strings.Contains(err.Error(), OptionMaxBytes)):
			t.Errorf("option %q: %v, want an error naming it", c.opt, err)
		case !c.bad && (err != nil || l.MaxBytes != c.want || l.MaxFiles != 4096):
			t.Errorf("option %q: %+v %v, want %d bytes and 4096 files", c.opt, l, err, c.want)
		}
	}
}
