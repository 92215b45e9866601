package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/tether-fsm/tether/internal/testproc"
)

// FuzzRawFile holds the store's own page reader to: never panic, never
// loop, whatever the file holds. Seeds are real store files.
func FuzzRawFile(f *testing.F) {
	for _, seed := range []string{filepath.Join("testdata", "v1", "tether.db")} {
		b, err := os.ReadFile(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, err := newRaw(bytes.NewReader(data), "fuzz.db", int64(len(data)))
		if err != nil {
			return
		}
		w := newRawWalk(raw)
		var walk func(v []byte, depth int)
		walk = func(v []byte, depth int) {
			w.bucket(v, "fuzz", func(e rawElem) bool {
				if e.bucket && depth < 4 {
					walk(e.value, depth+1)
				}
				return true
			}, func(rawDamage) {})
		}
		w.root(func(e rawElem) bool {
			if e.bucket {
				walk(e.value, 0)
			}
			return true
		}, func(rawDamage) {})
		_, _, _ = raw.freelist()
	})
}

// Every byte of a real page, flipped, gives the page reader an error or a
// page it can walk: never a panic.
func TestParseNode_EveryFlip(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	mustAppend(t, s, "a", 0, bigLog(120)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := openRaw(path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.close()
	for id := uint64(2); id < raw.meta.hwm; id++ {
		buf, err := raw.page(id, 0)
		if err != nil {
			continue
		}
		for i := range min(len(buf), 600) {
			bad := append([]byte(nil), buf...)
			bad[i] ^= 0xff
			_, _, _ = parseNode(bad, "flipped")
		}
	}
}
