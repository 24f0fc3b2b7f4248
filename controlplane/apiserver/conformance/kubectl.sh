#!/usr/bin/env bash
# kubectl conformance script: drives one kubectl, with no extra flags,
# through what users do every day and checks what it prints (not only its
# exit code). It ends with the line "N passed, N failed" and exits 1 when
# a case failed.
#
# TestKubectlConformance (conformance_test.go, `make conformance`) runs it
# once per kubectl from 1.27 to 1.33 against an orca it starts. To run it
# against another cluster, give it:
#   KUBECTL      the kubectl binary (default: kubectl on PATH)
#   KUBECONFIG   a kubeconfig whose current context's namespace is NAMESPACE
#   NAMESPACE    a namespace that does not exist yet: the script creates it
#                and deletes it at the end
#   NODE         a Ready node with the taint
#                orca.dev/conformance=$TAINT_VALUE:NoSchedule, which the
#                script cordons, drains and uncordons (only the script's
#                drain pods tolerate the taint, so runs in parallel with
#                other namespaces and nodes do not disturb each other)
#   TAINT_VALUE  that taint's value
# The cluster must serve the RuntimeClass "wasm" and the WASM modules
# hello-wasm:v1 and hello-wasm:v2 (examples/hello-wasm, `orca wasm push`).
#
# Each wait is bounded by T seconds (default 180; kubectl's own waits by
# `timeout`), so a broken cluster fails cases instead of hanging the script.
set -u
cd "$(dirname "$0")"
K=${KUBECTL:-kubectl}
NS=${NAMESPACE:?NAMESPACE is required}
NODE=${NODE:?NODE is required}
TAINT_VALUE=${TAINT_VALUE:?TAINT_VALUE is required}
T=${T:-180}
TD=testdata
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

# k ARGS...: runs kubectl; its output (stdout and stderr) is in $out and its
# exit code in $rc. kt SECONDS ARGS... is k bounded to SECONDS.
k() { out=$("$K" "$@" 2>&1); rc=$?; }
kt() { local s=$1; shift; out=$(timeout "$s" "$K" "$@" 2>&1); rc=$?; }

ok() { passed=$((passed + 1)); echo "ok   $1"; }
notok() {
	failed=$((failed + 1))
	echo "FAIL $1: $2"
	printf '%s\n' "$out" | head -60 | sed 's/^/     | /'
}
# matches NAME REGEX...: the last kubectl's output matches each extended
# REGEX (then the case passes).
matches() {
	local name=$1 re
	shift
	for re in "$@"; do
		grep -Eq -- "$re" <<<"$out" || { notok "$name" "output does not match /$re/"; return 1; }
	done
	ok "$name"
}
# expect NAME REGEX...: the last kubectl succeeded and its output matches
# each extended REGEX.
expect() {
	[ "$rc" -eq 0 ] || { notok "$1" "exit code $rc"; return 1; }
	matches "$@"
}
# refused NAME REGEX...: the last kubectl failed and its output matches
# each REGEX.
refused() {
	[ "$rc" -ne 0 ] || { notok "$1" "succeeded, want a failure"; return 1; }
	matches "$@"
}
# is NAME WANT: the last kubectl succeeded and printed exactly WANT.
is() {
	[ "$rc" -eq 0 ] || { notok "$1" "exit code $rc"; return 1; }
	[ "$out" = "$2" ] || { notok "$1" "want \"$2\""; return 1; }
	ok "$1"
}
# eventually NAME SECONDS WANT ARGS...: runs kubectl ARGS every 0.25 s
# until it prints exactly WANT, for at most SECONDS.
eventually() {
	local name=$1 secs=$2 want=$3 end=$((SECONDS + $2))
	shift 3
	while :; do
		k "$@"
		if [ "$rc" -eq 0 ] && [ "$out" = "$want" ]; then
			ok "$name"
			return 0
		fi
		[ "$SECONDS" -lt "$end" ] || break
		sleep 0.25
	done
	notok "$name" "want \"$want\" within $secs s"
	return 1
}
# eventually_match NAME SECONDS REGEX ARGS...: as eventually, until the
# output matches REGEX.
eventually_match() {
	local name=$1 secs=$2 re=$3 end=$((SECONDS + $2))
	shift 3
	while :; do
		k "$@"
		if [ "$rc" -eq 0 ] && grep -Eq -- "$re" <<<"$out"; then
			ok "$name"
			return 0
		fi
		[ "$SECONDS" -lt "$end" ] || break
		sleep 0.25
	done
	notok "$name" "no match of /$re/ within $secs s"
	return 1
}
# count LINES: the number of non-empty lines of $out.
count() { grep -c . <<<"$out"; }

