{{/*
The environment contract of a training container: what the launcher reads
(TF_CLUSTER_*), TF_CONFIG, storage paths (incl. Vertex-style AIP_*), threads
from the CPU limit and the legacy TF1 variables, in two parts:
- the run's environment ("tf-cluster.runEnv"): every value the same in every pod
  of the run, stored once in the run's ConfigMap (tfconfig-configmap.yaml) with the
  cluster spec, and given to both containers by `envFrom` (after the user's
  `envFrom`: a key in two sources takes the last one's value, so the chart's wins
  over the user's ConfigMaps as it did inline);
- the pod's own ("tf-cluster.env"): its role, its index and what the downward API
  gives, inline.
A name the user sets in `env` replaces the chart's (inline entries win over
`envFrom`; no duplicate keys: Helm 4 rejects them); a role's `env` wins over the
top-level `env`.
Usage: include "tf-cluster.env" (dict "context" $ "role" "worker" "spec" $role)
       ($role: the role's effective settings, include "tf-cluster.role")
*/}}
{{- define "tf-cluster.env" -}}
{{- $ctx := .context -}}
{{- $v := $ctx.Values -}}
{{- $roleName := .role -}}
{{- $r := dict "context" $ctx "role" $roleName -}}
{{- $traits := include "tf-cluster.traits" $r | fromJson -}}
{{- $env := list
  (dict "name" "TF_TASK_INDEX" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.annotations['batch.kubernetes.io/job-completion-index']")))
  (dict "name" "TF_CLUSTER_ROLE" "value" $roleName)
  (dict "name" "TF_CLUSTER_NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))
  (dict "name" "TF_CLUSTER_POD_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name")))
  (dict "name" "TF_CLUSTER_POD_UID" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.uid")))
  (dict "name" "TF_CLUSTER_STOP_WITH_LEADER" "value" (ternary "true" "false" (eq (include "tf-cluster.stopsWithLeader" $r) "true")))
  (dict "name" "TF_CLUSTER_WAIT_FOR_PEERS" "value" (ternary "true" "false" $traits.waitsForPeers))
-}}
{{- if include "tf-cluster.hasAgent" $r -}}
{{- $env = append $env (dict "name" "TF_CLUSTER_AGENT_DIR" "value" "/opt/tf-cluster/agent") -}}
{{- end -}}
{{- $program := not .chartOnly -}}{{- /* the agent sidecar runs no program: no exit-code rule, no exporter, no threads */ -}}
{{- if and .chartOnly (include "tf-cluster.relaxesGang" $r) -}}
{{- /* the gang the agent lowers to 1 once its task finished (files/tf_cluster_launcher/gang.py), and its API */ -}}
{{- $env = append $env (dict "name" "TF_CLUSTER_POD_GROUP" "value" (include "tf-cluster.podGroupName" $ctx)) -}}
{{- if ne (include "tf-cluster.gang" $ctx) "native" -}}{{- /* the agent's default is Kubernetes' own: its pods stay as they were */ -}}
{{- $env = append $env (dict "name" "TF_CLUSTER_POD_GROUP_API" "value" (include "tf-cluster.podGroupApi" $ctx)) -}}
{{- end -}}
{{- end -}}
{{- if $program -}}
{{- $env = append $env (dict "name" "TF_CLUSTER_RESTARTS" "value" (ternary "true" "false" (eq (include "tf-cluster.restartsUncounted" $r) "true"))) -}}
{{- end -}}
{{- if and $v.metrics.enabled $program -}}
{{- /* the failures of the pod's index before it (the annotation the Job controller sets with backoffLimitPerIndex; empty before the first failure) */ -}}
{{- $env = append $env (dict "name" "TF_CLUSTER_INDEX_FAILURES" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"))) -}}
{{- end -}}
{{- if include "tf-cluster.setsTfConfig" $r -}}
{{- $env = append $env (include "tf-cluster.tfConfigEntry" (dict "role" $roleName "index" "$(TF_TASK_INDEX)") | fromJson) -}}
{{- end -}}
{{- if and $v.threads.fromCpuLimit $program -}}
{{- /* TF_NUM_INTEROP_THREADS is set by the launcher to max(2, intra-op): 1 deadlocks ParameterServer fit (measured, TF 2.21). */ -}}
{{- $res := include "tf-cluster.containerResources" (dict "role" .spec "context" $ctx) | fromJson -}}
{{- $cpu := "limits.cpu" -}}{{- /* without a CPU limit the downward API gives the node's cores */ -}}
{{- if and (not (hasKey (default dict $res.limits) "cpu")) (hasKey (default dict $res.requests) "cpu") -}}
{{- $cpu = "requests.cpu" -}}
{{- end -}}
{{- range $name := list "TF_NUM_INTRAOP_THREADS" "OMP_NUM_THREADS" -}}
{{- $env = append $env (dict "name" $name "valueFrom" (dict "resourceFieldRef" (dict "containerName" "tensorflow" "resource" $cpu "divisor" "1"))) -}}
{{- end -}}
{{- end -}}
{{- if and $v.legacyTF1.env $program -}}
{{- $env = concat $env (list
  (dict "name" "JOB_NAME" "value" $roleName)
  (dict "name" "TASK_INDEX" "value" "$(TF_TASK_INDEX)")) -}}
{{- end -}}
{{- if .chartOnly -}}{{- /* the tf-cluster-agent sidecar: the chart's entries, none of the user's */ -}}
{{- toYaml $env -}}
{{- else -}}
{{- /* the chart's PYTHONPATH, which a user's goes before, is the run's (envFrom): packagesEnv's */ -}}
{{- $merge := dict "chart" $env "shared" (include "tf-cluster.packagesEnv" $ctx | fromJsonArray) "keep" (list "TF_TASK_INDEX") "top" $v.env "own" .spec.env -}}
{{- include "tf-cluster.withUserEnv" $merge | fromJsonArray | toYaml -}}
{{- end -}}
{{- end -}}

{{/* The run's environment, as a JSON list of {name, value}: every entry whose value is the same in
     every pod of the run, whatever its role and index (nothing from the downward API, no `$(...)`:
     `envFrom` values are not expanded). The run's ConfigMap holds it (tfconfig-configmap.yaml),
     with TF_CLUSTER_SPEC, the cluster TF_CONFIG is composed from. */}}
{{- define "tf-cluster.runEnv" -}}
{{- $v := .Values -}}
{{- $env := list
  (dict "name" "TF_CLUSTER_LEADER_JOB" "value" (include "tf-cluster.jobName" (dict "context" . "role" (include "tf-cluster.leaderRole" .))))
  (dict "name" "TF_CLUSTER_PEER_TIMEOUT" "value" (toString $v.launcher.peerTimeoutSeconds))
  (dict "name" "TF_CLUSTER_POLL_SECONDS" "value" (toString $v.launcher.pollSeconds))
  (dict "name" "TF_CLUSTER_STOP_GRACE" "value" (toString $v.launcher.stopGraceSeconds))
  (dict "name" "TF_CLUSTER_FENCE_SECONDS" "value" (ternary (toString $v.nodeLoss.fenceCheckSeconds) "0" (and $v.nodeLoss.fence $v.rbac.create)))
  (dict "name" "TF_CLUSTER_FENCE_AFTER" "value" (toString $v.nodeLoss.fenceAfterSeconds))
  (dict "name" "TF_CLUSTER_SELF_FENCE" "value" (include "tf-cluster.selfFenceSeconds" .))
  (dict "name" "TF_CLUSTER_RELEASE_SELECTOR" "value" (printf "app.kubernetes.io/instance=%s" .Release.Name))
  (dict "name" "TF_CLUSTER_STRATEGY" "value" $v.strategy)
  (dict "name" "TF_USE_LEGACY_KERAS" "value" "1")
  (dict "name" "PYTHONUNBUFFERED" "value" "1")
  (dict "name" "HOME" "value" "/tmp")
-}}
{{- $env = concat $env (include "tf-cluster.coordinatorEnv" . | fromJsonArray) -}}
{{- if $v.metrics.enabled -}}
{{- /* what the launcher's exporter needs (files/launcher.py, 6.): its port and its series' labels (release, run; the role and index it has already) */ -}}
{{- $env = concat $env (list
  (dict "name" "TF_CLUSTER_METRICS_PORT" "value" (toString $v.metrics.port))
  (dict "name" "TF_CLUSTER_RELEASE" "value" .Release.Name)
  (dict "name" "TF_CLUSTER_RUN" "value" (default "none" (include "tf-cluster.runSuffix" .)))) -}}
{{- end -}}
{{- $env = concat $env (include "tf-cluster.storageEnv" . | fromJsonArray) -}}
{{- $env = concat $env (include "tf-cluster.packagesEnv" . | fromJsonArray) -}}
{{- if $v.legacyTF1.env -}}
{{- $env = concat $env (list
  (dict "name" "PS_HOSTS" "value" (include "tf-cluster.hostList" (dict "context" . "role" "ps")))
  (dict "name" "WORKER_HOSTS" "value" (include "tf-cluster.hostList" (dict "context" . "role" "worker")))) -}}
{{- if gt (int (include "tf-cluster.replicas" (dict "context" . "role" "chief"))) 0 -}}
{{- $env = append $env (dict "name" "CHIEF_HOSTS" "value" (include "tf-cluster.hostList" (dict "context" . "role" "chief"))) -}}
{{- end -}}
{{- end -}}
{{- $env = append $env (dict "name" "TF_CLUSTER_SPEC" "value" (include "tf-cluster.clusterSpec" .)) -}}
{{- toJson $env -}}
{{- end -}}

{{/* The run's environment as a pod's `envFrom` source: the run's ConfigMap. */}}
{{- define "tf-cluster.runEnvFrom" -}}
- configMapRef:
    name: {{ include "tf-cluster.clusterSpecName" . }}
{{- end -}}

{{/* The chart's env entries under the user's, as a JSON list (no duplicate names: Helm 4 rejects
     them): the chart's entries whose name the user does not set (those in `keep` always stay), then
     the top-level `env` minus the names `own` sets, then `own` (a role's `env`, `notebook.env`).
     A PYTHONPATH value the user sets goes before the chart's, not instead of it (the packages the
     image lacks, the notebook's launcher module): "<user's>:<chart's>", the chart's found in `chart`
     or in `shared` (the run's environment, given by `envFrom`, which a user's entry overrides).
     Usage: include "tf-cluster.withUserEnv" (dict "chart" LIST "shared" LIST "keep" LIST "top" LIST "own" LIST) */}}
{{- define "tf-cluster.withUserEnv" -}}
{{- $chartPath := "" -}}
{{- range (concat .chart (default list .shared)) -}}{{- if and (eq .name "PYTHONPATH") (hasKey . "value") -}}{{- $chartPath = .value -}}{{- end -}}{{- end -}}
{{- $own := list -}}
{{- range (default list .own) -}}{{- $own = append $own (include "tf-cluster.userPythonPath" (dict "entry" . "chart" $chartPath) | fromJson) -}}{{- end -}}
{{- $top := list -}}
{{- range (default list .top) -}}{{- $top = append $top (include "tf-cluster.userPythonPath" (dict "entry" . "chart" $chartPath) | fromJson) -}}{{- end -}}
{{- $userNames := dict -}}
{{- range (concat $top $own) -}}{{- $_ := set $userNames .name true -}}{{- end -}}
{{- $ownNames := dict -}}
{{- range $own -}}{{- $_ := set $ownNames .name true -}}{{- end -}}
{{- $out := list -}}
{{- range .chart -}}
{{- if or (has .name (default list $.keep)) (not (hasKey $userNames .name)) -}}{{- $out = append $out . -}}{{- end -}}
{{- end -}}
{{- range $top -}}
{{- if not (hasKey $ownNames .name) -}}{{- $out = append $out . -}}{{- end -}}
{{- end -}}
{{- toJson (concat $out $own) -}}
{{- end -}}

{{/* Where the shared volumes and the code are, as a JSON list of env entries (training pods and
     the notebook): DATA_DIR, MODEL_DIR/CHECKPOINT_DIR (+ Vertex's AIP_*), LOG_DIR, CODE_DIR. */}}
{{- define "tf-cluster.storageEnv" -}}
{{- $v := .Values -}}
{{- $ckpt := $v.storage.checkpoints.mountPath -}}
{{- $env := list -}}
{{- if ne $v.storage.data.type "none" -}}
{{- $env = append $env (dict "name" "DATA_DIR" "value" $v.storage.data.mountPath) -}}
{{- end -}}
{{- if ne $v.storage.checkpoints.type "none" -}}
{{- $env = concat $env (list
  (dict "name" "MODEL_DIR" "value" (printf "%s/model" $ckpt))
  (dict "name" "CHECKPOINT_DIR" "value" (printf "%s/checkpoints" $ckpt))
  (dict "name" "AIP_MODEL_DIR" "value" (printf "%s/model" $ckpt))
  (dict "name" "AIP_CHECKPOINT_DIR" "value" (printf "%s/checkpoints" $ckpt))) -}}
{{- end -}}
{{- if ne $v.storage.logs.type "none" -}}
{{- $env = concat $env (list
  (dict "name" "LOG_DIR" "value" $v.storage.logs.mountPath)
  (dict "name" "AIP_TENSORBOARD_LOG_DIR" "value" $v.storage.logs.mountPath)) -}}
{{- end -}}
{{- if or $v.code.files $v.code.existingConfigMap -}}
{{- $env = append $env (dict "name" "CODE_DIR" "value" $v.code.mountPath) -}}
{{- end -}}
{{- toJson $env -}}
{{- end -}}

{{/* With an interactive coordinator (notebook.coordinator), what the servers and the notebook need
     to find its heartbeat (the ConfigMap named like the chief Job) and its time limits; else
     nothing. JSON list. */}}
{{- define "tf-cluster.coordinatorEnv" -}}
{{- $env := list -}}
{{- if include "tf-cluster.coordinatorInNotebook" . -}}
{{- $n := .Values.notebook -}}
{{- $env = list
  (dict "name" "TF_CLUSTER_HEARTBEAT" "value" (include "tf-cluster.jobName" (dict "context" . "role" "chief")))
  (dict "name" "TF_CLUSTER_START_TIMEOUT" "value" (toString $n.startTimeoutSeconds))
  (dict "name" "TF_CLUSTER_HEARTBEAT_TIMEOUT" "value" (toString $n.heartbeatTimeoutSeconds)) -}}
{{- end -}}
{{- toJson $env -}}
{{- end -}}

{{/* Legacy TF1 between-graph flags (TF1's own names: --ps_hosts, --worker_hosts), as a JSON list. */}}
{{- define "tf-cluster.legacyFlags" -}}
{{- $ctx := .context -}}
{{- $flags := list
  (printf "--ps_hosts=%s" (include "tf-cluster.hostList" (dict "context" $ctx "role" "ps")))
  (printf "--worker_hosts=%s" (include "tf-cluster.hostList" (dict "context" $ctx "role" "worker")))
  (printf "--job_name=%s" .role)
  "--task_index=$(TF_TASK_INDEX)" -}}
{{- toJson $flags -}}
{{- end -}}

{{/* One user env entry, as JSON: a PYTHONPATH value with the chart's PYTHONPATH (`chart`) after it. */}}
{{- define "tf-cluster.userPythonPath" -}}
{{- $e := deepCopy .entry -}}
{{- if and (eq $e.name "PYTHONPATH") (hasKey $e "value") .chart -}}
{{- $_ := set $e "value" (ternary .chart (printf "%s:%s" $e.value .chart) (eq (toString $e.value) "")) -}}
{{- end -}}
{{- toJson $e -}}
{{- end -}}
