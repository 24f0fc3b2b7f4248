package apiserver

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"

	"github.com/orca-edge/orca/controlplane/store"
)

// Server-side apply: PATCH with Content-Type application/apply-patch+yaml
// (YAML or JSON), as the Kubernetes apiserver's applyPatcher
// (k8s.io/apiserver/pkg/endpoints/handlers/patch.go) over the kind's
// managedfields.FieldManager (managedfields.go):
//
//   - the body is the applier's whole intent for the fields it manages:
//     apiVersion and kind must be the resource's (400 "invalid object
//     type"), metadata.name the URL's, metadata.managedFields absent;
//   - ?fieldManager= is required (422); ?force=true takes the fields
//     other managers own instead of failing;
//   - fields another manager owns with a different value are a 409
//     Conflict, reason Conflict, whose message lists each field and its
//     managers ("Apply failed with 1 conflict: conflict with \"kubectl\":
//     .spec.replicas") and whose details.causes have type
//     FieldManagerConflict, the field path and "conflict with <manager>";
//     kubectl prints them with its --force-conflicts hint;
//   - fields the manager applied before and no longer applies are removed
//     unless another manager owns them too;
//   - a missing object is created (201), with uid, creationTimestamp and
//     the rest of the server-owned metadata set as by POST; through the
//     status and scale subresources it is a 404;
//   - metadata.resourceVersion in the body makes the apply conditional on
//     it (409 when stale); ?dryRun=All answers what would be stored;
//   - the manager "kubectl" keeps kubectl's
//     kubectl.kubernetes.io/last-applied-configuration annotation up to
//     date when the object has one, and its conflicts with fields that
//     annotation lists with their live values are forgiven, so that
//     kubectl apply followed by kubectl apply --server-side on the same
//     object does not conflict (managedfields' lastApplied managers);
//   - the merged object then takes the path of any update: the strategy
//     (status kept on the main resource, only status through /status),
//     defaults, validation (422), compare-and-swap.
//
// A body that does not fit the kind's schema (an unknown field, a string
// where a number goes) is a 400 with the field manager's message
// ("failed to create typed patch object (...): .spec.foo: field not
// declared in schema"); Kubernetes answers 500 there (kubernetes#139253).
// application/apply-patch+cbor is 415.

// apply answers an apply patch of ri with body (JSON).
func (s *Server) apply(c echo.Context, ri reqInfo, body []byte) error {
	patch, err := applyConfiguration(body)
	if err != nil {
		return err
	}
	fm := s.fields.get(ri.kind, ri.sub)
	if fm == nil {
		return unsupportedMediaType(fmt.Sprintf("server-side apply is not supported for %s", ri.res.GroupResource()))
	}
	ctx := c.Request().Context()
	w := writerOf(ctx)
	w.applied = true
	ctx = withWriter(ctx, w)
	dryRun := isDryRun(c.Request().URL.Query())
	applyTo := func(live store.Object) (store.Object, error) {
		return applyWith(ri, fm, live, patch, w)
	}
	for attempt := 0; ; attempt++ {
		out, err := s.updateObject(ctx, ri, dryRun, applyTo)
		if !apierrors.IsNotFound(err) || ri.sub != "" || attempt > 8 {
			if err != nil {
				return err
			}
			return writeJSON(c, http.StatusOK, out)
		}
		// No such object: apply creates it (the patcher's createNewObject).
		obj, err := applyTo(objectConvertor{r: ri.res, gvk: ri.res.GroupVersion().WithKind(ri.res.Kind)}.newObject())
		if err != nil {
			return err
		}
		if uid := obj.GetUID(); uid != "" {
			return apierrors.NewConflict(ri.res.GroupResource(), ri.name, fmt.Errorf("uid mismatch: the provided object specified uid %s, and no existing object was found", uid))
		}
		if obj.GetName() != ri.name {
			return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), ri.name))
		}
		out, err = s.createObject(ctx, ri.res, ri.namespace, obj, dryRun)
		if apierrors.IsAlreadyExists(err) {
			continue // created meanwhile: apply to it
		}
		if err != nil {
			return err
		}
		return writeJSON(c, http.StatusCreated, out)
	}
}

