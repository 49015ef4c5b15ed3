{{/*
Shared storage: the `data`, `checkpoints` and `logs` volumes (storage.<volume>.type:
emptyDir, pvc, existingClaim or none), the pod's /tmp, the launcher, the example trainers, the
packages the pod adds to its image (_packages.tpl) and the code.
*/}}

{{/* The storage volumes, in mount order. */}}
{{- define "tf-cluster.storageVolumes" -}}data checkpoints logs{{- end -}}

{{/* Claim of a storage volume: `<fullname>-<volume>` for `pvc`, the named claim for
     `existingClaim`, empty otherwise. Usage: include "tf-cluster.claimName" (dict "context" $ "volume" "logs") */}}
{{- define "tf-cluster.claimName" -}}
{{- $cfg := index .context.Values.storage .volume -}}
{{- if eq $cfg.type "pvc" -}}
{{- printf "%s-%s" (include "tf-cluster.fullname" .context) .volume -}}
{{- else if eq $cfg.type "existingClaim" -}}
{{- $cfg.existingClaim -}}
{{- end -}}
{{- end -}}

{{/* Mounts shared by training pods. */}}
{{- define "tf-cluster.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- include "tf-cluster.launcherMounts" . | nindent 0 }}
- name: trainers
  mountPath: /opt/tf-cluster/trainers
  readOnly: true
{{- include "tf-cluster.packagesMount" . }}
{{- range $vol := splitList " " (include "tf-cluster.storageVolumes" .) }}
{{- $cfg := index $.Values.storage $vol }}
{{- if ne $cfg.type "none" }}
- name: {{ $vol }}
  mountPath: {{ $cfg.mountPath | quote }}
  {{- if $cfg.readOnly }}
  readOnly: true
  {{- end }}
{{- end }}
{{- end }}
{{- if or .Values.code.files .Values.code.existingConfigMap }}
- name: code
  mountPath: {{ .Values.code.mountPath | quote }}
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
  {{- with .Values.storage.tmp.sizeLimit }}
  emptyDir:
    sizeLimit: {{ . | quote }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- include "tf-cluster.launcherVolumes" . | nindent 0 }}
- name: trainers
  configMap:
    name: {{ $fullname }}-launcher
    items:
      {{- range $path, $_ := .Files.Glob "files/trainers/*.py" }}
      - key: trainers.{{ base $path }}
        path: {{ base $path }}
      {{- end }}
{{- include "tf-cluster.packagesVolume" . }}
{{- range $vol := splitList " " (include "tf-cluster.storageVolumes" .) }}
{{- $cfg := index $.Values.storage $vol }}
{{- if eq $cfg.type "emptyDir" }}
- name: {{ $vol }}
  {{- with $cfg.size }}
  emptyDir:
    sizeLimit: {{ . | quote }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- else if has $cfg.type (list "pvc" "existingClaim") }}
- name: {{ $vol }}
  persistentVolumeClaim:
    claimName: {{ include "tf-cluster.claimName" (dict "context" $ "volume" $vol) }}
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

{{/* The launcher's two volumes, as a YAML list: its ConfigMap (launcher.py, the notebook's module)
     and its package's (one key per module). Mounted by "tf-cluster.launcherMounts", without an
     `items` list: a pod's spec (and its managedFields) names two ConfigMaps, not every module. */}}
{{- define "tf-cluster.launcherVolumes" -}}
- name: launcher
  configMap:
    name: {{ include "tf-cluster.fullname" . }}-launcher
- name: launcher-package
  configMap:
    name: {{ include "tf-cluster.fullname" . }}-launcher-package
{{- end }}

{{/* Where a container finds the launcher, as a YAML list: /opt/tf-cluster/launcher/launcher.py (a
     subPath of its ConfigMap) beside its package's directory, tf_cluster_launcher/ (the package's
     ConfigMap whole: a volume cannot be mounted inside another ConfigMap's, which is read-only).
     The notebook adds its module there (notebook.yaml). Usage: include "tf-cluster.launcherMounts" . */}}
{{- define "tf-cluster.launcherMounts" -}}
- name: launcher
  mountPath: /opt/tf-cluster/launcher/launcher.py
  subPath: launcher.py
  readOnly: true
- name: launcher-package
  mountPath: /opt/tf-cluster/launcher/tf_cluster_launcher
  readOnly: true
{{- end }}

{{/* The launcher's protocol (files/tf_cluster_launcher/__init__.py, PROTOCOL): what names its
behaviour in every pod template, so that an edit which changes no behaviour renames no Job. */}}
{{- define "tf-cluster.launcherProtocol" -}}
{{- $line := regexFind "(?m)^PROTOCOL = [0-9]+$" (.Files.Get "files/tf_cluster_launcher/__init__.py") -}}
{{- required "files/tf_cluster_launcher/__init__.py declares no PROTOCOL = <number>" (trimPrefix "PROTOCOL = " $line) -}}
{{- end }}
