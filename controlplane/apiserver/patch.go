package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	sigsjson "sigs.k8s.io/json"

	"github.com/orca-edge/orca/controlplane/store"
)

// Limits on what applying a patch may cost. The first two are the
// Kubernetes apiserver's (k8s.io/apiserver/pkg/endpoints/handlers/patch.go
// and the JSONPatchMaxCopyBytes of its server config).
const (
	// maxJSONPatchOperations bounds the operations of one JSON patch; a
	// longer one is a 413 before any of it is applied.
	maxJSONPatchOperations = 10000
	// jsonPatchMaxCopyBytes bounds, in bytes, what the copy operations of
	// one JSON patch may add to the document (3 MiB). A copy can duplicate
	// a subtree into itself, doubling the document, so without this bound a
	// few dozen operations ask for exabytes. Exceeding it is a 413.
	jsonPatchMaxCopyBytes = 3 << 20
	// maxPatchedDepth bounds how deeply a patch of any type may nest the
	// object, in levels of objects and arrays ({} is 1), decided before
	// the patch is applied. The JSON patch library's cost grows with depth
	// times size: each level it has parsed encodes its whole subtree
	// again, so a JSON patch of one deep value, or of moves that stack
	// chains under each other, costs seconds per few kilobytes and minutes
	// for a full body, within both limits above. The objects orca serves
	// are at most about half as deep (a Deployment's pod anti-affinity
	// values: 13 levels). Kubernetes has no such bound. Exceeding it is a
	// 422.
	maxPatchedDepth = 32
	// maxMergedListElements bounds the list merges of a strategic merge
	// patch (mergedListCost): strategicpatch sorts a merged list with a
	// linear search per comparison, so a 135 KB patch of 8000 containers
	// costs 9 s of CPU, and a 165-byte one 7 s on a stored Pod of 8000.
	// 2000 elements cost about 0.3 s. Kubernetes has no such bound.
	// Exceeding it is a 413.
	maxMergedListElements = 2000
)

// jsonPatchCopyLimit arms jsonPatchMaxCopyBytes once; see armJSONPatchCopyLimit.
var jsonPatchCopyLimit sync.Once

// armJSONPatchCopyLimit sets jsonpatch.AccumulatedCopySizeLimit to
// jsonPatchMaxCopyBytes, unless something else in the process set a
// smaller one, as the Kubernetes apiserver does when it builds its
// GenericAPIServer. gopkg.in/evanphx/json-patch.v4 has no per-call option:
// the limit is a package variable its Apply reads, so it is process-wide.
// It is set once, before orca's first JSON patch; every Apply orca makes
// runs after this returns (sync.Once orders them), so none races with it.
func armJSONPatchCopyLimit() {
	jsonPatchCopyLimit.Do(func() {
		if l := jsonpatch.AccumulatedCopySizeLimit; l <= 0 || l > jsonPatchMaxCopyBytes {
			jsonpatch.AccumulatedCopySizeLimit = jsonPatchMaxCopyBytes
		}
	})
}

// patch answers PATCH of an object or its status subresource. Supported
// Content-Types: application/strategic-merge-patch+json (apimachinery
// strategicpatch with the typed object), application/merge-patch+json
// (RFC 7386), application/json-patch+json (RFC 6902) and server-side
// apply, application/apply-patch+yaml (apply.go). A patch that sets
// metadata.resourceVersion is conditional on it (409 when stale);
// otherwise it is applied to the latest object and retried on conflict.
//
// Cost is bounded before it is spent (applyPatch): the body by
// Config.MaxBodyBytes; a JSON patch by maxJSONPatchOperations and
// jsonPatchMaxCopyBytes; a strategic merge patch by maxMergedListElements;
// a patch of any type by maxPatchedDepth, and its result by
// Config.MaxBodyBytes again (what a client could have sent with PUT). Each
// limit exceeded is a 413 RequestEntityTooLarge (422 Invalid for the
// depth) whose message names the limit, and the object stays unchanged.
func (s *Server) patch(c echo.Context, ri reqInfo) error {
	if err := requireNamespace(ri); err != nil {
		return err
	}
	pt, body, err := s.readPatch(c)
	if err != nil {
		return err
	}
	if _, unstructured := ri.kind.New().(runtime.Unstructured); unstructured && pt == types.StrategicMergePatchType {
		// As Kubernetes: custom resources have no patch strategies.
		return unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format %q - accepted media types include: application/json-patch+json, application/merge-patch+json", pt))
	}
	if c.QueryParam("fieldValidation") == metav1.FieldValidationStrict {
		// A field given twice in the patch itself is lost in the patched
		// object: find it here.
		var v any
		if strictErrs, err := sigsjson.UnmarshalStrict(body, &v, sigsjson.DisallowDuplicateFields); err == nil && len(strictErrs) > 0 {
			msgs := make([]string, len(strictErrs))
			for i, e := range strictErrs {
				msgs[i] = e.Error()
			}
			return apierrors.NewBadRequest("strict decoding error: " + strings.Join(msgs, ", "))
		}
	}
	if pt == types.ApplyYAMLPatchType {
		return s.apply(c, ri, body)
	}
	// Strict field validation looks at the patched object, not the patch:
	// strategic merge patches carry directives ($setElementOrder/ports,
	// $patch, $retainKeys) that are not fields.
	strict := func(patched []byte) error {
		if ri.sub != "" {
			return nil
		}
		return checkStrict(c, ri.kind, patched)
	}
	out, err := s.updateObject(c.Request().Context(), ri, isDryRun(c.Request().URL.Query()), func(cur store.Object) (store.Object, error) {
		return patchObject(ri.res, pt, cur, body, s.cfg.MaxBodyBytes, strict)
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
	case types.StrategicMergePatchType, types.MergePatchType, types.JSONPatchType, types.ApplyYAMLPatchType:
	default:
		return "", nil, unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format %q - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml", pt))
	}
	body, err := readBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return "", nil, err
	}
	if !json.Valid(body) {
		j, yerr := yamlToJSON(body, s.cfg.MaxBodyBytes)
		if apierrors.IsRequestEntityTooLargeError(yerr) {
			return "", nil, yerr
		}
		if yerr != nil || !json.Valid(j) {
			return "", nil, apierrors.NewBadRequest("the patch is not valid JSON")
		}
		body = j
	}
	return pt, body, nil
}

