// Package store is tether's durable event log: one bbolt file holding every
// task's events, an index of live tasks, and a schema version.
//
// # Layout
//
// The file has three top-level buckets, and a fourth once it holds
// desired state:
//
//   - meta: "schema" holds the schema version (4 bytes, big endian): 1,
//     or 2 once the desired bucket exists.
//   - tasks: one bucket per task id. Its records are keyed by their 8-byte
//     big-endian sequence number (1..n); its head (version, state, reaping
//     target, spawn nonce, restart count, checksummed) sits under a key
//     that sorts after them, so Append checks the expected version and
//     folds new events without reading the log.
//   - live: the ids of tasks not in a terminal state, so recovery reads
//     only what is live.
//   - desired: the agent's desired tasks, one checksummed, versioned
//     record per name (desired.go): the registrations of `tether enable`,
//     the task started for each (written before its start), the restart
//     count, and why it settled. ChangeDesired writes them, Desired reads
//     them, Check verifies them and Salvage copies them.
//
// Records are a compact binary form (see record.go) with a header carrying
// the record schema version, the event type and a CRC32C of the record.
// Version 2 carries every field of fsm.Event (cgroups, OOM, restart
// attempts, and the spec's resources, logs, restart policy, namespaces and
// job); version-1 records, written before those fields existed, are
// upcast on reading (the new fields zero), as are version-1 heads. A record
// is at most 1 MiB: Append refuses a larger event with a *SizeError. A
// damaged record is reported as a *CorruptError naming its task and
// sequence number (errors.Is(err, ErrCorrupt)); a record from a newer
// tether as a *VersionError. Nothing is skipped silently and nothing
// panics: a bbolt panic on a damaged file becomes an ErrCorrupt error naming
// the file. Every reader (Load, LoadTask, LoadFrom, LoadTasks, Check,
// CheckFile, Salvage) holds a task's log to the same rules: its sequence
// numbers contiguous from 1 (a gap is named at the missing number), its
// end at its head's version (a record missing before it or one past it is
// named at the first number the two disagree on), every record's checksum
// (any single bit flipped, a version byte included, is a checksum
// mismatch, never a newer version), and, for the readers that fold, the
// live index (a task it lists though ended, a live task it misses, an
// entry without a task).
//
// # Damage
//
// Damage never hangs an operation and never panics: every bbolt panic (or
// memory fault on a file cut short) becomes an error naming the file, and
// the task where it is known (LoadTask, Load and LoadTasks give a
// *CorruptError naming the task). A transaction that bbolt cannot even roll
// back leaves the store refusing every further use, and Close lets go of
// the file without bbolt (whose Close would wait for ever for the locks
// the failed transaction holds). A store whose freelist is damaged opens
// only read-only (a writable Open returns ErrCorrupt naming the freelist's
// page); Compact rebuilds the freelist.
//
// Check and CheckFile read the file page by page with the store's own
// reader (raw.go), never through bbolt's tree, so they go on past a
// damaged page and say which page it was and which tasks or records it
// held. Salvage copies every readable task, its log verified, into a new
// store, and reports the others with what could be read of them (state,
// nonce, and the executor's identity from a readable prefix), so that the
// processes of a damaged store's live tasks can be killed or adopted
// rather than leaked.
//
// Where the structure itself is gone (a file cut short, a damaged root or
// task index), a salvage scans every page of the file for what it can
// still read on its own (pagescan.go): leaf pages of the task index, leaf
// pages of records (each checked by its checksum and key), desired
// records. Records name no task: they are given to one only through the
// spawn nonce its executor's directory holds (a Claim, from the caller),
// the longest legal log among the copies found. A live claim of which
// nothing can be rebuilt is reported lost with its nonce, so that its
// executor is killed by its proven identity; RecordLost then records such
// tasks in the new store as ended lost. An empty store file is never
// opened as a new store: it is a store cut to nothing (and so is a bbolt
// file without a single bucket).
//
// # Locking
//
// One process at a time writes a store; readers (Options.ReadOnly) share
// it. The lock is a blocking flock on PATH.lock beside the store file,
// never renamed or removed; the store file is opened by its path only once
// the lock is held, so Compact, which holds the lock across the rename of
// its new file, is safe beside any other process. A waiter gets the lock
// the moment its holder lets go (no polling) or gives up after
// Options.LockTimeout with ErrLocked. The store file and the lock file are
// opened without following symbolic links (ErrUnsafePath).
//
// # Writing
//
// Append is optimistic: the caller passes the version it folded from, and a
// concurrent writer that got there first makes it fail with a
// *ConflictError. Each event is checked against fsm.Lifecycle before it is
// written, so every log on disk is a legal walk through the table
// (invariant 8), which Check verifies offline.
//
// Appends are group-committed by one committer goroutine: a lone writer
// commits at once, and writers that arrive while a commit is syncing share
// the next commit and its fsync. Append returns only once its events are
// on disk (invariant 7: an acknowledged append survives a crash). A
// caller's context that ends while its append waits is told the truth:
// before the committer claims the request, ctx.Err() and nothing written
// (a retry commits it once); after, the commit's own outcome (a retry of a
// committed append conflicts: nothing is committed twice).
//
// # Usage
//
//	s, err := store.Open(path, store.Options{Logger: logger})
//	if err != nil { ... }           // ErrLocked: another tether holds it
//	defer s.Close()
//
//	t, _ := s.LoadTask(ctx, id)     // or fsm.Task{ID: id} for a new task
//	evs, effs, err := fsm.Step(t, input)
//	v, err := s.Append(ctx, id, t.Version, evs...)
//	// errors.Is(err, store.ErrConflict): reload and retry
//	// now, and only now, perform effs.
//
// Recovery walks the live tasks:
//
//	err := s.Live(ctx, func(id string) error {
//		t, err := s.LoadTask(ctx, id)
//		...
//	})
//
// A listing reads every task at once and keeps going past damaged ones:
//
//	scan, err := s.LoadTasks(ctx, store.AllTasks)
//	// scan.Tasks: folded; scan.Unreadable: id and error of each other one
//
// A command that spawns, launches or waits between its reads and appends
// uses a Shared log, which holds the store (and its lock) only while
// operations are in flight; overlapping operations share one open store
// and its group commit. Each idle-to-busy transition costs an open and a
// close: 0.07 to 0.2 ms on top of a 0.4 ms durable append here
// (BenchmarkShared_Append, and bench's BenchmarkSharedAppend):
//
//	sh, err := store.OpenShared(path, store.Options{LockTimeout: 10 * time.Second})
//	defer sh.Close()
//	v, err := sh.Append(ctx, id, 0, evs...) // opens, appends, closes
//
// A damaged store is checked from its file, even one Open refuses:
//
//	rep, err := store.CheckFile(ctx, path, opts)   // rep.Problems: task, seq, page
//
// # Maintenance
//
// Salvage, Install and Compact read the store and then replace its file.
// An append acknowledged between the read and the replacement would be in
// the file replaced, and lost; so each runs under a Maintenance, the
// store's lock held exclusively from the read to the replacement, with no
// store open on it:
//
//	m, err := store.BeginMaintenance(ctx, path, opts) // waits for the lock, as Open does
//	defer m.Release()                                  // the waiters open what is in place
//	srep, err := m.Salvage(ctx, newPath, claims...)    // the whole store as it stands
//	// srep.Lost: kill or adopt each live one's processes (Prefix.Executor,
//	// Nonce; driver.SalvageStore does all of it), record the killed:
//	err = m.RecordLost(newPath, losses, time.Now())
//	err = m.Install(newPath, asidePath)                // only a salvage of this maintenance
//
// Meanwhile every other process waits for the lock (and gives up with
// ErrLocked, before it has appended anything, if the maintenance holds it
// past that process's LockTimeout); once it is let go they open the file
// in place, by its path, and append there. So an append that returned
// before the maintenance began is in the file it installs, and one that
// returns after is in that file too. A package-level Salvage takes the
// lock shared and makes a copy to look at; it has no Install.
//
// A process that holds the store open for its whole life (an agent) does
// the same on its own store, in three steps, with its own requests paused
// for the duration (they must not find the store closed):
//
//  1. pause: stop taking requests that use the store, and let those in
//     flight finish;
//  2. s.Suspend(): the appends in flight commit, the file is closed, and
//     the lock passes, still held, to the returned Maintenance (no other
//     process can take the store in between); run the maintenance on it
//     (Salvage then Install, or Compact);
//  3. m.Reopen(): the store in place is opened with the lock the
//     maintenance holds; use the new *Store from here (the old one only
//     answers ErrClosed), and resume the requests.
//
// Reopen is called whether the maintenance succeeded or not (it opens
// whichever file is in place); only when Reopen fails is the lock let go,
// and then the agent has no store and must say so and stop.
//
// Every durable step of a maintenance calls Options.Crash with its name
// (CrashPoints): tests kill or pause the process there.
//
// # The steps, in order
//
// A maintenance replaces the store's file only in steps that a crash
// (a process killed, or a power loss, which drops whatever was not synced)
// can cut between anywhere and leave the old store or the whole new one
// under the store's name, every acknowledged append in it:
//
//	Compact  write the copy beside the store (PATH.compact, unsynced);
//	         fsync it; [compact:copied] rename it over the store;
//	         [compact:renamed] fsync the directory; let the lock go
//	Salvage  create the new store (PATH.new, fsync, rename, fsync of the
//	         directory: Open's creation); copy into it, each transaction
//	         fsynced; [salvage:copied] RecordLost: the lost tasks' records
//	         into it, fsynced
//	Install  link the old store to its aside name; [install:aside] rename
//	         the new store over the store; [install:renamed] fsync the
//	         directory (the link and the rename with it); let the lock go
//	         or Reopen
//	Remove   one transaction, fsynced; [remove:committed]
//	Suspend  commit the queued appends (each fsynced), close the file, keep
//	         the lock; Reopen opens the file in place with it
//
// A file is synced before it is given the store's name (else the name may
// reach the disk before the content), and the directory is synced after
// the rename before the lock is let go (else an append acknowledged in
// the new file afterwards is lost with the rename). A bbolt file without
// a single bucket under the store's name is what a copy renamed before its
// content reached the disk leaves: Open and Compact refuse it
// (ErrNotStore) rather than lay it out as a new store, which would leave
// its running tasks unknown.
package store
