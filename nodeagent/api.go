package nodeagent

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/store"
)

// API is the agent's access to the cluster's objects beyond what it reads
// from its own NodePods projection and its informers (RuntimeClasses,
// Services, Endpoints): the Secrets and ConfigMaps its pods reference, its
// own Node and Lease, its pods' status and deletion, Events, and
// ServiceAccount tokens. The kubelet's clientset plays this part in
// Kubernetes.
//
// Two implementations: the relay (REST over NATS to the apiserver, which
// authorizes every request as the node, user system:node:<node>; the one
// orca-agent uses) and StoreAPI (direct store access, trusted, for
// in-process tests and single-process setups).
//
// Errors are *k8s.io/apimachinery/pkg/api/errors.StatusError values, as the
// apiserver returns them: test them with apierrors.IsNotFound, IsConflict,
// IsForbidden, ...
type API interface {
	// Get returns namespace/name of r ("" namespace for cluster-scoped
	// kinds). NotFound when missing.
	Get(ctx context.Context, r store.Resource, namespace, name string) (store.Object, error)
	// Create stores a new object and returns it as stored (uid,
	// creationTimestamp and resourceVersion set). AlreadyExists when
	// the name is taken.
	Create(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error)
	// Update replaces the object (not its status, for kinds with a
	// status subresource) if obj's resourceVersion is still the stored
	// one: Conflict when it moved, NotFound when missing.
	Update(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error)
	// UpdateStatus replaces only the status of the object (PUT
	// .../status), with the same resourceVersion check as Update.
	// BadRequest for kinds without a status subresource (Pods and
	// Nodes have one).
	UpdateStatus(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error)
	// Delete removes namespace/name; opts.Preconditions (uid,
	// resourceVersion) must hold (Conflict otherwise). NotFound when
	// missing.
	Delete(ctx context.Context, r store.Resource, namespace, name string, opts metav1.DeleteOptions) error
	// CreateToken requests a token of ServiceAccount
	// namespace/serviceAccount (POST .../serviceaccounts/<name>/token,
	// authentication.k8s.io/v1 TokenRequest) and returns the request
	// with status.token and status.expirationTimestamp set.
	CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// TokenFunc serves CreateToken for a StoreAPI (controlplane/auth/
// serviceaccount's signer in tests).
type TokenFunc func(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)

// StoreAPI is the API over the store directly, with no authentication,
// authorization or admission: whoever holds it may read and write any
// object. It is trusted and meant for in-process tests and a control plane
// that runs its own agent; orca-agent uses the relay. It does what the
// apiserver does on the writes an agent makes and no more: uid and
// creationTimestamp on create, status-only writes for UpdateStatus (Pods
// and Nodes), delete preconditions.
type StoreAPI struct {
	Store *store.Store
	// Tokens serves CreateToken; nil: CreateToken fails with 405
	// MethodNotAllowed.
	Tokens TokenFunc
}

var _ API = (*StoreAPI)(nil)

// NewStoreAPI returns the trusted API over s (see StoreAPI).
func NewStoreAPI(s *store.Store) *StoreAPI { return &StoreAPI{Store: s} }

// Get implements API.
func (a *StoreAPI) Get(ctx context.Context, r store.Resource, namespace, name string) (store.Object, error) {
	return a.Store.Get(ctx, r, namespace, name)
}

// Create implements API.
func (a *StoreAPI) Create(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	obj = obj.DeepCopyObject().(store.Object)
	if obj.GetUID() == "" {
		obj.SetUID(types.UID(uuid.NewString()))
	}
	if ts := obj.GetCreationTimestamp(); ts.IsZero() {
		obj.SetCreationTimestamp(metav1.Now())
	}
	obj.SetResourceVersion("")
	return a.Store.Create(ctx, r, obj)
}

// Update implements API; the stored status is kept for Pods and Nodes.
func (a *StoreAPI) Update(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	return a.write(ctx, r, obj, false)
}

// UpdateStatus implements API.
func (a *StoreAPI) UpdateStatus(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	return a.write(ctx, r, obj, true)
}

// write updates obj with compare-and-swap on its resourceVersion, taking
// only the status (status) or everything but the status (!status) from it
// for the kinds with a status subresource, as the apiserver's status and
// main strategies do.
func (a *StoreAPI) write(ctx context.Context, r store.Resource, obj store.Object, status bool) (store.Object, error) {
	if obj.GetResourceVersion() == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("update %s %s/%s: metadata.resourceVersion must be set", r.Kind, obj.GetNamespace(), obj.GetName()))
	}
	if status && r.Bucket() != store.Pods.Bucket() && r.Bucket() != store.Nodes.Bucket() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the server does not serve a status subresource of %s", r.Plural))
	}
	rv := obj.GetResourceVersion()
	return a.Store.GuaranteedUpdate(ctx, r, obj.GetNamespace(), obj.GetName(), &store.Preconditions{ResourceVersion: &rv}, func(cur store.Object) (store.Object, error) {
		return mergeStatus(r, cur, obj, status)
	})
}

