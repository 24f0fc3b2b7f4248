#!/usr/bin/env bash
# `make run`: start orca on this machine and deploy examples/hello-wasm
# and, where containerd can run, examples/hello-container.
#
# Starts orca-server (embedded NATS on 127.0.0.1:4222, apiserver on
# 127.0.0.1:6443) and one orca-agent, with all data under $RUNDIR
# (default .run/, git-ignored, emptied first unless ORCA_KEEP_STATE=1),
# pushes the example's WASM module, applies its Deployment and Service, waits until the 3 pods are Ready, fetches a
# response through the service proxy (NodePort 30080) and prints where to
# look. Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNDIR=${RUNDIR:-.run}
API=127.0.0.1:6443
NATS=127.0.0.1:4222
NODEPORT=30080
CNODEPORT=30081
SERVER="https://$API"
# orca-server writes the admin kubeconfig (client certificate of
# system:admin, the cluster CA) here; every bin/orca and kubectl uses it.
export KUBECONFIG="$PWD/$RUNDIR/kubeconfig"
t_make=$(date +%s%N)
t0=$t_make
ms() { echo $(( ($(date +%s%N) - t0) / 1000000 )); }

port_in_use() { (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; }
busy=()
for addr in "$API" "$NATS" "127.0.0.1:$NODEPORT" "127.0.0.1:$CNODEPORT"; do
  port_in_use "$addr" && busy+=("$addr")
done
if [ ${#busy[@]} -gt 0 ]; then
  echo "make run: ${busy[*]} already in use (another 'make run' or program?). Stop it and try again." >&2
  exit 1
fi

mkdir -p "$RUNDIR"
# Container pods need containerd and runc (and the CNI plugins for their
# own pod IPs), and root for the agent's own containerd. As root on a
# machine without them, install them (one line says so); otherwise run
# WASM only and say what enables containers.
containers=1
pkgs=()
command -v containerd >/dev/null 2>&1 || pkgs+=(containerd)
command -v runc >/dev/null 2>&1 || pkgs+=(runc)
[ -x /usr/lib/cni/bridge ] || pkgs+=(containernetworking-plugins)
if [ "$(id -u)" != 0 ]; then
  containers=0
  if [ ${#pkgs[@]} -gt 0 ]; then
    echo "make run: containerd is not set up, so this run has WASM pods only; to run containers too: sudo apt-get install -y containerd runc containernetworking-plugins && sudo make run"
  else
    echo "make run: the agent's containerd needs root, so this run has WASM pods only; to run containers too: sudo make run"
  fi
elif [ ${#pkgs[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "make run: installing ${pkgs[*]} for container pods (apt-get install -y ${pkgs[*]})..."
    if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >"$RUNDIR/apt.log" 2>&1 ||
           { apt-get update -qq >>"$RUNDIR/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >>"$RUNDIR/apt.log" 2>&1; }; }; then
      echo "make run: could not install them (see $RUNDIR/apt.log)" >&2
    fi
  fi
  if ! command -v containerd >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    containers=0
    echo "make run: no containerd, so this run has WASM pods only; to run containers too: apt-get install -y containerd runc containernetworking-plugins"
  fi
fi

${MAKE:-make} --no-print-directory build
t0=$(date +%s%N)
mkdir -p "$RUNDIR"
for f in server agent; do # keep the previous run's logs
  [ -f "$RUNDIR/$f.log" ] && mv "$RUNDIR/$f.log" "$RUNDIR/$f.log.1"
done
# killall_containers ends every container of this run's containerd (its
# shims serve a socket under $RUNDIR/agent), as k3s-killall.sh does, removes
# their cgroups and unmounts their root filesystems, and prints how many it
# ended. The pod network's namespaces stay mounted: the next agent releases
# their addresses and masquerade rules (CNI DEL) when it finds them.
killall_containers() {
  local n=0 shim id cg
  for shim in $(pgrep -f "containerd-shim-runc-v2 .*-address $(pwd -P)/$RUNDIR/agent/" || true); do
    id=$(tr '\0' ' ' <"/proc/$shim/cmdline" 2>/dev/null | grep -o -- '-id [^ ]*' | cut -d' ' -f2)
    pkill -KILL -P "$shim" 2>/dev/null || true
    kill -KILL "$shim" 2>/dev/null || true
    n=$((n + 1))
    for cg in /sys/fs/cgroup/*/orca/"$id" /sys/fs/cgroup/orca/"$id"; do
      [ -n "$id" ] && [ -d "$cg" ] || continue
      for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
    done
  done
  grep -o " $(pwd -P)/$RUNDIR/agent/[^ ]*" /proc/mounts 2>/dev/null | grep -v "/$RUNDIR/agent/podnet/" | sort -r | xargs -r umount -l 2>/dev/null || true
  echo "$n"
}

# Each run starts from an empty cluster, so the demo is the same every
# time; ORCA_KEEP_STATE=1 keeps the previous run's cluster state instead.
if [ "${ORCA_KEEP_STATE:-0}" != 1 ]; then
  # A run that was killed may leave containers (their shims serve the old
  # containerd's socket), pod network namespaces and container mounts
  # under the agent's directory: end and unmount them first.
  killall_containers >/dev/null
  # The pod network's state (agent/podnet) stays, its namespaces mounted:
  # the new agent releases the old pods' addresses, veths and masquerade
  # rules (CNI DEL) when it starts and finds their pods gone.
  rm -rf "$RUNDIR/server"
  [ -d "$RUNDIR/agent" ] && find "$RUNDIR/agent" -mindepth 1 -maxdepth 1 ! -name podnet -exec rm -rf {} +
fi
pids=()
containers_applied=0
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "stopping orca (logs stay in $RUNDIR/*.log; the previous run's in *.log.1)..."
  # Containers outlive their agent (as a kubelet's do): delete the
  # example's first, so that none keeps running after make run.
  if [ "$containers_applied" = 1 ]; then
    bin/orca delete -f examples/hello-container/app.yaml --wait 60s >/dev/null 2>&1 ||
      echo "could not delete the container example; its containers may still run (see $RUNDIR/agent.log)" >&2
  fi
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # Containers of pods you created outlive the agent too. The next run
  # starts from an empty cluster, so end them now, unless the state is
  # kept (ORCA_KEEP_STATE=1): then the next agent adopts them.
  if [ "${ORCA_KEEP_STATE:-0}" != 1 ]; then
    n=$(killall_containers)
    [ "$n" -gt 0 ] && echo "ended $n container(s) of pods created during this run"
  fi
  exit "${1:-0}"
}
trap 'cleanup $?' EXIT
trap 'cleanup 0' INT TERM

# Components run in their own sessions (setsid): Ctrl-C reaches only this
# script, whose trap stops them in order; if one dies by itself, `wait -n`
# below notices.
rm -f "$KUBECONFIG"
setsid bin/orca-server --data-dir "$RUNDIR/server" --nats-listen "$NATS" --apiserver-addr "$API" --write-kubeconfig "$KUBECONFIG" >"$RUNDIR/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 150); do [ -s "$KUBECONFIG" ] && break; sleep 0.2; done
bin/orca wait --server-ready --timeout 30s >/dev/null || { echo "orca-server did not start; see $RUNDIR/server.log:" >&2; tail -20 "$RUNDIR/server.log" >&2; exit 1; }
echo "orca-server ready after $(ms) ms: apiserver $SERVER, NATS nats://$NATS"

ctrflag=--containerd=true
[ "$containers" = 1 ] || ctrflag=--containerd=false
# The agent joins as a remote node would: a bootstrap token and the CA's
# pin (orca token create), then its node certificate and its own NATS
# credentials (node permissions), kept under $RUNDIR/agent.
join=$(bin/orca token create --print-join-command)
read -r _ joinflags <<<"$join"
# shellcheck disable=SC2086 # the join line's flags, word-split on purpose
setsid bin/orca-agent $joinflags --node-name "${ORCA_NODE_NAME:-edge-1}" --data-dir "$RUNDIR/agent" "$ctrflag" >"$RUNDIR/agent.log" 2>&1 &
pids+=($!)

bin/orca wasm push bin/hello.wasm --name hello-wasm:v1
if [ "$containers" = 1 ]; then
  bin/orca image push bin/hello-container.tar
fi
t_apply=$(date +%s%N)
bin/orca apply -f examples/hello-wasm/app.yaml
if [ "$containers" = 1 ]; then
  containers_applied=1
  bin/orca apply -f examples/hello-container/app.yaml
fi
bin/orca wait -l app=hello-wasm --count 3 --timeout 3m
echo "3 WASM pods Ready $(( ($(date +%s%N) - t_apply) / 1000000 )) ms after apply"
if [ "$containers" = 1 ]; then
  bin/orca wait -l app=hello-container --count 2 --timeout 3m ||
    { echo "the container pods did not become Ready; see $RUNDIR/agent.log and $RUNDIR/agent/containerd/containerd.log" >&2; exit 1; }
  echo "2 container pods Ready $(( ($(date +%s%N) - t_apply) / 1000000 )) ms after apply"
fi

fetch() { # GET http://127.0.0.1:$1/ with bash alone (no curl needed)
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  sed -e '1,/^\r\{0,1\}$/d' <&3
  exec 3<&-
}
answer() { # the first non-empty answer of http://127.0.0.1:$1/ within 10 s
  local r=""
  for _ in $(seq 1 50); do
    r=$(fetch "$1" 2>/dev/null || true)
    [ -n "$r" ] && break
    sleep 0.2
  done
  printf '%s' "$r"
}
resp=$(answer "$NODEPORT")
[ -n "$resp" ] || { echo "no answer through the service proxy on 127.0.0.1:$NODEPORT; see $RUNDIR/agent.log" >&2; exit 1; }
cresp=""
if [ "$containers" = 1 ]; then
  cresp=$(answer "$CNODEPORT")
  [ -n "$cresp" ] || { echo "no answer from the container Service on 127.0.0.1:$CNODEPORT; see $RUNDIR/agent.log" >&2; exit 1; }
fi


cat <<MSG

== orca is running: first response $(( ($(date +%s%N) - t_make) / 1000000 )) ms after 'make run' began, $(ms) ms after the build ==
Response from a WASM pod through the service proxy (http://127.0.0.1:$NODEPORT):
  $resp
$(if [ "$containers" = 1 ]; then printf 'Response from a container pod through the service proxy (http://127.0.0.1:%s):\n  %s\n' "$CNODEPORT" "$cresp"; else echo "(No container pods in this run: see the first lines above for what enables them.)"; fi)

Look further:
  export KUBECONFIG=$PWD/$RUNDIR/kubeconfig
  kubectl get pods,deployments,replicasets,services,endpoints,nodes -o wide
  kubectl logs deploy/hello-wasm
$(if [ "$containers" = 1 ]; then printf '  kubectl logs deploy/hello-container\n  kubectl exec -it deploy/hello-container -- sh       # a tiny shell: ls, cat, env, ... (kubectl cp works too)\n'; fi)
  kubectl scale deployment hello-wasm --replicas=5
  for i in 1 2 3; do curl -s http://127.0.0.1:$NODEPORT/; done
  go install github.com/nats-io/natscli/nats@v0.5.0   # the NATS CLI, once
  bin/orca nats creds --read-only -o $RUNDIR/view.creds      # read-only NATS credentials (every bucket but secrets)
  nats --server nats://$NATS --tlsca $RUNDIR/server/tls/ca.crt --creds $RUNDIR/view.creds kv ls pods
  nats --server nats://$NATS --tlsca $RUNDIR/server/tls/ca.crt --creds $RUNDIR/view.creds kv watch pods
Logs: $RUNDIR/server.log, $RUNDIR/agent.log.  Ctrl-C (or kill -TERM $$) stops orca and every container it ran.
MSG
wait -n "${pids[@]}" || true
echo "a component exited by itself; see $RUNDIR/server.log and $RUNDIR/agent.log" >&2
exit 1
