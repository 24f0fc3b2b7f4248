package core

import (
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateVolumes checks a pod spec's volumes, its containers'
// volumeMounts and security contexts, as Kubernetes' ValidateVolumes,
// ValidateVolumeMounts and ValidateSecurityContext, for the fields orca's
// agent uses: names (DNS labels, unique), exactly one volume type, the
// sources' fields (paths relative without "..", modes 0-0777, keys valid
// ConfigMap keys, hostPath types, downward API fields), mounts naming a
// volume of the pod at a unique mountPath with at most one of subPath and
// subPathExpr, and ids within 0-2147483647. Volume types the agent does
// not serve pass here and are reported by the agent (FailedMount).
func validateVolumes(sp *corev1.PodSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	vp := p.Child("volumes")
	for i := range sp.Volumes {
		v := &sp.Volumes[i]
		idx := vp.Index(i)
		if v.Name == "" {
			errs = append(errs, field.Required(idx.Child("name"), ""))
		} else {
			for _, msg := range validation.IsDNS1123Label(v.Name) {
				errs = append(errs, field.Invalid(idx.Child("name"), v.Name, msg))
			}
			if names.Has(v.Name) {
				errs = append(errs, field.Duplicate(idx.Child("name"), v.Name))
			}
			names.Insert(v.Name)
		}
		errs = append(errs, validateVolumeSource(&v.VolumeSource, idx)...)
	}
	for _, cs := range []struct {
		list []corev1.Container
		path *field.Path
	}{{sp.InitContainers, p.Child("initContainers")}, {sp.Containers, p.Child("containers")}} {
		for i := range cs.list {
			c := &cs.list[i]
			errs = append(errs, validateVolumeMounts(c.VolumeMounts, names, cs.path.Index(i).Child("volumeMounts"))...)
			errs = append(errs, validateSecurityContext(c.SecurityContext, cs.path.Index(i).Child("securityContext"))...)
		}
	}
	if psc := sp.SecurityContext; psc != nil {
		sp := p.Child("securityContext")
		errs = append(errs, validateID(psc.RunAsUser, sp.Child("runAsUser"))...)
		errs = append(errs, validateID(psc.RunAsGroup, sp.Child("runAsGroup"))...)
		errs = append(errs, validateID(psc.FSGroup, sp.Child("fsGroup"))...)
		for i, g := range psc.SupplementalGroups {
			errs = append(errs, validateID(&g, sp.Child("supplementalGroups").Index(i))...)
		}
	}
	return errs
}

var hostPathTypes = sets.New(string(corev1.HostPathUnset), string(corev1.HostPathDirectoryOrCreate), string(corev1.HostPathDirectory),
	string(corev1.HostPathFileOrCreate), string(corev1.HostPathFile), string(corev1.HostPathSocket), string(corev1.HostPathCharDev), string(corev1.HostPathBlockDev))

// validateVolumeSource checks that exactly one type is set and, for the
// types the agent serves, their fields.
func validateVolumeSource(src *corev1.VolumeSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	count := func(set bool) bool {
		if set {
			n++
		}
		return set
	}
	if count(src.EmptyDir != nil) {
		if q := src.EmptyDir.SizeLimit; q != nil && q.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Child("emptyDir", "sizeLimit"), q.String(), "must be greater than or equal to 0"))
		}
		if m := src.EmptyDir.Medium; m != corev1.StorageMediumDefault && m != corev1.StorageMediumMemory && m != corev1.StorageMediumHugePages && !strings.HasPrefix(string(m), string(corev1.StorageMediumHugePagesPrefix)) {
			errs = append(errs, field.NotSupported(p.Child("emptyDir", "medium"), m, []string{"", string(corev1.StorageMediumMemory)}))
		}
	}
	if count(src.HostPath != nil) {
		hp := p.Child("hostPath")
		if src.HostPath.Path == "" {
			errs = append(errs, field.Required(hp.Child("path"), ""))
		} else {
			errs = append(errs, validateNoBacksteps(src.HostPath.Path, hp.Child("path"))...)
		}
		if t := src.HostPath.Type; t != nil && !hostPathTypes.Has(string(*t)) {
			errs = append(errs, field.NotSupported(hp.Child("type"), *t, sets.List(hostPathTypes)))
		}
	}
	if count(src.ConfigMap != nil) {
		cp := p.Child("configMap")
		if src.ConfigMap.Name == "" {
			errs = append(errs, field.Required(cp.Child("name"), ""))
		}
		errs = append(errs, validateMode(src.ConfigMap.DefaultMode, cp.Child("defaultMode"))...)
		errs = append(errs, validateKeyToPaths(src.ConfigMap.Items, cp.Child("items"))...)
	}
	if count(src.Secret != nil) {
		sp := p.Child("secret")
		if src.Secret.SecretName == "" {
			errs = append(errs, field.Required(sp.Child("secretName"), ""))
		}
		errs = append(errs, validateMode(src.Secret.DefaultMode, sp.Child("defaultMode"))...)
		errs = append(errs, validateKeyToPaths(src.Secret.Items, sp.Child("items"))...)
	}
	if count(src.DownwardAPI != nil) {
		dp := p.Child("downwardAPI")
		errs = append(errs, validateMode(src.DownwardAPI.DefaultMode, dp.Child("defaultMode"))...)
		errs = append(errs, validateDownwardAPIFiles(src.DownwardAPI.Items, dp.Child("items"))...)
	}
	if count(src.Projected != nil) {
		pp := p.Child("projected")
		errs = append(errs, validateMode(src.Projected.DefaultMode, pp.Child("defaultMode"))...)
		paths := sets.New[string]()
		dupPath := func(fp *field.Path, path string) {
			if paths.Has(path) {
				errs = append(errs, field.Invalid(fp, path, "conflicting duplicate paths"))
			}
			paths.Insert(path)
		}
		for i, s := range src.Projected.Sources {
			sp := pp.Child("sources").Index(i)
			kinds := 0
			if s.ConfigMap != nil {
				kinds++
				errs = append(errs, validateKeyToPaths(s.ConfigMap.Items, sp.Child("configMap", "items"))...)
				for j, it := range s.ConfigMap.Items {
					dupPath(sp.Child("configMap", "items").Index(j).Child("path"), it.Path)
				}
			}
			if s.Secret != nil {
				kinds++
				errs = append(errs, validateKeyToPaths(s.Secret.Items, sp.Child("secret", "items"))...)
				for j, it := range s.Secret.Items {
					dupPath(sp.Child("secret", "items").Index(j).Child("path"), it.Path)
				}
			}
			if s.DownwardAPI != nil {
				kinds++
				errs = append(errs, validateDownwardAPIFiles(s.DownwardAPI.Items, sp.Child("downwardAPI", "items"))...)
				for j, it := range s.DownwardAPI.Items {
					dupPath(sp.Child("downwardAPI", "items").Index(j).Child("path"), it.Path)
				}
			}
			if s.ServiceAccountToken != nil {
				kinds++
			}
			if s.ClusterTrustBundle != nil {
				kinds++
			}
			if kinds != 1 {
				errs = append(errs, field.Forbidden(sp, "may not specify more than 1 volume type per source"))
			}
		}
	}
	for _, other := range []bool{src.GCEPersistentDisk != nil, src.AWSElasticBlockStore != nil, src.GitRepo != nil, src.NFS != nil,
		src.ISCSI != nil, src.Glusterfs != nil, src.PersistentVolumeClaim != nil, src.RBD != nil, src.FlexVolume != nil, src.Cinder != nil,
		src.CephFS != nil, src.Flocker != nil, src.FC != nil, src.AzureFile != nil, src.VsphereVolume != nil, src.Quobyte != nil,
		src.AzureDisk != nil, src.PhotonPersistentDisk != nil, src.PortworxVolume != nil, src.ScaleIO != nil, src.StorageOS != nil,
		src.CSI != nil, src.Ephemeral != nil, src.Image != nil} {
		count(other)
	}
	switch {
	case n == 0:
		errs = append(errs, field.Required(p, "must specify a volume type"))
	case n > 1:
		errs = append(errs, field.Forbidden(p, "may not specify more than 1 volume type"))
	}
	return errs
}

