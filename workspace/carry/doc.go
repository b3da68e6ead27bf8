// Package carry moves a session's workspace from one node to another.
//
// Several harvest serve nodes share one store. A session's workspace (its
// checkouts, its box's HOME and /tmp) lives on the owning node's disk, under
// one directory. When that node dies another takes the session over and
// must rebuild the workspace as it was at the end of the last finished
// turn. So the owner calls Snapshot at every turn end, which stores the
// tree's file data in the store as packs and returns a Manifest (the caller
// stores it too); the new owner calls Restore with the last manifest.
//
// # Format
//
// A pack is file data concatenated, up to Options.PackSize (8 MiB)
// uncompressed, compressed as one zstd frame. Its name is the hex sha256 of
// the compressed bytes, so packs are immutable and storing one twice is
// harmless. zstd (github.com/klauspost/compress, default level, already in
// our module graph) rather than compress/flate: it is several times faster
// than flate at a similar ratio (the library's published figures; not
// measured here; on BenchmarkSnapshot's tree it stores 0.44 of the bytes),
// and its decoder can be told the largest window it may allocate.
//
// A file's data is a list of extents (pack, offset and length in the
// uncompressed pack, offset in the file); a big file spans packs, and the
// gaps between extents are holes (found with SEEK_DATA/SEEK_HOLE, restored
// as holes, not counted in Manifest.Bytes or Options.MaxBytes).
//
// A marshalled manifest is "hvcarry", a version byte (1), then one zstd
// frame holding: the pack table (count, then 32-byte raw hashes; extents
// name packs by index), the root directory, the entry count and the
// entries in walk order (a directory before its contents, names sorted).
// Each entry is its path (bytes shared with the previous path, then the
// rest), type, mode, uid, gid, mtime in ns, xattrs, then per type: a file's
// size, identity (dev, inode, ctime) and extents; a symlink's target; a
// device's number. Integers are varints. The format is binary rather than
// JSON because names need not be UTF-8.
//
// # Incremental snapshots
//
// A regular file whose (dev, inode, size, mtime, ctime) equal its entry in
// prev, at the same path, keeps prev's extents and is not opened for
// reading. Everything else is read into new packs. Timestamps come from a
// coarse clock, so a file changed less than a second before the snapshot
// started could change again with the same ctime: such a file (and one that
// changed while it was read) is recorded with identity zero and is read
// again next time, as git does with "racily clean" entries. Restore
// returns the manifest with the restored files' identities, so the new
// owner's first snapshot is incremental too. Other links to a file already
// read (same dev and inode) reuse its extents.
//
// Packs are never rewritten: a pack stays referenced while any kept
// manifest references any of its bytes. Removing unreferenced packs
// (Manifest.Packs lists a manifest's) is the store's job.
//
// # What is carried
//
// Directories, regular files, symlinks (their text; never followed), fifos,
// char and block device nodes (an overlayfs whiteout is char 0:0); owner,
// mode including setuid, setgid and sticky, mtime (a directory's is set
// after its contents), and the xattrs user.* and trusted.overlay.* (the
// markers of an overlayfs upper directory: opaque, origin, redirect, ...).
//
// Not carried: sockets; atime; ctime and inode numbers (new on restore);
// hard-link identity (links are restored as copies); xattrs outside those
// two namespaces: security.* (SELinux labels, file capabilities) and
// system.* (POSIX ACLs: a workspace has no use for them, and carrying them
// would also mean carrying the box's uid map semantics); anything on
// another filesystem mounted inside the root (not entered). Entries
// Options.Skip names (lost+found, the overlay's work directory) are not
// carried.
//
// # Security
//
// The tree is written by an untrusted agent, whose box may still be running
// and changing it while Snapshot, as root on the host, walks it. Snapshot
// opens the root once, then each entry by its single name relative to its
// parent's descriptor with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) and O_PATH|O_NOFOLLOW (so a
// symlink is opened as itself and a mount point is refused), and takes the
// kind and every attribute from fstat of that descriptor, which keeps
// pointing at the same object whatever the agent renames. It descends only
// into descriptors it opened this way, and only on the root's device. A
// regular file is read by reopening that very inode through
// /proc/self/fd/N, so a fifo or device swapped in is never opened (no
// hang, no side effect); sockets are skipped. A file is read up to the
// size fstat gave, never more: one that grows is cut there, one that
// shrinks ends where reading did (crash-consistent). Entries that vanish
// or change kind during the walk are left out, not errors. Where openat2
// is missing (ENOSYS, or EPERM from seccomp) openat with O_NOFOLLOW on the
// single name is used, and st_dev is compared with the root's: that catches
// other filesystems but not a bind mount of the same filesystem (openat2
// catches both).
//
// Restore treats the manifest as untrusted even though it comes from our
// store. It (and UnmarshalManifest) refuse: absolute paths, empty, "." or
// ".." components, NUL, paths or names longer than Linux allows,
// duplicates, an entry whose parent is not a directory entry earlier in
// the manifest (so nothing is created under a symlink entry), modes with
// bits outside 07777, xattrs outside the carried namespaces, extents out of
// order or outside the file or past MaxPackSize, pack names that are not
// hashes. Every object is created relative to a directory descriptor
// opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) from the
// root, files with O_CREAT|O_EXCL|O_NOFOLLOW, and attributes are set
// through descriptors, never paths. The root must be empty apart from
// skipped entries. A pack whose sha256 differs from its name is refused,
// and only the prefix the manifest's extents need is decompressed (at most
// MaxPackSize per pack, a few packs cached), so a decompression bomb costs
// nothing. Manifests are bounded: DefaultMaxEntries entries, 16 M extents,
// 1 GiB encoded, and the decoder never allocates more than its input
// justifies.
//
// Device nodes other than whiteouts can not be made by an unprivileged box,
// but a forged manifest could name one: the filesystem holding workspaces
// should be mounted nodev (and nosuid) so that such a node, or a setuid
// file, is inert.
//
// # Concurrency
//
// Snapshot and Restore may run concurrently on different roots. Inside a
// Snapshot one goroutine, owned and waited for by it, compresses and
// stores the previous pack while the walk fills the next; the walk checks
// ctx between entries and every MiB read, Restore between entries, and
// Packs implementations get ctx.
package carry
