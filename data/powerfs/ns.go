package powerfs

import (
	"fmt"
	"strconv"
)

type opKind int

const (
	// opCreate linked a new name: ino at (dir, name). Files, directories,
	// symlinks, device nodes and hard links.
	opCreate opKind = iota
	// opRemove unlinked (dir, name), which named ino; the name now sits
	// in the attic as attic.
	opRemove
	// opRename moved ino from (dir, name) to (dir2, name2). If that
	// replaced ino2, ino2 sits in the attic as attic2.
	opRename
	// opExchange swapped (dir, name), which named ino, with (dir2,
	// name2), which named ino2.
	opExchange
)

func (k opKind) String() string {
	switch k {
	case opCreate:
		return "create"
	case opRemove:
		return "remove"
	case opRename:
		return "rename"
	case opExchange:
		return "exchange"
	}
	return "op" + strconv.Itoa(int(k))
}

// nsOp is one logged namespace operation. Directories are named by their
// backing inode numbers, which survive renames of them and of their
// ancestors.
type nsOp struct {
	seq    uint64
	kind   opKind
	dir    uint64
	name   string
	ino    uint64
	isDir  bool
	dir2   uint64
	name2  string
	ino2   uint64
	isDir2 bool
	attic  string
	attic2 string
}

func (op *nsOp) String() string {
	switch op.kind {
	case opCreate, opRemove:
		return fmt.Sprintf("%v %d/%s (ino %d)", op.kind, op.dir, op.name, op.ino)
	default:
		return fmt.Sprintf("%v %d/%s (ino %d) -> %d/%s (ino %d)", op.kind, op.dir, op.name, op.ino, op.dir2, op.name2, op.ino2)
	}
}

// twoDirs says whether op has a second directory.
func (op *nsOp) twoDirs() bool { return op.kind == opRename || op.kind == opExchange }

// entity names something an operation reads or changes: a directory entry
// or an inode. Two operations that share one must be undone in order.
type entity struct {
	dir  uint64 // 0 for an inode
	name string
	ino  uint64
}

func (op *nsOp) entities(yield func(entity) bool) {
	if !yield(entity{dir: op.dir, name: op.name}) || !yield(entity{ino: op.ino}) {
		return
	}
	if op.twoDirs() {
		if !yield(entity{dir: op.dir2, name: op.name2}) {
			return
		}
		if op.ino2 != 0 && !yield(entity{ino: op.ino2}) {
			return
		}
	}
}

// atticEntry is something in the attic whose removal is durable, waiting
// to be deleted for real once no pending operation refers to it.
type atticEntry struct {
	name  string
	ino   uint64
	isDir bool
}

// nsLog is the log of namespace operations that are not durable yet. It is
// guarded by FS.nsMu.
type nsLog struct {
	seq uint64
	// dirSync maps a directory inode to the sequence number of its last
	// fsync.
	dirSync map[uint64]uint64
	// committed is the sequence number of the last fsync that made all
	// earlier operations durable (journaled mode).
	committed uint64
	pending   []nsOp
	// dead are attic entries whose removal is durable.
	dead []atticEntry
	// logged counts all operations ever logged.
	logged int64
}

func (l *nsLog) next() uint64 {
	l.seq++
	return l.seq
}

func (l *nsLog) add(op nsOp) {
	op.seq = l.next()
	l.pending = append(l.pending, op)
	l.logged++
}

// synced says whether op's directories were fsynced after it.
func (l *nsLog) synced(op *nsOp) bool {
	if l.committed > op.seq {
		return true
	}
	if l.dirSync[op.dir] <= op.seq {
		return false
	}
	return !op.twoDirs() || l.dirSync[op.dir2] > op.seq
}

// fsyncDir records an fsync of directory dir.
func (l *nsLog) fsyncDir(dir uint64) {
	if l.dirSync == nil {
		l.dirSync = make(map[uint64]uint64)
	}
	l.dirSync[dir] = l.next()
	l.settle()
}

// commit records an fsync that makes every earlier operation durable.
func (l *nsLog) commit() {
	l.committed = l.next()
	l.settle()
}

// settle drops the operations that are durable now; what they moved to
// the attic becomes dead.
func (l *nsLog) settle() {
	// An operation is durable when its directories were synced and no
	// earlier operation that stays pending touched what it touched.
	// Once durable it stays so: later syncs only make earlier operations
	// durable too. So durable operations can be forgotten.
	busy := make(map[entity]bool)
	keep := l.pending[:0]
	for i := range l.pending {
		op := &l.pending[i]
		durable := l.synced(op)
		if durable {
			for e := range op.entities {
				if busy[e] {
					durable = false
					break
				}
			}
		}
		if durable {
			switch {
			case op.kind == opRemove:
				l.dead = append(l.dead, atticEntry{op.attic, op.ino, op.isDir})
			case op.kind == opRename && op.ino2 != 0:
				l.dead = append(l.dead, atticEntry{op.attic2, op.ino2, op.isDir2})
			}
			continue
		}
		for e := range op.entities {
			busy[e] = true
		}
		keep = append(keep, *op)
	}
	clear(l.pending[len(keep):])
	l.pending = keep
}

// collectable returns the dead attic entries that no pending operation
// refers to, either as the inode it moves or as a directory it works in
// (undoing an unlink inside a removed directory needs the directory), and
// forgets them.
func (l *nsLog) collectable() []atticEntry {
	if len(l.dead) == 0 {
		return nil
	}
	used := make(map[uint64]bool)
	for i := range l.pending {
		op := &l.pending[i]
		used[op.dir] = true
		used[op.ino] = true
		if op.twoDirs() {
			used[op.dir2] = true
			used[op.ino2] = true
		}
	}
	var out []atticEntry
	keep := l.dead[:0]
	for _, e := range l.dead {
		if used[e.ino] {
			keep = append(keep, e)
		} else {
			out = append(out, e)
		}
	}
	clear(l.dead[len(keep):])
	l.dead = keep
	return out
}
