package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// subresource serves a subresource the kind declares
// (registry.Kind.Subresource): status, scale and the update subresources
// (namespaces/finalize) generically, the others (pods' binding, eviction,
// log, exec, attach, portforward) by their handler in connectors. A method
// that is not one of the subresource's verbs is a 405.
func (s *Server) subresource(c echo.Context, ri reqInfo) error {
	if err := requireNamespace(ri); err != nil {
		return err
	}
	m := c.Request().Method
	sr, ok := ri.kind.Subresource(ri.sub)
	if !ok {
		return notFoundPath(c.Request().URL.Path)
	}
	if !slices.Contains(sr.Verbs, methodVerbs[m]) {
		return apiMethodNotAllowed(m, c.Request().URL.Path)
	}
	switch {
	case ri.sub == "status" && ri.kind.Status:
		switch m {
		case http.MethodGet:
			return s.get(c, ri)
		case http.MethodPut:
			return s.update(c, ri)
		case http.MethodPatch:
			return s.patch(c, ri)
		}
	case ri.sub == "scale" && ri.kind.Scale != nil:
		return s.scale(c, ri)
	case sr.Update != nil && m == http.MethodPut:
		return s.update(c, ri)
	}
	if serve, ok := connectors[connectorKey(ri.kind, ri.sub)]; ok {
		return serve(s, c, ri)
	}
	return apiMethodNotAllowed(m, c.Request().URL.Path)
}

// methodVerbs maps an HTTP method to its Kubernetes verb on one object.
var methodVerbs = map[string]string{http.MethodGet: "get", http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}

// connectors are the apiserver's handlers of subresources that are not
// updates of their object (Kubernetes' connect and create REST of
// pods/log, pods/exec, pods/binding...), keyed by connectorKey. What a
// subresource is (its verbs, its discovery entry) is the kind's, in the
// registry; these serve it. This table is static.
var connectors = map[string]func(*Server, echo.Context, reqInfo) error{
	"/Pod/binding":          (*Server).bind,
	"/Pod/eviction":         (*Server).evict,
	"/Pod/log":              (*Server).podLog,
	"/Pod/exec":             (*Server).podRemoteCommand,
	"/Pod/attach":           (*Server).podRemoteCommand,
	"/Pod/portforward":      (*Server).podPortForward,
	"/ServiceAccount/token": (*Server).serviceAccountToken,
}

// connectorKey is "<group>/<Kind>/<subresource>" ("/Pod/log").
func connectorKey(k *registry.Kind, sub string) string { return k.Group + "/" + k.Kind + "/" + sub }

// bind answers POST pods/<name>/binding with a v1.Binding: it assigns the
// pod to binding.target.name with store.Bind (409 when the pod is already
// bound or being deleted, or metadata.uid does not match) and answers
// 201 with a Success Status, as Kubernetes' BindingREST.
func (s *Server) bind(c echo.Context, ri reqInfo) error {
	data, err := s.bodyJSON(c)
	if err != nil {
		return err
	}
	var b corev1.Binding
	if err := json.Unmarshal(data, &b); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("decode Binding: %v", err))
	}
	if b.Name != "" && b.Name != ri.name {
		return apierrors.NewBadRequest(fmt.Sprintf("name in URL (%s) does not match name in Binding object (%s)", ri.name, b.Name))
	}
	if b.Namespace != "" && b.Namespace != ri.namespace {
		return apierrors.NewBadRequest(fmt.Sprintf("namespace in URL (%s) does not match namespace in Binding object (%s)", ri.namespace, b.Namespace))
	}
	if b.Target.Kind != "" && b.Target.Kind != "Node" {
		return apierrors.NewBadRequest(fmt.Sprintf("bind pod %s/%s: target kind %q is not Node", ri.namespace, ri.name, b.Target.Kind))
	}
	// As the pod's spec.nodeName, which the binding sets (ValidateNodeName).
	if msgs := validation.IsDNS1123Subdomain(b.Target.Name); len(msgs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "Binding"}, ri.name, field.ErrorList{field.Invalid(field.NewPath("target", "name"), b.Target.Name, msgs[0])})
	}
	if isDryRun(c.Request().URL.Query()) {
		// Check what Bind would, write nothing.
		obj, err := s.st.Get(c.Request().Context(), store.Pods, ri.namespace, ri.name)
		if err != nil {
			return err
		}
		pod := obj.(*corev1.Pod)
		switch {
		case b.UID != "" && pod.UID != b.UID:
			return apierrors.NewConflict(store.Pods.GroupResource(), ri.name, fmt.Errorf("pod uid %s is not %s", pod.UID, b.UID))
		case pod.DeletionTimestamp != nil:
			return apierrors.NewConflict(store.Pods.GroupResource(), ri.name, fmt.Errorf("pod is being deleted"))
		case pod.Spec.NodeName != "":
			return apierrors.NewConflict(store.Pods.GroupResource(), ri.name, fmt.Errorf("pod is already assigned to node %q", pod.Spec.NodeName))
		}
	} else if _, err := s.st.Bind(c.Request().Context(), ri.namespace, ri.name, b.UID, b.Target.Name); err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

