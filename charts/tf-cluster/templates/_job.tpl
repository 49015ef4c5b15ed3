{{/*
The Indexed Job every role shares. The per-role files (chief-job.yaml,
worker-job.yaml, ps-job.yaml, evaluator-job.yaml) only call it.
Usage: include "tf-cluster.job" (dict "context" $ "role" "worker")
*/}}
{{- define "tf-cluster.job" -}}
{{- if not (and (hasKey . "context") (hasKey . "role")) -}}
{{- fail "tf-cluster.job: pass (dict \"context\" $ \"role\" ROLE)" -}}
{{- end -}}
{{- $ctx := .context -}}
{{- $v := $ctx.Values -}}
{{- $roleName := .role -}}
{{- $role := index $v.roles $roleName -}}
{{- $replicas := int $role.replicas -}}
{{- if gt $replicas 0 -}}
{{- $fullname := include "tf-cluster.fullname" $ctx -}}
{{- $jobName := include "tf-cluster.jobName" (dict "context" $ctx "role" $roleName) -}}
{{- /* Overlay key by key: sprig's merge would drop a role's 0 (e.g. backoffLimitPerIndex: 0). */ -}}
{{- $policy := deepCopy $v.job -}}
{{- range $k, $val := (default dict (get $v.jobPolicies $roleName)) -}}
{{- $_ := set $policy $k $val -}}
{{- end -}}
{{- $stops := include "tf-cluster.stopsWithLeader" (dict "context" $ctx "role" $roleName) -}}
{{- $image := merge (deepCopy (default dict $role.image)) (deepCopy $v.image) -}}
{{- $tag := default (printf "%s-cpu" $ctx.Chart.AppVersion) $image.tag -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ $jobName }}
  labels:
    {{- include "tf-cluster.componentLabels" (dict "context" $ctx "component" $roleName) | nindent 4 }}
  {{- with $policy.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  completionMode: Indexed
  completions: {{ $replicas }}
  parallelism: {{ $replicas }}
  backoffLimitPerIndex: {{ int $policy.backoffLimitPerIndex }}
  {{- if not (kindIs "invalid" $policy.maxFailedIndexes) }}
  maxFailedIndexes: {{ int $policy.maxFailedIndexes }}
  {{- end }}
  podReplacementPolicy: Failed
  podFailurePolicy:
    rules:
      # A pod evicted or preempted (node drain, spot reclaim) is retried without counting.
      - action: Ignore
        onPodConditions:
          - type: DisruptionTarget
            status: "True"
      {{- with $policy.nonRetryableExitCodes }}
      # Exit codes that mean "retrying will not help" fail the whole Job at once.
      - action: FailJob
        onExitCodes:
          containerName: tensorflow
          operator: In
          values: {{ toJson . }}
      {{- end }}
  {{- if not (kindIs "invalid" $policy.activeDeadlineSeconds) }}
  activeDeadlineSeconds: {{ int64 $policy.activeDeadlineSeconds }}
  {{- end }}
  {{- if not (kindIs "invalid" $policy.ttlSecondsAfterFinished) }}
  ttlSecondsAfterFinished: {{ int $policy.ttlSecondsAfterFinished }}
  {{- end }}
  template:
    metadata:
      labels:
        {{- include "tf-cluster.componentSelectorLabels" (dict "context" $ctx "component" $roleName) | nindent 8 }}
        tf-cluster.io/run: {{ default "none" (include "tf-cluster.runSuffix" $ctx) | quote }}
        {{- with $role.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        checksum/launcher: {{ $ctx.Files.Get "files/launcher.py" | sha256sum | trunc 16 }}
        {{- with (merge (deepCopy (default dict $role.podAnnotations)) (deepCopy (default dict $v.podAnnotations))) }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      subdomain: {{ $fullname }}
      restartPolicy: Never
      serviceAccountName: {{ include "tf-cluster.serviceAccountName" $ctx }}
      automountServiceAccountToken: {{ if $stops }}true{{ else }}false{{ end }}
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ int $policy.terminationGracePeriodSeconds }}
      {{- with $role.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $role.schedulerName }}
      schedulerName: {{ . }}
      {{- end }}
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $v.podSecurityContext | nindent 8 }}
      {{- with $role.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $role.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $role.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $role.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: tensorflow
          image: "{{ $image.repository }}:{{ $tag }}"
          imagePullPolicy: {{ $image.pullPolicy }}
          command:
            - {{ $v.launcher.python }}
            - /opt/tf-cluster/launcher/launcher.py
            - --
            {{- toYaml (default $v.command $role.command) | nindent 12 }}
          {{- $args := default $v.args $role.args -}}
          {{- if $v.legacyTF1.flags }}
          {{- $args = concat $args (include "tf-cluster.legacyFlags" (dict "context" $ctx "role" $roleName) | fromJsonArray) }}
          {{- end }}
          {{- with $args }}
          args:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          env:
            {{- include "tf-cluster.env" (dict "context" $ctx "role" $roleName) | nindent 12 }}
          {{- with (concat (default list $v.envFrom) (default list $role.envFrom)) }}
          envFrom:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- if ne $roleName "evaluator" }}
          ports:
            - name: tf
              containerPort: {{ $v.port }}
              protocol: TCP
          {{- end }}
          {{- $resources := deepCopy (default dict $role.resources) -}}
          {{- with $role.gpus }}
          {{- $_ := set $resources "limits" (merge (default dict $resources.limits) .) }}
          {{- $_ := set $resources "requests" (merge (default dict $resources.requests) .) }}
          {{- end }}
          {{- with $resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "tf-cluster.volumeMounts" $ctx | nindent 12 }}
      volumes:
        {{- include "tf-cluster.volumes" $ctx | nindent 8 }}
{{- end -}}
{{- end -}}

{{/* The container's environment. Names a user sets in env replace the chart's (no duplicate keys: Helm 4 rejects them). */}}
{{- define "tf-cluster.env" -}}
{{- $ctx := .context -}}
{{- $v := $ctx.Values -}}
{{- $roleName := .role -}}
{{- $role := index $v.roles $roleName -}}
{{- $userEnv := concat (default list $v.env) (default list $role.env) -}}
{{- $userNames := dict -}}
{{- range $userEnv -}}{{- $_ := set $userNames .name true -}}{{- end -}}
{{- $leader := include "tf-cluster.leaderRole" $ctx -}}
{{- $ckpt := $v.storage.checkpoints.mountPath -}}
{{- $env := list
  (dict "name" "TF_TASK_INDEX" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.annotations['batch.kubernetes.io/job-completion-index']")))
  (dict "name" "TF_CLUSTER_ROLE" "value" $roleName)
  (dict "name" "TF_CLUSTER_NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))
  (dict "name" "TF_CLUSTER_LEADER_JOB" "value" (include "tf-cluster.jobName" (dict "context" $ctx "role" $leader)))
  (dict "name" "TF_CLUSTER_STOP_WITH_LEADER" "value" (ternary "true" "false" (eq (include "tf-cluster.stopsWithLeader" .) "true")))
  (dict "name" "TF_CLUSTER_WAIT_FOR_PEERS" "value" (ternary "false" "true" (eq $roleName "evaluator")))
  (dict "name" "TF_CLUSTER_PEER_TIMEOUT" "value" (toString $v.launcher.peerTimeoutSeconds))
  (dict "name" "TF_CLUSTER_POLL_SECONDS" "value" (toString $v.launcher.pollSeconds))
  (dict "name" "TF_CLUSTER_STOP_GRACE" "value" (toString $v.launcher.stopGraceSeconds))
  (dict "name" "TF_CLUSTER_STRATEGY" "value" $v.strategy)
  (dict "name" "TF_USE_LEGACY_KERAS" "value" "1")
  (dict "name" "PYTHONUNBUFFERED" "value" "1")
  (dict "name" "HOME" "value" "/tmp")
-}}
{{- if include "tf-cluster.setsTfConfig" . -}}
{{- $env = append $env (dict "name" "TF_CONFIG" "value" (include "tf-cluster.tfConfig" .)) -}}
{{- end -}}
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
{{- if $v.threads.fromCpuLimit -}}
{{- /* TF_NUM_INTEROP_THREADS is set by the launcher to max(2, intra-op): 1 deadlocks ParameterServer fit (measured, TF 2.21). */ -}}
{{- range $name := list "TF_NUM_INTRAOP_THREADS" "OMP_NUM_THREADS" -}}
{{- $env = append $env (dict "name" $name "valueFrom" (dict "resourceFieldRef" (dict "containerName" "tensorflow" "resource" "limits.cpu" "divisor" "1"))) -}}
{{- end -}}
{{- end -}}
{{- if $v.legacyTF1.env -}}
{{- $env = concat $env (list
  (dict "name" "PS_HOSTS" "value" (include "tf-cluster.hostList" (dict "context" $ctx "role" "ps")))
  (dict "name" "WORKER_HOSTS" "value" (include "tf-cluster.hostList" (dict "context" $ctx "role" "worker")))
  (dict "name" "JOB_NAME" "value" $roleName)
  (dict "name" "TASK_INDEX" "value" "$(TF_TASK_INDEX)")) -}}
{{- if gt (int $v.roles.chief.replicas) 0 -}}
{{- $env = append $env (dict "name" "CHIEF_HOSTS" "value" (include "tf-cluster.hostList" (dict "context" $ctx "role" "chief"))) -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $env -}}
{{- if or (eq .name "TF_TASK_INDEX") (not (hasKey $userNames .name)) -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- /* A role's env wins over the top-level env of the same name. */ -}}
{{- $roleNames := dict -}}
{{- range (default list $role.env) -}}{{- $_ := set $roleNames .name true -}}{{- end -}}
{{- range (default list $v.env) -}}
{{- if not (hasKey $roleNames .name) -}}{{- $out = append $out . -}}{{- end -}}
{{- end -}}
{{- $out = concat $out (default list $role.env) -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Legacy TF1 between-graph flags, as a JSON list. */}}
{{- define "tf-cluster.legacyFlags" -}}
{{- $ctx := .context -}}
{{- $flags := list
  (printf "--ps_hosts=%s" (include "tf-cluster.hostList" (dict "context" $ctx "role" "ps")))
  (printf "--worker_hosts=%s" (include "tf-cluster.hostList" (dict "context" $ctx "role" "worker")))
  (printf "--job_name=%s" .role)
  "--task_index=$(TF_TASK_INDEX)" -}}
{{- toJson $flags -}}
{{- end -}}

{{/* Mounts shared by training pods. */}}
{{- define "tf-cluster.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: launcher
  mountPath: /opt/tf-cluster/launcher
  readOnly: true
{{- range $vol := list "data" "checkpoints" "logs" }}
{{- $cfg := index $.Values.storage $vol }}
{{- if ne $cfg.type "none" }}
- name: {{ $vol }}
  mountPath: {{ $cfg.mountPath }}
  {{- if $cfg.readOnly }}
  readOnly: true
  {{- end }}
{{- end }}
{{- end }}
{{- if or .Values.code.files .Values.code.existingConfigMap }}
- name: code
  mountPath: {{ .Values.code.mountPath }}
  readOnly: true
{{- end }}
{{- if .Values.shmSize }}
- name: dshm
  mountPath: /dev/shm
{{- end }}
{{- end -}}

{{/* Volumes shared by training pods. */}}
{{- define "tf-cluster.volumes" -}}
{{- $fullname := include "tf-cluster.fullname" . -}}
- name: tmp
  emptyDir: {}
- name: launcher
  configMap:
    name: {{ $fullname }}-launcher
{{- range $vol := list "data" "checkpoints" "logs" }}
{{- $cfg := index $.Values.storage $vol }}
{{- if eq $cfg.type "emptyDir" }}
- name: {{ $vol }}
  emptyDir: {}
{{- else if eq $cfg.type "pvc" }}
- name: {{ $vol }}
  persistentVolumeClaim:
    claimName: {{ $fullname }}-{{ $vol }}
{{- else if eq $cfg.type "existingClaim" }}
- name: {{ $vol }}
  persistentVolumeClaim:
    claimName: {{ $cfg.existingClaim }}
{{- end }}
{{- end }}
{{- if .Values.code.files }}
- name: code
  configMap:
    name: {{ $fullname }}-code
{{- else if .Values.code.existingConfigMap }}
- name: code
  configMap:
    name: {{ .Values.code.existingConfigMap }}
{{- end }}
{{- if .Values.shmSize }}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.shmSize }}
{{- end }}
{{- end -}}
