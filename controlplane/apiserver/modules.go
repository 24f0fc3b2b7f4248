package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/wasm"
)

// MaxModuleBytes bounds a pushed WASM module: 64 MiB.
const MaxModuleBytes = 64 << 20

// moduleName is an image-style reference without registry: lowercase path
// components, then an optional ":tag" (OCI distribution's grammar).
var moduleName = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$`)

// maxModulePushes bounds the module pushes served at once: each holds its
// module in memory (up to MaxModuleBytes) to validate and hash it, so two
// cost at most about 2 x 64 MiB plus the store's copies. More get 429
// with Retry-After.
const maxModulePushes = 2

// maxModuleNameBytes bounds "name:tag": a 255-byte name (wasm.ParseRef)
// and a 128-byte tag.
const maxModuleNameBytes = 255 + 1 + 128

// ModuleResponse is the answer to a module push.
type ModuleResponse struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// orcaAPI serves the orca.dev/v1 group: discovery, and
// PUT /apis/orca.dev/v1/wasmmodules/<name> (name URL-escaped, such as
// hello-wasm%3Av1) with the raw module as body (at most 64 MiB, else 413),
// which stores it through Config.Modules and answers 201
// {"name":..., "digest":"sha256:..."}. A malformed name, or bytes that are
// not a valid module (wasm.ErrInvalidModule), is 422; without a
// ModulePusher the push is 503.
func (s *Server) orcaAPI(c echo.Context) error {
	segs := splitPath(c.Request().URL.EscapedPath())
	if len(segs) < 3 || segs[2] != "v1" {
		return notFoundPath(c.Request().URL.Path)
	}
	if len(segs) == 3 {
		return s.discovery(c, schema.GroupVersion{Group: orcaGroup, Version: "v1"}, segs)
	}
	if segs[3] == "images" && len(segs) <= 5 {
		return s.images(c, segs) // images.go
	}
	if segs[3] == natsauth.Resource {
		return s.natsCredentials(c, segs) // natscreds.go
	}
	if segs[3] != "wasmmodules" || len(segs) > 5 {
		return notFoundPath(c.Request().URL.Path)
	}
	if c.Request().Method == http.MethodGet {
		name := ""
		if len(segs) == 5 {
			name = segs[4]
		}
		return s.getModules(c, name)
	}
	if c.Request().Method != http.MethodPut || len(segs) != 5 {
		return apiMethodNotAllowed(c.Request().Method, c.Request().URL.Path)
	}
	name := segs[4]
	if _, perr := wasm.ParseRef(name); perr != nil || len(name) > maxModuleNameBytes || !moduleName.MatchString(name) || wasm.ValidDigest(name) {
		return apierrors.NewInvalid(schema.GroupKind{Group: orcaGroup, Kind: "WasmModule"}, name, field.ErrorList{
			field.Invalid(field.NewPath("metadata", "name"), name, "must be a module reference such as hello-wasm:v1 (lowercase path components, at most 255 bytes, optional :tag)")})
	}
	if s.cfg.Modules == nil {
		return apierrors.NewServiceUnavailable("this apiserver has no WASM module store configured")
	}
	if isDryRun(c.Request().URL.Query()) {
		return apierrors.NewBadRequest("dryRun is not supported for module pushes")
	}
	select {
	case s.modulePushes <- struct{}{}:
		defer func() { <-s.modulePushes }()
	default:
		c.Response().Header().Set("Retry-After", "1")
		c.Response().Header().Set("Connection", "close") // the body stays unread
		return tooManyRequests()
	}
	req := c.Request()
	if req.ContentLength > MaxModuleBytes {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("module %s: limit is %d bytes", name, MaxModuleBytes))
	}
	body := http.MaxBytesReader(c.Response(), req.Body, MaxModuleBytes)
	digest, err := s.cfg.Modules.Push(req.Context(), name, body)
	if err != nil {
		var mbe *http.MaxBytesError
		if asMaxBytes(err, &mbe) {
			return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("module %s: limit is %d bytes", name, MaxModuleBytes))
		}
		if _, ok := err.(apierrors.APIStatus); ok {
			return err
		}
		if errors.Is(err, wasm.ErrInvalidModule) {
			return apierrors.NewInvalid(schema.GroupKind{Group: orcaGroup, Kind: "WasmModule"}, name, field.ErrorList{
				field.Invalid(field.NewPath("body"), "<module bytes>", err.Error())})
		}
		return apierrors.NewInternalError(fmt.Errorf("push module %s: %w", name, err))
	}
	return writeJSON(c, http.StatusCreated, ModuleResponse{Name: name, Digest: digest})
}

// ModuleLister is implemented by a ModulePusher that can also list its
// tags (wasm.ModuleStore does); GET on wasmmodules then works.
type ModuleLister interface {
	List(ctx context.Context) ([]wasm.ModuleInfo, error)
}

// WasmModule is how a pushed module tag reads over the API.
type WasmModule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              WasmModuleSpec `json:"spec"`
}

// WasmModuleSpec is what a tag points at.
type WasmModuleSpec struct {
	Digest string `json:"digest"`
	Size   uint64 `json:"size"`
}

// getModules answers GET wasmmodules (a WasmModuleList, or a Table for
// kubectl: NAME, DIGEST, SIZE, AGE) and GET wasmmodules/<name>.
func (s *Server) getModules(c echo.Context, name string) error {
	lister, ok := s.cfg.Modules.(ModuleLister)
	if !ok {
		return apierrors.NewServiceUnavailable("this apiserver has no WASM module store configured")
	}
	infos, err := lister.List(c.Request().Context())
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	gr := schema.GroupResource{Group: orcaGroup, Resource: "wasmmodules"}
	var items []WasmModule
	for _, in := range infos {
		if name != "" && in.Name != name {
			continue
		}
		items = append(items, WasmModule{
			TypeMeta:   metav1.TypeMeta{APIVersion: orcaGroup + "/v1", Kind: "WasmModule"},
			ObjectMeta: metav1.ObjectMeta{Name: in.Name, CreationTimestamp: metav1.NewTime(in.Modified)},
			Spec:       WasmModuleSpec{Digest: in.Digest, Size: in.Size}})
	}
	if name != "" && len(items) == 0 {
		return apierrors.NewNotFound(gr, name)
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
		Metadata        metav1.ListMeta `json:"metadata"`
		Items           []WasmModule    `json:"items"`
	}{TypeMeta: metav1.TypeMeta{APIVersion: orcaGroup + "/v1", Kind: "WasmModuleList"}, Items: items})
}
