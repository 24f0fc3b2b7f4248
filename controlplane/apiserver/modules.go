package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/wasm"
)

// MaxModuleBytes bounds a pushed WASM module: 64 MiB.
const MaxModuleBytes = 64 << 20

// moduleName is an image-style reference without registry: lowercase path
// components, then an optional ":tag" (OCI distribution's grammar).
var moduleName = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$`)

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
	if segs[3] != "wasmmodules" || len(segs) != 5 {
		return notFoundPath(c.Request().URL.Path)
	}
	if c.Request().Method != http.MethodPut {
		return apiMethodNotAllowed(c.Request().Method, c.Request().URL.Path)
	}
	name := segs[4]
	if !moduleName.MatchString(name) {
		return apierrors.NewInvalid(schema.GroupKind{Group: orcaGroup, Kind: "WasmModule"}, name, field.ErrorList{
			field.Invalid(field.NewPath("metadata", "name"), name, "must be a module reference such as hello-wasm:v1 (lowercase path components, optional :tag)")})
	}
	if s.cfg.Modules == nil {
		return apierrors.NewServiceUnavailable("this apiserver has no WASM module store configured")
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
