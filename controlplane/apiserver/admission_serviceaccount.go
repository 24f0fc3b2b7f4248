package apiserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/orca-edge/orca/controlplane/auth/serviceaccount"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

const (
	// mirrorPodAnnotation marks a kubelet's mirror pod.
	mirrorPodAnnotation = "kubernetes.io/config.mirror"
	// enforceMountableSecretsAnnotation on a ServiceAccount ("true") limits
	// the secrets its pods may reference to those it lists.
	enforceMountableSecretsAnnotation = "kubernetes.io/enforce-mountable-secrets"
	// defaultServiceAccountLookups is how often a pod's missing "default"
	// ServiceAccount is looked up (100-200 ms apart) before the pod is
	// refused: the ServiceAccount controller may be about to create it.
	defaultServiceAccountLookups = 10
)

// serviceAccountAdmissionName names the ServiceAccount plugin in the
// registry's mutating admission.
const serviceAccountAdmissionName = "ServiceAccount"

// installServiceAccountAdmission installs admitServiceAccount as the
// registry's mutating admission of pod creates, so the pods controllers
// create (ReplicaSets, Jobs, DaemonSets) get their ServiceAccount, pull
// secrets and token volume as those created through the API do, as in
// Kubernetes, where controllers create pods through the API. A process
// running the controllers without the apiserver (--apiserver=false)
// installs no plugin: its pods get none of that.
func (s *Server) installServiceAccountAdmission() {
	s.reg.SetMutatingAdmission(serviceAccountAdmissionName, func(ctx context.Context, a registry.AdmissionAttributes) error {
		pod, ok := a.Object.(*corev1.Pod)
		if !ok || a.Operation != admissionv1.Create || a.Subresource != "" {
			return nil
		}
		return s.admitServiceAccount(ctx, pod)
	})
}

// admitServiceAccount is Kubernetes' ServiceAccount admission plugin for a
// pod being created (plugin/pkg/admission/serviceaccount):
//   - a mirror pod may reference neither a ServiceAccount nor secrets;
//   - a pod without spec.serviceAccountName gets "default";
//   - the ServiceAccount must exist in the pod's namespace, else 403
//     Forbidden "error looking up service account <ns>/<name>:
//     serviceaccount "<name>" not found" ("default" is looked up
//     defaultServiceAccountLookups times first);
//   - a pod without imagePullSecrets gets the ServiceAccount's;
//   - a ServiceAccount annotated kubernetes.io/enforce-mountable-secrets
//     "true" refuses (403) a pod referencing a secret it does not list;
//   - when the apiserver issues tokens (Config.ServiceAccountTokens) and
//     neither the pod's nor (when the pod's is unset) the
//     ServiceAccount's automountServiceAccountToken is false, the pod
//     gets the projected volume kube-api-access-<5 random> (token: a
//     pod-bound token of 3607 s, ca.crt from ConfigMap kube-root-ca.crt,
//     namespace) mounted read-only at
//     /var/run/secrets/kubernetes.io/serviceaccount in every container
//     and init container that mounts nothing there already
//     (mountServiceAccountToken).
func (s *Server) admitServiceAccount(ctx context.Context, pod *corev1.Pod) error {
	if _, mirror := pod.Annotations[mirrorPodAnnotation]; mirror {
		if pod.Spec.ServiceAccountName != "" {
			return podForbidden(pod, fmt.Errorf("a mirror pod may not reference service accounts"))
		}
		for _, v := range pod.Spec.Volumes {
			if v.Secret != nil {
				return podForbidden(pod, fmt.Errorf("a mirror pod may not reference secrets"))
			}
		}
		return nil
	}
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = core.DefaultServiceAccountName
	}
	sa, err := s.lookupServiceAccount(ctx, pod.Namespace, pod.Spec.ServiceAccountName)
	if err != nil {
		return podForbidden(pod, fmt.Errorf("error looking up service account %s/%s: %w", pod.Namespace, pod.Spec.ServiceAccountName, err))
	}
	if len(pod.Spec.ImagePullSecrets) == 0 && len(sa.ImagePullSecrets) > 0 {
		for _, ps := range sa.ImagePullSecrets {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: ps.Name})
		}
	}
	if v, ok := sa.Annotations[enforceMountableSecretsAnnotation]; ok {
		if enforce, _ := strconv.ParseBool(v); enforce {
			if err := limitSecretReferences(sa, pod); err != nil {
				return podForbidden(pod, err)
			}
		}
	}
	if s.cfg.ServiceAccountTokens != nil && automount(sa, pod) {
		mountServiceAccountToken(pod)
	}
	return nil
}

// The kube-api-access volume, as Kubernetes' ServiceAccount admission.
const (
	serviceAccountVolumePrefix = "kube-api-access-"
	// DefaultAPITokenMountPath is where every container finds token,
	// ca.crt and namespace.
	DefaultAPITokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	rootCAConfigMap          = "kube-root-ca.crt"
)

