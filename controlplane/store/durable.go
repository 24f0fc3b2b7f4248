package store

import (
	"context"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream handles of a store with Config.GroupCommit: every write
// through them (KV and object store writes, publishes) returns only after
// the group commit has fsynced its stream (see groupcommit.go), and a KV or
// object store bucket created or updated through them has its stream's
// meta files fsynced. Reads pass through.

// durableJS wraps a JetStream context so that its KV and object store
// handles and its publishes wait for the group commit.
type durableJS struct {
	jetstream.JetStream
	gc *GroupCommit
}

func (d *durableJS) Publish(ctx context.Context, subject string, payload []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	pa, err := d.JetStream.Publish(ctx, subject, payload, opts...)
	return d.acked(ctx, pa, err)
}

func (d *durableJS) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	pa, err := d.JetStream.PublishMsg(ctx, msg, opts...)
	return d.acked(ctx, pa, err)
}

func (d *durableJS) acked(ctx context.Context, pa *jetstream.PubAck, err error) (*jetstream.PubAck, error) {
	if err != nil || pa == nil {
		return pa, err
	}
	if err := d.gc.SyncSequence(ctx, pa.Stream, pa.Sequence); err != nil {
		return nil, err
	}
	return pa, nil
}

func (d *durableJS) kv(ctx context.Context, kv jetstream.KeyValue, err error, created bool) (jetstream.KeyValue, error) {
	if err != nil {
		return nil, err
	}
	stream := "KV_" + kv.Bucket()
	if created {
		if err := d.gc.SyncStreamMeta(ctx, stream); err != nil {
			return nil, err
		}
	}
	return &durableKV{KeyValue: kv, gc: d.gc, stream: stream}, nil
}

func (d *durableJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := d.JetStream.KeyValue(ctx, bucket)
	return d.kv(ctx, kv, err, false)
}

func (d *durableJS) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := d.JetStream.CreateKeyValue(ctx, cfg)
	return d.kv(ctx, kv, err, true)
}

func (d *durableJS) UpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := d.JetStream.UpdateKeyValue(ctx, cfg)
	return d.kv(ctx, kv, err, true)
}

func (d *durableJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := d.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
	return d.kv(ctx, kv, err, true)
}

func (d *durableJS) obs(ctx context.Context, bucket string, obs jetstream.ObjectStore, err error, created bool) (jetstream.ObjectStore, error) {
	if err != nil {
		return nil, err
	}
	stream := "OBJ_" + bucket
	if created {
		if err := d.gc.SyncStreamMeta(ctx, stream); err != nil {
			return nil, err
		}
	}
	return &durableOBS{ObjectStore: obs, gc: d.gc, stream: stream}, nil
}

func (d *durableJS) ObjectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	obs, err := d.JetStream.ObjectStore(ctx, bucket)
	return d.obs(ctx, bucket, obs, err, false)
}

func (d *durableJS) CreateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	obs, err := d.JetStream.CreateObjectStore(ctx, cfg)
	return d.obs(ctx, cfg.Bucket, obs, err, true)
}

func (d *durableJS) UpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	obs, err := d.JetStream.UpdateObjectStore(ctx, cfg)
	return d.obs(ctx, cfg.Bucket, obs, err, true)
}

func (d *durableJS) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	obs, err := d.JetStream.CreateOrUpdateObjectStore(ctx, cfg)
	return d.obs(ctx, cfg.Bucket, obs, err, true)
}

// durableKV is a KV bucket whose writes return after the group commit
// fsynced them.
type durableKV struct {
	jetstream.KeyValue
	gc     *GroupCommit
	stream string
}

func (k *durableKV) synced(ctx context.Context, rev uint64, err error) (uint64, error) {
	if err != nil {
		return rev, err
	}
	if err := k.gc.SyncSequence(ctx, k.stream, rev); err != nil {
		return 0, err
	}
	return rev, nil
}

func (k *durableKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := k.KeyValue.Put(ctx, key, value)
	return k.synced(ctx, rev, err)
}

func (k *durableKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	rev, err := k.KeyValue.PutString(ctx, key, value)
	return k.synced(ctx, rev, err)
}

func (k *durableKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := k.KeyValue.Create(ctx, key, value, opts...)
	return k.synced(ctx, rev, err)
}

func (k *durableKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	rev, err := k.KeyValue.Update(ctx, key, value, revision)
	return k.synced(ctx, rev, err)
}

func (k *durableKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := k.synced(ctx, 0, k.KeyValue.Delete(ctx, key, opts...))
	return err
}

func (k *durableKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := k.synced(ctx, 0, k.KeyValue.Purge(ctx, key, opts...))
	return err
}

func (k *durableKV) PurgeDeletes(ctx context.Context, opts ...jetstream.KVPurgeOpt) error {
	_, err := k.synced(ctx, 0, k.KeyValue.PurgeDeletes(ctx, opts...))
	return err
}

// durableOBS is an object store bucket whose writes return after the
// group commit fsynced them.
type durableOBS struct {
	jetstream.ObjectStore
	gc     *GroupCommit
	stream string
}

func (o *durableOBS) synced(ctx context.Context, info *jetstream.ObjectInfo, err error) (*jetstream.ObjectInfo, error) {
	if err != nil {
		return info, err
	}
	if err := o.gc.Sync(ctx, o.stream); err != nil {
		return nil, err
	}
	return info, nil
}

func (o *durableOBS) Put(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	info, err := o.ObjectStore.Put(ctx, meta, r)
	return o.synced(ctx, info, err)
}

func (o *durableOBS) PutBytes(ctx context.Context, name string, data []byte) (*jetstream.ObjectInfo, error) {
	info, err := o.ObjectStore.PutBytes(ctx, name, data)
	return o.synced(ctx, info, err)
}

func (o *durableOBS) PutString(ctx context.Context, name string, data string) (*jetstream.ObjectInfo, error) {
	info, err := o.ObjectStore.PutString(ctx, name, data)
	return o.synced(ctx, info, err)
}

func (o *durableOBS) PutFile(ctx context.Context, file string) (*jetstream.ObjectInfo, error) {
	info, err := o.ObjectStore.PutFile(ctx, file)
	return o.synced(ctx, info, err)
}

func (o *durableOBS) UpdateMeta(ctx context.Context, name string, meta jetstream.ObjectMeta) error {
	_, err := o.synced(ctx, nil, o.ObjectStore.UpdateMeta(ctx, name, meta))
	return err
}

func (o *durableOBS) Delete(ctx context.Context, name string) error {
	_, err := o.synced(ctx, nil, o.ObjectStore.Delete(ctx, name))
	return err
}

func (o *durableOBS) AddLink(ctx context.Context, name string, obj *jetstream.ObjectInfo) (*jetstream.ObjectInfo, error) {
	info, err := o.ObjectStore.AddLink(ctx, name, obj)
	return o.synced(ctx, info, err)
}

func (o *durableOBS) AddBucketLink(ctx context.Context, name string, bucket jetstream.ObjectStore) (*jetstream.ObjectInfo, error) {
	if d, ok := bucket.(*durableOBS); ok {
		bucket = d.ObjectStore // nats.go needs its own type here
	}
	info, err := o.ObjectStore.AddBucketLink(ctx, name, bucket)
	return o.synced(ctx, info, err)
}

func (o *durableOBS) Seal(ctx context.Context) error {
	if err := o.ObjectStore.Seal(ctx); err != nil {
		return err
	}
	return o.gc.SyncStreamMeta(ctx, o.stream)
}
