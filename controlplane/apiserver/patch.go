package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/orca-edge/orca/controlplane/store"
)

// patch answers PATCH of an object or its status subresource. Supported
// Content-Types: application/strategic-merge-patch+json (apimachinery
// strategicpatch with the typed object), application/merge-patch+json
// (RFC 7386) and application/json-patch+json (RFC 6902). Server-side apply
// (application/apply-patch+yaml) is 415. A patch that sets
// metadata.resourceVersion is conditional on it (409 when stale);
// otherwise it is applied to the latest object and retried on conflict.
func (s *Server) patch(c echo.Context, ri reqInfo) error {
	if err := requireNamespace(ri); err != nil {
		return err
	}
	pt, body, err := s.readPatch(c)
	if err != nil {
		return err
	}
	// Strict field validation looks at the patched object, not the patch:
	// strategic merge patches carry directives ($setElementOrder/ports,
	// $patch, $retainKeys) that are not fields.
	strict := func(patched []byte) error {
		if ri.sub != "" {
			return nil
		}
		return checkStrict(c, ri.res, patched)
	}
	out, err := s.updateObject(c.Request().Context(), ri, isDryRun(c.Request().URL.Query()), func(cur store.Object) (store.Object, error) {
		return patchObject(ri.res, pt, cur, body, strict)
	})
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// readPatch reads a PATCH body and its type.
func (s *Server) readPatch(c echo.Context) (types.PatchType, []byte, error) {
	pt := types.PatchType(mediaType(c))
	switch pt {
	case types.StrategicMergePatchType, types.MergePatchType, types.JSONPatchType:
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		return "", nil, unsupportedMediaType("server-side apply is not supported by orca; use client-side apply (kubectl apply without --server-side)")
	default:
		return "", nil, unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format %q - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json", pt))
	}
	body, err := readBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return "", nil, err
	}
	if !json.Valid(body) {
		j, yerr := yaml.YAMLToJSON(body)
		if yerr != nil || !json.Valid(j) {
			return "", nil, apierrors.NewBadRequest("the patch is not valid JSON")
		}
		body = j
	}
	return pt, body, nil
}

// patchObject applies patch of type pt to cur, checks the result with
// check, and decodes it. The result carries a resourceVersion only when
// the patch set one.
func patchObject(r store.Resource, pt types.PatchType, cur store.Object, patch []byte, check func(patched []byte) error) (store.Object, error) {
	curRV := cur.GetResourceVersion()
	orig, err := json.Marshal(cur)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out, err := applyPatch(pt, orig, patch, r.New())
	if err != nil {
		return nil, err
	}
	if err := check(out); err != nil {
		return nil, err
	}
	obj, err := decodeObject(r, out)
	if err != nil {
		return nil, err
	}
	if obj.GetUID() != cur.GetUID() {
		// metadata.uid in a patch is a precondition, as in Kubernetes.
		return nil, apierrors.NewConflict(r.GroupResource(), cur.GetName(),
			fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", obj.GetUID(), cur.GetUID()))
	}
	if obj.GetResourceVersion() == curRV && !patchSetsResourceVersion(patch) {
		obj.SetResourceVersion("")
	}
	return obj, nil
}

// applyPatch applies a patch to the JSON document orig; dataStruct is the
// typed object strategic merge patches need for their merge keys.
func applyPatch(pt types.PatchType, orig, patch []byte, dataStruct any) ([]byte, error) {
	var out []byte
	var err error
	switch pt {
	case types.StrategicMergePatchType:
		out, err = strategicpatch.StrategicMergePatch(orig, patch, dataStruct)
	case types.MergePatchType:
		out, err = jsonpatch.MergePatch(orig, patch)
	case types.JSONPatchType:
		p, derr := jsonpatch.DecodePatch(patch)
		if derr != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", pt, derr))
		}
		if out, err = p.Apply(orig); err != nil {
			// A well-formed patch that does not apply (a failed test, a
			// missing path) is 422, as Kubernetes' interpretJSONPatchError.
			return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{}, "", fmt.Sprintf("the JSON patch could not be applied: %v", err), 0, false)
		}
	default:
		return nil, unsupportedMediaType(fmt.Sprintf("unsupported patch type %q", pt))
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("apply %s: %v", pt, err))
	}
	return out, nil
}

// patchSetsResourceVersion reports whether a merge-style patch names
// metadata.resourceVersion (a JSON patch is treated as not setting it).
func patchSetsResourceVersion(patch []byte) bool {
	var m struct {
		Metadata struct {
			ResourceVersion *string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	return json.Unmarshal(patch, &m) == nil && m.Metadata.ResourceVersion != nil
}