// applyWith applies patch (not modified) to live, a copy it may change,
// as w's manager. Errors are Statuses: conflicts a 409 with their causes,
// a patch that does not fit the schema a 400, a metadata.uid in the patch
// that is not the stored object's a 409 (a precondition, as for every
// patch type).
func applyWith(ri reqInfo, fm *managedfields.FieldManager, live store.Object, patch *unstructured.Unstructured, w writer) (store.Object, error) {
	obj, err := fm.Apply(live, patch.DeepCopy(), w.manager, w.force)
	if err != nil {
		if _, ok := err.(apierrors.APIStatus); ok {
			return nil, err
		}
		if strings.HasPrefix(err.Error(), "failed to create typed live object") {
			return nil, apierrors.NewInternalError(err)
		}
		return nil, apierrors.NewBadRequest(err.Error())
	}
	out := obj.(store.Object)
	if live.GetUID() != "" && out.GetUID() != live.GetUID() {
		return nil, apierrors.NewConflict(ri.res.GroupResource(), ri.name,
			fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", out.GetUID(), live.GetUID()))
	}
	return out, nil
}

// applyScale answers an apply patch of the scale subresource: the body is
// an autoscaling/v1 Scale whose spec.replicas is applied to the parent's
// spec.replicas by the manager, with subresource "scale" in its
// managedFields entry (as Kubernetes' ScaleHandler maps them). Answers the
// Scale; a missing parent is a 404. Kinds of unstructured objects (custom
// resources) are 415.
func (s *Server) applyScale(c echo.Context, ri reqInfo, body []byte) error {
	if _, unstructuredKind := ri.kind.New().(runtime.Unstructured); unstructuredKind {
		// A custom resource's replicas may be anywhere (the CRD's
		// specReplicasPath); Kubernetes maps them with its ScaleHandler.
		return unsupportedMediaType(fmt.Sprintf("server-side apply is not supported for %s/scale of a custom resource; use a merge patch", ri.res.GroupResource()))
	}
	patch, err := applyConfiguration(body)
	if err != nil {
		return err
	}
	if patch.GetAPIVersion() != "autoscaling/v1" || patch.GetKind() != "Scale" {
		return apierrors.NewBadRequest(fmt.Sprintf("invalid object type: %v", patch.GroupVersionKind()))
	}
	if patch.GetManagedFields() != nil {
		return apierrors.NewBadRequest("metadata.managedFields must be nil")
	}
	md := map[string]any{"name": patch.GetName()}
	if rv := patch.GetResourceVersion(); rv != "" {
		md["resourceVersion"] = rv
	}
	if uid := patch.GetUID(); uid != "" {
		md["uid"] = string(uid)
	}
	parent := &unstructured.Unstructured{Object: map[string]any{"apiVersion": ri.res.APIVersion(), "kind": ri.res.Kind, "metadata": md}}
	if replicas, ok, _ := unstructured.NestedFieldNoCopy(patch.Object, "spec", "replicas"); ok {
		parent.Object["spec"] = map[string]any{"replicas": replicas}
	}
	main := ri
	main.sub = ""
	fm := s.fields.get(ri.kind, "scale")
	if fm == nil {
		return unsupportedMediaType(fmt.Sprintf("server-side apply is not supported for %s/scale", ri.res.GroupResource()))
	}
	ctx := c.Request().Context()
	w := writerOf(ctx)
	w.applied = true
	out, err := s.updateObject(withWriter(ctx, w), main, isDryRun(c.Request().URL.Query()), func(live store.Object) (store.Object, error) {
		return applyWith(ri, fm, live, parent, w)
	})
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, scaleOf(ri.kind, out))
}
