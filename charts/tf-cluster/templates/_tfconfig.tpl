{{/*
TF_CONFIG — the one place it is computed.

The `cluster` part is the same for every pod of a release: each role with the
`inCluster` trait (files/roles.yaml: chief, worker, ps; never the evaluator, never
master) lists
  <job>-<i>.<fullname>:<port>
for i in 0..replicas-1, i.e. the pod hostname the Indexed Job controller gives
index i, under the headless Service <fullname> (the pods' subdomain). That short
form resolves through the pod's DNS search path; `tfConfig.fullyQualified`
appends .<namespace>.svc.<clusterDomain>.

Stored once per run: the cluster part lives in one immutable ConfigMap named like
the run's Jobs (<fullname>-tf-config[-<run>], key TF_CLUSTER_SPEC,
tfconfig-configmap.yaml, with the rest of the run's environment: _env.tpl), and each
pod composes its TF_CONFIG from it with Kubernetes dependent environment variables,
so a pod carries a reference, not the cluster (O(N) bytes in etcd, not O(N²)):
  envFrom          configMapRef <that ConfigMap>   (TF_CLUSTER_SPEC among its keys)
  TF_CONFIG        {"cluster":$(TF_CLUSTER_SPEC),"task":{"type":<role>,"index":$(TF_TASK_INDEX)}}
A pod outside the Jobs (the notebook, the `helm test` pod) takes TF_CLUSTER_SPEC alone,
by a configMapKeyRef ("tf-cluster.tfConfigEnv"). The kubelet expands TF_CONFIG when
the container starts: the program sees the same TF_CONFIG as when it was inline. The
task index is not known at render time: the pod defines TF_TASK_INDEX from the
`batch.kubernetes.io/job-completion-index` annotation first.
*/}}

{{/* Addresses of one role as a JSON list: <job>-<i>.<fullname>[.<ns>.svc.<domain>]:<port>. */}}
{{- define "tf-cluster.roleAddresses" -}}
{{- $ctx := .context -}}
{{- $job := include "tf-cluster.jobName" (dict "context" $ctx "role" .role) -}}
{{- $domain := include "tf-cluster.fullname" $ctx -}}
{{- if $ctx.Values.tfConfig.fullyQualified -}}
{{- $domain = printf "%s.%s.svc.%s" $domain $ctx.Release.Namespace $ctx.Values.tfConfig.clusterDomain -}}
{{- end -}}
{{- $out := list -}}
{{- range $i := until (int (include "tf-cluster.replicas" .)) -}}
{{- $out = append $out (printf "%s-%d.%s:%v" $job $i $domain $ctx.Values.port) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The cluster spec shared by every pod, as JSON (keys sorted: deterministic). */}}
{{- define "tf-cluster.clusterSpec" -}}
{{- $ctx := . -}}
{{- $spec := dict -}}
{{- range $role := splitList " " (include "tf-cluster.rolesWith" (dict "context" $ctx "trait" "inCluster")) -}}
{{- if gt (int (include "tf-cluster.replicas" (dict "context" $ctx "role" $role))) 0 -}}
{{- $_ := set $spec $role (include "tf-cluster.roleAddresses" (dict "context" $ctx "role" $role) | fromJsonArray) -}}
{{- end -}}
{{- end -}}
{{- toJson $spec -}}
{{- end -}}

{{/* "true" when a role's pods get TF_CONFIG: always in a multi-task cluster; for a
     single training task only with tfConfig.alwaysSet; a role outside the cluster
     (the evaluator) always gets one. */}}
{{- define "tf-cluster.setsTfConfig" -}}
{{- $traits := include "tf-cluster.traits" . | fromJson -}}
{{- if or (not $traits.inCluster) .context.Values.tfConfig.alwaysSet (gt (int (include "tf-cluster.trainingTaskCount" .context)) 1) -}}true{{- end -}}
{{- end -}}

{{/* TF_CONFIG of one role's pods as the program sees it, with the index left as $(TF_TASK_INDEX):
     what the size check measures (the pods compose it, "tf-cluster.tfConfigEntry"). */}}
{{- define "tf-cluster.tfConfig" -}}
{{- printf "{\"cluster\":%s,\"task\":{\"type\":%s,\"index\":$(TF_TASK_INDEX)}}" (include "tf-cluster.clusterSpec" .context) (toJson .role) -}}
{{- end -}}

