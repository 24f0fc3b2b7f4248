package deployment

import (
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Annotations and labels the Deployment controller sets, as Kubernetes'.
const (
	// RevisionAnnotation holds the rollout revision of a Deployment and of
	// each of its ReplicaSets.
	RevisionAnnotation = "deployment.kubernetes.io/revision"
	// DesiredReplicasAnnotation on a ReplicaSet is its Deployment's replicas.
	DesiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	// MaxReplicasAnnotation on a ReplicaSet is replicas + maxSurge.
	MaxReplicasAnnotation = "deployment.kubernetes.io/max-replicas"
	// PodTemplateHashLabel distinguishes the ReplicaSets (and pods) of one
	// Deployment by template.
	PodTemplateHashLabel = appsv1.DefaultDeploymentUniqueLabelKey
)

// Defaults the apiserver applies to a Deployment; applied here too because
// objects may be written to the store directly.
const (
	defaultRevisionHistoryLimit    = 10
	defaultProgressDeadlineSeconds = 600
)

var defaultSurgeUnavailable = intstr.FromString("25%")

// ComputeHash returns the pod-template-hash of template with
// collisionCount, as Kubernetes' controller.ComputeHash: fnv32a over the
// template (here its JSON, where Kubernetes hashes a spew dump) and, when
// set, the collision count as 8 bytes holding it little-endian, rendered
// with rand.SafeEncodeString.
func ComputeHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	b, _ := json.Marshal(template)
	h.Write(b)
	if collisionCount != nil {
		var buf [8]byte
		binary.LittleEndian.PutUint32(buf[:], uint32(*collisionCount))
		h.Write(buf[:])
	}
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// equalIgnoreHash reports whether two templates are equal apart from the
// pod-template-hash label (deploymentutil.EqualIgnoreHash).
func equalIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, PodTemplateHashLabel)
	delete(b.Labels, PodTemplateHashLabel)
	if len(a.Labels) == 0 {
		a.Labels = nil
	}
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

func replicasOf(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func rsReplicas(rs *appsv1.ReplicaSet) int32 { return replicasOf(rs.Spec.Replicas) }

func isRollingUpdate(d *appsv1.Deployment) bool {
	return d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType
}

// resolveFenceposts returns maxSurge and maxUnavailable as pod counts for
// d, as deploymentutil.ResolveFenceposts: percentages of spec.replicas,
// surge rounded up and unavailable down; when both are 0, unavailable is 1.
// Unset values default to 25%.
func resolveFenceposts(d *appsv1.Deployment) (surge, unavailable int32) {
	ms, mu := &defaultSurgeUnavailable, &defaultSurgeUnavailable
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			ms = ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			mu = ru.MaxUnavailable
		}
	}
	desired := int(replicasOf(d.Spec.Replicas))
	s, err := intstr.GetScaledValueFromIntOrPercent(ms, desired, true)
	if err != nil {
		s = 0
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(mu, desired, false)
	if err != nil {
		u = 0
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u)
}

// maxUnavailable is deploymentutil.MaxUnavailable.
func maxUnavailable(d *appsv1.Deployment) int32 {
	r := replicasOf(d.Spec.Replicas)
	if !isRollingUpdate(d) || r == 0 {
		return 0
	}
	_, u := resolveFenceposts(d)
	return min(u, r)
}

// maxSurge is deploymentutil.MaxSurge.
func maxSurge(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) {
		return 0
	}
	s, _ := resolveFenceposts(d)
	return s
}

func revision(o metav1.Object) int64 {
	v, err := strconv.ParseInt(o.GetAnnotations()[RevisionAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

func maxRevision(rss []*appsv1.ReplicaSet) int64 {
	var m int64
	for _, rs := range rss {
		m = max(m, revision(rs))
	}
	return m
}

// sortByCreation sorts oldest first, then by name.
func sortByCreation(rss []*appsv1.ReplicaSet) {
	sort.SliceStable(rss, func(i, j int) bool {
		a, b := rss[i], rss[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
}

func sumReplicas(rss []*appsv1.ReplicaSet) (spec, status, ready, available int32) {
	for _, rs := range rss {
		if rs == nil {
			continue
		}
		spec += rsReplicas(rs)
		status += rs.Status.Replicas
		ready += rs.Status.ReadyReplicas
		available += rs.Status.AvailableReplicas
	}
	return
}

// newRSNewReplicas is how many replicas the new ReplicaSet should have now
// (deploymentutil.NewRSNewReplicas): for RollingUpdate, scale up within
// replicas + maxSurge pods in total; for Recreate, all replicas.
func newRSNewReplicas(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRSReplicas int32) int32 {
	want := replicasOf(d.Spec.Replicas)
	if !isRollingUpdate(d) {
		return want
	}
	current, _, _, _ := sumReplicas(all)
	maxTotal := want + maxSurge(d)
	if current >= maxTotal {
		return newRSReplicas
	}
	up := min(maxTotal-current, want-newRSReplicas)
	return newRSReplicas + max(up, 0)
}
