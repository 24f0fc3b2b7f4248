package nodeagent

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/runtimes"
)

// securityContext returns the effective security context of container c
// of pod, as the kubelet's DetermineEffectiveSecurityContext: the pod's
// PodSecurityContext (runAsUser, runAsGroup, runAsNonRoot) overridden
// field by field by the container's SecurityContext; supplementalGroups
// and fsGroup come from the pod alone (fsGroup is added to the
// supplementary groups, as the CRI does). It returns nil when neither
// sets anything. A privileged container on a node started without
// allowPrivileged is refused with an error, as the kubelet's
// --allow-privileged=false did ("privileged containers are not allowed").
func securityContext(pod *corev1.Pod, c *corev1.Container, allowPrivileged bool) (*runtimes.SecurityContext, error) {
	psc, csc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil && csc == nil {
		return nil, nil
	}
	out := &runtimes.SecurityContext{}
	if psc != nil {
		out.RunAsUser, out.RunAsGroup = psc.RunAsUser, psc.RunAsGroup
		out.RunAsNonRoot = psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
		out.SupplementalGroups = append(out.SupplementalGroups, psc.SupplementalGroups...)
		if g := psc.FSGroup; g != nil && !slices.Contains(out.SupplementalGroups, *g) {
			out.SupplementalGroups = append(out.SupplementalGroups, *g)
		}
	}
	if csc != nil {
		if csc.RunAsUser != nil {
			out.RunAsUser = csc.RunAsUser
		}
		if csc.RunAsGroup != nil {
			out.RunAsGroup = csc.RunAsGroup
		}
		if csc.RunAsNonRoot != nil {
			out.RunAsNonRoot = *csc.RunAsNonRoot
		}
		out.ReadOnlyRootFilesystem = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
		out.Privileged = csc.Privileged != nil && *csc.Privileged
		out.AllowPrivilegeEscalation = csc.AllowPrivilegeEscalation
		if caps := csc.Capabilities; caps != nil {
			for _, n := range caps.Add {
				out.CapAdd = append(out.CapAdd, string(n))
			}
			for _, n := range caps.Drop {
				out.CapDrop = append(out.CapDrop, string(n))
			}
		}
	}
	if out.Privileged && !allowPrivileged {
		return nil, fmt.Errorf("container %s of pod %s/%s is privileged, but privileged containers are not allowed on node (start orca-agent with --allow-privileged)", c.Name, pod.Namespace, pod.Name)
	}
	if out.RunAsNonRoot && out.RunAsUser != nil && *out.RunAsUser == 0 {
		// The kubelet's verifyRunAsNonRoot, when runAsUser is known here.
		return nil, fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID), c.Name)
	}
	return out, nil
}

// cpuRequestMillis returns the container's CPU request in millicores, or its
// limit when only a limit is set (the API defaults the request to the
// limit), or 0.
func cpuRequestMillis(c *corev1.Container) int64 {
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		return q.MilliValue()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		return q.MilliValue()
	}
	return 0
}
