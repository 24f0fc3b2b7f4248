package apiserver

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/batch"
)

// TestKubectlCronJob drives kubectl 1.27, 1.33 and /usr/bin/kubectl
// through the CronJob commands (no controller runs: examples/e2e runs
// their pods): create cronjob, get cronjob (the server's columns),
// create job --from=cronjob (annotated manual, the CronJob its
// controller), create job --image, describe cronjob and delete cronjob.
func TestKubectlCronJob(t *testing.T) {
	e := newEnv(t)
	paths := map[string]string{"default": kubectlPath,
		"1.27": "/usr/lib/google-cloud-sdk/bin/kubectl.1.27", "1.33": "/usr/lib/google-cloud-sdk/bin/kubectl.1.33"}
	for v, path := range paths {
		t.Run(v, func(t *testing.T) {
			name := "hello-" + strings.ReplaceAll(v, ".", "-")
			run := func(args ...string) string {
				t.Helper()
				out, err := e.kubectlAt(context.Background(), path, "", args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			if out := run("create", "cronjob", name, "--image=hello-job:v1", "--schedule=*/1 * * * *", "--", "/hello"); !strings.Contains(out, "cronjob.batch/"+name+" created") {
				t.Fatalf("create cronjob: %s", out)
			}
			out := run("get", "cronjob", name)
			if !regexp.MustCompile(`NAME\s+SCHEDULE\s+TIMEZONE\s+SUSPEND\s+ACTIVE\s+LAST SCHEDULE\s+AGE\n` + name + `\s+\*/1 \* \* \* \*\s+<none>\s+False\s+0\s+<none>\s+\S+`).MatchString(out) {
				t.Errorf("get cronjob:\n%s", out)
			}
			o, err := e.st.Get(context.Background(), batch.CronJobs, "default", name)
			if err != nil {
				t.Fatal(err)
			}
			cj := o.(*batchv1.CronJob)
			if c := cj.Spec.JobTemplate.Spec.Template.Spec.Containers; len(c) != 1 || c[0].Image != "hello-job:v1" || strings.Join(c[0].Command, " ") != "/hello" ||
				cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy != "OnFailure" {
				t.Errorf("template %+v", cj.Spec.JobTemplate.Spec.Template.Spec)
			}

			once := "once-" + strings.ReplaceAll(v, ".", "-")
			if out := run("create", "job", once, "--from=cronjob/"+name); !strings.Contains(out, "job.batch/"+once+" created") {
				t.Fatalf("create job --from: %s", out)
			}
			o, err = e.st.Get(context.Background(), batch.Jobs, "default", once)
			if err != nil {
				t.Fatal(err)
			}
			j := o.(*batchv1.Job)
			// kubectl 1.27 sets a plain ownerReference, later ones mark it
			// the controller (without blockOwnerDeletion).
			refs := j.OwnerReferences
			if j.Annotations["cronjob.kubernetes.io/instantiate"] != "manual" || len(refs) != 1 || refs[0].Kind != "CronJob" || refs[0].UID != cj.UID ||
				(v != "1.27") != (metav1.GetControllerOf(j) != nil) ||
				j.Spec.Template.Spec.Containers[0].Image != "hello-job:v1" || j.Spec.Selector == nil {
				t.Errorf("job %s: annotations %v owners %+v", once, j.Annotations, j.OwnerReferences)
			}

			pi := "pi-" + strings.ReplaceAll(v, ".", "-")
			if out := run("create", "job", pi, "--image=hello-job:v1"); !strings.Contains(out, "job.batch/"+pi+" created") {
				t.Fatalf("create job: %s", out)
			}
			if out := run("get", "job", pi); !regexp.MustCompile(`NAME\s+STATUS\s+COMPLETIONS\s+DURATION\s+AGE\n` + pi + `\s+\S+\s+0/1\s+`).MatchString(out) {
				t.Errorf("get job:\n%s", out)
			}

			out = run("describe", "cronjob", name)
			for _, want := range []string{"Name:", name, "Schedule:", "*/1 * * * *", "Concurrency Policy:", "Allow", "Suspend:", "False",
				"Successful Job History Limit:", "3", "Image:", "hello-job:v1", "Command:", "/hello", "Last Schedule Time:", "<unset>"} {
				if !strings.Contains(out, want) {
					t.Errorf("describe cronjob: no %q in\n%s", want, out)
				}
			}
			if out := run("delete", "cronjob", name); !strings.Contains(out, fmt.Sprintf("cronjob.batch %q deleted", name)) {
				t.Errorf("delete cronjob: %s", out)
			}
		})
	}
}
