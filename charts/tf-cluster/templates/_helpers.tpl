{{/*
Names, labels, image and run naming. Roles live in _roles.tpl, TF_CONFIG in
_tfconfig.tpl, the Job in _job.tpl (pod: _pod.tpl, env: _env.tpl, volumes:
_storage.tpl), render-time checks in _validate.tpl.
*/}}

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
A container's `image` and `imagePullPolicy`: `image` with an override's keys on top
(a role's `image`, `tensorboard.image`, the notebook's); the tag defaults to `<appVersion>` (the
official image's). `image.digest` goes with `image`'s own repository and tag only: an override
that names another repository or tag without a digest of its own gets none.
Usage: include "tf-cluster.image" (dict "context" $ "override" $role.image)
*/}}
{{- define "tf-cluster.image" -}}
{{- if not (and (hasKey . "context") (hasKey . "override")) -}}
{{- fail "tf-cluster.image: pass (dict \"context\" $ \"override\" DICT)" -}}
{{- end -}}
{{- $override := default dict .override -}}
{{- $image := merge (deepCopy $override) (deepCopy .context.Values.image) -}}
{{- if and (or $override.repository $override.tag) (not $override.digest) -}}
{{- /* a digest pins the image it was taken of: an override naming another image does not inherit it */ -}}
{{- $_ := unset $image "digest" -}}
{{- end -}}
{{- if $image.digest }}
image: "{{ $image.repository }}@{{ $image.digest }}"
{{- else }}
image: "{{ $image.repository }}:{{ default .context.Chart.AppVersion $image.tag }}"
{{- end }}
imagePullPolicy: {{ $image.pullPolicy }}
{{- end -}}

{{/*
Run suffix. Jobs are immutable, so a Job whose pod template (or another immutable
field) changes needs a new name, and a Job whose pods run the same must keep its
name (Argo CD would otherwise prune a running training). `auto`: the run hash.
*/}}
{{- define "tf-cluster.runSuffix" -}}
{{- if hasKey . "tfClusterRunProbe" -}}
{{- .tfClusterRunProbe -}}
{{- else -}}
{{- $s := toString .Values.run.suffix -}}
{{- if eq $s "auto" -}}
{{- include "tf-cluster.runHash" . -}}
{{- else if ne $s "none" -}}
{{- $s -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The run hash: 6 hex digits of the sha256 of what the release's Jobs run, i.e. each
present role's immutable Job spec with its pod template (_job.tpl's
"tf-cluster.jobRunSpec": image, command, env, launcher checksum, service account,
volumes, scheduling, restart policy ...), rendered with the placeholder run name
"run", and the run's environment (_env.tpl "tf-cluster.runEnv": the values every pod shares,
the cluster spec TF_CONFIG is composed from among them), which lives in a ConfigMap, not in the
pod template. Nothing else counts: a new chart version, a label or
a TensorBoard/NetworkPolicy/RBAC change that leaves every pod the same keeps the
run. One hash for the whole release: its tasks address each other by Job name.
Computed once per render (cached in .Values under a key the schema forbids users).
*/}}
{{- define "tf-cluster.runHash" -}}
{{- if not (hasKey .Values "tfClusterRunHashCache") -}}
{{- $probe := dict "Values" .Values "Release" .Release "Chart" .Chart "Files" .Files "Capabilities" .Capabilities "Template" .Template "tfClusterRunProbe" "run" -}}
{{- $specs := list -}}
{{- range $role := splitList " " (include "tf-cluster.roles" .) -}}
{{- $r := dict "context" $probe "role" $role -}}
{{- if gt (int (include "tf-cluster.jobReplicas" $r)) 0 -}}
{{- $specs = append $specs (printf "%s:\n%s" $role (include "tf-cluster.jobRunSpec" (dict "context" $probe "role" $role "policy" (include "tf-cluster.jobPolicy" $r | fromJson)))) -}}
{{- end -}}
{{- end -}}
{{- $specs = append $specs (printf "tf-config:\n%s" (include "tf-cluster.runEnv" $probe)) -}}
{{- $_ := set .Values "tfClusterRunHashCache" (join "\n---\n" $specs | sha256sum | trunc 6) -}}
{{- end -}}
{{- .Values.tfClusterRunHashCache -}}
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
