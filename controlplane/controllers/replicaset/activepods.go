package replicaset

import (
	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	corev1 "k8s.io/api/core/v1"
)

// podPhaseOrdinal orders phases for deletion: Pending < Unknown < Running.
var podPhaseOrdinal = map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}

// deleteFirst reports whether pod a should be deleted before pod b when a
// ReplicaSet scales down, as Kubernetes' controller.ActivePods ordering:
// unscheduled < scheduled; Pending < Unknown < Running; not ready < ready;
// ready for less time < longer; more restarts < fewer; newer < older.
func deleteFirst(a, b *corev1.Pod) bool {
	if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
		return a.Spec.NodeName == ""
	}
	if pa, pb := podPhaseOrdinal[a.Status.Phase], podPhaseOrdinal[b.Status.Phase]; pa != pb {
		return pa < pb
	}
	ra, rb := ctrlutil.IsPodReady(a), ctrlutil.IsPodReady(b)
	if ra != rb {
		return !ra
	}
	if ra && rb {
		ta := ctrlutil.GetPodReadyCondition(&a.Status).LastTransitionTime
		tb := ctrlutil.GetPodReadyCondition(&b.Status).LastTransitionTime
		if !ta.Equal(&tb) {
			return tb.Before(&ta) // a became ready later: it has been ready for less time
		}
	}
	if ca, cb := maxRestarts(a), maxRestarts(b); ca != cb {
		return ca > cb
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return a.Name > b.Name
}

func maxRestarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n = max(n, c.RestartCount)
	}
	return n
}