echo "# kubectl $("$K" version --client 2>/dev/null | head -1), namespace $NS, node $NODE"

# --- create -------------------------------------------------------------
k create namespace "$NS"
expect "create namespace" "^namespace/$NS created$"
k create configmap conf-created --from-literal=k=v
expect "create configmap --from-literal" "^configmap/conf-created created$"
k create configmap conf-created --from-literal=k=v
refused "create an existing object" 'AlreadyExists|already exists'
k create service clusterip conf-svc --tcp=80:8080
expect "create service clusterip" "^service/conf-svc created$"
k get service conf-svc -o jsonpath='{.spec.clusterIP}'
expect "service gets a ClusterIP" '^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$'
k create -f "$TD/dir/secret.yaml"
expect "create -f" "^secret/conf-dir created$"
k delete -f "$TD/dir/secret.yaml"
expect "delete -f" "^secret \"conf-dir\" deleted"

# --- apply: a file, a directory, a multi-document file ------------------
k apply -f "$TD/configmap.yaml"
expect "apply a file" "^configmap/conf-single created$"
k apply -f "$TD/configmap.yaml"
expect "apply again is unchanged" "^configmap/conf-single unchanged$"
sed -e 's/a: one/a: uno/' -e '/b: two/d' "$TD/configmap.yaml" >"$tmp/configmap.yaml"
k apply -f "$tmp/configmap.yaml"
expect "apply a changed file" "^configmap/conf-single configured$"
k get configmap conf-single -o jsonpath='{.data}'
is "apply changes and prunes fields (last-applied)" '{"a":"uno"}'
k apply -f "$TD/dir"
expect "apply a directory" "^configmap/conf-dir created$" "^secret/conf-dir created$"
k get secret conf-dir -o jsonpath='{.data.password}'
is "a secret's stringData is stored as data" "$(printf s3cret | base64)"
k apply -f "$TD/app.yaml"
expect "apply a multi-document file" "^deployment.apps/web created$" "^service/web created$"
# Applied now, so their pods are Available when the cascade cases come.
k apply -f "$TD/cascade.yaml"
expect "apply three deployments" "^deployment.apps/casc-background created$" "^deployment.apps/casc-orphan created$"
k apply -f "$TD/app.yaml"
expect "apply a multi-document file again" "^deployment.apps/web unchanged$" "^service/web unchanged$"
sed 's/replicas: 2/replicas: 4/' "$TD/app.yaml" >"$tmp/app4.yaml"
k diff -f "$tmp/app4.yaml" # exits 1 when it finds differences
refused "diff shows what apply would change" '^-  replicas: 2$' '^\+  replicas: 4$'
k apply --dry-run=server -f "$tmp/app4.yaml"
expect "apply --dry-run=server" "^deployment.apps/web configured \(server dry run\)$"
k get deployment web -o jsonpath='{.spec.replicas}'
is "a server dry run writes nothing" "2"

# --- rollout status, wait -----------------------------------------------
kt "$T" rollout status deployment/web
expect "rollout status" 'successfully rolled out'
kt "$T" wait --for=condition=Available deployment/web
expect "wait --for=condition=Available" "^deployment.apps/web condition met$"
kt "$T" wait --for=condition=Ready pod -l app=web
expect "wait --for=condition=Ready pods" "^pod/web-.* condition met$"
[ "$(count)" = 2 ] && ok "wait reports each pod" || notok "wait reports each pod" "want 2 lines"

