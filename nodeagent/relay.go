package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// RelayAPI is the API over the apiserver's REST API relayed on NATS
// (controlplane/nodeapi's relay): every request is authorized by the
// apiserver as the node (its Node authorizer and NodeRestriction
// admission), as the kubelet's clientset over HTTPS. Safe for concurrent
// use.
type RelayAPI struct {
	relay *nodeapi.Relay
}

var _ API = (*RelayAPI)(nil)

// NewRelayAPI returns the API of node over the relay on nc. nc must be
// the node's own NATS connection: its credentials are what lets it
// publish on the node's relay subject.
func NewRelayAPI(nc *nats.Conn, node string) *RelayAPI {
	return &RelayAPI{relay: nodeapi.NewRelay(nc, node)}
}

// resourcePath is the REST path of r's namespace/name ("" name: the
// collection) and subresource ("" none), its segments escaped.
func resourcePath(r store.Resource, namespace, name, sub string) string {
	var b strings.Builder
	if r.Group == "" {
		b.WriteString("/api/" + r.Version)
	} else {
		b.WriteString("/apis/" + r.Group + "/" + r.Version)
	}
	if r.Namespaced {
		b.WriteString("/namespaces/" + url.PathEscape(namespace))
	}
	b.WriteString("/" + r.Plural)
	if name != "" {
		b.WriteString("/" + url.PathEscape(name))
	}
	if sub != "" {
		b.WriteString("/" + sub)
	}
	return b.String()
}

// do sends one request with a JSON body (in, nil for none) and decodes a
// successful reply into out (nil: ignored). An error status is returned
// as the apiserver's Status (apierrors.FromObject).
func (a *RelayAPI) do(ctx context.Context, method, path string, gr schema.GroupResource, name string, in, out any) error {
	var body []byte
	ct := ""
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("%s %s: encode body: %v", method, path, err))
		}
		ct = "application/json"
	}
	resp, err := a.relay.Do(ctx, method, path, ct, body)
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var st metav1.Status
		if json.Unmarshal(resp.Body, &st) == nil && st.Kind == "Status" && st.Status == metav1.StatusFailure {
			return apierrors.FromObject(&st)
		}
		return apierrors.NewGenericServerResponse(resp.StatusCode, method, gr, name, string(resp.Body), 0, false)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("%s %s: decode reply: %w", method, path, err))
	}
	return nil
}

// object sends one request about the object namespace/name of r (name
// "" for the collection) with in as its body (nil: none) and decodes the
// reply into a new object of r. Errors name in's name, else name.
func (a *RelayAPI) object(ctx context.Context, method string, r store.Resource, namespace, name, sub string, in store.Object) (store.Object, error) {
	var body any
	errName := name
	if in != nil {
		in = in.DeepCopyObject().(store.Object)
		in.GetObjectKind().SetGroupVersionKind(r.GroupVersion().WithKind(r.Kind))
		body, errName = in, in.GetName()
	}
	out := r.New()
	if err := a.do(ctx, method, resourcePath(r, namespace, name, sub), r.GroupResource(), errName, body, out); err != nil {
		return nil, err
	}
	out.GetObjectKind().SetGroupVersionKind(r.GroupVersion().WithKind(r.Kind))
	return out, nil
}

// Get implements API (GET).
func (a *RelayAPI) Get(ctx context.Context, r store.Resource, namespace, name string) (store.Object, error) {
	return a.object(ctx, http.MethodGet, r, namespace, name, "", nil)
}

// Create implements API (POST to the collection).
func (a *RelayAPI) Create(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	return a.object(ctx, http.MethodPost, r, obj.GetNamespace(), "", "", obj)
}

// Update implements API (PUT).
func (a *RelayAPI) Update(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	return a.object(ctx, http.MethodPut, r, obj.GetNamespace(), obj.GetName(), "", obj)
}

// UpdateStatus implements API (PUT .../status).
func (a *RelayAPI) UpdateStatus(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	return a.object(ctx, http.MethodPut, r, obj.GetNamespace(), obj.GetName(), "status", obj)
}

// Delete implements API (DELETE with the options as body).
func (a *RelayAPI) Delete(ctx context.Context, r store.Resource, namespace, name string, opts metav1.DeleteOptions) error {
	opts.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}
	return a.do(ctx, http.MethodDelete, resourcePath(r, namespace, name, ""), r.GroupResource(), name, &opts, nil)
}

// CreateToken implements API (POST .../serviceaccounts/<name>/token).
func (a *RelayAPI) CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	in := req.DeepCopy()
	in.TypeMeta = metav1.TypeMeta{APIVersion: authenticationv1.SchemeGroupVersion.String(), Kind: "TokenRequest"}
	out := &authenticationv1.TokenRequest{}
	sa := store.Resource{Version: "v1", Plural: "serviceaccounts", Namespaced: true}
	if err := a.do(ctx, http.MethodPost, resourcePath(sa, namespace, serviceAccount, "token"), sa.GroupResource(), serviceAccount, in, out); err != nil {
		return nil, err
	}
	return out, nil
}
