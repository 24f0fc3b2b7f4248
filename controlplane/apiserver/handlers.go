package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"
	admissionv1 "k8s.io/api/admission/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/audit"
	"github.com/orca-edge/orca/controlplane/auth/node"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// get answers GET of one object.
func (s *Server) get(c echo.Context, ri reqInfo) error {
	if err := requireNamespace(ri); err != nil {
		return err
	}
	rv, err := getOptions(c.Request().URL.Query())
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if err := s.st.WaitRevision(ctx, ri.res, rv); err != nil {
		return err
	}
	obj, err := s.st.Get(ctx, ri.res, ri.namespace, ri.name)
	if err != nil {
		return err
	}
	if ok, v := wantsTable(c); ok {
		return writeJSON(c, http.StatusOK, s.table(ri.kind, []store.Object{obj}, "", v, c.QueryParam("includeObject")))
	}
	return writeJSON(c, http.StatusOK, obj)
}

// requireNamespace rejects a name on a namespaced resource without a
// namespace in the path (/api/v1/pods/x names nothing).
func requireNamespace(ri reqInfo) error {
	if ri.res.Namespaced && ri.namespace == "" && ri.name != "" {
		return apierrors.NewNotFound(ri.res.GroupResource(), ri.name)
	}
	return nil
}

// list answers GET of a collection, filtered by labelSelector and
// fieldSelector, paged by limit and continue as the Kubernetes apiserver:
// the selectors apply before the limit; a page that does not end the list
// has metadata.continue and metadata.remainingItemCount; every page of one
// list reflects the first page's resourceVersion (store.ListPage says for
// how long that revision can be served; after that a continuation is 410
// Gone, reason Expired). A malformed continue token, or one with a
// resourceVersion, is a 400.
func (s *Server) list(c echo.Context, ri reqInfo, opts metainternalversion.ListOptions, sel selector) error {
	q := c.Request().URL.Query()
	ctx := c.Request().Context()
	page := store.ListPageOptions{Limit: int(min(max(opts.Limit, 0), int64(math.MaxInt32)))}
	if !sel.empty() {
		page.Match, page.Labels, page.Fields = sel.matches, sel.label, sel.field
	}
	if opts.Continue != "" {
		if opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
			return apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		rev, start, err := decodeContinue(opts.Continue)
		if err != nil {
			return err
		}
		page.Revision, page.Start = rev, start
		p, err := s.st.ListPage(ctx, ri.res, ri.namespace, page)
		if apierrors.IsResourceExpired(err) {
			return expiredContinue(start)
		}
		if err != nil {
			return err
		}
		return s.writeList(c, ri, q, p)
	}
	// A first page is served at the latest revision; one from a
	// resourceVersion the store has not reached waits for it (then 504
	// "Too large resource version"). resourceVersionMatch=Exact serves the
	// state at exactly that resourceVersion (listOptions refused it with
	// resourceVersion 0 or none), 410 Expired when the store no longer
	// keeps the history back to it, as kube-apiserver's watch cache.
	minRV, _ := store.ParseResourceVersion(opts.ResourceVersion) // checked by listOptions
	if err := s.st.WaitRevision(ctx, ri.res, minRV); err != nil {
		return err
	}
	if opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
		page.Revision = minRV
	}
	p, err := s.st.ListPage(ctx, ri.res, ri.namespace, page)
	if apierrors.IsResourceExpired(err) && page.Revision != 0 && page.Start == "" {
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d", minRV))
	}
	if err != nil {
		return err
	}
	return s.writeList(c, ri, q, p)
}

