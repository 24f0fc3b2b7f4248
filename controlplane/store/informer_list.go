package store

import (
	"context"
	"time"
)

// ListUncached returns the objects of r in namespace ("" = all) and the
// revision they are consistent at, as List, from a watch cache of its own
// that is stopped before it returns. A caller that reads a bucket once
// (the nodepods controller loading the NodePods projection at start) so
// does not leave the process a cache mirroring the bucket for good: that
// cache would hold a decoded copy of every object and decode every later
// write (with 30,000 bound pods, a second copy of every pod in
// orca-server). Use List when the bucket is read again later.
func (s *Store) ListUncached(ctx context.Context, r Resource, namespace string) ([]Object, uint64, error) {
	kv, err := s.bucket(ctx, r)
	if err != nil {
		return nil, 0, err
	}
	c := newWatchCache(r, kv, "", 1, s.cfg.WatchCacheBytes, time.Hour)
	c.bindOnly = true // the shared cache of the bucket, if any, purges deleted keys
	c.transform = func(key string, data []byte) ([]byte, error) {
		out, _, err := s.fromStorage(c.ctx, r, key, data)
		return out, err
	}
	if err := c.start(); err != nil {
		return nil, 0, err
	}
	defer c.stop()
	if err := c.waitFresh(ctx); err != nil {
		return nil, 0, err
	}
	objs, rev := c.list(namespace)
	return objs, rev, nil
}
