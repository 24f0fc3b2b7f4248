package wasm

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
)

func startJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	ns := storetest.StartNATS(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestModuleStore(t *testing.T) {
	ctx := context.Background()
	js := startJetStream(t)
	ms, err := NewModuleStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	// Opening an existing bucket works too.
	if _, err := NewModuleStore(ctx, js); err != nil {
		t.Fatalf("reopen: %v", err)
	}

	job := guestData.job
	want := Digest(job)
	got, err := ms.Push(ctx, "job:v1", bytes.NewReader(job))
	if err != nil || got != want {
		t.Fatalf("Push = %q, %v; want %q", got, err, want)
	}
	// The same bytes under another tag: same digest, one object.
	if got, err := ms.Push(ctx, "job", bytes.NewReader(job)); err != nil || got != want {
		t.Fatalf("Push job (latest) = %q, %v; want %q", got, err, want)
	}
	// Retagging v1 to other bytes moves the link.
	other := append(append([]byte{}, wasmMagic...), 0x01, 0x01, 0x00) // + an empty type section
	otherDigest, err := ms.Push(ctx, "job:v2", bytes.NewReader(other))
	if err != nil {
		t.Fatal(err)
	}

	for ref, wantDigest := range map[string]string{
		"job:v1":           want,
		"job":              want,
		"job:latest":       want,
		"job@" + want:      want,
		"anything@" + want: want,
		want:               want,
		"job:v2":           otherDigest,
	} {
		d, err := ms.Resolve(ctx, ref)
		if err != nil || d != wantDigest {
			t.Errorf("Resolve(%q) = %q, %v; want %q", ref, d, err, wantDigest)
		}
	}
	data, d, err := ms.Fetch(ctx, "job:v1")
	if err != nil || d != want || !bytes.Equal(data, job) {
		t.Fatalf("Fetch(job:v1) = %d bytes, %q, %v", len(data), d, err)
	}

	if _, err := ms.Push(ctx, "job:v2", bytes.NewReader(guestData.hello)); err != nil {
		t.Fatal(err)
	}
	if d, _ := ms.Resolve(ctx, "job:v2"); d != Digest(guestData.hello) {
		t.Errorf("after retag, job:v2 -> %s, want %s", d, Digest(guestData.hello))
	}

	for _, ref := range []string{"nope:v1", "job:v9", "sha256:" + strings.Repeat("0", 64), "Bad Name"} {
		if _, err := ms.Resolve(ctx, ref); !errors.Is(err, runtimes.ErrImage) {
			t.Errorf("Resolve(%q) error = %v, want ErrImage", ref, err)
		}
		if _, _, err := ms.Fetch(ctx, ref); !errors.Is(err, runtimes.ErrImage) {
			t.Errorf("Fetch(%q) error = %v, want ErrImage", ref, err)
		}
	}

	for name, body := range map[string][]byte{
		"job:v3":                            []byte("#!/bin/sh\n"),
		"Job:v1":                            job,
		"job:":                              job,
		"sha256:" + strings.Repeat("a", 64): job,
	} {
		if _, err := ms.Push(ctx, name, bytes.NewReader(body)); err == nil {
			t.Errorf("Push(%q, %d bytes) succeeded, want error", name, len(body))
		}
	}
}

// An object whose bytes do not match its digest name is refused by Fetch.
func TestModuleStoreFetchVerifiesDigest(t *testing.T) {
	ctx := context.Background()
	js := startJetStream(t)
	ms, err := NewModuleStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, ModuleBucket)
	if err != nil {
		t.Fatal(err)
	}
	forged := "sha256:" + strings.Repeat("1", 64)
	if _, err := obs.PutBytes(ctx, forged, guestData.job); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ms.Fetch(ctx, forged); !errors.Is(err, runtimes.ErrImage) || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("Fetch of a forged object: %v, want a digest mismatch wrapping ErrImage", err)
	}
}

func TestModuleStoreList(t *testing.T) {
	ctx := context.Background()
	ms, err := NewModuleStore(ctx, startJetStream(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ms.List(ctx); err != nil || len(got) != 0 {
		t.Fatalf("empty store: %v %v", got, err)
	}
	job := guestData.job
	for _, name := range []string{"job:v2", "job:v1"} {
		if _, err := ms.Push(ctx, name, bytes.NewReader(job)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ms.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "job:v1" || got[1].Name != "job:v2" || got[0].Digest != Digest(job) ||
		got[0].Size != uint64(len(job)) || got[0].Modified.IsZero() {
		t.Errorf("List = %+v", got)
	}
}
