{{/*
What a pod adds to its image at start (values `packages`): the `packages` init container, whose
image's own pip installs each module the image lacks into the pod's /opt/tf-cluster/packages
(files/tf_cluster_launcher/packages.py), and what the other containers need to import them.
*/}}

{{- define "tf-cluster.packagesDir" -}}/opt/tf-cluster/packages{{- end -}}

{{/* The `packages` init container, as a one-item YAML list (empty when packages.enabled is off).
     Usage: include "tf-cluster.packagesContainer" (dict "context" $ "image" $override "for" "training") */}}
{{- define "tf-cluster.packagesContainer" -}}
{{- $v := .context.Values -}}
{{- if $v.packages.enabled }}
- name: packages
  {{- include "tf-cluster.image" (dict "context" .context "override" .image) | nindent 2 }}
  command:
    - {{ $v.launcher.python }}
    - /opt/tf-cluster/launcher/launcher.py
    - --packages
    - {{ include "tf-cluster.packagesDir" . }}
    {{- range $module, $requirement := index $v.packages .for }}
    - {{ printf "%s=%s" $module $requirement | quote }}
    {{- end }}
  {{- /* pipEnv over the chart's: a name set twice would make Helm 4 refuse the manifest */}}
  {{- $env := list (dict "name" "HOME" "value" "/tmp") (dict "name" "PIP_NO_CACHE_DIR" "value" "1") (dict "name" "PIP_DISABLE_PIP_VERSION_CHECK" "value" "1") }}
  env:
    {{- include "tf-cluster.withUserEnv" (dict "chart" $env "top" $v.packages.pipEnv "own" list) | fromJsonArray | toYaml | nindent 4 }}
  {{- with include "tf-cluster.withDefaultRequests" (dict "resources" $v.packages.resources "defaults" $v.resourceDefaults.packages) | fromJson }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
    {{- include "tf-cluster.launcherMounts" . | nindent 4 }}
    - name: packages
      mountPath: {{ include "tf-cluster.packagesDir" . }}
{{- end }}
{{- end -}}

{{/* The containers' PYTHONPATH entry, as a JSON list of env entries (empty when packages.enabled is off). */}}
{{- define "tf-cluster.packagesEnv" -}}
{{- if .Values.packages.enabled -}}
{{- list (dict "name" "PYTHONPATH" "value" (include "tf-cluster.packagesDir" .)) | toJson -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{/* The packages volume's mount in a program's container (read-only). */}}
{{- define "tf-cluster.packagesMount" -}}
{{- if .Values.packages.enabled }}
- name: packages
  mountPath: {{ include "tf-cluster.packagesDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* The packages volume: an emptyDir the init container fills. */}}
{{- define "tf-cluster.packagesVolume" -}}
{{- if .Values.packages.enabled }}
- name: packages
  emptyDir:
    sizeLimit: 512Mi
{{- end }}
{{- end -}}