// patchObject applies patch of type pt to cur, checks the result with
// check, and decodes it. A result larger than limit bytes is a 413
// (checkPatchedSize). The result carries a resourceVersion only when the
// patch set one.
func patchObject(r store.Resource, pt types.PatchType, cur store.Object, patch []byte, limit int64, check func(patched []byte) error) (store.Object, error) {
	curRV := cur.GetResourceVersion()
	orig, err := json.Marshal(cur)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out, err := applyPatch(pt, orig, patch, r.New())
	if err != nil {
		return nil, err
	}
	if err := checkPatchedSize(out, limit); err != nil {
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
// typed object strategic merge patches need for their merge keys. Before
// it spends work out of proportion to their size, it refuses a patch that
// could nest the document more than maxPatchedDepth levels deep (422), a
// JSON patch of more than maxJSONPatchOperations operations (413) and a
// strategic merge patch whose list merges cost more than
// maxMergedListElements (413); while applying, a JSON patch whose copies
// add more than jsonPatchMaxCopyBytes (413). The size of the result is
// the caller's to bound (checkPatchedSize).
func applyPatch(pt types.PatchType, orig, patch []byte, dataStruct any) ([]byte, error) {
	switch pt {
	case types.StrategicMergePatchType:
		if err := checkPatchedDepth(max(jsonDepth(orig), jsonDepth(patch))); err != nil {
			return nil, err
		}
		return strategicMerge(orig, patch, dataStruct)
	case types.MergePatchType:
		if err := checkPatchedDepth(max(jsonDepth(orig), jsonDepth(patch))); err != nil {
			return nil, err
		}
		out, err := jsonpatch.MergePatch(orig, patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("apply %s: %v", pt, err))
		}
		return out, nil
	case types.JSONPatchType:
		return applyJSONPatch(orig, patch)
	default:
		return nil, unsupportedMediaType(fmt.Sprintf("unsupported patch type %q", pt))
	}
}

// applyJSONPatch applies the RFC 6902 patch to orig; see applyPatch.
func applyJSONPatch(orig, patch []byte) ([]byte, error) {
	p, err := decodeJSONPatch(patch)
	if err != nil {
		return nil, err
	}
	if err := checkPatchedDepth(patchedDepthBound(p, orig)); err != nil {
		return nil, err
	}
	armJSONPatchCopyLimit()
	out, err := p.Apply(orig)
	if err != nil {
		msg := fmt.Sprintf("the JSON patch could not be applied: %v", err)
		var tooMuchCopied *jsonpatch.AccumulatedCopySizeError
		if errors.As(err, &tooMuchCopied) {
			return nil, apierrors.NewRequestEntityTooLargeError(msg)
		}
		// A well-formed patch that does not apply (a failed test, a
		// missing path) is 422, as Kubernetes' interpretJSONPatchError.
		return nil, unprocessablePatch(msg)
	}
	return out, nil
}

// strategicMerge applies a strategic merge patch with apimachinery's
// strategicpatch, once mergedListCost says its list merges are affordable.
func strategicMerge(orig, patch []byte, dataStruct any) ([]byte, error) {
	var o, p map[string]any
	if json.Unmarshal(orig, &o) != nil || json.Unmarshal(patch, &p) != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("apply %s: %v", types.StrategicMergePatchType, mergepatch.ErrBadJSONDoc))
	}
	if n, at := mergedListCost(o, p); n > maxMergedListElements {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the strategic merge patch merges lists as costly to merge as one of %d elements (the longest at %s), more than the %d allowed", n, at, maxMergedListElements))
	}
	m, err := strategicpatch.StrategicMergeMapPatch(o, p, dataStruct)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("apply %s: %v", types.StrategicMergePatchType, err))
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