{{/* The ConfigMap holding the run's cluster spec: named like the run's Jobs, so a new run (a new
     cluster) is a new object and the old one goes with its Jobs. */}}
{{- define "tf-cluster.clusterSpecName" -}}
{{- include "tf-cluster.jobName" (dict "context" . "role" "tf-config") -}}
{{- end -}}

{{/* TF_CONFIG composed from TF_CLUSTER_SPEC (the run's ConfigMap's key, by `envFrom` or
     "tf-cluster.tfConfigEnv"), as one JSON env entry. `index`: "$(TF_TASK_INDEX)" (a Job's pods) or a
     number. Usage: include "tf-cluster.tfConfigEntry" (dict "role" "worker" "index" "$(TF_TASK_INDEX)") */}}
{{- define "tf-cluster.tfConfigEntry" -}}
{{- toJson (dict "name" "TF_CONFIG" "value" (printf "{\"cluster\":$(TF_CLUSTER_SPEC),\"task\":{\"type\":%s,\"index\":%s}}" (toJson .role) (toString .index))) -}}
{{- end -}}

{{/* The env entries that give a container outside the run's Jobs its TF_CONFIG, as a JSON list: the
     cluster from the run's ConfigMap's one key, then TF_CONFIG composed from it.
     Usage: include "tf-cluster.tfConfigEnv" (dict "context" $ "role" "worker" "index" "0") */}}
{{- define "tf-cluster.tfConfigEnv" -}}
{{- $ref := dict "configMapKeyRef" (dict "name" (include "tf-cluster.clusterSpecName" .context) "key" "TF_CLUSTER_SPEC") -}}
{{- toJson (list
  (dict "name" "TF_CLUSTER_SPEC" "valueFrom" $ref)
  (include "tf-cluster.tfConfigEntry" . | fromJson)) -}}
{{- end -}}

{{/*
Linux caps one environment string ("NAME=value\0") at 131072 bytes
(MAX_ARG_STRLEN); past it the container cannot start (E2BIG). Fail at render
time with advice instead. Measured on the evaluator's TF_CONFIG: the longest task
type, with the whole training cluster.
*/}}
{{- define "tf-cluster.tfConfigSizeCheck" -}}
{{- $limit := 131072 -}}
{{- $bytes := add (len (include "tf-cluster.tfConfig" (dict "context" . "role" "evaluator"))) (len "TF_CONFIG=") 1 -}}
{{- if gt $bytes $limit -}}
{{- $tasks := include "tf-cluster.trainingTaskCount" . -}}
{{- /* advise only what can still be shortened */ -}}
{{- $advice := list -}}
{{- $fullname := include "tf-cluster.fullname" . -}}
{{- if gt (len $fullname) 1 -}}
{{- $advice = append $advice (printf "set fullnameOverride to a short name (now %q)" $fullname) -}}
{{- end -}}
{{- $suffix := include "tf-cluster.runSuffix" . -}}
{{- if $suffix -}}
{{- $advice = append $advice (printf "set run.suffix to none or a shorter string (now %q)" $suffix) -}}
{{- end -}}
{{- if .Values.tfConfig.fullyQualified -}}
{{- $advice = append $advice "set tfConfig.fullyQualified to false" -}}
{{- end -}}
{{- $advice = append $advice "reduce roles.*.replicas" -}}
{{- fail (printf "TF_CONFIG for %s training tasks would be %d bytes, over Linux's %d-byte limit for one environment variable. Every task address is <fullname>-<role>-<run>-<index>.<fullname>:<port>: %s" $tasks $bytes $limit (join ", " $advice)) -}}
{{- end -}}
{{- end -}}

{{/* Comma-joined host:port list of a role, for legacy TF1 flags/env. */}}
{{- define "tf-cluster.hostList" -}}
{{- include "tf-cluster.roleAddresses" . | fromJsonArray | join "," -}}
{{- end -}}