// scale answers the scale subresource of a kind with one (Kind.Scale) with
// an autoscaling/v1 Scale (spec.replicas, status.replicas, status.selector).
// PUT and PATCH change only spec.replicas.
func (s *Server) scale(c echo.Context, ri reqInfo) error {
	ctx := c.Request().Context()
	if c.Request().Method == http.MethodGet {
		obj, err := s.st.Get(ctx, ri.res, ri.namespace, ri.name)
		if err != nil {
			return err
		}
		return writeJSON(c, http.StatusOK, scaleOf(ri.kind, obj))
	}
	var pt types.PatchType
	var body []byte
	var err error
	if c.Request().Method == http.MethodPatch {
		pt, body, err = s.readPatch(c)
		if err == nil && pt == types.ApplyYAMLPatchType {
			return s.applyScale(c, ri, body)
		}
	} else {
		body, err = s.bodyJSON(c)
	}
	if err != nil {
		return err
	}
	main := ri
	main.sub = ""
	out, err := s.updateObject(ctx, main, isDryRun(c.Request().URL.Query()), func(cur store.Object) (store.Object, error) {
		sc := scaleOf(ri.kind, cur)
		var want autoscalingv1.Scale
		if pt != "" {
			orig, _ := json.Marshal(sc)
			patched, err := applyPatch(pt, orig, body, &autoscalingv1.Scale{})
			if err != nil {
				return nil, err
			}
			if err := checkPatchedSize(patched, s.cfg.MaxBodyBytes); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(patched, &want); err != nil {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("decode Scale: %v", err))
			}
			if want.ResourceVersion == sc.ResourceVersion && !patchSetsResourceVersion(body) {
				want.ResourceVersion = ""
			}
		} else if err := json.Unmarshal(body, &want); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("decode Scale: %v", err))
		}
		if want.Spec.Replicas < 0 {
			return nil, apierrors.NewInvalid(schema.GroupKind{Group: "autoscaling", Kind: "Scale"}, ri.name, field.ErrorList{
				field.Invalid(field.NewPath("spec", "replicas"), want.Spec.Replicas, "must be greater than or equal to 0")})
		}
		ri.kind.Scale.Set(cur, want.Spec.Replicas)
		cur.SetResourceVersion(want.ResourceVersion)
		return cur, nil
	})
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, scaleOf(ri.kind, out))
}

func scaleOf(k *registry.Kind, obj store.Object) autoscalingv1.Scale {
	sc := autoscalingv1.Scale{TypeMeta: metav1.TypeMeta{Kind: "Scale", APIVersion: "autoscaling/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace(), UID: obj.GetUID(),
			ResourceVersion: obj.GetResourceVersion(), CreationTimestamp: obj.GetCreationTimestamp()}}
	sc.Spec.Replicas, sc.Status.Replicas, sc.Status.Selector = k.Scale.Get(obj)
	return sc
}
