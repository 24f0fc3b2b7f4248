package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"

	"github.com/labstack/echo/v4"
	yamlv3 "go.yaml.in/yaml/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// readBody reads the request body, at most limit bytes. A larger body is a
// 413 RequestEntityTooLarge.
func readBody(c echo.Context, limit int64) ([]byte, error) {
	req := c.Request()
	if req.ContentLength > limit {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", limit))
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", limit))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, apierrors.NewTimeoutError("the request body was not received within the request timeout", 0)
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("read request body: %v", err))
	}
	return b, nil
}

// mediaType returns the request's Content-Type without parameters.
func mediaType(c echo.Context) string {
	ct := c.Request().Header.Get("Content-Type")
	if ct == "" {
		return "application/json"
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ct
	}
	return mt
}

// yamlDuplicatesKey holds, in the echo context, the error of a YAML body
// that gives a key twice.
const yamlDuplicatesKey = "orca.yamlDuplicates"

// bodyJSON reads the body and returns it as JSON: JSON is passed through,
// YAML (application/yaml, text/yaml) is converted with sigs.k8s.io/yaml.
// Other media types (protobuf, CBOR) are 415; an unparsable body is 400.
func (s *Server) bodyJSON(c echo.Context) ([]byte, error) {
	b, err := readBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	switch mt := mediaType(c); mt {
	case "application/json", "*/*":
		if !json.Valid(b) {
			return nil, apierrors.NewBadRequest("the request body is not valid JSON")
		}
		return b, nil
	case "application/yaml", "application/x-yaml", "text/yaml":
		j, err := yamlToJSON(b, s.cfg.MaxBodyBytes)
		if err != nil {
			return nil, err
		}
		// A key given twice is lost in the conversion: remember it for
		// fieldValidation=Strict (checkStrict).
		if _, serr := yaml.YAMLToJSONStrict(b); serr != nil {
			c.Set(yamlDuplicatesKey, serr)
		}
		return j, nil
	case protobufMediaType:
		return s.protobufToJSON(b)
	default:
		return nil, unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format %q - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf", mt))
	}
}

// yamlToJSON converts a YAML body to JSON with sigs.k8s.io/yaml, once it
// is sure the result stays within limit bytes: an alias repeats its
// anchor's whole node, so a small body can expand to gigabytes (the YAML
// parser's own "excessive aliasing" check is easily diluted). The body is
// parsed first without resolving aliases and the expanded size bounded
// from its node tree; past limit it is a 413. Invalid YAML is a 400.
func yamlToJSON(b []byte, limit int64) ([]byte, error) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(b, &doc); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid YAML: %v", err))
	}
	if n := expandedYAMLSize(&doc, map[*yamlv3.Node]int64{}, limit); n > limit {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the YAML body expands (through its aliases) to more than %d bytes, the limit", limit))
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid YAML: %v", err))
	}
	return j, nil
}

// expandedYAMLSize bounds from above the bytes node takes once every alias
// is replaced by its anchor, counting each node at its length plus a few
// bytes of punctuation; it stops counting past limit. sizes memoizes
// anchored nodes.
func expandedYAMLSize(node *yamlv3.Node, sizes map[*yamlv3.Node]int64, limit int64) int64 {
	if node == nil {
		return 0
	}
	if n, ok := sizes[node]; ok {
		return n
	}
	var n int64
	switch node.Kind {
	case yamlv3.AliasNode:
		n = expandedYAMLSize(node.Alias, sizes, limit)
	case yamlv3.ScalarNode:
		n = int64(len(node.Value)) + 4
	default:
		n = 2
		for _, c := range node.Content {
			n += expandedYAMLSize(c, sizes, limit) + 1
			if n > limit {
				break
			}
		}
	}
	if node.Anchor != "" {
		sizes[node] = n
	}
	return n
}

// decodeObject parses JSON into a new object of r. A body whose kind or
// apiVersion names another type is a 400, as in Kubernetes.
func decodeObject(r store.Resource, data []byte) (store.Object, error) {
	var tm struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(data, &tm); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", r.Kind, err))
	}
	if tm.Kind != "" && tm.Kind != r.Kind {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): kind %q", r.Kind, tm.Kind))
	}
	if tm.APIVersion != "" && tm.APIVersion != r.APIVersion() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", tm.APIVersion, r.APIVersion()))
	}
	obj := r.New()
	if err := json.Unmarshal(data, obj); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", r.Kind, err))
	}
	obj.GetObjectKind().SetGroupVersionKind(r.GroupVersion().WithKind(r.Kind))
	return obj, nil
}

// toMap returns obj as a generic JSON map.
func toMap(obj any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, json.Unmarshal(b, &m)
}

// fromMap decodes a generic JSON map into a new object of r.
func fromMap(r store.Resource, m map[string]any) (store.Object, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return decodeObject(r, b)
}

// writeJSON writes v as JSON with code.
func writeJSON(c echo.Context, code int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	return c.JSONBlob(code, b)
}