# --- get, every output format ---------------------------------------------
k get deployment web -o wide
expect "get -o wide" '^NAME +READY +UP-TO-DATE +AVAILABLE +AGE +CONTAINERS +IMAGES +SELECTOR$' \
	'^web +2/2 +2 +2 +[0-9a-z]+ +web +hello-wasm:v1 +app=web$'
k get pods -o wide
expect "get pods -o wide" '^NAME +READY +STATUS +RESTARTS +AGE +IP +NODE( |$)' '^web-[a-z0-9]+-[a-z0-9]+ +1/1 +Running +0 +[0-9a-z]+ +[0-9.]+ +node-a( |$)'
k get deployment web -o yaml
expect "get -o yaml" '^kind: Deployment$' '^  name: web$' '^  replicas: 2$' '^    image: hello-wasm:v1$|^      - image: hello-wasm:v1$'
k get deployment web -o json
expect "get -o json" '^    "kind": "Deployment",$' '"replicas": 2,' '"image": "hello-wasm:v1",'
k get deployment web -o jsonpath='{.spec.template.spec.containers[0].image}'
is "get -o jsonpath" "hello-wasm:v1"
k get pods -l app=web -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}'
is "get -o jsonpath with range" "$(printf 'Running\nRunning')"
k get deployment web -o custom-columns='NAME:.metadata.name,IMAGE:.spec.template.spec.containers[0].image,REPLICAS:.spec.replicas'
expect "get -o custom-columns" '^NAME +IMAGE +REPLICAS$' '^web +hello-wasm:v1 +2$'
k get deployment,service -o name
expect "get two kinds -o name" '^deployment.apps/web$' '^service/web$' '^service/conf-svc$'
for i in 1 2 3 4 5; do
	printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: chunk-%s\n  labels: {chunk: "yes"}\ndata: {i: "%s"}\n' "$i" "$i"
done >"$tmp/chunks.yaml"
k apply -f "$tmp/chunks.yaml"
[ "$rc" = 0 ] && [ "$(grep -c 'created$' <<<"$out")" = 5 ] && ok "apply five objects from one file" || notok "apply five objects from one file" "want 5 created"
k get configmaps -l chunk=yes --chunk-size=2 -v=6
expect "get --chunk-size pages the list" 'limit=2' 'continue=' '^chunk-1 ' '^chunk-5 '
[ "$(grep -c '^chunk-' <<<"$out")" = 5 ] && ok "get --chunk-size lists every object once" || notok "get --chunk-size lists every object once" "want 5 rows"
[ "$(grep -c '^NAME ' <<<"$out")" = 1 ] && ok "get --chunk-size prints one header" || notok "get --chunk-size prints one header" "want 1 header"
k get configmaps -l chunk=yes --chunk-size=2 -o name
is "get --chunk-size -o name" "$(printf 'configmap/chunk-%s\n' 1 2 3 4 5 | head -c -1)"
k delete configmaps -l chunk=yes
[ "$rc" = 0 ] && [ "$(grep -c 'deleted' <<<"$out")" = 5 ] && ok "delete by label" || notok "delete by label" "want 5 deleted"

# --- replace --------------------------------------------------------------
k get configmap conf-created -o yaml
sed 's/^  k: v$/  k: replaced/' <<<"$out" >"$tmp/replace.yaml"
k replace -f "$tmp/replace.yaml"
expect "replace" "^configmap/conf-created replaced$"
k get configmap conf-created -o jsonpath='{.data.k}'
is "replace wrote the object" "replaced"
k replace -f "$tmp/replace.yaml"
refused "replace with a stale resourceVersion" 'Conflict|the object has been modified'