// validateKeyToPaths checks configMap and secret items: a valid key, a
// relative path without ".." and not starting with "..", a mode 0-0777.
func validateKeyToPaths(items []corev1.KeyToPath, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		ip := p.Index(i)
		if it.Key == "" {
			errs = append(errs, field.Required(ip.Child("key"), ""))
		} else {
			for _, msg := range validation.IsConfigMapKey(it.Key) {
				errs = append(errs, field.Invalid(ip.Child("key"), it.Key, msg))
			}
		}
		errs = append(errs, validateLocalNonReservedPath(it.Path, ip.Child("path"))...)
		errs = append(errs, validateMode(it.Mode, ip.Child("mode"))...)
	}
	return errs
}

var downwardAPIFieldPaths = sets.New("metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid")
var downwardAPIResources = sets.New("limits.cpu", "limits.memory", "requests.cpu", "requests.memory", "limits.ephemeral-storage", "requests.ephemeral-storage")

// validateDownwardAPIFiles checks downwardAPI items as Kubernetes'
// validateDownwardAPIVolumeFile: a path, exactly one of fieldRef (a
// supported field, or a label or annotation by key) and resourceFieldRef
// (a supported resource of a named container).
func validateDownwardAPIFiles(items []corev1.DownwardAPIVolumeFile, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		ip := p.Index(i)
		errs = append(errs, validateLocalNonReservedPath(it.Path, ip.Child("path"))...)
		errs = append(errs, validateMode(it.Mode, ip.Child("mode"))...)
		switch {
		case it.FieldRef != nil && it.ResourceFieldRef != nil:
			errs = append(errs, field.Invalid(ip, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		case it.FieldRef != nil:
			fp := it.FieldRef.FieldPath
			ok := downwardAPIFieldPaths.Has(fp)
			for _, prefix := range []string{"metadata.labels", "metadata.annotations"} {
				if strings.HasPrefix(fp, prefix+"['") && strings.HasSuffix(fp, "']") && len(fp) > len(prefix)+4 {
					ok = true
				}
			}
			if !ok {
				errs = append(errs, field.NotSupported(ip.Child("fieldRef", "fieldPath"), fp, sets.List(downwardAPIFieldPaths)))
			}
		case it.ResourceFieldRef != nil:
			rp := ip.Child("resourceFieldRef")
			if it.ResourceFieldRef.ContainerName == "" {
				errs = append(errs, field.Required(rp.Child("containerName"), ""))
			}
			if !downwardAPIResources.Has(it.ResourceFieldRef.Resource) {
				errs = append(errs, field.NotSupported(rp.Child("resource"), it.ResourceFieldRef.Resource, sets.List(downwardAPIResources)))
			}
		default:
			errs = append(errs, field.Required(ip, "one of fieldRef and resourceFieldRef is required"))
		}
	}
	return errs
}

// validateVolumeMounts checks a container's mounts: a volume of the pod,
// a unique mountPath, a relative subPath without "..", not both subPath
// and subPathExpr.
func validateVolumeMounts(mounts []corev1.VolumeMount, volumes sets.Set[string], p *field.Path) field.ErrorList {
	var errs field.ErrorList
	paths := sets.New[string]()
	for i, m := range mounts {
		mp := p.Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(mp.Child("name"), ""))
		} else if !volumes.Has(m.Name) {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(mp.Child("mountPath"), ""))
		} else {
			if paths.Has(m.MountPath) {
				errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be unique"))
			}
			paths.Insert(m.MountPath)
		}
		if m.SubPath != "" {
			errs = append(errs, validateLocalDescendingPath(m.SubPath, mp.Child("subPath"))...)
		}
		if m.SubPath != "" && m.SubPathExpr != "" {
			errs = append(errs, field.Invalid(mp.Child("subPathExpr"), m.SubPathExpr, "subPathExpr and subPath are mutually exclusive"))
		}
		if m.SubPathExpr != "" && path.IsAbs(m.SubPathExpr) {
			errs = append(errs, field.Invalid(mp.Child("subPathExpr"), m.SubPathExpr, "must be a relative path"))
		}
	}
	return errs
}

