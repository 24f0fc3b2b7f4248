package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/store"
)

// subresource routes /status, /finalize, /binding, /log, /scale and
// pods' /exec, /attach and /portforward (exec.go).
func (s *Server) subresource(c echo.Context, ri reqInfo) error {
	if err := requireNamespace(ri); err != nil {
		return err
	}
	m := c.Request().Method
	kind := ri.res.Kind
	switch {
	case ri.sub == "status" && statusSubresource[kind]:
		switch m {
		case http.MethodGet:
			return s.get(c, ri)
		case http.MethodPut:
			return s.update(c, ri)
		case http.MethodPatch:
			return s.patch(c, ri)
		}
	case ri.sub == "finalize" && kind == "Namespace" && m == http.MethodPut:
		return s.update(c, ri)
	case ri.sub == "binding" && kind == "Pod" && m == http.MethodPost:
		return s.bind(c, ri)
	case ri.sub == "log" && kind == "Pod" && m == http.MethodGet:
		return s.podLog(c, ri)
	case ri.sub == "scale" && (kind == "Deployment" || kind == "ReplicaSet"):
		switch m {
		case http.MethodGet, http.MethodPut, http.MethodPatch:
			return s.scale(c, ri)
		}
	case kind == "Pod" && (ri.sub == "exec" || ri.sub == "attach") && (m == http.MethodGet || m == http.MethodPost):
		return s.podRemoteCommand(c, ri)
	case kind == "Pod" && ri.sub == "portforward" && (m == http.MethodGet || m == http.MethodPost):
		return s.podPortForward(c, ri)
	default:
		return notFoundPath(c.Request().URL.Path)
	}
	return apiMethodNotAllowed(m, c.Request().URL.Path)
}

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

// scale answers the scale subresource of Deployments and ReplicaSets with
// an autoscaling/v1 Scale (spec.replicas, status.replicas, status.selector).
// PUT and PATCH change only spec.replicas.
func (s *Server) scale(c echo.Context, ri reqInfo) error {
	ctx := c.Request().Context()
	if c.Request().Method == http.MethodGet {
		obj, err := s.st.Get(ctx, ri.res, ri.namespace, ri.name)
		if err != nil {
			return err
		}
		return writeJSON(c, http.StatusOK, scaleOf(obj))
	}
	var pt types.PatchType
	var body []byte
	var err error
	if c.Request().Method == http.MethodPatch {
		pt, body, err = s.readPatch(c)
	} else {
		body, err = s.bodyJSON(c)
	}
	if err != nil {
		return err
	}
	main := ri
	main.sub = ""
	out, err := s.updateObject(ctx, main, isDryRun(c.Request().URL.Query()), func(cur store.Object) (store.Object, error) {
		sc := scaleOf(cur)
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
		replicas := want.Spec.Replicas
		switch o := cur.(type) {
		case *appsv1.Deployment:
			o.Spec.Replicas = &replicas
		case *appsv1.ReplicaSet:
			o.Spec.Replicas = &replicas
		}
		cur.SetResourceVersion(want.ResourceVersion)
		return cur, nil
	})
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, scaleOf(out))
}

func scaleOf(obj store.Object) autoscalingv1.Scale {
	sc := autoscalingv1.Scale{TypeMeta: metav1.TypeMeta{Kind: "Scale", APIVersion: "autoscaling/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace(), UID: obj.GetUID(),
			ResourceVersion: obj.GetResourceVersion(), CreationTimestamp: obj.GetCreationTimestamp()}}
	var sel *metav1.LabelSelector
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if o.Spec.Replicas != nil {
			sc.Spec.Replicas = *o.Spec.Replicas
		}
		sc.Status.Replicas, sel = o.Status.Replicas, o.Spec.Selector
	case *appsv1.ReplicaSet:
		if o.Spec.Replicas != nil {
			sc.Spec.Replicas = *o.Spec.Replicas
		}
		sc.Status.Replicas, sel = o.Status.Replicas, o.Spec.Selector
	}
	if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && sel != nil {
		sc.Status.Selector = s.String()
	}
	return sc
}
