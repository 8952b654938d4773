// Package powerfs is a test-only FUSE file system that simulates a power
// cut. It passes reads and writes through to a backing directory and
// remembers, for every file and directory, what was last made durable; on a
// cut it throws away everything that was not.
//
// A power-loss test mounts it over a backing directory, runs the program
// under test on the mount point, and then:
//
//	fs.Cut()        // freeze: nothing becomes durable any more, every op fails with EIO
//	kill -9 the program and wait for it
//	fs.Unmount()
//	fs.Revert()     // the backing directory now holds only the durable state
//	powerfs.Mount(backing, mountpoint, ...) and start the program again
//
// Mounting needs root and /dev/fuse; [Available] says why they are missing
// so that a test can skip with the reason on other machines. The mount is
// made with the mount(2) system call directly, so no fusermount binary is
// needed.
//
// # Durability model
//
// By default the model is strict POSIX: only what the program explicitly synced
// survives.
//
// File data. A file's content and size are durable as of its last fsync or
// fdatasync (FUSE_FSYNC, with or without the datasync flag; a file opened
// with O_SYNC or O_DSYNC gets one from the kernel after each write). Writes,
// truncates and fallocates after that are lost at a cut: the file reverts to
// exactly the bytes and size it had at its last sync, or at the mount if it
// was never synced since, or to empty if it was created on this mount and
// never synced. Data durability is per file and independent of whether the
// file's name is durable.
//
// Namespace. Creating a file, directory, symlink, device node or hard link,
// unlink, rmdir and rename (including rename over an existing target and
// RENAME_EXCHANGE) are durable only once their parent directory has been
// fsynced afterwards (FUSE_FSYNCDIR), and for a rename between two
// directories only once both have. At a cut every namespace operation that
// is not durable is undone, in reverse order. An operation whose own
// directories were synced still counts as not durable when it touches a name
// or an inode that an earlier, not durable operation also touched (say,
// unlinking b/x after an unsynced rename of a/x to b/x): undoing the earlier
// one needs the later one undone first, and a file is never left in two
// places or none by the undo. A new directory that is not durable is undone
// with everything inside it, even if the files in it were synced: they are
// unreachable without it.
//
// A file fsync does not make the file's name durable, and fsyncing a
// directory does not make its parent's entry for it durable: that takes an
// fsync of the parent. Programs that create files or directories and want
// them to survive have to fsync the containing directory, as POSIX asks.
// Few do all the way up: nats-server v2.15.2, for one, never fsyncs the
// directories above a stream's, and the one holding its block files only
// every two minutes, so under this model a power cut loses whole streams.
//
// [Options.Journaled] relaxes the namespace part to what journaling file
// systems that commit all metadata in one transaction (ext4 with
// data=ordered, xfs) roughly do: any fsync or fdatasync, of a file or a
// directory, makes every namespace operation before it durable, wherever
// it was. File data stays durable per file. Real journals also commit on a
// timer (ext4 every five seconds), which neither mode models.
//
// The mount point's own root directory always exists. Everything that was
// in the backing directory when it was mounted counts as durable.
//
// sync(2) and syncfs(2) are not forwarded by the Linux kernel to ordinary
// FUSE servers (only virtiofs gets FUSE_SYNCFS), so this file system never
// sees them: the model treats them as no-ops, and programs must fsync their
// files and directories.
//
// File metadata other than size (mode, owner, times, extended attributes)
// is passed through and never reverted. Extended attributes are not
// supported at all (ENOSYS). Byte-range and flock locks are handled by the
// kernel on the mount and never reach the backing files; they are released
// when the locking process dies, as on a real power cut.
//
// # What real disks do that this model does not
//
// The model is "all or nothing since the last sync, per file": at a cut a
// file loses all of its unsynced writes. Real hardware can keep any subset:
// some unsynced writes reach the platter and others do not, in any order,
// even within one file, and a sector being written when the power fails can
// be torn (half old, half new) or come back unreadable. Programs that are
// only correct because unsynced writes vanish as a block are not caught by
// this model; a checksummed format such as bbolt's meta pages or the
// nats-server block files copes with both. Likewise real file systems often
// make more durable than POSIX promises (ext4 in ordered mode commits a new
// file's directory entry with its fsync), so a program that passes here
// also passes there, but not the other way around.
//
// # Implementation
//
// File data: for every backing inode that changed since its last sync the
// file system keeps the size it had at that sync and the old content of
// every 4 KiB page of that size that was overwritten, saved the first time
// the page is touched after the sync. Bytes beyond the synced size are not
// saved, only cut off at a revert. The undo state is keyed by backing inode
// number, which does not change across renames. Memory use is therefore
// proportional to the bytes overwritten since the last sync, rounded up to
// pages; a truncate that shrinks a synced file saves everything it cuts
// off.
//
// Namespace: operations are carried out on the backing directory at once,
// but nothing is deleted. An unlinked file, removed directory or overwritten
// rename target is moved to a hidden directory, the attic
// (".powerfs-attic" in the backing directory's root, invisible through the
// mount), and every namespace operation is logged. Once an operation is
// durable and no pending operation refers to what it moved to the attic,
// the attic copy is deleted for real. Revert undoes the pending operations
// in reverse order, bringing files back from the attic, then rolls file
// data back, then empties the attic.
//
// The server runs in the process that calls Mount, and that process must
// not block on the mount in a way that keeps a thread from reaching a GC
// safe point: the next stop-the-world GC would wait for that thread while
// the server's goroutines, which it waits for, are stopped. Two ways to do
// that: touching an mmap of a file on the mount (a page fault waits in the
// kernel for the server's READ), and starting a subprocess whose working
// directory or executable is on the mount (the child enters it between fork
// and exec, while the forking thread waits). So run code that maps files on
// the mount, such as bbolt, in a subprocess, and start subprocesses from
// outside the mount, passing paths on it as arguments. The descriptor of
// the FUSE connection is close-on-exec, so a subprocess that outlives the
// test does not keep the connection alive.
//
// The kernel keeps its page cache for file data across opens and caches
// attributes and entries for a second: every change reaches the backing
// directory through this mount, so the caches stay coherent. There is no
// writeback cache (writes reach the file system synchronously, so the model
// sees each one as it happens) and no FUSE passthrough (which would bypass
// it). mmap with MAP_SHARED reads the same page cache that write(2)
// updates.
package powerfs
