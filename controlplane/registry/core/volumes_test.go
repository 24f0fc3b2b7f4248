package core

import (
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestValidateVolumes(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	i64 := func(v int64) *int64 { return &v }
	yes, no := true, false
	neg := resource.MustParse("-1Mi")
	socket, bogus := corev1.HostPathSocket, corev1.HostPathType("Pipe")
	cm := func(items ...corev1.KeyToPath) corev1.VolumeSource {
		return corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Items: items}}
	}
	ok := corev1.Volume{Name: "ok", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	for _, tc := range []struct {
		name   string
		vols   []corev1.Volume
		mounts []corev1.VolumeMount
		sc     *corev1.SecurityContext
		want   []string // "type:field", sorted
	}{
		{name: "valid", vols: []corev1.Volume{ok,
			{Name: "cm", VolumeSource: cm(corev1.KeyToPath{Key: "a.conf", Path: "sub/a", Mode: i32(0o600)})},
			{Name: "hp", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/x.sock", Type: &socket}}},
			{Name: "dw", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "l", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}},
				{Path: "m", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.memory"}}}}}},
		}, mounts: []corev1.VolumeMount{{Name: "ok", MountPath: "/a"}, {Name: "cm", MountPath: "/b", SubPath: "sub/a"}, {Name: "ok", MountPath: "/c", SubPathExpr: "$(POD)"}}},
		{name: "names", vols: []corev1.Volume{ok, ok, {Name: "Bad_Name", VolumeSource: ok.VolumeSource}},
			want: []string{"FieldValueDuplicate:spec.volumes[1].name", "FieldValueInvalid:spec.volumes[2].name"}},
		{name: "no type and two types", vols: []corev1.Volume{{Name: "a"}, {Name: "b", VolumeSource: corev1.VolumeSource{EmptyDir: ok.EmptyDir, HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}}},
			want: []string{"FieldValueForbidden:spec.volumes[1]", "FieldValueRequired:spec.volumes[0]"}},
		{name: "sources", vols: []corev1.Volume{
			{Name: "ed", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &neg}}},
			{Name: "hp", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/a/../etc", Type: &bogus}}},
			{Name: "cm", VolumeSource: cm(corev1.KeyToPath{Key: "a/b", Path: "../x", Mode: i32(0o1777)})},
			{Name: "se", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{DefaultMode: i32(-1)}}},
			{Name: "dw", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "/abs", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}, {Path: "r", ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.gpu"}}}}}},
		}, want: []string{
			"FieldValueInvalid:spec.volumes[0].emptyDir.sizeLimit", "FieldValueInvalid:spec.volumes[1].hostPath.path", "FieldValueNotSupported:spec.volumes[1].hostPath.type",
			"FieldValueInvalid:spec.volumes[2].configMap.items[0].key", "FieldValueInvalid:spec.volumes[2].configMap.items[0].path", "FieldValueInvalid:spec.volumes[2].configMap.items[0].mode",
			"FieldValueRequired:spec.volumes[3].secret.secretName", "FieldValueInvalid:spec.volumes[3].secret.defaultMode",
			"FieldValueInvalid:spec.volumes[4].downwardAPI.items[0].path", "FieldValueNotSupported:spec.volumes[4].downwardAPI.items[0].fieldRef.fieldPath",
			"FieldValueRequired:spec.volumes[4].downwardAPI.items[1].resourceFieldRef.containerName", "FieldValueNotSupported:spec.volumes[4].downwardAPI.items[1].resourceFieldRef.resource",
		}},
		// The AtomicWriter owns names starting with "..": an item there
		// would replace the volume's ..data link (Kubernetes'
		// validateLocalNonReservedPath).
		{name: "reserved paths", vols: []corev1.Volume{
			{Name: "cm", VolumeSource: cm(corev1.KeyToPath{Key: "a", Path: "..data"}, corev1.KeyToPath{Key: "b", Path: "..x/y"})},
			{Name: "dw", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "..data_tmp", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		}, want: []string{"FieldValueInvalid:spec.volumes[0].configMap.items[0].path", "FieldValueInvalid:spec.volumes[0].configMap.items[1].path",
			"FieldValueInvalid:spec.volumes[1].downwardAPI.items[0].path"}},
		{name: "mounts", vols: []corev1.Volume{ok}, mounts: []corev1.VolumeMount{{Name: "nope", MountPath: "/a"}, {Name: "ok", MountPath: "/a", SubPath: "../x"},
			{Name: "ok", MountPath: "/b", SubPath: "x", SubPathExpr: "y"}, {Name: "ok"}},
			want: []string{"FieldValueNotFound:spec.containers[0].volumeMounts[0].name", "FieldValueInvalid:spec.containers[0].volumeMounts[1].mountPath",
				"FieldValueInvalid:spec.containers[0].volumeMounts[1].subPath", "FieldValueInvalid:spec.containers[0].volumeMounts[2].subPathExpr",
				"FieldValueRequired:spec.containers[0].volumeMounts[3].mountPath"}},
		{name: "security context", sc: &corev1.SecurityContext{RunAsUser: i64(-1), Privileged: &yes, AllowPrivilegeEscalation: &no},
			want: []string{"FieldValueInvalid:spec.containers[0].securityContext", "FieldValueInvalid:spec.containers[0].securityContext.runAsUser"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &corev1.PodSpec{Volumes: tc.vols, Containers: []corev1.Container{{Name: "c", Image: "i", VolumeMounts: tc.mounts, SecurityContext: tc.sc}}}
			var got []string
			for _, e := range ValidatePodSpec(sp, field.NewPath("spec")) {
				got = append(got, string(e.Type)+":"+e.Field)
			}
			sort.Strings(got)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// An image with leading or trailing whitespace is refused, as
// Kubernetes' validateContainerCommon (a node could not parse it).
func TestValidateImageWhitespace(t *testing.T) {
	for image, want := range map[string]string{"app:v1": "", " app:v1": "FieldValueInvalid:spec.containers[0].image", "app:v1\n": "FieldValueInvalid:spec.containers[0].image", "": "FieldValueRequired:spec.containers[0].image"} {
		sp := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}
		var got []string
		for _, e := range ValidatePodSpec(sp, field.NewPath("spec")) {
			got = append(got, string(e.Type)+":"+e.Field)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("image %q: errors %v, want %q", image, got, want)
		}
	}
}
