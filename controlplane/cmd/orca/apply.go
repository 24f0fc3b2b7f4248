package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// lastAppliedAnnotation is where kubectl's client-side apply keeps the
// manifest it last applied.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// newApplyCmd returns `orca apply -f FILE`: create each object of a
// (multi-document) YAML or JSON manifest, or replace it when it exists.
// It is the small subset of `kubectl apply` that `make run` needs on a
// machine without kubectl: it replaces instead of merging, but records the
// last-applied annotation so kubectl apply can take over.
func newApplyCmd() *cobra.Command {
	var file, namespace string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace the objects of a Kubernetes manifest (a kubectl-free subset of kubectl apply)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := connect(cmd)
			if err != nil {
				return err
			}
			return apply(cmd.OutOrStdout(), api, file, namespace)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "manifest file ('-' for stdin)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "default", "namespace for objects that name none")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// apply applies each object of file. A manifest with no object (empty,
// only `null` documents or only comments) is the error "no objects passed
// to apply", as kubectl apply.
func apply(out io.Writer, api *apiClient, file, namespace string) error {
	n := 0
	res := newResolver(api)
	if err := eachObject(file, func(u *unstructured.Unstructured) error {
		n++
		return applyOne(out, api, res, u, namespace)
	}); err != nil {
		return err
	}
	if n == 0 {
		return errors.New("no objects passed to apply")
	}
	return nil
}

// eachObject calls f with each object of the (multi-document) YAML or
// JSON manifest file ("-": stdin), in order, stopping at its first error.
func eachObject(file string, f func(*unstructured.Unstructured) error) error {
	var r io.Reader = os.Stdin
	if file != "-" {
		fh, err := os.Open(file)
		if err != nil {
			return err
		}
		defer fh.Close()
		r = fh
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := f(&u); err != nil {
			return err
		}
	}
}

// resolver maps a manifest object's apiVersion and kind to its REST
// collection path with the server's discovery (GET /api/v1,
// /apis/<group>/<version>), as kubectl's RESTMapper: every kind the
// server serves, those it added at run time (custom resources) included.
// Each group version is asked once per resolver.
type resolver struct {
	api   *apiClient
	lists map[string]*metav1.APIResourceList // by group version; nil: not served
}

func newResolver(api *apiClient) *resolver {
	return &resolver{api: api, lists: map[string]*metav1.APIResourceList{}}
}

// resourcePath returns the collection path of obj's kind, e.g.
// "/apis/apps/v1/namespaces/default/deployments", and sets obj's
// namespace to namespace when it is namespaced and names none.
func (r *resolver) resourcePath(u *unstructured.Unstructured, namespace string) (string, error) {
	gvk := u.GroupVersionKind()
	base := "/api/" + gvk.Version
	if gvk.Group != "" {
		base = "/apis/" + gvk.Group + "/" + gvk.Version
	}
	gv := gvk.GroupVersion().String()
	list, ok := r.lists[gv]
	if !ok {
		var l metav1.APIResourceList
		code, err := do(r.api, http.MethodGet, base, nil, &l)
		if err != nil {
			return "", fmt.Errorf("discover %s: %w", gv, err)
		}
		if code == http.StatusOK {
			list = &l
		}
		r.lists[gv] = list
	}
	if list != nil {
		for _, res := range list.APIResources {
			if res.Kind != gvk.Kind || strings.Contains(res.Name, "/") {
				continue
			}
			p := base
			if res.Namespaced {
				if u.GetNamespace() == "" {
					u.SetNamespace(namespace)
				}
				p += "/namespaces/" + url.PathEscape(u.GetNamespace())
			}
			return p + "/" + res.Name, nil
		}
	}
	return "", fmt.Errorf("%s %q: kind %s is not served by orca", gvk.GroupVersion(), u.GetName(), gvk.Kind)
}

func applyOne(out io.Writer, api *apiClient, res *resolver, u *unstructured.Unstructured, namespace string) error {
	coll, err := res.resourcePath(u, namespace)
	if err != nil {
		return err
	}
	// Record the manifest as kubectl apply does, so a later `kubectl apply`
	// of the same objects computes its three-way merge from it.
	last, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[lastAppliedAnnotation] = string(last) + "\n"
	u.SetAnnotations(ann)
	item := coll + "/" + url.PathEscape(u.GetName())
	what := strings.ToLower(u.GetKind()) + "/" + u.GetName()
	var cur map[string]any
	code, err := do(api, http.MethodGet, item, nil, &cur)
	if err != nil {
		return err
	}
	if code == http.StatusNotFound {
		if _, err := doOK(api, http.MethodPost, coll, u.Object, nil); err != nil {
			return fmt.Errorf("create %s: %w", what, err)
		}
		fmt.Fprintf(out, "%s created\n", what)
		return nil
	}
	meta, _ := cur["metadata"].(map[string]any)
	u.SetResourceVersion(fmt.Sprint(meta["resourceVersion"]))
	if _, err := doOK(api, http.MethodPut, item, u.Object, nil); err != nil {
		return fmt.Errorf("replace %s: %w", what, err)
	}
	fmt.Fprintf(out, "%s configured\n", what)
	return nil
}

// do sends a JSON request and decodes a JSON answer into into (if not nil
// and the status is 2xx). It returns the HTTP status.
func do(api *apiClient, method, path string, body any, into any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, strings.TrimRight(api.server, "/")+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := api.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 == 2 && into != nil {
		return resp.StatusCode, json.Unmarshal(data, into)
	}
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusNotFound {
		return resp.StatusCode, statusError(resp.StatusCode, data)
	}
	return resp.StatusCode, nil
}

// doOK is do that treats every non-2xx answer as an error.
func doOK(api *apiClient, method, path string, body any, into any) (int, error) {
	code, err := do(api, method, path, body, into)
	if err == nil && code/100 != 2 {
		err = fmt.Errorf("%s %s: HTTP %d", method, path, code)
	}
	return code, err
}

func statusError(code int, data []byte) error {
	var st struct {
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}
	if json.Unmarshal(data, &st) == nil && st.Message != "" {
		return fmt.Errorf("HTTP %d %s: %s", code, st.Reason, st.Message)
	}
	return fmt.Errorf("HTTP %d: %s", code, bytes.TrimSpace(data))
}
