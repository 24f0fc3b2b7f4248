package daemonset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/store"
)

// revisionPatch is the Data of ds's ControllerRevision, as the
// DaemonSetsController's getPatch: a strategic merge patch replacing
// spec.template, which `kubectl rollout undo` applies to the DaemonSet.
func revisionPatch(ds *appsv1.DaemonSet) ([]byte, error) {
	b, err := json.Marshal(ds.Spec.Template)
	if err != nil {
		return nil, err
	}
	var tpl map[string]any
	if err := json.Unmarshal(b, &tpl); err != nil {
		return nil, err
	}
	tpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tpl}})
}

// ownedRevisions are the ControllerRevisions ds controls.
func (c *Controller) ownedRevisions(ds *appsv1.DaemonSet) []*appsv1.ControllerRevision {
	var out []*appsv1.ControllerRevision
	for _, o := range c.revs.List(ds.Namespace, nil) {
		r := o.(*appsv1.ControllerRevision)
		if ref := metav1.GetControllerOfNoCopy(r); ref != nil && ref.UID == ds.UID {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

// constructHistory returns ds's current revision's hash and the other
// (old) revisions, as the DaemonSetsController's constructHistory: the
// revision whose data is ds's template is current (renumbered above every
// other when it is an old one come back, as after a rollback), else one is
// created with the next number, named <ds>-<hash>, labelled with the
// template's labels and the hash. A name taken by a revision of other data
// bumps status.collisionCount and fails, so that the next sync hashes
// anew.
func (c *Controller) constructHistory(ctx context.Context, ds *appsv1.DaemonSet) (string, []*appsv1.ControllerRevision, error) {
	patch, err := revisionPatch(ds)
	if err != nil {
		return "", nil, err
	}
	all := c.ownedRevisions(ds)
	var cur *appsv1.ControllerRevision
	var old []*appsv1.ControllerRevision
	var maxRev int64
	for _, r := range all {
		maxRev = max(maxRev, r.Revision)
		if cur == nil && bytes.Equal(r.Data.Raw, patch) {
			cur = r
		} else {
			old = append(old, r)
		}
	}
	if cur != nil {
		if cur.Revision < maxRev {
			out, err := c.reg.GuaranteedUpdate(ctx, c.s, apps.ControllerRevisions, cur.Namespace, cur.Name, nil, func(o store.Object) (store.Object, error) {
				r := o.(*appsv1.ControllerRevision)
				r.Revision = maxRev + 1
				return r, nil
			})
			if err != nil {
				return "", nil, fmt.Errorf("renumber revision %s/%s: %w", cur.Namespace, cur.Name, err)
			}
			cur = out.(*appsv1.ControllerRevision)
		}
		hash := cur.Labels[HashLabel]
		if hash == "" {
			hash = computeHash(&ds.Spec.Template, ds.Status.CollisionCount)
		}
		return hash, old, nil
	}
	hash := computeHash(&ds.Spec.Template, ds.Status.CollisionCount)
	lbls := map[string]string{}
	for k, v := range ds.Spec.Template.Labels {
		lbls[k] = v
	}
	lbls[HashLabel] = hash
	r := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name + "-" + hash, Labels: lbls, Annotations: ds.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)}},
		Data:     runtime.RawExtension{Raw: patch},
		Revision: maxRev + 1,
	}
	if _, err := c.reg.Create(ctx, c.s, apps.ControllerRevisions, r); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return "", nil, fmt.Errorf("create revision %s/%s: %w", r.Namespace, r.Name, err)
		}
		existing, gerr := c.s.Get(ctx, apps.ControllerRevisions, r.Namespace, r.Name)
		if gerr != nil {
			return "", nil, gerr
		}
		e := existing.(*appsv1.ControllerRevision)
		if ref := metav1.GetControllerOfNoCopy(e); ref != nil && ref.UID == ds.UID && bytes.Equal(e.Data.Raw, patch) {
			return hash, old, nil // the informer has not seen it yet
		}
		// A hash collision: count it, so the next hash differs.
		if _, uerr := c.reg.GuaranteedUpdateStatus(ctx, c.s, apps.DaemonSets, ds.Namespace, ds.Name, nil, func(o store.Object) (store.Object, error) {
			d := o.(*appsv1.DaemonSet)
			n := int32(0)
			if d.Status.CollisionCount != nil {
				n = *d.Status.CollisionCount
			}
			n++
			d.Status.CollisionCount = &n
			return d, nil
		}); uerr != nil {
			return "", nil, uerr
		}
		return "", nil, fmt.Errorf("found a hash collision for daemonset %s/%s: bumped collisionCount", ds.Namespace, ds.Name)
	}
	return hash, old, nil
}

// cleanupHistory deletes the oldest old revisions that no live pod uses
// beyond spec.revisionHistoryLimit (the controller's cleanupHistory).
func (c *Controller) cleanupHistory(ctx context.Context, ds *appsv1.DaemonSet, old []*appsv1.ControllerRevision, nodeToPods map[string][]*corev1.Pod) error {
	limit := 10
	if ds.Spec.RevisionHistoryLimit != nil {
		limit = int(*ds.Spec.RevisionHistoryLimit)
	}
	if len(old) <= limit {
		return nil
	}
	live := map[string]bool{}
	for _, pods := range nodeToPods {
		for _, p := range pods {
			if h := p.Labels[HashLabel]; h != "" {
				live[h] = true
			}
		}
	}
	toKill := len(old) - limit
	for _, r := range old { // sorted by revision, oldest first
		if toKill <= 0 {
			break
		}
		if live[r.Labels[HashLabel]] {
			continue
		}
		if _, err := c.reg.Delete(ctx, c.s, apps.ControllerRevisions, r.Namespace, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		toKill--
	}
	return nil
}
