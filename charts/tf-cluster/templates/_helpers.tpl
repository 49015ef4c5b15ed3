{{/*
Names, labels and render-time validation.
TF_CONFIG lives in _tfconfig.tpl, the shared Job in _job.tpl.
*/}}

{{- define "tf-cluster.roles" -}}chief worker ps evaluator{{- end -}}
{{- define "tf-cluster.trainingRoles" -}}chief worker ps{{- end -}}

{{- define "tf-cluster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fullname: also the headless Service name and every pod's subdomain. */}}
{{- define "tf-cluster.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tf-cluster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that never change across chart versions: selectors and Job pod templates. */}}
{{- define "tf-cluster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tf-cluster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object's metadata. */}}
{{- define "tf-cluster.labels" -}}
helm.sh/chart: {{ include "tf-cluster.chart" . }}
{{ include "tf-cluster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tf-cluster
{{- end -}}

{{/*
Component labels. Usage: include "tf-cluster.componentLabels" (dict "context" . "component" "worker")
*/}}
{{- define "tf-cluster.componentLabels" -}}
{{- if not (and (hasKey . "context") (hasKey . "component")) -}}
{{- fail "tf-cluster.componentLabels: pass (dict \"context\" $ \"component\" NAME)" -}}
{{- end -}}
{{ include "tf-cluster.labels" .context }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tf-cluster.componentSelectorLabels" -}}
{{- if not (and (hasKey . "context") (hasKey . "component")) -}}
{{- fail "tf-cluster.componentSelectorLabels: pass (dict \"context\" $ \"component\" NAME)" -}}
{{- end -}}
{{ include "tf-cluster.selectorLabels" .context }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tf-cluster.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tf-cluster.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Run suffix: Jobs are immutable, so a changed job-affecting value must give new
Job names. `auto` hashes every value that reaches a Job plus the chart version
(deterministic: same values, same bytes).
*/}}
{{- define "tf-cluster.runSuffix" -}}
{{- $s := toString .Values.run.suffix -}}
{{- if eq $s "auto" -}}
{{- $affecting := omit .Values "tensorboard" "networkPolicy" "run" "tests" "rbac" "serviceAccount" -}}
{{- printf "%s|%s" .Chart.Version (toJson $affecting) | sha256sum | trunc 6 -}}
{{- else if ne $s "none" -}}
{{- $s -}}
{{- end -}}
{{- end -}}

{{/* Job name of a role: <fullname>-<role>[-<run suffix>]. Usage: include "tf-cluster.jobName" (dict "context" $ "role" "worker") */}}
{{- define "tf-cluster.jobName" -}}
{{- if not (and (hasKey . "context") (hasKey . "role")) -}}
{{- fail "tf-cluster.jobName: pass (dict \"context\" $ \"role\" ROLE)" -}}
{{- end -}}
{{- $suffix := include "tf-cluster.runSuffix" .context -}}
{{- if $suffix -}}
{{- printf "%s-%s-%s" (include "tf-cluster.fullname" .context) .role $suffix -}}
{{- else -}}
{{- printf "%s-%s" (include "tf-cluster.fullname" .context) .role -}}
{{- end -}}
{{- end -}}

{{- define "tf-cluster.replicas" -}}
{{- $role := index .context.Values.roles .role -}}
{{- int (default 0 $role.replicas) -}}
{{- end -}}

{{/* The leading Job: the chief's if there is one, else the workers'. Stopping roles watch it. */}}
{{- define "tf-cluster.leaderRole" -}}
{{- if gt (int .Values.roles.chief.replicas) 0 -}}chief{{- else -}}worker{{- end -}}
{{- end -}}

{{/* "true" when this role's launcher stops it once the leading Job has finished. */}}
{{- define "tf-cluster.stopsWithLeader" -}}
{{- $ctx := .context -}}
{{- $leader := include "tf-cluster.leaderRole" $ctx -}}
{{- if eq .role $leader -}}
{{- else if or (eq .role "ps") (eq .role "evaluator") -}}true
{{- else if and (eq .role "worker") (eq $ctx.Values.strategy "parameterServer") -}}true
{{- end -}}
{{- end -}}

{{/* "true" if any present role stops with the leader (then the chart needs RBAC). */}}
{{- define "tf-cluster.anyStopsWithLeader" -}}
{{- $ctx := . -}}
{{- range $role := splitList " " (include "tf-cluster.roles" .) -}}
{{- if and (gt (int (index $ctx.Values.roles $role).replicas) 0) (include "tf-cluster.stopsWithLeader" (dict "context" $ctx "role" $role)) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Render-time validation. Every message names the value and says what to do.
Included once from the headless Service template, so nothing renders on failure
(Helm renders all templates before it prints any).
*/}}
{{- define "tf-cluster.validate" -}}
{{- $v := .Values -}}
{{- $chief := int $v.roles.chief.replicas -}}
{{- $worker := int $v.roles.worker.replicas -}}
{{- $ps := int $v.roles.ps.replicas -}}
{{- $eval := int $v.roles.evaluator.replicas -}}
{{- if gt $chief 1 -}}
{{- fail (printf "roles.chief.replicas=%d: a TensorFlow cluster has at most one chief; set roles.chief.replicas to 0 or 1 (add workers with roles.worker.replicas)" $chief) -}}
{{- end -}}
{{- if gt $eval 1 -}}
{{- fail (printf "roles.evaluator.replicas=%d: TensorFlow supports at most one evaluator; set roles.evaluator.replicas to 0 or 1" $eval) -}}
{{- end -}}
{{- if eq (add $chief $worker $ps) 0 -}}
{{- fail "roles: no training task (roles.chief, roles.worker and roles.ps all have replicas 0); set roles.worker.replicas (or roles.chief.replicas) to at least 1" -}}
{{- end -}}
{{- if eq $v.strategy "multiWorkerMirrored" -}}
{{- if gt $ps 0 -}}
{{- fail (printf "roles.ps.replicas=%d: strategy multiWorkerMirrored has no parameter servers; set roles.ps.replicas to 0, or use strategy: parameterServer" $ps) -}}
{{- end -}}
{{- else if eq $v.strategy "parameterServer" -}}
{{- if ne $chief 1 -}}
{{- fail (printf "roles.chief.replicas=%d: strategy parameterServer needs exactly one chief (the coordinator); set roles.chief.replicas to 1" $chief) -}}
{{- end -}}
{{- if lt $worker 1 -}}
{{- fail "roles.worker.replicas=0: strategy parameterServer needs at least one worker; set roles.worker.replicas to 1 or more" -}}
{{- end -}}
{{- if lt $ps 1 -}}
{{- fail "roles.ps.replicas=0: strategy parameterServer needs at least one parameter server; set roles.ps.replicas to 1 or more" -}}
{{- end -}}
{{- end -}}
{{- $fullname := include "tf-cluster.fullname" . -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname) -}}
{{- fail (printf "fullname %q (from the release name or fullnameOverride) is not a valid DNS-1035 label: use lowercase letters, digits and '-', starting with a letter" $fullname) -}}
{{- end -}}
{{- $suffix := include "tf-cluster.runSuffix" . -}}
{{- if and $suffix (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $suffix)) -}}
{{- fail (printf "run.suffix=%q: use auto, none, or lowercase letters, digits and '-'" $suffix) -}}
{{- end -}}
{{- range $role := splitList " " (include "tf-cluster.roles" .) -}}
{{- $n := int (index $v.roles $role).replicas -}}
{{- if gt $n 0 -}}
{{- $host := printf "%s-%d" (include "tf-cluster.jobName" (dict "context" $ "role" $role)) (sub $n 1) -}}
{{- if gt (len $host) 63 -}}
{{- fail (printf "pod hostname %q is %d characters, over the 63 allowed in a DNS label: shorten the release name or set fullnameOverride (now %q, %d characters) to at most %d characters" $host (len $host) $fullname (len $fullname) (sub (len $fullname) (sub (len $host) 63))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $v.code.existingConfigMap $v.code.files -}}
{{- fail "code: set either code.files or code.existingConfigMap, not both" -}}
{{- end -}}
{{- range $vol, $cfg := $v.storage -}}
{{- if and (eq $cfg.type "existingClaim") (not $cfg.existingClaim) -}}
{{- fail (printf "storage.%s.type=existingClaim needs storage.%s.existingClaim (the PVC's name)" $vol $vol) -}}
{{- end -}}
{{- end -}}
{{- if and $v.tensorboard.enabled (eq $v.storage.logs.type "none") -}}
{{- fail "tensorboard.enabled=true needs a logs volume: set storage.logs.type to pvc or existingClaim" -}}
{{- end -}}
{{- include "tf-cluster.tfConfigSizeCheck" . -}}
{{- end -}}
