package apiserver

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/store"
)

// prepareForCreate resets what a client may not set on create, as the
// Kubernetes strategies' PrepareForCreate: a pod starts Pending, a
// namespace Active with the "kubernetes" finalizer (the namespace
// controller removes it after emptying the namespace), workload and
// service status start empty, a secret's stringData is merged into its
// data (mergeStringData).
func prepareForCreate(obj store.Object) {
	switch o := obj.(type) {
	case *corev1.Pod:
		o.Status = corev1.PodStatus{Phase: corev1.PodPending}
	case *corev1.Namespace:
		o.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
		if !hasFinalizer(o.Spec.Finalizers, corev1.FinalizerKubernetes) {
			o.Spec.Finalizers = append(o.Spec.Finalizers, corev1.FinalizerKubernetes)
		}
	case *corev1.Service:
		o.Status = corev1.ServiceStatus{}
	case *appsv1.Deployment:
		o.Status = appsv1.DeploymentStatus{}
	case *appsv1.ReplicaSet:
		o.Status = appsv1.ReplicaSetStatus{}
	case *corev1.Secret:
		mergeStringData(o)
	}
}

func hasFinalizer(list []corev1.FinalizerName, f corev1.FinalizerName) bool {
	for _, x := range list {
		if x == f {
			return true
		}
	}
	return false
}

// setDefaults fills unset fields with Kubernetes' defaults
// (pkg/apis/core/v1/defaults.go, pkg/apis/apps/v1/defaults.go) for the
// fields orca's components read.
func setDefaults(obj store.Object) {
	switch o := obj.(type) {
	case *corev1.Pod:
		defaultPodSpec(&o.Spec)
	case *appsv1.Deployment:
		if o.Spec.Replicas == nil {
			o.Spec.Replicas = new(int32(1))
		}
		st := &o.Spec.Strategy
		if st.Type == "" {
			st.Type = appsv1.RollingUpdateDeploymentStrategyType
		}
		if st.Type == appsv1.RollingUpdateDeploymentStrategyType {
			if st.RollingUpdate == nil {
				st.RollingUpdate = &appsv1.RollingUpdateDeployment{}
			}
			if st.RollingUpdate.MaxUnavailable == nil {
				v := intstr.FromString("25%")
				st.RollingUpdate.MaxUnavailable = &v
			}
			if st.RollingUpdate.MaxSurge == nil {
				v := intstr.FromString("25%")
				st.RollingUpdate.MaxSurge = &v
			}
		}
		if o.Spec.RevisionHistoryLimit == nil {
			o.Spec.RevisionHistoryLimit = new(int32(10))
		}
		if o.Spec.ProgressDeadlineSeconds == nil {
			o.Spec.ProgressDeadlineSeconds = new(int32(600))
		}
		defaultPodSpec(&o.Spec.Template.Spec)
	case *appsv1.ReplicaSet:
		if o.Spec.Replicas == nil {
			o.Spec.Replicas = new(int32(1))
		}
		defaultPodSpec(&o.Spec.Template.Spec)
	case *corev1.Service:
		sp := &o.Spec
		if sp.Type == "" {
			sp.Type = corev1.ServiceTypeClusterIP
		}
		if sp.SessionAffinity == "" {
			sp.SessionAffinity = corev1.ServiceAffinityNone
		}
		if sp.Type != corev1.ServiceTypeExternalName && sp.InternalTrafficPolicy == nil {
			p := corev1.ServiceInternalTrafficPolicyCluster
			sp.InternalTrafficPolicy = &p
		}
		if (sp.Type == corev1.ServiceTypeNodePort || sp.Type == corev1.ServiceTypeLoadBalancer) && sp.ExternalTrafficPolicy == "" {
			sp.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}
		for i := range sp.Ports {
			p := &sp.Ports[i]
			if p.Protocol == "" {
				p.Protocol = corev1.ProtocolTCP
			}
			if p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal == 0 && p.TargetPort.StrVal == "" {
				p.TargetPort = intstr.FromInt32(p.Port)
			}
		}
	case *corev1.Namespace:
		if o.Status.Phase == "" {
			o.Status.Phase = corev1.NamespaceActive
		}
	case *corev1.Secret:
		if o.Type == "" {
			o.Type = corev1.SecretTypeOpaque
		}
	}
}

func defaultPodSpec(sp *corev1.PodSpec) {
	if sp.RestartPolicy == "" {
		sp.RestartPolicy = corev1.RestartPolicyAlways
	}
	if sp.DNSPolicy == "" {
		sp.DNSPolicy = corev1.DNSClusterFirst
	}
	if sp.TerminationGracePeriodSeconds == nil {
		sp.TerminationGracePeriodSeconds = new(int64(corev1.DefaultTerminationGracePeriodSeconds))
	}
	if sp.SchedulerName == "" {
		sp.SchedulerName = corev1.DefaultSchedulerName
	}
	if sp.SecurityContext == nil {
		sp.SecurityContext = &corev1.PodSecurityContext{}
	}
	for i := range sp.InitContainers {
		defaultContainer(&sp.InitContainers[i])
	}
	for i := range sp.Containers {
		defaultContainer(&sp.Containers[i])
	}
}

func defaultContainer(c *corev1.Container) {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	if c.ImagePullPolicy == "" && c.Image != "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
}

// defaultProbe sets a probe's defaults as Kubernetes' SetDefaults_Probe and
// SetDefaults_HTTPGetAction do: timeout 1 s, period 10 s, success
// threshold 1, failure threshold 3, HTTP scheme and path "/".
func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if g := p.HTTPGet; g != nil {
		if g.Path == "" {
			g.Path = "/"
		}
		if g.Scheme == "" {
			g.Scheme = corev1.URISchemeHTTP
		}
	}
}

// defaultPullPolicy is Always for an image without a tag or tagged
// :latest, IfNotPresent otherwise (digest references included).
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	last := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(last, ":")
	if i < 0 || last[i+1:] == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// keepSystemMeta copies the server-owned metadata of old into obj.
func keepSystemMeta(obj, old metav1.Object) {
	obj.SetUID(old.GetUID())
	obj.SetCreationTimestamp(old.GetCreationTimestamp())
	obj.SetDeletionTimestamp(old.GetDeletionTimestamp())
	obj.SetDeletionGracePeriodSeconds(old.GetDeletionGracePeriodSeconds())
	obj.SetNamespace(old.GetNamespace())
	obj.SetManagedFields(nil)
	if obj.GetGenerateName() == "" {
		obj.SetGenerateName(old.GetGenerateName())
	}
}