// writeList writes one page as a <Kind>List or, if asked, a Table.
func (s *Server) writeList(c echo.Context, ri reqInfo, q url.Values, p store.Page) error {
	meta := metav1.ListMeta{ResourceVersion: fmt.Sprint(p.Revision)}
	if p.LastKey != "" {
		meta.Continue = encodeContinue(p.LastKey, int64(p.Revision))
		n := int64(p.Remaining)
		meta.RemainingItemCount = &n
	}
	if ok, v := wantsTable(c); ok {
		t := s.table(ri.kind, p.Items, meta.ResourceVersion, v, q.Get("includeObject"))
		t.ListMeta = meta
		return writeJSON(c, http.StatusOK, t)
	}
	// The list's JSON around its items, then each item's JSON as the
	// store's watch cache encoded it once for every list and watch: the
	// bytes json.Marshal writes for the whole list.
	l := listOf(ri.res, nil, meta.ResourceVersion)
	l.Metadata = meta
	head, err := json.Marshal(l)
	if err != nil || !bytes.HasSuffix(head, []byte("[]}")) {
		return apierrors.NewInternalError(fmt.Errorf("encode %s: %v", ri.res.ListKind, err))
	}
	// The pieces are written as they are rather than copied into one
	// body first (150 KB more per request for a list of 100 pods); the
	// bytes sent are the same.
	items := make([][]byte, len(p.Items))
	for i := range p.Items {
		if items[i], err = p.ItemJSON(i); err != nil {
			return apierrors.NewInternalError(err)
		}
	}
	resp := c.Response()
	resp.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON) // as c.JSONBlob
	resp.WriteHeader(http.StatusOK)
	if _, err := resp.Write(head[:len(head)-2]); err != nil { // up to "items":[
		return err
	}
	for i, b := range items {
		if i > 0 {
			if _, err := resp.Write(comma); err != nil {
				return err
			}
		}
		if _, err := resp.Write(b); err != nil {
			return err
		}
	}
	_, err = resp.Write(listEnd)
	return err
}

var comma, listEnd = []byte(","), []byte("]}")

// objectList is the JSON shape of every <Kind>List.
type objectList struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ListMeta `json:"metadata"`
	Items           []store.Object  `json:"items"`
}

func listOf(r store.Resource, items []store.Object, rv string) objectList {
	if items == nil {
		items = []store.Object{}
	}
	return objectList{TypeMeta: metav1.TypeMeta{Kind: r.ListKind, APIVersion: r.APIVersion()}, Metadata: metav1.ListMeta{ResourceVersion: rv}, Items: items}
}

func isDryRun(q url.Values) bool { return len(q["dryRun"]) > 0 && q.Get("dryRun") != "" }

// create answers POST to a collection.
func (s *Server) create(c echo.Context, ri reqInfo) error {
	if ri.res.Namespaced && ri.namespace == "" {
		return apiMethodNotAllowed(http.MethodPost, c.Request().URL.Path)
	}
	data, err := s.bodyJSON(c)
	if err != nil {
		return err
	}
	obj, err := decodeChecked(c, ri, data, func(obj store.Object) {
		audit.LogObject(c.Request().Context(), obj) // the audit event's objectRef.name
	})
	if err != nil {
		return err
	}
	out, err := s.createObject(c.Request().Context(), ri.res, ri.namespace, obj, isDryRun(c.Request().URL.Query()))
	if err != nil {
		return err
	}
	audit.LogObject(c.Request().Context(), out)
	return writeJSON(c, http.StatusCreated, out)
}

