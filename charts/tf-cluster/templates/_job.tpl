{{/*
The Indexed Job every role shares: the Job wrapper (name, labels, the mutable
deadlines) around "tf-cluster.jobRunSpec" (below). The pod it runs is _pod.tpl's. The per-role files
(chief-job.yaml, worker-job.yaml, ps-job.yaml, evaluator-job.yaml) only call it.
Usage: include "tf-cluster.job" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-cluster.job" -}}
{{- if not (and (hasKey . "context") (hasKey . "role")) -}}
{{- fail "tf-cluster.job: pass (dict \"context\" $ \"role\" ROLE)" -}}
{{- end -}}
{{- $ctx := .context -}}
{{- $roleName := .role -}}
{{- $replicas := int (include "tf-cluster.jobReplicas" .) -}}
{{- if gt $replicas 0 -}}
{{- $policy := include "tf-cluster.jobPolicy" . | fromJson -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ include "tf-cluster.jobName" . }}
  labels:
    {{- include "tf-cluster.componentLabels" (dict "context" $ctx "component" $roleName) | nindent 4 }}
    {{- with $ctx.Values.scheduling.kueueQueue }}
    kueue.x-k8s.io/queue-name: {{ . | quote }}
    {{- end }}
  {{- with $policy.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- include "tf-cluster.jobRunSpec" (dict "context" $ctx "role" $roleName "policy" $policy) | nindent 2 }}
  {{- /* Mutable fields: changing them keeps the run (and patches the running Job). */}}
  {{- if not (kindIs "invalid" $policy.activeDeadlineSeconds) }}
  activeDeadlineSeconds: {{ int64 $policy.activeDeadlineSeconds }}
  {{- end }}
  {{- if not (kindIs "invalid" $policy.ttlSecondsAfterFinished) }}
  ttlSecondsAfterFinished: {{ int $policy.ttlSecondsAfterFinished }}
  {{- end }}
{{- end -}}
{{- end -}}

{{/*
What a role's Job runs: the Job spec fields Kubernetes will not change on a live Job
(completions, restart and failure policy) and the pod template. Its rendering is
what the run hash (_helpers.tpl "tf-cluster.runHash") covers.
Usage: include "tf-cluster.jobRunSpec" (dict "context" $ "role" "worker" "policy" $policy)
*/}}
{{- define "tf-cluster.jobRunSpec" -}}
{{- $policy := .policy -}}
completionMode: Indexed
completions: {{ include "tf-cluster.replicas" . }}
parallelism: {{ include "tf-cluster.replicas" . }}
backoffLimitPerIndex: {{ int $policy.backoffLimitPerIndex }}
{{- if not (kindIs "invalid" $policy.maxFailedIndexes) }}
maxFailedIndexes: {{ int $policy.maxFailedIndexes }}
{{- end }}
podReplacementPolicy: Failed
{{- if and (include "tf-cluster.stopsWithLeader" .) (include "tf-cluster.gang" .context) (semverCompare ">=1.33-0" .context.Capabilities.KubeVersion.Version) }}
# A server role ends with the run: once one task was stopped because the leading Job completed,
# this Job is done. A replacement created after the gang's other tasks finished (a late eviction)
# could never be placed (its gang cannot form again); the Job removes it instead of waiting forever.
successPolicy:
  rules:
    - succeededCount: 1
{{- end }}
podFailurePolicy:
  rules:
    # A pod evicted or preempted (node drain, spot reclaim) is retried without counting.
    - action: Ignore
      onPodConditions:
        - type: DisruptionTarget
          status: "True"
    {{- if include "tf-cluster.restartsUncounted" (dict "context" .context "role" .role) }}
    # The launcher restarts its task (exit 6) to reconnect to a peer replaced after its node was lost
    # (the ParameterServer coordinator to a worker or ps; a MultiWorkerMirrored task to a new leader),
    # or when its self-fence stops it (nodeLoss.selfFenceSeconds): retried without counting, as an
    # eviction (it is not this task's failure).
    - action: Ignore
      onExitCodes:
        containerName: tensorflow
        operator: In
        values: [6]
    {{- end }}
    {{- with $policy.restartExitCodes }}
    # Exit codes that ask for a restart (TensorFlow's PreemptionCheckpointHandler exits 42 after
    # saving at a peer's preemption): the task is replaced without counting.
    - action: Ignore
      onExitCodes:
        containerName: tensorflow
        operator: In
        values: {{ toJson . }}
    {{- end }}
    {{- with $policy.nonRetryableExitCodes }}
    # Exit codes that mean "retrying will not help" fail the whole Job at once.
    - action: FailJob
      onExitCodes:
        containerName: tensorflow
        operator: In
        values: {{ toJson . }}
    {{- end }}
template:
  {{- include "tf-cluster.podTemplate" (dict "context" .context "role" .role "policy" $policy) | nindent 2 }}
{{- end -}}

{{/*
A role's Job policy, as JSON: `job` with `jobPolicies.<role>` laid over it key by
key (sprig's merge would drop a role's 0, e.g. backoffLimitPerIndex: 0).
*/}}
{{- define "tf-cluster.jobPolicy" -}}
{{- $policy := deepCopy .context.Values.job -}}
{{- range $k, $val := (default dict (get .context.Values.jobPolicies .role)) -}}
{{- $_ := set $policy $k $val -}}
{{- end -}}
{{- toJson $policy -}}
{{- end -}}