# --- patch: strategic merge, JSON merge, JSON patch -----------------------
k patch deployment web -p '{"spec":{"template":{"spec":{"containers":[{"name":"web","env":[{"name":"GREETING","value":"hi"}]}]}}}}'
expect "patch (strategic merge)" "^deployment.apps/web patched$"
k get deployment web -o jsonpath='{range .spec.template.spec.containers[*]}{.name} {.image} {.env[0].value}{end}'
is "strategic merge merges containers by name" "web hello-wasm:v1 hi"
k patch configmap conf-created --type=merge -p '{"data":{"m":"merged"}}'
expect "patch --type=merge" "^configmap/conf-created patched$"
k get configmap conf-created -o jsonpath='{.data}'
is "merge patch keeps other keys" '{"k":"replaced","m":"merged"}'
k patch configmap conf-created --type=merge -p '{"data":{"m":"merged"}}'
expect "patch with no change" "^configmap/conf-created patched \(no change\)$"
k patch configmap conf-created --type=json -p '[{"op":"remove","path":"/data/m"},{"op":"add","path":"/data/j","value":"json"}]'
expect "patch --type=json" "^configmap/conf-created patched$"
k get configmap conf-created -o jsonpath='{.data}'
is "JSON patch applied its operations" '{"j":"json","k":"replaced"}'
k patch configmap conf-created --type=json -p '[{"op":"test","path":"/data/j","value":"other"}]'
refused "JSON patch test operation fails" 'test'

# --- apply --server-side ---------------------------------------------------
k apply --server-side -f "$TD/ssa.yaml"
expect "apply --server-side" "^configmap/conf-ssa serverside-applied$"
k get configmap conf-ssa --show-managed-fields -o json
expect "server-side apply records the field manager" '"manager": "kubectl"' '"operation": "Apply"' '"f:color": \{\}'
sed '/size: small/d' "$TD/ssa.yaml" >"$tmp/ssa-nosize.yaml"
k apply --server-side -f "$tmp/ssa-nosize.yaml"
expect "apply --server-side of fewer fields" "^configmap/conf-ssa serverside-applied$"
k get configmap conf-ssa -o jsonpath='{.data}'
is "server-side apply removes the fields its manager no longer applies" '{"color":"blue"}'
sed 's/color: blue/color: red/' "$tmp/ssa-nosize.yaml" >"$tmp/ssa-red.yaml"
k apply --server-side --field-manager=other -f "$tmp/ssa-red.yaml"
refused "server-side apply of another manager's field conflicts" 'conflict with "kubectl"' '\.data\.color'
k apply --server-side --field-manager=other --force-conflicts -f "$tmp/ssa-red.yaml"
expect "apply --server-side --force-conflicts" "^configmap/conf-ssa serverside-applied$"
k get configmap conf-ssa --show-managed-fields -o jsonpath='{.data.color} {range .metadata.managedFields[*]}{.manager}={.fieldsV1}{" "}{end}'
expect "--force-conflicts moves the field to the new manager" '^red ' 'other=\{"f:data":\{"f:color":\{\}\}\}'

# --- label, annotate ------------------------------------------------------
k label configmap conf-created tier=backend
expect "label" "^configmap/conf-created labeled$"
k get configmaps -l tier=backend -o name
is "get by the new label" "configmap/conf-created"
k label configmap conf-created tier=frontend
refused "label without --overwrite keeps a value" "already has a value"
k label configmap conf-created tier=frontend --overwrite
expect "label --overwrite" "^configmap/conf-created labeled$"
k label configmap conf-created tier-
expect "remove a label" "^configmap/conf-created unlabeled$"
k get configmap conf-created -o jsonpath='{.metadata.labels}'
is "the label is gone" ""
# kubectl 1.27 prints "annotate", the others "annotated".
k annotate deployment web team=edge
expect "annotate" "^deployment.apps/web annotated?$"
k get deployment web -o jsonpath='{.metadata.annotations.team}'
is "annotation stored" "edge"
k annotate deployment web team-
expect "remove an annotation" "^deployment.apps/web annotated?$"