// createObject prepares and validates obj as the registry's BeforeCreate
// (uid, creationTimestamp, generation 1, generateName, the kind's
// PrepareForCreate, Default and Validate), allocates Service addresses,
// and stores it. namespace is the
// request's namespace: an object naming another one is a 400. For a
// namespaced kind the namespace must exist (404) and not be terminating
// (403). A name taken by a generateName attempt is retried up to 8 times.
func (s *Server) createObject(ctx context.Context, r store.Resource, namespace string, obj store.Object, dryRun bool) (store.Object, error) {
	k, err := s.reg.Kind(r)
	if err != nil {
		return nil, err
	}
	if !k.Allows("create") {
		// A kind without create (a terminating CRD's custom resources).
		return nil, apierrors.NewMethodNotSupported(r.GroupResource(), "create")
	}
	if r.Namespaced {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(namespace)
		} else if obj.GetNamespace() != namespace {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", obj.GetNamespace(), namespace))
		}
		// A consistent read, not the watch cache as it is: a namespace
		// deleted an instant ago must refuse new content at once (the
		// cache may not have applied the deletion yet).
		nsObj, err := s.st.GetConsistent(ctx, store.Namespaces, namespace, namespace)
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(store.Namespaces.GroupResource(), namespace)
		}
		if err != nil {
			return nil, err
		}
		if nsObj.GetDeletionTimestamp() != nil {
			return nil, apierrors.NewForbidden(r.GroupResource(), obj.GetName(),
				fmt.Errorf("unable to create new content in namespace %s because it is being terminated", namespace))
		}
	} else {
		obj.SetNamespace("")
	}
	if err := s.admitNode(ctx, node.Create, r, "", namespace, obj.GetName(), obj, nil); err != nil { // admission_node.go
		return nil, err
	}
	// Mutating admission (ServiceAccount, ...), before defaults and
	// validation; controllers' creates run the same plugins (registry).
	if err := s.reg.AdmitMutating(ctx, registry.AdmissionAttributes{Operation: admissionv1.Create, Resource: r, Object: obj}); err != nil {
		return nil, err
	}
	if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
		admitCertificateSigningRequest(ctx, csr)
	}
	generate := obj.GetName() == "" && obj.GetGenerateName() != ""
	for attempt := 0; ; attempt++ {
		if generate {
			obj.SetName("") // drawn again by BeforeCreate
		}
		registry.PrepareCreate(k, obj)
		obj = s.trackCreate(ctx, k, obj)
		if err := registry.ValidateCreate(k, obj); err != nil {
			return nil, err
		}
		if err := s.reg.Admit(ctx, registry.AdmissionAttributes{Operation: admissionv1.Create, Resource: r, Object: obj}); err != nil {
			return nil, err
		}
		release, err := s.allocate(ctx, obj)
		if err != nil {
			return nil, err
		}
		if dryRun {
			release()
			return obj, nil
		}
		out, err := s.st.Create(ctx, r, obj)
		release() // the store now holds the addresses (or they are free again)
		if generate && apierrors.IsAlreadyExists(err) && attempt < 8 {
			continue
		}
		if _, ok := out.(*corev1.Namespace); ok && err == nil {
			s.ensureDefaultServiceAccount(ctx, out.GetName())
		}
		return out, err
	}
}

// update answers PUT of an object or of its status/finalize subresource.
func (s *Server) update(c echo.Context, ri reqInfo) error {
	if err := requireNamespace(ri); err != nil {
		return err
	}
	data, err := s.bodyJSON(c)
	if err != nil {
		return err
	}
	obj, err := decodeChecked(c, ri, data, func(store.Object) {})
	if err != nil {
		return err
	}
	if obj.GetName() == "" {
		obj.SetName(ri.name)
	}
	if obj.GetName() != ri.name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), ri.name))
	}
	out, err := s.updateObjectFrom(c.Request().Context(), ri, isDryRun(c.Request().URL.Query()), replaceWith(ri, obj, data), false)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// replaceWith is the PUT handler's mutate: its first call returns obj
// (decoded from data) itself, which updateObject's rules then modify;
// a later call (another attempt after a conflict or a stale cached
// object) returns data decoded again, as obj was before the first
// attempt, rather than every attempt working on a copy of obj.
func replaceWith(ri reqInfo, obj store.Object, data []byte) func(store.Object) (store.Object, error) {
	first := true
	return func(store.Object) (store.Object, error) {
		if first {
			first = false
			return obj, nil
		}
		again, err := decodeObject(ri.res, data)
		if err != nil {
			return nil, err
		}
		if again.GetName() == "" {
			again.SetName(ri.name)
		}
		return again, nil
	}
}