// mergedListCost measures what merging the lists of the strategic merge
// patch p into o costs, as the length of the one list that would cost as
// much, and names the path of the costliest. strategicpatch merges a list
// of the patch with the stored one in time quadratic in their combined
// length, so each list of p counts its length plus that of the longest
// list of o at the same path (list indices aside), squared; the measure is
// the square root of their sum. $setElementOrder/x and
// $deleteFromPrimitiveList/x count as lists at x.
func mergedListCost(o, p map[string]any) (int, string) {
	stored := map[string]int{} // path -> length of the longest list of o there
	var measure func(v any, at string)
	measure = func(v any, at string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				measure(x, at+"."+k)
			}
		case []any:
			stored[at] = max(stored[at], len(v))
			for _, x := range v {
				measure(x, at+"[]")
			}
		}
	}
	measure(o, "")
	sum, costliest, costliestAt := 0, 0, ""
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if directive, field, ok := strings.Cut(k, "/"); ok && strings.HasPrefix(directive, "$") {
					k = field
				}
				walk(x, at+"."+k)
			}
		case []any:
			n := len(v) + stored[at]
			sum += n * n
			if n > costliest {
				costliest, costliestAt = n, at
			}
			for _, x := range v {
				walk(x, at+"[]")
			}
		}
	}
	walk(p, "")
	return int(math.Sqrt(float64(sum))), strings.TrimPrefix(costliestAt, ".")
}

// checkPatchedDepth is a 422 when a patch may nest the object depth
// levels deep, more than maxPatchedDepth.
func checkPatchedDepth(depth int) error {
	if depth > maxPatchedDepth {
		return unprocessablePatch(fmt.Sprintf("the patch may nest the object %d levels deep, more than the %d allowed", depth, maxPatchedDepth))
	}
	return nil
}

// unprocessablePatch is the 422 Invalid of a patch that cannot be
// applied, with msg as its message. (apierrors.NewGenericServerResponse,
// which Kubernetes uses here, replaces a 422's message with "the server
// rejected our request due to an error in our request".)
func unprocessablePatch(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: msg,
	}}
}

// decodeJSONPatch decodes an RFC 6902 patch: a 400 when it is not a list
// of operations, a 413 when it has more than maxJSONPatchOperations. The
// operations are counted on their raw text, before they are decoded.
func decodeJSONPatch(patch []byte) (jsonpatch.Patch, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(patch, &raw); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", types.JSONPatchType, err))
	}
	if len(raw) > maxJSONPatchOperations {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOperations, len(raw)))
	}
	p := make(jsonpatch.Patch, len(raw))
	for i, op := range raw {
		if err := json.Unmarshal(op, &p[i]); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decode %s: operation %d: %v", types.JSONPatchType, i, err))
		}
		// RFC 6902 section 4: add, replace and test need a value, move
		// and copy a from. The library dereferences a missing value.
		kind := p[i].Kind()
		_, hasValue := p[i]["value"]
		_, hasFrom := p[i]["from"]
		switch {
		case (kind == "add" || kind == "replace" || kind == "test") && !hasValue:
			return nil, unprocessablePatch(fmt.Sprintf("the JSON patch could not be applied: operation %d (%s) has no value", i, kind))
		case (kind == "move" || kind == "copy") && !hasFrom:
			return nil, unprocessablePatch(fmt.Sprintf("the JSON patch could not be applied: operation %d (%s) has no from", i, kind))
		}
	}
	return p, nil
}

// patchedDepthBound bounds from above the nesting depth (jsonDepth) of
// the document orig once p is applied: an add or replace at a path of n
// segments of a value of depth d reaches n+d, and a copy or move deepens
// the document by at most how much longer its path is than its from. It
// costs one scan of orig and of the operations' values.
func patchedDepthBound(p jsonpatch.Patch, orig []byte) int {
	segments := func(pointer string) int { return strings.Count(pointer, "/") }
	reach, grow := jsonDepth(orig), 0
	for _, op := range p {
		path, _ := op.Path() // an operation without one fails to apply
		switch op.Kind() {
		case "add", "replace":
			d := 0
			if v := op["value"]; v != nil {
				d = jsonDepth(*v)
			}
			reach = max(reach, segments(path)+d)
		case "copy", "move":
			from, _ := op.From()
			grow += max(0, segments(path)-segments(from))
		}
	}
	return reach + grow
}

// jsonDepth is the nesting depth of the valid JSON text b: 0 for a scalar,
// 1 for {} or [], and one more for each level of objects and arrays inside.
func jsonDepth(b []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++ // the escaped character cannot end the string
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// checkPatchedSize is a 413 when a patched document is larger than limit
// bytes: a patch may not build an object bigger than the request body a
// client could have sent to write it (Config.MaxBodyBytes).
func checkPatchedSize(patched []byte, limit int64) error {
	if int64(len(patched)) > limit {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the patched object is %d bytes, limit is %d bytes", len(patched), limit))
	}
	return nil
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
