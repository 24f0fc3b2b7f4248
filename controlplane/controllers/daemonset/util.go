package daemonset

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	v1helper "k8s.io/component-helpers/scheduling/corev1"

	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/scheduler/nodeaffinity"
)

// Pod labels, as Kubernetes' apps.ControllerRevisionHashLabelKey and
// extensions.DaemonSetTemplateGenerationKey.
const (
	HashLabel               = appsv1.ControllerRevisionHashLabelKey // "controller-revision-hash"
	TemplateGenerationLabel = "pod-template-generation"             // extensions/v1beta1 DaemonSetTemplateGenerationKey
)

// daemonTolerations are the tolerations every daemon pod gets
// (Kubernetes' util.AddOrUpdateDaemonPodTolerations): a daemon pod stays on
// a node that is not ready or unreachable, and lands on nodes under
// disk, memory or PID pressure and on cordoned nodes; hostNetwork pods
// also on nodes whose network is unavailable.
func daemonTolerations(spec *corev1.PodSpec) []corev1.Toleration {
	t := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if spec.HostNetwork {
		t = append(t, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return t
}

// addTolerations adds each of add that tols has not (same key, operator,
// value and effect), as v1helper.AddOrUpdateTolerationInPodSpec.
func addTolerations(spec *corev1.PodSpec, add []corev1.Toleration) {
	for _, a := range add {
		found := false
		for i := range spec.Tolerations {
			if spec.Tolerations[i].MatchToleration(&a) {
				spec.Tolerations[i] = a
				found = true
				break
			}
		}
		if !found {
			spec.Tolerations = append(spec.Tolerations, a)
		}
	}
}

// newPodSpec is ds's template as a pod for node: the daemon tolerations
// added and the required node affinity replaced by one term matchFields
// metadata.name In [node] (util.ReplaceDaemonSetPodNodeNameNodeAffinity),
// which places the pod through the scheduler on exactly that node, as
// Kubernetes does since 1.12.
func newPodTemplate(ds *appsv1.DaemonSet, node string) *corev1.PodTemplateSpec {
	t := ds.Spec.Template.DeepCopy()
	addTolerations(&t.Spec, daemonTolerations(&t.Spec))
	if node != "" {
		t.Spec.Affinity = replaceNodeNameAffinity(t.Spec.Affinity, node)
	}
	return t
}

func replaceNodeNameAffinity(a *corev1.Affinity, node string) *corev1.Affinity {
	sel := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = sel
	return a
}

// targetNode is the node a daemon pod is for: spec.nodeName once bound,
// else the node of its matchFields metadata.name term
// (util.GetTargetNodeName).
func targetNode(pod *corev1.Pod) (string, bool) {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName, true
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return "", false
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0], true
			}
		}
	}
	return "", false
}

// nodeShouldRunDaemonPod is Kubernetes' NodeShouldRunDaemonPod: whether a
// daemon pod should be started on node (its nodeName, nodeSelector and
// required node affinity match and every NoSchedule/NoExecute taint is
// tolerated, the daemon tolerations included), and whether one already
// there should keep running (it matches and tolerates every NoExecute
// taint).
func nodeShouldRunDaemonPod(node *corev1.Node, ds *appsv1.DaemonSet) (shouldRun, shouldContinueRunning bool) {
	t := newPodTemplate(ds, "")
	if t.Spec.NodeName != "" && t.Spec.NodeName != node.Name {
		return false, false
	}
	pod := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	if !nodeaffinity.Fits(pod, node) {
		return false, false
	}
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
	}, false)
	if !untolerated {
		return true, true
	}
	_, untoleratedNoExecute := v1helper.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return false, !untoleratedNoExecute
}

// computeHash is Kubernetes' controller.ComputeHash: the FNV-32a hash of
// the template (dump.ForHash) and the collision count, safely encoded.
func computeHash(t *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(t))
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		h.Write(b)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// isPodUpdated is util.IsPodUpdated: the pod has the current hash or the
// current template generation.
func isPodUpdated(pod *corev1.Pod, hash string, templateGeneration int64) bool {
	genMatches := templateGeneration > 0 && pod.Labels[TemplateGenerationLabel] == strconv.FormatInt(templateGeneration, 10)
	return (hash != "" && pod.Labels[HashLabel] == hash) || genMatches
}

// allowsSurge reports whether ds's RollingUpdate has a maxSurge above 0.
func allowsSurge(ds *appsv1.DaemonSet) bool {
	s, _, _ := unavailableCounts(ds, 1)
	return s > 0
}

// unavailableCounts returns maxSurge and maxUnavailable scaled to desired
// nodes (util.SurgeCount and UnavailableCount: percentages round up; when
// both are 0, maxUnavailable is 1, as updatedDesiredNodeCounts).
func unavailableCounts(ds *appsv1.DaemonSet, desired int) (surge, unavailable int, err error) {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil {
		return 0, 0, nil
	}
	if ru.MaxSurge != nil {
		if surge, err = intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, desired, true); err != nil {
			return 0, 0, err
		}
	}
	if ru.MaxUnavailable != nil {
		if unavailable, err = intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, desired, true); err != nil {
			return 0, 0, err
		}
	}
	if desired == 0 {
		return surge, unavailable, nil
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return surge, unavailable, nil
}

// templateGeneration is ds's template generation (apps.TemplateGeneration).
func templateGeneration(ds *appsv1.DaemonSet) int64 { return apps.TemplateGeneration(ds) }
