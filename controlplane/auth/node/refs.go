package node

import corev1 "k8s.io/api/core/v1"

// podSecretNames returns the names of the Secrets pod references: image
// pull secrets, env and envFrom of every container (init and ephemeral
// too), and volumes (secret, projected secret sources, and the secretRefs
// of the volume plugins that have one), as Kubernetes'
// pkg/api/v1/pod.VisitPodSecretNames, which the Node authorizer's graph
// uses.
func podSecretNames(pod *corev1.Pod) []string {
	var out []string
	add := func(n string) {
		if n != "" {
			out = append(out, n)
		}
	}
	addRef := func(r *corev1.LocalObjectReference) {
		if r != nil {
			add(r.Name)
		}
	}
	for _, s := range pod.Spec.ImagePullSecrets {
		add(s.Name)
	}
	visitContainers(pod, func(env []corev1.EnvVar, from []corev1.EnvFromSource) {
		for _, e := range from {
			if e.SecretRef != nil {
				add(e.SecretRef.Name)
			}
		}
		for _, e := range env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				add(e.ValueFrom.SecretKeyRef.Name)
			}
		}
	})
	for _, v := range pod.Spec.Volumes {
		s := &v.VolumeSource
		switch {
		case s.Secret != nil:
			add(s.Secret.SecretName)
		case s.Projected != nil:
			for _, p := range s.Projected.Sources {
				if p.Secret != nil {
					add(p.Secret.Name)
				}
			}
		case s.AzureFile != nil:
			add(s.AzureFile.SecretName)
		case s.CephFS != nil:
			addRef(s.CephFS.SecretRef)
		case s.Cinder != nil:
			addRef(s.Cinder.SecretRef)
		case s.FlexVolume != nil:
			addRef(s.FlexVolume.SecretRef)
		case s.RBD != nil:
			addRef(s.RBD.SecretRef)
		case s.ScaleIO != nil:
			addRef(s.ScaleIO.SecretRef)
		case s.ISCSI != nil:
			addRef(s.ISCSI.SecretRef)
		case s.StorageOS != nil:
			addRef(s.StorageOS.SecretRef)
		case s.CSI != nil:
			addRef(s.CSI.NodePublishSecretRef)
		}
	}
	return out
}

// podConfigMapNames returns the names of the ConfigMaps pod references
// (env, envFrom, configMap volumes and projected sources), as Kubernetes'
// VisitPodConfigmapNames.
func podConfigMapNames(pod *corev1.Pod) []string {
	var out []string
	add := func(n string) {
		if n != "" {
			out = append(out, n)
		}
	}
	visitContainers(pod, func(env []corev1.EnvVar, from []corev1.EnvFromSource) {
		for _, e := range from {
			if e.ConfigMapRef != nil {
				add(e.ConfigMapRef.Name)
			}
		}
		for _, e := range env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				add(e.ValueFrom.ConfigMapKeyRef.Name)
			}
		}
	})
	for _, v := range pod.Spec.Volumes {
		switch s := &v.VolumeSource; {
		case s.ConfigMap != nil:
			add(s.ConfigMap.Name)
		case s.Projected != nil:
			for _, p := range s.Projected.Sources {
				if p.ConfigMap != nil {
					add(p.ConfigMap.Name)
				}
			}
		}
	}
	return out
}

// podPVCNames returns the PersistentVolumeClaims pod's volumes name
// (persistentVolumeClaim and generic ephemeral volumes, "<pod>-<volume>").
func podPVCNames(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			out = append(out, pod.Name+"-"+v.Name)
		}
	}
	return out
}

// visitContainers calls f with the env and envFrom of every container of
// pod: init, regular and ephemeral.
func visitContainers(pod *corev1.Pod, f func([]corev1.EnvVar, []corev1.EnvFromSource)) {
	for _, c := range pod.Spec.InitContainers {
		f(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.Containers {
		f(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		f(c.Env, c.EnvFrom)
	}
}
