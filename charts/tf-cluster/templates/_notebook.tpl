{{/*
The notebook's settings (templates/notebook.yaml): its image, root directory and environment.
*/}}

{{/* The notebook image override, as JSON: notebook.image over the training image. Its tag: with
     TensorFlow's official image (the default), its `-jupyter` variant (JupyterLab on the same
     TensorFlow); with another image, that image's tag + "-notebook" (what `tf-cluster build
     --notebook` tags), unless notebook.image sets one. */}}
{{- define "tf-cluster.notebookImage" -}}
{{- $image := deepCopy (default dict .Values.notebook.image) -}}
{{- if and (not $image.tag) (not $image.digest) -}}
{{- $official := and (not $image.repository) (eq .Values.image.repository "docker.io/tensorflow/tensorflow") -}}
{{- $_ := set $image "tag" (printf "%s-%s" (default .Chart.AppVersion .Values.image.tag) (ternary "jupyter" "notebook" $official)) -}}
{{- end -}}
{{- toJson $image -}}
{{- end -}}

{{/* JupyterLab's root: notebook.rootDir, else the data volume (when writable), else /tmp/notebooks. */}}
{{- define "tf-cluster.notebookRoot" -}}
{{- $data := .Values.storage.data -}}
{{- if .Values.notebook.rootDir -}}
{{- .Values.notebook.rootDir -}}
{{- else if and (ne $data.type "none") (not $data.readOnly) -}}
{{- $data.mountPath -}}
{{- else -}}
/tmp/notebooks
{{- end -}}
{{- end -}}

{{/* The notebook container's environment, as a JSON list: the release's TF_CONFIG as the chief's
     (with notebook.coordinator), its heartbeat ConfigMap and its limits, the shared volumes' paths, TensorBoard's
     link, the token file; then the top-level `env` and `notebook.env`, merged as a role's env is
     (_env.tpl "tf-cluster.withUserEnv": a name the user sets wins, notebook.env over env). */}}
{{- define "tf-cluster.notebookEnv" -}}
{{- $v := .Values -}}
{{- $coordinator := include "tf-cluster.coordinatorInNotebook" . -}}
{{- $tensorboard := default (printf "http://localhost:%v/" $v.tensorboard.service.port) $v.notebook.tensorboardUrl -}}
{{- $env := list
  (dict "name" "TF_CLUSTER_ROLE" "value" (ternary "chief" "notebook" (eq $coordinator "true")))
  (dict "name" "TF_TASK_INDEX" "value" "0")
  (dict "name" "TF_CLUSTER_NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))
  (dict "name" "TF_CLUSTER_STRATEGY" "value" $v.strategy)
  (dict "name" "TF_CLUSTER_POLL_SECONDS" "value" (toString $v.launcher.pollSeconds))
  (dict "name" "TF_CLUSTER_NOTEBOOK_ROOT" "value" (include "tf-cluster.notebookRoot" .))
  (dict "name" "TF_CLUSTER_TOKEN_FILE" "value" "/tmp/.tf-cluster/jupyter-token")
  (dict "name" "JUPYTER_TOKEN_FILE" "value" "/tmp/.tf-cluster/jupyter-token")
  (dict "name" "PYTHONPATH" "value" (ternary "/opt/tf-cluster/launcher:/opt/tf-cluster/packages" "/opt/tf-cluster/launcher" (not (not .Values.packages.enabled))))
  (dict "name" "TF_USE_LEGACY_KERAS" "value" "1")
  (dict "name" "PYTHONUNBUFFERED" "value" "1")
  (dict "name" "HOME" "value" "/tmp")
-}}
{{- if $v.tensorboard.enabled -}}
{{- $env = append $env (dict "name" "TF_CLUSTER_TENSORBOARD_URL" "value" $tensorboard) -}}
{{- end -}}
{{- $env = concat $env (include "tf-cluster.coordinatorEnv" . | fromJsonArray) -}}
{{- if $coordinator -}}
{{- $env = concat $env (include "tf-cluster.tfConfigEnv" (dict "context" . "role" "chief" "index" "0") | fromJsonArray) -}}
{{- end -}}
{{- $env = concat $env (include "tf-cluster.storageEnv" . | fromJsonArray) -}}
{{- include "tf-cluster.withUserEnv" (dict "chart" $env "top" $v.env "own" $v.notebook.env) -}}
{{- end -}}
