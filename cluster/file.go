package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// privateDir creates dir (0700) if needed and refuses one that is a
// symbolic link, not a directory, or open to others: the desired copy in
// it tells the node what to run.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cluster: state directory %s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("cluster: state directory %s: %w", dir, err)
	}
	switch {
	case st.Mode()&os.ModeSymlink != 0 || !st.IsDir():
		return fmt.Errorf("%w: %s is not a directory (a symbolic link or a file)", ErrLocalCopy, dir)
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: %s is writable by others (mode %04o): chmod 700 it", ErrLocalCopy, dir, st.Mode().Perm())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() && sys.Uid != 0 {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this process's user or root", ErrLocalCopy, dir, sys.Uid)
	}
	return nil
}

// writeFileAtomic replaces dir/name with data durably: a new file (0600,
// created exclusively, never through a link) is written and fsynced,
// renamed over the old one, and the directory fsynced, so a crash leaves
// the old file or the new one, never a torn one.
func writeFileAtomic(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, "."+name+".new")
	_ = os.Remove(tmp) // a leftover of a write cut short
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, filepath.Join(dir, name))
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return werr
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readPrivateFile reads dir/name, refusing a link or a file others can
// write. A missing file is os.ErrNotExist.
func readPrivateFile(dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link", ErrLocalCopy, path)
		}
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%w: %s is not a private regular file (mode %s)", ErrLocalCopy, path, st.Mode())
	}
	const maxFile = 64 << 20
	if st.Size() > maxFile {
		return nil, fmt.Errorf("%w: %s is %d bytes (at most %d)", ErrLocalCopy, path, st.Size(), maxFile)
	}
	buf := make([]byte, st.Size())
	if _, err := f.ReadAt(buf, 0); err != nil {
		return nil, err
	}
	return buf, nil
}