// updateObject reads the stored object, lets mutate produce the new one,
// applies the registry's update rules (registry.PrepareUpdate, the
// Service address allocation, registry.ValidateUpdate) and writes it with a
// compare-and-swap, through store.GuaranteedUpdate (mutate may run more
// than once). When the new object carries no resourceVersion the
// update is unconditional and retried on conflict (as Kubernetes'
// GuaranteedUpdate); with one, a stale resourceVersion is a 409 Conflict.
// An update that leaves an object marked for deletion without finalizers
// (and with a zero grace period) deletes it.
func (s *Server) updateObject(ctx context.Context, ri reqInfo, dryRun bool, mutate func(cur store.Object) (store.Object, error)) (store.Object, error) {
	return s.updateObjectFrom(ctx, ri, dryRun, mutate, true)
}

// updateObjectFrom is updateObject; with copyCur false, mutate is given
// the current object itself, which it must not modify (the PUT handler's
// ignores it), instead of a copy.
func (s *Server) updateObjectFrom(ctx context.Context, ri reqInfo, dryRun bool, mutate func(cur store.Object) (store.Object, error), copyCur bool) (store.Object, error) {
	r, k := ri.res, ri.kind
	var dry store.Object // the would-be object of a dry run
	out, err := s.st.GuaranteedUpdate(ctx, r, ri.namespace, ri.name, nil, func(cur store.Object) (store.Object, error) {
		given := cur
		if copyCur {
			given = cur.DeepCopyObject().(store.Object)
		}
		obj, err := mutate(given)
		if err != nil {
			return nil, err
		}
		if obj.GetName() != ri.name {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), ri.name))
		}
		if r.Namespaced && obj.GetNamespace() != "" && obj.GetNamespace() != ri.namespace {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace on the URL (%s)", obj.GetNamespace(), ri.namespace))
		}
		if rv := obj.GetResourceVersion(); rv == "" {
			obj.SetResourceVersion(cur.GetResourceVersion())
		} else if rv != cur.GetResourceVersion() {
			// Pinned to a resourceVersion: a stale one is a 409, not retried.
			if _, err := store.ParseResourceVersion(rv); err != nil {
				return nil, err
			}
			return nil, apierrors.NewConflict(r.GroupResource(), ri.name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		if err := s.reg.AdmitMutating(ctx, registry.AdmissionAttributes{Operation: admissionv1.Update, Resource: r, Subresource: ri.sub, Object: obj, OldObject: cur}); err != nil {
			return nil, err
		}
		managed := obj.GetManagedFields() // as sent or applied: PrepareUpdate's JSON round trip drops an empty list
		obj, err = registry.PrepareUpdate(k, ri.sub, obj, cur)
		if err != nil {
			return nil, err
		}
		obj.SetManagedFields(managed)
		if err := s.admitNode(ctx, node.Update, r, ri.sub, ri.namespace, ri.name, obj, cur); err != nil { // admission_node.go
			return nil, err
		}
		obj = s.trackUpdate(ctx, k, cur, obj)
		if err := s.allocateUpdate(ctx, obj, cur); err != nil {
			return nil, err
		}
		if err := registry.ValidateUpdate(k, obj, cur); err != nil {
			return nil, err
		}
		if err := s.reg.Admit(ctx, registry.AdmissionAttributes{Operation: admissionv1.Update, Resource: r, Subresource: ri.sub, Object: obj, OldObject: cur}); err != nil {
			return nil, err
		}
		if dryRun {
			dry = obj
			return nil, errDryRun
		}
		return obj, nil // a no-op (same JSON) is not written, as Kubernetes
	})
	if errors.Is(err, errDryRun) {
		return dry, nil
	}
	if err != nil {
		return nil, err
	}
	if registry.ShouldDeleteDuringUpdate(k, out) {
		if _, err := s.st.Delete(ctx, r, ri.namespace, ri.name, out.GetResourceVersion()); err != nil && !apierrors.IsNotFound(err) {
			if apierrors.IsConflict(err) {
				return out, nil // someone else wrote meanwhile; their write decides
			}
			return nil, err
		}
	}
	return out, nil
}

// errDryRun ends the GuaranteedUpdate of a dry run before its write.
var errDryRun = errors.New("dry run")

