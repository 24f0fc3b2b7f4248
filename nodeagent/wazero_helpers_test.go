package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"time"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/controllers/persistentvolume"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/registry/storage"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	wazeroruntime "github.com/orca-edge/orca/runtimes/wazero"
	"github.com/orca-edge/orca/wasm"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// wasmModules pushes each WASM file of images (image name → path) to a
// module store on e's JetStream and creates the "wasm" RuntimeClass, for
// pods with runtimeClassName "wasm" and those images.
func (e *env) wasmModules(images map[string]string) *wasm.ModuleStore {
	e.t.Helper()
	ctx := context.Background()
	modules, err := wasm.NewModuleStore(ctx, e.s.JetStream())
	if err != nil {
		e.t.Fatal(err)
	}
	for name, path := range images {
		f, err := os.Open(path)
		if err != nil {
			e.t.Fatal(err)
		}
		_, err = modules.Push(ctx, name, f)
		f.Close()
		if err != nil {
			e.t.Fatalf("push %s: %v", name, err)
		}
	}
	e.create(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wasm"}, Handler: nodeapi.HandlerWasm}, store.RuntimeClasses)
	return modules
}

// wasmRuntime returns a real wazero runtime over modules that keeps its
// compiled code under dataDir ("": a new temporary directory); it is
// closed when the test ends.
func (e *env) wasmRuntime(modules *wasm.ModuleStore, dataDir string) *wazeroruntime.Runtime {
	e.t.Helper()
	if dataDir == "" {
		dataDir = filepath.Join(e.t.TempDir(), "wasm")
	}
	wz, err := wazeroruntime.New(context.Background(), wazeroruntime.Config{DataDir: dataDir, Modules: modules})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { wz.Close(context.Background()) })
	return wz
}

// probeWasm builds the probe guest (probePackage), pushes it as image
// "probe:v1" with the "wasm" RuntimeClass (wasmModules) and returns the
// module store.
func (e *env) probeWasm() *wasm.ModuleStore {
	e.t.Helper()
	guest, err := wasmtest.Build(e.t.TempDir(), probePackage)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.wasmModules(map[string]string{"probe:v1": guest})
}

// runClaimControllers starts inf (shared informers over e's store), then
// the scheduler, the PV controller and each of more once inf has synced,
// all until the test ends, and waits for the PV controller's default
// StorageClass: what a pod of a PersistentVolumeClaim needs to be placed
// and given its volume.
func (e *env) runClaimControllers(reg *registry.Registry, inf *store.SharedInformers, more ...func(ctx context.Context)) {
	e.t.Helper()
	pvc := persistentvolume.New(e.s, reg, inf.For(core.PersistentVolumeClaims), inf.For(core.PersistentVolumes), inf.For(storage.StorageClasses),
		inf.For(store.Pods), inf.For(store.Nodes), persistentvolume.Config{})
	sched, err := scheduler.New(scheduler.Config{Store: e.s})
	if err != nil {
		e.t.Fatal(err)
	}
	storetest.RunUntilCleanup(e.t, func(ctx context.Context) error {
		inf.Start(ctx)
		if !inf.WaitForSync(ctx) {
			return nil
		}
		go sched.Run(ctx)
		for _, run := range more {
			go run(ctx)
		}
		pvc.Run(ctx, 2)
		inf.Wait()
		return nil
	})
	storetest.Eventually(e.t, 20*time.Second, func() error {
		_, err := e.s.Get(context.Background(), storage.StorageClasses, "", persistentvolume.DefaultClassName)
		return err
	})
}
