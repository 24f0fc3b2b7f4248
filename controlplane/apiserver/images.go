package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/runtimes/imagestore"
)

// MaxImageBytes bounds a pushed OCI image archive: 2 GiB
// (imagestore.MaxArchiveBytes).
const MaxImageBytes = imagestore.MaxArchiveBytes

// maxImagePushes bounds the image pushes served at once: each spools its
// archive (up to MaxImageBytes) to a temporary file to validate it. More
// get 429 with Retry-After.
const maxImagePushes = 2

// ImageStore stores pushed OCI image archives and lists them
// (imagestore.Store implements it).
type ImageStore interface {
	Push(ctx context.Context, name string, r io.Reader) (imagestore.Image, error)
	List(ctx context.Context) ([]imagestore.Image, error)
}

// ContainerImage is how a pushed image reference reads over the API.
type ContainerImage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ContainerImageSpec `json:"spec"`
}

// ContainerImageSpec is what a reference points at.
type ContainerImageSpec struct {
	// Digest of the image, "sha256:<hex>".
	Digest string `json:"digest"`
	// Size of its archive in bytes.
	Size uint64 `json:"size"`
}

// images serves /apis/orca.dev/v1/images: PUT images/<ref> (ref
// URL-escaped, such as hello%3Av1 or registry.lan%2Fteam%2Fapp%3Av2) with
// an OCI image layout archive as body (at most MaxImageBytes, else 413)
// stores it through Config.Images under the normalized reference and
// answers 201 with the ContainerImage (name, digest, size). An archive
// that is not one valid image, or a reference that does not parse, is
// 422; without Config.Images every request is 503; more than 2 pushes at
// once get 429. GET images lists them (a Table for kubectl) and GET
// images/<ref> reads one.
func (s *Server) images(c echo.Context, segs []string) error {
	if s.cfg.Images == nil {
		return apierrors.NewServiceUnavailable("this apiserver has no image store configured")
	}
	name := ""
	if len(segs) == 5 {
		name = segs[4]
	}
	req := c.Request()
	if req.Method == http.MethodGet {
		return s.getImages(c, name)
	}
	if req.Method != http.MethodPut || name == "" {
		return apiMethodNotAllowed(req.Method, req.URL.Path)
	}
	gk := schema.GroupKind{Group: orcaGroup, Kind: "ContainerImage"}
	norm, err := imagestore.Normalize(name)
	if err != nil || len(name) > 255+1+128 {
		return apierrors.NewInvalid(gk, name, field.ErrorList{
			field.Invalid(field.NewPath("metadata", "name"), name, "must be an image reference such as hello:v1 or registry.lan:5000/team/app:v2")})
	}
	if isDryRun(req.URL.Query()) {
		return apierrors.NewBadRequest("dryRun is not supported for image pushes")
	}
	select {
	case s.imagePushes <- struct{}{}:
		defer func() { <-s.imagePushes }()
	default:
		c.Response().Header().Set("Retry-After", "1")
		c.Response().Header().Set("Connection", "close") // the body stays unread
		return tooManyRequests()
	}
	tooLarge := apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("image %s: limit is %d bytes", norm, int64(MaxImageBytes)))
	if req.ContentLength > MaxImageBytes {
		return tooLarge
	}
	body := http.MaxBytesReader(c.Response(), req.Body, MaxImageBytes)
	img, err := s.cfg.Images.Push(req.Context(), norm, body)
	if err != nil {
		var mbe *http.MaxBytesError
		if asMaxBytes(err, &mbe) {
			return tooLarge
		}
		if errors.Is(err, imagestore.ErrInvalidArchive) {
			return apierrors.NewInvalid(gk, name, field.ErrorList{field.Invalid(field.NewPath("body"), "<archive bytes>", err.Error())})
		}
		return apierrors.NewInternalError(fmt.Errorf("push image %s: %w", norm, err))
	}
	return writeJSON(c, http.StatusCreated, containerImage(img))
}

func containerImage(in imagestore.Image) ContainerImage {
	return ContainerImage{
		TypeMeta:   metav1.TypeMeta{APIVersion: orcaGroup + "/v1", Kind: "ContainerImage"},
		ObjectMeta: metav1.ObjectMeta{Name: in.Name, CreationTimestamp: metav1.NewTime(in.Modified)},
		Spec:       ContainerImageSpec{Digest: in.Digest, Size: in.Size}}
}

// getImages answers GET images (a ContainerImageList, or a Table for
// kubectl: NAME, DIGEST, SIZE, AGE) and GET images/<ref>.
func (s *Server) getImages(c echo.Context, name string) error {
	if name != "" {
		if n, err := imagestore.Normalize(name); err == nil {
			name = n
		}
	}
	infos, err := s.cfg.Images.List(c.Request().Context())
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	var items []ContainerImage
	for _, in := range infos {
		if name == "" || in.Name == name {
			items = append(items, containerImage(in))
		}
	}
	if name != "" && len(items) == 0 {
		return apierrors.NewNotFound(schema.GroupResource{Group: orcaGroup, Resource: "images"}, name)
	}
	if ok, v := wantsTable(c); ok {
		rows := make([]digestRow, len(items))
		for i, m := range items {
			rows[i] = digestRow{m.ObjectMeta, m.Spec.Digest, m.Spec.Size}
		}
		return digestTable(c, v, rows)
	}
	if name != "" {
		return writeJSON(c, http.StatusOK, items[0])
	}
	return writeJSON(c, http.StatusOK, struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ListMeta  `json:"metadata"`
		Items           []ContainerImage `json:"items"`
	}{TypeMeta: metav1.TypeMeta{APIVersion: orcaGroup + "/v1", Kind: "ContainerImageList"}, Items: items})
}

// digestRow is one object stored by digest (a WASM module, an image).
type digestRow struct {
	meta   metav1.ObjectMeta
	digest string
	size   uint64
}

// digestTable answers a Table for kubectl (meta.k8s.io version v, "" is
// v1) of objects stored by digest: NAME, DIGEST, SIZE, AGE.
func digestTable(c echo.Context, v string, rows []digestRow) error {
	if v == "" {
		v = "v1"
	}
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/" + v},
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name"}, {Name: "Digest", Type: "string"},
			{Name: "Size", Type: "string"}, {Name: "Age", Type: "string"}}}
	for _, r := range rows {
		b, _ := json.Marshal(metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}, ObjectMeta: r.meta})
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{r.meta.Name, r.digest, resource.NewQuantity(int64(r.size), resource.BinarySI).String(),
			duration.HumanDuration(time.Since(r.meta.CreationTimestamp.Time))}, Object: runtime.RawExtension{Raw: b}})
	}
	return writeJSON(c, http.StatusOK, t)
}
