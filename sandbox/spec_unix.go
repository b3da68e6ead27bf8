package sandbox

import (
	"io/fs"
	"syscall"
)

func ownerOf(fi fs.FileInfo) (uid, gid int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}

// writableBy approximates the kernel's permission check for u on a directory
// (write and search bits; ACLs are not considered).
func writableBy(fi fs.FileInfo, u User) bool {
	uid, gid := ownerOf(fi)
	m := fi.Mode().Perm()
	switch {
	case uid == u.UID:
		return m&0o300 == 0o300
	case gid == u.GID:
		return m&0o030 == 0o030
	default:
		return m&0o003 == 0o003
	}
}
