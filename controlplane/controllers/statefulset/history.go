package statefulset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
)

// revisionHashLabel labels a ControllerRevision with its hash, as
// history.ControllerRevisionHashLabel.
const revisionHashLabel = "controller.kubernetes.io/hash"

// patch is the data of set's revision: {"spec":{"template":<template with
// "$patch":"replace">}}, as Kubernetes' getPatch.
func patch(set *appsv1.StatefulSet) ([]byte, error) {
	raw, err := json.Marshal(set.Spec.Template)
	if err != nil {
		return nil, err
	}
	var tpl map[string]any
	if err := json.Unmarshal(raw, &tpl); err != nil {
		return nil, err
	}
	tpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tpl}})
}

// templateOf returns the pod template a revision records.
func templateOf(rev *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	var d struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(rev.Data.Raw, &d); err != nil {
		return nil, fmt.Errorf("revision %s: %w", rev.Name, err)
	}
	return &d.Spec.Template, nil
}

// hashRevision is history.HashControllerRevision: FNV-32 of the data and
// the collision count, in rand.SafeEncodeString's alphabet.
func hashRevision(data []byte, collisionCount *int32) string {
	h := fnv.New32()
	h.Write(data)
	if collisionCount != nil {
		h.Write([]byte(strconv.FormatInt(int64(*collisionCount), 10)))
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// newRevision builds set's revision number rev (not stored).
func newRevision(set *appsv1.StatefulSet, rev int64, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	data, err := patch(set)
	if err != nil {
		return nil, err
	}
	hash := hashRevision(data, collisionCount)
	lbls := map[string]string{}
	for k, v := range set.Spec.Template.Labels {
		lbls[k] = v
	}
	lbls[revisionHashLabel] = hash
	prefix := set.Name
	if len(prefix) > 223 {
		prefix = prefix[:223]
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: set.Namespace, Name: prefix + "-" + hash, Labels: lbls,
			Annotations:     set.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, controllerKind)}},
		Data:     runtime.RawExtension{Raw: data},
		Revision: rev,
	}, nil
}

// listRevisions returns set's ControllerRevisions by ascending revision
// number, adopting orphans its selector matches (ControllerRefManager's
// ClaimControllerRevisions).
func (c *Controller) listRevisions(ctx context.Context, set *appsv1.StatefulSet, sel labels.Selector) ([]*appsv1.ControllerRevision, error) {
	objs, err := ctrlutil.Claim(ctx, c.reg, c.s, apps.ControllerRevisions, set, controllerKind, sel, c.revisions.List(set.Namespace, nil))
	revs := make([]*appsv1.ControllerRevision, 0, len(objs))
	for _, o := range objs {
		revs = append(revs, o.(*appsv1.ControllerRevision))
	}
	sort.SliceStable(revs, func(i, j int) bool {
		if revs[i].Revision != revs[j].Revision {
			return revs[i].Revision < revs[j].Revision
		}
		return revs[i].Name < revs[j].Name
	})
	return revs, err
}

// getRevisions returns set's current and update revisions and the
// collision count to report, creating the update revision or renumbering
// an equal older one (a rollback), as getStatefulSetRevisions.
func (c *Controller) getRevisions(ctx context.Context, set *appsv1.StatefulSet, revs []*appsv1.ControllerRevision) (current, update *appsv1.ControllerRevision, collisionCount int32, err error) {
	if set.Status.CollisionCount != nil {
		collisionCount = *set.Status.CollisionCount
	}
	next := int64(1)
	if n := len(revs); n > 0 {
		next = revs[n-1].Revision + 1
	}
	want, err := newRevision(set, next, &collisionCount)
	if err != nil {
		return nil, nil, collisionCount, err
	}
	var equal []*appsv1.ControllerRevision
	for _, r := range revs {
		if bytes.Equal(r.Data.Raw, want.Data.Raw) {
			equal = append(equal, r)
		}
	}
	switch {
	case len(equal) > 0 && equal[len(equal)-1] == revs[len(revs)-1]:
		update = revs[len(revs)-1] // the latest: nothing changed
	case len(equal) > 0:
		// A rollback to an older template: that revision becomes the newest.
		old := equal[len(equal)-1]
		o, uerr := c.reg.GuaranteedUpdate(ctx, c.s, apps.ControllerRevisions, old.Namespace, old.Name, nil, func(obj store.Object) (store.Object, error) {
			r := obj.(*appsv1.ControllerRevision)
			r.Revision = next
			return r, nil
		})
		if uerr != nil {
			return nil, nil, collisionCount, fmt.Errorf("renumber revision %s: %w", old.Name, uerr)
		}
		update = o.(*appsv1.ControllerRevision)
	default:
		update, err = c.createRevision(ctx, set, want, &collisionCount)
		if err != nil {
			return nil, nil, collisionCount, err
		}
	}
	for _, r := range revs {
		if r.Name == set.Status.CurrentRevision {
			current = r
		}
	}
	if current == nil {
		current = update
	}
	return current, update, collisionCount, nil
}

// createRevision stores want; a revision of that name with other data
// is a hash collision: collisionCount goes up and the name is drawn again,
// as history.realHistory.CreateControllerRevision.
func (c *Controller) createRevision(ctx context.Context, set *appsv1.StatefulSet, want *appsv1.ControllerRevision, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	for {
		o, err := c.reg.Create(ctx, c.s, apps.ControllerRevisions, want.DeepCopy())
		if err == nil {
			return o.(*appsv1.ControllerRevision), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create revision %s: %w", want.Name, err)
		}
		cur, gerr := c.s.Get(ctx, apps.ControllerRevisions, want.Namespace, want.Name)
		if gerr != nil {
			return nil, gerr
		}
		r := cur.(*appsv1.ControllerRevision)
		if ref := metav1.GetControllerOfNoCopy(r); ref != nil && ref.UID == set.UID && bytes.Equal(r.Data.Raw, want.Data.Raw) {
			return r, nil
		}
		*collisionCount++
		nw, err := newRevision(set, want.Revision, collisionCount)
		if err != nil {
			return nil, err
		}
		want = nw
	}
}

// truncateHistory deletes the oldest revisions that no pod uses and that
// are neither current nor update, beyond revisionHistoryLimit, as
// truncateHistory.
func (c *Controller) truncateHistory(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod, revs []*appsv1.ControllerRevision, current, update *appsv1.ControllerRevision) error {
	live := map[string]bool{current.Name: true, update.Name: true}
	for _, p := range pods {
		live[p.Labels[appsv1.ControllerRevisionHashLabelKey]] = true
	}
	var unused []*appsv1.ControllerRevision
	for _, r := range revs {
		if !live[r.Name] {
			unused = append(unused, r)
		}
	}
	limit := 10
	if set.Spec.RevisionHistoryLimit != nil {
		limit = int(*set.Spec.RevisionHistoryLimit)
	}
	for i := 0; i < len(unused)-limit; i++ {
		uid := unused[i].UID
		if _, err := c.reg.Delete(ctx, c.s, apps.ControllerRevisions, set.Namespace, unused[i].Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}
