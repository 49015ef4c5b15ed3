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

The task index is not known at render time: the pod defines TF_TASK_INDEX from
the `batch.kubernetes.io/job-completion-index` annotation first, and TF_CONFIG
refers to it as $(TF_TASK_INDEX) (Kubernetes dependent environment variables).
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

{{/* TF_CONFIG of one role's pods, with the index left as $(TF_TASK_INDEX). */}}
{{- define "tf-cluster.tfConfig" -}}
{{- printf "{\"cluster\":%s,\"task\":{\"type\":%s,\"index\":$(TF_TASK_INDEX)}}" (include "tf-cluster.clusterSpec" .context) (toJson .role) -}}
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
{{- fail (printf "TF_CONFIG for %s training tasks would be %d bytes, over Linux's %d-byte limit for one environment variable. Every task address is <fullname>-<role>-<run>-<index>.<fullname>:<port>: set fullnameOverride to a short name (now %q), set run.suffix to none or a short string, keep tfConfig.fullyQualified false, or reduce roles.*.replicas" $tasks $bytes $limit (include "tf-cluster.fullname" .)) -}}
{{- end -}}
{{- end -}}

{{/* Comma-joined host:port list of a role, for legacy TF1 flags/env. */}}
{{- define "tf-cluster.hostList" -}}
{{- include "tf-cluster.roleAddresses" . | fromJsonArray | join "," -}}
{{- end -}}