// validateSecurityContext checks a container's security context as
// Kubernetes' ValidateSecurityContext: ids in range, and privileged or
// CAP_SYS_ADMIN not with allowPrivilegeEscalation false.
func validateSecurityContext(sc *corev1.SecurityContext, p *field.Path) field.ErrorList {
	if sc == nil {
		return nil
	}
	errs := append(validateID(sc.RunAsUser, p.Child("runAsUser")), validateID(sc.RunAsGroup, p.Child("runAsGroup"))...)
	if ape := sc.AllowPrivilegeEscalation; ape != nil && !*ape {
		if sc.Privileged != nil && *sc.Privileged {
			errs = append(errs, field.Invalid(p, sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
		}
		if sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				if strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_") == "SYS_ADMIN" {
					errs = append(errs, field.Invalid(p, sc, "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"))
				}
			}
		}
	}
	return errs
}

// validateID checks a uid or gid: 0-2147483647, as Kubernetes' ValidateUserID.
func validateID(id *int64, p *field.Path) field.ErrorList {
	if id == nil {
		return nil
	}
	if *id < 0 || *id > 2147483647 {
		return field.ErrorList{field.Invalid(p, *id, "must be between 0 and 2147483647, inclusive")}
	}
	return nil
}

// validateMode checks a file mode: 0-0777 (octal), as Kubernetes'.
func validateMode(m *int32, p *field.Path) field.ErrorList {
	if m != nil && (*m < 0 || *m > 0o777) {
		return field.ErrorList{field.Invalid(p, *m, "must be a number between 0 and 0777 (octal), both inclusive")}
	}
	return nil
}

// validateLocalDescendingPath is Kubernetes': relative, no ".." element.
func validateLocalDescendingPath(target string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if target == "" {
		return append(errs, field.Required(p, ""))
	}
	if path.IsAbs(target) {
		errs = append(errs, field.Invalid(p, target, "must be a relative path"))
	}
	return append(errs, validateNoBacksteps(target, p)...)
}

// validateLocalNonReservedPath is Kubernetes': a local descending path
// that does not start with "..", the names the atomic writer of
// configMap, secret, downwardAPI and projected volumes keeps for itself
// (..data, ..data_tmp, ..<timestamp>).
func validateLocalNonReservedPath(target string, p *field.Path) field.ErrorList {
	errs := validateLocalDescendingPath(target, p)
	if strings.HasPrefix(target, "..") && !strings.HasPrefix(target, "../") {
		errs = append(errs, field.Invalid(p, target, "must not start with '..'"))
	}
	return errs
}

// validateNoBacksteps refuses a ".." element, as Kubernetes' validatePathNoBacksteps.
func validateNoBacksteps(target string, p *field.Path) field.ErrorList {
	for _, el := range strings.Split(target, "/") {
		if el == ".." {
			return field.ErrorList{field.Invalid(p, target, "must not contain '..'")}
		}
	}
	return nil
}
