package store

import (
	"context"
	"errors"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestLoadFrom_ReadsTheTailFromAnySeq(t *testing.T) {
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	log := withSeq(1, runningLog(4)) // 10 events
	mustAppend(t, s, "web", 0, log...)
	for from := uint64(0); from <= 12; from++ {
		for _, limit := range []int{0, 1, 3, 100} {
			got, err := s.LoadFrom(ctx, "web", from, limit)
			if err != nil {
				t.Fatalf("LoadFrom(%d, %d): %v", from, limit, err)
			}
			start := max(from, 1) - 1
			want := log[min(start, uint64(len(log))):]
			if limit > 0 && len(want) > limit {
				want = want[:limit]
			}
			if len(want) == 0 {
				want = nil
			}
			if len(got) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("LoadFrom(%d, %d):\n got %v\nwant %v", from, limit, got, want)
			}
		}
	}
	if _, err := s.LoadFrom(ctx, "nope", 1, 0); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("LoadFrom of an unknown task: %v, want ErrUnknownTask", err)
	}
}

func TestLoadFrom_MissingRecordIsCorruptNotShort(t *testing.T) {
	path := damagedStore(t, func(s *Store) {
		mustAppend(t, s, "web", 0, runningLog(2)...)
	}, func(path string) {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketTasks).Bucket([]byte("web")).Delete(seqKey(5))
		}); err != nil {
			t.Fatal(err)
		}
	})
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, from := range []uint64{1, 4, 5} {
		_, err := s.LoadFrom(context.Background(), "web", from, 0)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Task != "web" || ce.Seq != 5 {
			t.Errorf("LoadFrom(%d) past a missing seq 5: %v, want a CorruptError at web #5", from, err)
		}
	}
	// A read that stops before the hole is whole.
	if got, err := s.LoadFrom(context.Background(), "web", 1, 4); err != nil || len(got) != 4 {
		t.Errorf("LoadFrom(1, 4) before the hole: %d events, %v", len(got), err)
	}
}

func TestVersions_ListsEveryTaskWithItsHead(t *testing.T) {
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	mustAppend(t, s, "b", 0, runningLog(3)...)
	mustAppend(t, s, "a", 0, runningLog(0)...)
	v := mustAppend(t, s, "c", 0, runningLog(0)...)
	mustAppend(t, s, "c", v, finishLog(20)...)
	got, err := s.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []TaskVersion{{"a", 6}, {"b", 9}, {"c", 8}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Versions = %v, want %v", got, want)
	}
}