# --- scale, rollout -------------------------------------------------------
k scale deployment web --replicas=3
expect "scale" "^deployment.apps/web scaled$"
kt "$T" rollout status deployment/web
expect "rollout status after scale" 'successfully rolled out'
k get deployment web -o jsonpath='{.spec.replicas} {.status.replicas} {.status.readyReplicas} {.status.updatedReplicas}'
is "scaled deployment's status" "3 3 3 3"
k describe deployment web
expect "describe" '^Name: +web$' '^Replicas: +3 desired \| 3 updated \| 3 total \| 3 available \| 0 unavailable$' '^Events:'
# Events are recorded asynchronously; a repeated one shows "(x2 over 3s)".
eventually_match "describe shows the scaling event" "$T" 'ScalingReplicaSet +.+ +deployment-controller +Scaled up replica set web-[a-z0-9]+ (from 2 )?to 3' describe deployment web
k rollout history deployment/web
expect "rollout history" '^REVISION +CHANGE-CAUSE$' '^1 ' '^2 '
k set image deployment/web web=hello-wasm:v2
expect "set image" "^deployment.apps/web image updated$"
kt "$T" rollout status deployment/web
expect "rollout status of a new image" 'successfully rolled out'
k get pods -l app=web -o jsonpath='{range .items[*]}{.spec.containers[0].image}{"\n"}{end}'
is "every pod runs the new image" "$(printf 'hello-wasm:v2\nhello-wasm:v2\nhello-wasm:v2')"
k rollout history deployment/web --revision=3
expect "rollout history --revision" 'hello-wasm:v2'
k rollout undo deployment/web
expect "rollout undo" "^deployment.apps/web rolled back$"
kt "$T" rollout status deployment/web
expect "rollout status after undo" 'successfully rolled out'
k get deployment web -o jsonpath='{.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\.kubernetes\.io/revision}'
is "undo restored the previous template as revision 4" "hello-wasm:v1 4"
k rollout restart deployment/web
expect "rollout restart" "^deployment.apps/web restarted$"
k get deployment web -o jsonpath='{.spec.template.metadata.annotations.kubectl\.kubernetes\.io/restartedAt}'
expect "rollout restart sets restartedAt" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T'
kt "$T" rollout status deployment/web
expect "rollout status after restart" 'successfully rolled out'
eventually "old pods are gone after the restart" "$T" 3 get pods -l app=web -o go-template='{{len .items}}'
k rollout pause deployment/web
expect "rollout pause" "^deployment.apps/web paused$"
k rollout resume deployment/web
expect "rollout resume" "^deployment.apps/web resumed$"

# --- explain --------------------------------------------------------------
k explain pods
expect "explain a kind" '^KIND: +Pod$' '^VERSION: +v1$' '^DESCRIPTION:' '^FIELDS:' '^  spec\b'
k explain deployment.spec.template.spec.containers.readinessProbe.httpGet.port
expect "explain a deep path" '^KIND: +Deployment$' '(FIELD|RESOURCE): +port <' 'DESCRIPTION:'
k explain configmap.data
expect "explain a map field" '^KIND: +ConfigMap$' '(FIELD|RESOURCE): +data <map\[string\]string>'
k explain pods.spec.containers --recursive
expect "explain --recursive" '^KIND: +Pod$' '^ +livenessProbe\b' '^ +httpGet\b'

# --- cordon, drain, uncordon ----------------------------------------------
k cordon "$NODE"
expect "cordon" "^node/$NODE cordoned$"
k get node "$NODE"
expect "a cordoned node is SchedulingDisabled" "^$NODE +Ready,SchedulingDisabled "
k uncordon "$NODE"
expect "uncordon" "^node/$NODE uncordoned$"
k get node "$NODE" -o jsonpath='{.spec.unschedulable}'
is "an uncordoned node is schedulable" ""
sed -e "s/@NODE@/$NODE/" -e "s/@TAINT_VALUE@/$TAINT_VALUE/" "$TD/drain.yaml.in" >"$tmp/drain.yaml"
k apply -f "$tmp/drain.yaml"
expect "apply the drain deployment" "^deployment.apps/drainme created$"
kt "$T" rollout status deployment/drainme
expect "rollout status of the drain deployment" 'successfully rolled out'
k get pods -l app=drainme -o jsonpath='{.items[*].spec.nodeName}'
is "the drain pod runs on the drained node" "$NODE"
kt "$T" drain "$NODE"
expect "drain evicts" "^node/$NODE cordoned$" "^evicting pod $NS/drainme-" "^pod/drainme-[a-z0-9-]+ evicted$" "^node/$NODE drained$"
k get pods --field-selector "spec.nodeName=$NODE" -o name
is "drain leaves no pod on the node" ""
eventually "the drained pod's replacement waits (Pending)" "$T" Pending get pods -l app=drainme -o jsonpath='{.items[*].status.phase}'
k uncordon "$NODE"
expect "uncordon the drained node" "^node/$NODE uncordoned$"
kt "$T" rollout status deployment/drainme
expect "the replacement runs once uncordoned" 'successfully rolled out'

