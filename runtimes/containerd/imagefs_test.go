package containerd_test

import (
	"slices"
	"testing"

	"github.com/orca-edge/orca/runtimes"
)

// The image manager ability: images by digest with their names, sizes
// and use; removal; the snapshotter's filesystem usage.
func TestImageManager(t *testing.T) {
	e := newRuntime(t)
	ctx := testCtx(t)
	var im runtimes.ImageManager = e.rt
	st, err := im.ImageFsStats(ctx)
	if err != nil || st.CapacityBytes == 0 || st.AvailableBytes > st.CapacityBytes {
		t.Fatalf("ImageFsStats = %+v, %v", st, err)
	}
	s := spec(t, jobImage, "SLEEP_SECONDS=60")
	if _, err := e.rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	defer e.rt.Stop(ctx, s.ID, 0)
	imgs, err := im.ListImages(ctx)
	if err != nil || len(imgs) != len(archives) {
		t.Fatalf("ListImages = %+v, %v", imgs, err)
	}
	for _, img := range imgs {
		if len(img.Names) != 1 || img.Size < 1000 || len(img.ID) != len("sha256:")+64 {
			t.Errorf("image %+v", img)
		}
		if img.InUse != (img.Names[0] == jobImage) {
			t.Errorf("image %s: InUse %v", img.Names[0], img.InUse)
		}
	}
	if err := im.RemoveImage(ctx, helloImage); err != nil {
		t.Fatal(err)
	}
	if err := im.RemoveImage(ctx, helloImage); err != nil {
		t.Errorf("removing a name that is gone: %v", err)
	}
	imgs, _ = im.ListImages(ctx)
	for _, img := range imgs {
		if slices.Contains(img.Names, helloImage) {
			t.Errorf("%s still listed after RemoveImage", helloImage)
		}
	}
	if len(imgs) != len(archives)-1 {
		t.Errorf("%d images after one removal, want %d", len(imgs), len(archives)-1)
	}
}