// mergeStatus returns the object to store for an update of cur with obj,
// as the apiserver's strategies for kinds with a status subresource
// (registry.Kind.Status): a main update takes obj with cur's status, a
// status update obj's status and metadata with cur's spec and
// ownerReferences. Other kinds' main updates store obj. uid,
// creationTimestamp and deletionTimestamp always stay cur's.
func mergeStatus(r store.Resource, cur, obj store.Object, status bool) (store.Object, error) {
	var next store.Object
	switch c := cur.(type) {
	case *corev1.Pod:
		o, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("update %s: object is a %T", r.Kind, obj))
		}
		n := o.DeepCopy()
		if status {
			n.Spec, n.OwnerReferences = c.Spec, c.OwnerReferences
		} else {
			n.Status = c.Status
		}
		next = n
	case *corev1.Node:
		o, ok := obj.(*corev1.Node)
		if !ok {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("update %s: object is a %T", r.Kind, obj))
		}
		n := o.DeepCopy()
		if status {
			n.Spec, n.OwnerReferences = c.Spec, c.OwnerReferences
		} else {
			n.Status = c.Status
		}
		next = n
	default:
		if status {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the server does not serve a status subresource of %s", r.Plural))
		}
		next = obj.DeepCopyObject().(store.Object)
	}
	next.SetUID(cur.GetUID())
	next.SetCreationTimestamp(cur.GetCreationTimestamp())
	next.SetDeletionTimestamp(cur.GetDeletionTimestamp())
	next.SetResourceVersion(cur.GetResourceVersion())
	return next, nil
}

// Delete implements API: the object goes at once (the agent deletes its
// pods once they stopped, as the kubelet with gracePeriodSeconds 0), with
// compare-and-swap on the revision its preconditions were checked on; a
// write in between is retried (16 times).
func (a *StoreAPI) Delete(ctx context.Context, r store.Resource, namespace, name string, opts metav1.DeleteOptions) error {
	var err error
	for range updateMaxAttempts {
		var obj store.Object
		obj, err = a.Store.Get(ctx, r, namespace, name)
		if err != nil {
			return err
		}
		if p := opts.Preconditions; p != nil {
			if err := (&store.Preconditions{UID: p.UID, ResourceVersion: p.ResourceVersion}).Check(r, store.Key(namespace, name), obj); err != nil {
				return err
			}
		}
		_, err = a.Store.Delete(ctx, r, namespace, name, obj.GetResourceVersion())
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// CreateToken implements API with Tokens.
func (a *StoreAPI) CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	if a.Tokens == nil {
		return nil, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "serviceaccounts/token"}, "create")
	}
	return a.Tokens(ctx, namespace, serviceAccount, req)
}

// updateMaxAttempts bounds updateObject's retries after conflicts.
const updateMaxAttempts = 16

// updateObject reads namespace/name through api, applies mutate to a copy
// and writes it back (UpdateStatus when status, else Update) when it
// changed, re-reading on Conflict up to updateMaxAttempts times, as
// client-go's retry.RetryOnConflict around a get-modify-update. mutate
// returns false to skip the write (the read object is returned). NotFound
// is returned as is.
func updateObject(ctx context.Context, api API, r store.Resource, namespace, name string, status bool, mutate func(store.Object) (bool, error)) (store.Object, error) {
	var err error
	for range updateMaxAttempts {
		var cur store.Object
		cur, err = api.Get(ctx, r, namespace, name)
		if err != nil {
			return nil, err
		}
		next := cur.DeepCopyObject().(store.Object)
		ok, merr := mutate(next)
		if merr != nil {
			return nil, merr
		}
		if !ok || apiequality.Semantic.DeepEqual(cur, next) {
			return cur, nil
		}
		var out store.Object
		if status {
			out, err = api.UpdateStatus(ctx, r, next)
		} else {
			out, err = api.Update(ctx, r, next)
		}
		if err == nil {
			return out, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, err
		}
	}
	return nil, err
}

// eventSink writes the agent's Events through its API.
type eventSink struct{ api API }

func (k eventSink) Create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	obj, err := k.api.Create(ctx, store.Events, ev)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Event), nil
}

func (k eventSink) Update(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	obj, err := k.api.Update(ctx, store.Events, ev)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Event), nil
}