# --- a PodDisruptionBudget guards the drain ---------------------------------
k create poddisruptionbudget drainme --selector=app=drainme --min-available=1
expect "create poddisruptionbudget" "^poddisruptionbudget.policy/drainme created$"
eventually "the disruption controller fills the budget's status" "$T" "1 1 0" get pdb drainme -o jsonpath='{.status.currentHealthy} {.status.desiredHealthy} {.status.disruptionsAllowed}'
kt 15 drain "$NODE"
refused "drain does not evict below the budget" "^node/$NODE cordoned$" "disruption budget"
k get pods -l app=drainme -o jsonpath='{.items[*].spec.nodeName} {.items[*].status.phase}'
is "the guarded pod keeps running" "$NODE Running"
k patch pdb drainme --type=merge -p '{"spec":{"minAvailable":0}}'
expect "patch the budget" "^poddisruptionbudget.policy/drainme patched$"
eventually "the budget allows one disruption" "$T" "1" get pdb drainme -o jsonpath='{.status.disruptionsAllowed}'
kt "$T" drain "$NODE"
expect "drain evicts once the budget allows it" "^evicting pod $NS/drainme-" "^pod/drainme-[a-z0-9-]+ evicted$" "^node/$NODE drained$"
k uncordon "$NODE"
expect "uncordon after the guarded drain" "^node/$NODE uncordoned$"

# --- delete with each cascade ---------------------------------------------
kt "$T" wait --for=condition=Available deployment -l group=cascade
expect "wait for several deployments" "^deployment.apps/casc-background condition met$" "^deployment.apps/casc-foreground condition met$" "^deployment.apps/casc-orphan condition met$"
kt "$T" delete deployment casc-background --cascade=background
expect "delete --cascade=background" '^deployment.apps "casc-background" deleted'
eventually "background deletion removes the replicaset and pods" "$T" "" get replicasets,pods -l app=casc-background -o name
kt "$T" delete deployment casc-foreground --cascade=foreground
expect "delete --cascade=foreground" '^deployment.apps "casc-foreground" deleted'
k get replicasets,pods -l app=casc-foreground -o name
is "foreground deletion removed the dependents first" ""
kt "$T" delete deployment casc-orphan --cascade=orphan
expect "delete --cascade=orphan" '^deployment.apps "casc-orphan" deleted'
k get replicasets -l app=casc-orphan -o jsonpath='{range .items[*]}{.metadata.name} owners={.metadata.ownerReferences}{end}'
expect "orphan deletion keeps the replicaset, without its owner" '^casc-orphan-[a-z0-9]+ owners=$'
k get pods -l app=casc-orphan -o jsonpath='{.items[*].status.phase}'
is "orphan deletion keeps the pods running" "Running"
k delete replicasets -l app=casc-orphan
expect "delete the orphaned replicaset" 'deleted'
eventually "its pods go with it" "$T" "" get pods -l app=casc-orphan -o name

# --- the end --------------------------------------------------------------
kt "$T" delete namespace "$NS"
expect "delete namespace waits for its contents" "^namespace \"$NS\" deleted"
k get namespace "$NS"
refused "the namespace is gone" 'NotFound|not found'

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