// wantsTable reports whether the client asked for a meta.k8s.io Table
// (kubectl get does), and which version.
func wantsTable(c echo.Context) (bool, string) {
	acc := c.Request().Header.Get("Accept")
	for _, part := range strings.Split(acc, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		if mt == "application/json" && params["as"] == "Table" && params["g"] == "meta.k8s.io" {
			return true, params["v"]
		}
		if mt == "application/json" && params["as"] == "" {
			return false, ""
		}
	}
	return false, ""
}

// decodeChecked decodes a create or update body into a new object of
// ri's kind as decodeObject does, calls decoded with it (the audit
// event's objectRef), then checks ?fieldValidation= as checkStrict does,
// with the same objects, errors and warnings. The common body (a built-in
// kind, no unknown or duplicate field, kind and apiVersion absent or
// right) is decoded once, by the strict decoder, instead of three times:
// the strict decoder matches field names case-sensitively, so when it
// finds no unknown field every name matched exactly and encoding/json
// (which prefers an exact match) would fill the same fields. Any other
// body takes decodeObject and checkStrict.
func decodeChecked(c echo.Context, ri reqInfo, data []byte, decoded func(store.Object)) (store.Object, error) {
	if obj := decodeStrictOnce(c, ri.kind, ri.res, data); obj != nil {
		decoded(obj)
		return obj, nil
	}
	obj, err := decodeObject(ri.res, data)
	if err != nil {
		return nil, err
	}
	decoded(obj)
	if err := checkStrict(c, ri.kind, data); err != nil {
		return nil, err
	}
	return obj, nil
}

// decodeStrictOnce is decodeChecked's single decode; nil when the body
// needs decodeObject and checkStrict.
func decodeStrictOnce(c echo.Context, k *registry.Kind, r store.Resource, data []byte) store.Object {
	switch c.QueryParam("fieldValidation") {
	case "", metav1.FieldValidationWarn, metav1.FieldValidationStrict:
	default:
		return nil
	}
	if k.UnknownFields != nil || c.Get(yamlDuplicatesKey) != nil {
		return nil
	}
	obj := r.New()
	if _, ok := obj.(runtime.Unstructured); ok {
		return nil
	}
	strictErrs, err := sigsjson.UnmarshalStrict(data, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil || len(strictErrs) > 0 {
		return nil
	}
	tm, ok := obj.GetObjectKind().(*metav1.TypeMeta)
	if !ok || (tm.Kind != "" && tm.Kind != r.Kind) || (tm.APIVersion != "" && tm.APIVersion != r.APIVersion()) {
		return nil
	}
	obj.GetObjectKind().SetGroupVersionKind(r.GroupVersion().WithKind(r.Kind))
	return obj
}

// checkStrict implements ?fieldValidation= as the Kubernetes apiserver
// does for create, update and patch: the body is decoded into the kind
// with sigs.k8s.io/json's strict options, so an unknown field and a field
// given twice are found with their paths ("unknown field
// \"spec.foo\"", "duplicate field \"metadata.name\""). Strict
// (kubectl's default --validate) makes them a 400 "strict decoding
// error: ..."; Warn (the server default, "") answers them as Warning
// headers; Ignore skips the check. Any other value is a 400.
func checkStrict(c echo.Context, k *registry.Kind, data []byte) error {
	mode := c.QueryParam("fieldValidation")
	switch mode {
	case metav1.FieldValidationIgnore:
		return nil
	case "", metav1.FieldValidationWarn, metav1.FieldValidationStrict:
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("fieldValidation %q is not one of %s, %s, %s", mode,
			metav1.FieldValidationIgnore, metav1.FieldValidationWarn, metav1.FieldValidationStrict))
	}
	var strictErrs []error
	var err error
	if k.UnknownFields != nil {
		// Custom resources: duplicates from the JSON, unknown fields
		// from the schema's pruning, as Kubernetes reports them.
		var v any
		if strictErrs, err = sigsjson.UnmarshalStrict(data, &v, sigsjson.DisallowDuplicateFields); err == nil {
			for _, f := range k.UnknownFields(data) {
				strictErrs = append(strictErrs, fmt.Errorf("unknown field %q", f))
			}
		}
	} else {
		strictErrs, err = sigsjson.UnmarshalStrict(data, k.New(), sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	}
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", k.Kind, err))
	}
	if mode == metav1.FieldValidationStrict && c.Get(yamlDuplicatesKey) != nil {
		strictErrs = append(strictErrs, c.Get(yamlDuplicatesKey).(error))
	}
	if len(strictErrs) == 0 {
		return nil
	}
	msgs := make([]string, len(strictErrs))
	for i, e := range strictErrs {
		msgs[i] = e.Error()
	}
	if mode == metav1.FieldValidationStrict {
		return apierrors.NewBadRequest("strict decoding error: " + strings.Join(msgs, ", "))
	}
	// As Kubernetes' warning recorder: each warning cut to 256 characters,
	// at most 4 KiB of them.
	total := 0
	for _, m := range msgs {
		if len(m) > 256 {
			m = m[:253] + "..."
		}
		if total += len(m); total > 4096 {
			break
		}
		c.Response().Header().Add("Warning", fmt.Sprintf("299 - %q", m))
	}
	return nil
}
