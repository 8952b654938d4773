package data

import (
	"fmt"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// Commits whose callers wait for a condition (CommitDurable) are answered
// here, off the commit loop: the loop writes group after group to bbolt
// while the fsync of the log they derive from runs, and each group is
// answered, and shown to readers, once its condition has returned. Groups
// are answered in commit order, so a reader that may see transaction n may
// see every transaction before it.

// committedGroup is a group that bbolt has committed and whose callers
// wait for their answer.
type committedGroup struct {
	txid uint64
	reqs []*commitReq
}

// visibility says which committed transactions readers may see: every one up
// to upTo. A failed condition stops it for good: a transaction whose log may
// be lost must never be read, and neither may anything built on it.
type visibility struct {
	upTo atomic.Uint64
	mu   sync.Mutex
	cond *sync.Cond
	err  error
}

func (v *visibility) init(db *bolt.DB) {
	v.cond = sync.NewCond(&v.mu)
	// Whatever the file holds when it is opened is visible.
	_ = db.View(func(tx *bolt.Tx) error {
		v.upTo.Store(uint64(tx.ID()))
		return nil
	})
}

// wait returns once transaction txid may be read.
func (v *visibility) wait(txid uint64) error {
	if v.upTo.Load() >= txid {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for v.upTo.Load() < txid && v.err == nil {
		v.cond.Wait()
	}
	if v.upTo.Load() >= txid {
		return nil
	}
	return v.err
}

func (v *visibility) advance(txid uint64) {
	v.mu.Lock()
	v.upTo.Store(txid)
	v.cond.Broadcast()
	v.mu.Unlock()
}

func (v *visibility) fail(err error) {
	v.mu.Lock()
	if v.err == nil {
		v.err = err
	}
	v.cond.Broadcast()
	v.mu.Unlock()
}

func (v *visibility) failed() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// committedTx hands a committed group over for its answer. Without
// conditions and with no earlier group waiting, it is answered at once.
func (s *Store) committedTx(txid uint64, group []*commitReq) {
	conditions := false
	for _, r := range group {
		conditions = conditions || r.durable != nil
	}
	if !conditions && s.waiting.Load() == 0 {
		err := s.vis.failed()
		if err == nil {
			s.vis.advance(txid)
		}
		for _, r := range group {
			r.err <- err
		}
		return
	}
	s.waiting.Add(1)
	s.committed <- &committedGroup{txid: txid, reqs: append([]*commitReq(nil), group...)}
}

// answerLoop answers committed groups in order as their conditions return,
// until the commit loop has ended (loopDone) and every group it committed
// is answered.
func (s *Store) answerLoop(loopDone <-chan struct{}) {
	for {
		select {
		case g := <-s.committed:
			s.answer(g)
		case <-loopDone:
			for {
				select {
				case g := <-s.committed:
					s.answer(g)
				default:
					return
				}
			}
		}
	}
}

func (s *Store) answer(g *committedGroup) {
	err := s.vis.failed()
	for _, r := range g.reqs {
		if err != nil {
			break
		}
		if r.durable != nil {
			if derr := r.durable(); derr != nil {
				err = fmt.Errorf("data: the log of a commit did not become durable: %w", derr)
				s.vis.fail(err)
			}
		}
	}
	if err == nil {
		s.vis.advance(g.txid)
	}
	for _, r := range g.reqs {
		r.err <- err
	}
	s.waiting.Add(^uint64(0))
}