// parseDeleteOptions reads DeleteOptions from the body (JSON or YAML, may
// be empty) and the query (gracePeriodSeconds, propagationPolicy,
// orphanDependents, dryRun), the query winning.
func (s *Server) parseDeleteOptions(c echo.Context) (metav1.DeleteOptions, error) {
	var opts metav1.DeleteOptions
	if c.Request().ContentLength != 0 && c.Request().Body != nil && c.Request().Body != http.NoBody {
		data, err := s.bodyJSON(c)
		if err != nil {
			return opts, err
		}
		if len(bytes.TrimSpace(data)) > 0 && string(bytes.TrimSpace(data)) != "null" {
			if err := json.Unmarshal(data, &opts); err != nil {
				return opts, apierrors.NewBadRequest(fmt.Sprintf("decode DeleteOptions: %v", err))
			}
		}
	}
	q := c.Request().URL.Query()
	if v := q.Get("gracePeriodSeconds"); v != "" {
		var g int64
		if _, err := fmt.Sscan(v, &g); err != nil {
			return opts, apierrors.NewBadRequest(fmt.Sprintf("gracePeriodSeconds %q is not an integer", v))
		}
		opts.GracePeriodSeconds = &g
	}
	if v := q.Get("propagationPolicy"); v != "" {
		p := metav1.DeletionPropagation(v)
		opts.PropagationPolicy = &p
	}
	if v := q.Get("orphanDependents"); v != "" {
		b := v == "true"
		opts.OrphanDependents = &b
	}
	if isDryRun(q) {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if p := opts.PropagationPolicy; p != nil {
		switch *p {
		case metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground, metav1.DeletePropagationForeground:
		default:
			return opts, apierrors.NewBadRequest(fmt.Sprintf("propagationPolicy %q is not one of Orphan, Background, Foreground", *p))
		}
	}
	if g := opts.GracePeriodSeconds; g != nil && *g < 0 {
		zero := int64(0)
		opts.GracePeriodSeconds = &zero
	}
	return opts, nil
}

// delete answers DELETE of one object. It returns the object: as deleted,
// or as marked for deletion (graceful pod deletion, finalizers).
func (s *Server) delete(c echo.Context, ri reqInfo) error {
	if err := requireNamespace(ri); err != nil {
		return err
	}
	if ri.kind.AdmitDelete != nil {
		if err := ri.kind.AdmitDelete(ri.namespace, ri.name); err != nil {
			return err
		}
	}
	opts, err := s.parseDeleteOptions(c)
	if err != nil {
		return err
	}
	if err := s.admitNodeDelete(c.Request().Context(), ri.res, "", ri.namespace, ri.name); err != nil { // admission_node.go
		return err
	}
	out, err := s.reg.Delete(c.Request().Context(), s.st, ri.res, ri.namespace, ri.name, opts)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, out)
}

// deleteCollection answers DELETE of a collection: every object matching
// the selectors is deleted as by registry.Delete. It returns the list of
// objects as Delete returned them.
func (s *Server) deleteCollection(c echo.Context, ri reqInfo) error {
	if !ri.kind.Allows("deletecollection") {
		// As Kubernetes: namespaces have no deletecollection verb.
		return apiMethodNotAllowed(http.MethodDelete, c.Request().URL.Path)
	}
	_, sel, err := listOptions(ri.kind, c.Request().URL.Query(), false)
	if err != nil {
		return err
	}
	opts, err := s.parseDeleteOptions(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	objs, rev, err := s.st.List(ctx, ri.res, ri.namespace)
	if err != nil {
		return err
	}
	var out []store.Object
	for _, o := range objs {
		if !sel.matches(o) {
			continue
		}
		d, err := s.reg.Delete(ctx, s.st, ri.res, o.GetNamespace(), o.GetName(), opts)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		out = append(out, d)
	}
	return writeJSON(c, http.StatusOK, listOf(ri.res, out, fmt.Sprint(rev)))
}