// automount reports whether pod gets its ServiceAccount's token: the
// pod's automountServiceAccountToken when set, else the ServiceAccount's,
// else true.
func automount(sa *corev1.ServiceAccount, pod *corev1.Pod) bool {
	if pod.Spec.AutomountServiceAccountToken != nil {
		return *pod.Spec.AutomountServiceAccountToken
	}
	if sa.AutomountServiceAccountToken != nil {
		return *sa.AutomountServiceAccountToken
	}
	return true
}

// mountServiceAccountToken adds the kube-api-access volume (unless the pod
// has one) and mounts it in every container without a mount at
// DefaultAPITokenMountPath, as the admission plugin's.
func mountServiceAccountToken(pod *corev1.Pod) {
	name := ""
	for _, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, serviceAccountVolumePrefix) {
			name = v.Name
			break
		}
	}
	hasVolume := name != ""
	if !hasVolume {
		name = registry.GenerateName(serviceAccountVolumePrefix)
	}
	mount := corev1.VolumeMount{Name: name, ReadOnly: true, MountPath: DefaultAPITokenMountPath}
	needed := false
	add := func(cs []corev1.Container) {
		for i := range cs {
			if !slices.ContainsFunc(cs[i].VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == DefaultAPITokenMountPath }) {
				cs[i].VolumeMounts = append(cs[i].VolumeMounts, mount)
				needed = true
			}
		}
	}
	add(pod.Spec.InitContainers)
	add(pod.Spec.Containers)
	if hasVolume || !needed {
		return
	}
	mode := corev1.ProjectedVolumeSourceDefaultMode
	exp := int64(serviceaccount.DefaultProjectedExpiration / time.Second)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: &mode,
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: rootCAConfigMap},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}})
}

// lookupServiceAccount reads namespace/name, retrying a missing "default"
// as the admission plugin does; NotFound when it stays missing.
func (s *Server) lookupServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	attempts := 1
	if name == core.DefaultServiceAccountName {
		attempts = defaultServiceAccountLookups
	}
	interval := time.Duration(100+rand.IntN(100)) * time.Millisecond
	for i := range attempts {
		if i > 0 {
			t := time.NewTimer(interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		obj, err := s.st.GetCached(ctx, core.ServiceAccounts, namespace, name) // as the plugin's lister, then a live read
		if err == nil {
			return obj.(*corev1.ServiceAccount), nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccount"}, name)
}

// limitSecretReferences refuses a pod referencing (in secret volumes, env,
// envFrom or imagePullSecrets) a secret its ServiceAccount does not list.
func limitSecretReferences(sa *corev1.ServiceAccount, pod *corev1.Pod) error {
	mountable := map[string]bool{}
	for _, s := range sa.Secrets {
		mountable[s.Name] = true
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && !mountable[v.Secret.SecretName] {
			return fmt.Errorf("volume with secret.secretName=%q is not allowed because service account %s does not reference that secret", v.Secret.SecretName, sa.Name)
		}
	}
	check := func(what string, cs []corev1.Container) error {
		for _, c := range cs {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !mountable[e.ValueFrom.SecretKeyRef.Name] {
					return fmt.Errorf("%s %s with envVar %s referencing secret.secretName=%q is not allowed because service account %s does not reference that secret",
						what, c.Name, e.Name, e.ValueFrom.SecretKeyRef.Name, sa.Name)
				}
			}
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil && !mountable[e.SecretRef.Name] {
					return fmt.Errorf("%s %s with envFrom referencing secret.secretName=%q is not allowed because service account %s does not reference that secret",
						what, c.Name, e.SecretRef.Name, sa.Name)
				}
			}
		}
		return nil
	}
	if err := check("init container", pod.Spec.InitContainers); err != nil {
		return err
	}
	if err := check("container", pod.Spec.Containers); err != nil {
		return err
	}
	pull := map[string]bool{}
	for _, s := range sa.ImagePullSecrets {
		pull[s.Name] = true
	}
	for i, ref := range pod.Spec.ImagePullSecrets {
		if !pull[ref.Name] {
			return fmt.Errorf("imagePullSecrets[%d].name=%q is not allowed because service account %s does not reference that imagePullSecret", i, ref.Name, sa.Name)
		}
	}
	return nil
}

// podForbidden is admission's NewForbidden for a pod: named by its name,
// else its generateName, else "Unknown".
func podForbidden(pod *corev1.Pod, err error) error {
	name := pod.Name
	if name == "" {
		name = pod.GenerateName
	}
	if name == "" {
		name = "Unknown"
	}
	return apierrors.NewForbidden(store.Pods.GroupResource(), name, err)
}

// ensureDefaultServiceAccount creates the "default" ServiceAccount of a
// namespace just created, so a pod can be created in it at once (the
// ServiceAccount controller creates it too, and again when it is
// deleted). It is best effort: a failure leaves it to the controller.
func (s *Server) ensureDefaultServiceAccount(ctx context.Context, namespace string) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: core.DefaultServiceAccountName}}
	_, _ = s.createObject(ctx, core.ServiceAccounts, namespace, sa, false)
}
