{{/*
The pod template of a role's Job: metadata, scheduling, the `tensorflow`
container (the launcher around the role's command) and its volumes. The
container's environment is _env.tpl's, its volumes _storage.tpl's.
Usage: include "tf-cluster.podTemplate" (dict "context" $ "role" "worker" "policy" $policy)
*/}}
{{- define "tf-cluster.podTemplate" -}}
{{- $ctx := .context -}}
{{- $v := $ctx.Values -}}
{{- $roleName := .role -}}
{{- $r := dict "context" $ctx "role" $roleName -}}
{{- $role := include "tf-cluster.role" $r | fromJson -}}
{{- $traits := include "tf-cluster.traits" $r | fromJson -}}
{{- $stops := include "tf-cluster.stopsWithLeader" $r -}}
{{- $agent := include "tf-cluster.hasAgent" $r -}}
{{- $inGang := include "tf-cluster.inGang" $r -}}
{{- $gangMeta := include "tf-cluster.gangPodMeta" $r | fromJson -}}
metadata:
  labels:
    {{- include "tf-cluster.componentSelectorLabels" (dict "context" $ctx "component" $roleName) | nindent 4 }}
    tf-cluster.io/run: {{ default "none" (include "tf-cluster.runSuffix" $ctx) | quote }}
    {{- with $role.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $gangMeta.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    tf-cluster.io/launcher-protocol: {{ include "tf-cluster.launcherProtocol" $ctx | quote }}
    {{- with $gangMeta.annotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with (merge (deepCopy (default dict $role.podAnnotations)) (deepCopy (default dict $v.podAnnotations)) (include "tf-cluster.scrapeAnnotations" $ctx | fromJson)) }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  subdomain: {{ include "tf-cluster.fullname" $ctx }}
  restartPolicy: Never
  serviceAccountName: {{ include "tf-cluster.serviceAccountName" $ctx }}
  # No container gets the account's token but the tf-cluster-agent sidecar (its own projected
  # volume): the user's program holds no credential.
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ int .policy.terminationGracePeriodSeconds }}
  {{- with $role.priorityClassName }}
  priorityClassName: {{ . | quote }}
  {{- end }}
  {{- with $role.schedulerName | default (and $inGang (include "tf-cluster.gangSchedulerName" $ctx)) }}
  schedulerName: {{ . | quote }}
  {{- end }}
  {{- if and $inGang (eq (include "tf-cluster.gang" $ctx) "native") }}
  schedulingGroup:
    podGroupName: {{ include "tf-cluster.podGroupName" $ctx }}
  {{- end }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $v.podSecurityContext | nindent 4 }}
  {{- with $role.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with (include "tf-cluster.affinity" (dict "context" $ctx "affinity" $role.affinity) | fromJson) }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with (include "tf-cluster.tolerations" (dict "context" $ctx "role" $role) | fromJsonArray) }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $role.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- $inits := include "tf-cluster.initContainers" (dict "context" $ctx "role" $role) | fromJsonArray }}
  {{- if or $agent $inits }}
  initContainers:
    {{- if $agent }}
    {{- include "tf-cluster.agentContainer" (dict "context" $ctx "role" $roleName "spec" $role) | nindent 4 }}
    {{- end }}
    {{- with $inits }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  containers:
    - name: tensorflow
      {{- include "tf-cluster.image" (dict "context" $ctx "override" $role.image) | nindent 6 }}
      {{- with include "tf-cluster.workingDir" (dict "context" $ctx "image" $role.image) }}
      workingDir: {{ . | quote }}
      {{- end }}
      command:
        - {{ $v.launcher.python }}
        - /opt/tf-cluster/launcher/launcher.py
        - --
        {{- toYaml (default $v.command $role.command) | nindent 8 }}
      {{- $args := default $v.args $role.args -}}
      {{- if $v.legacyTF1.flags }}
      {{- $args = concat $args (include "tf-cluster.legacyFlags" $r | fromJsonArray) }}
      {{- end }}
      {{- with $args }}
      args:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      env:
        {{- include "tf-cluster.env" (dict "context" $ctx "role" $roleName "spec" $role) | nindent 8 }}
      envFrom:
        {{- with (concat (default list $v.envFrom) (default list $role.envFrom)) }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- include "tf-cluster.runEnvFrom" $ctx | nindent 8 }}
      {{- if or $traits.port $v.metrics.enabled }}
      ports:
        {{- if $traits.port }}
        - name: tf
          containerPort: {{ $v.port }}
          protocol: TCP
        {{- end }}
        {{- if $v.metrics.enabled }}
        - name: metrics
          containerPort: {{ $v.metrics.port }}
          protocol: TCP
        {{- end }}
      {{- end }}
      {{- $resources := include "tf-cluster.containerResources" (dict "role" $role "context" $ctx) | fromJson -}}
      {{- with $resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $v.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "tf-cluster.volumeMounts" $ctx | nindent 8 }}
        {{- if $agent }}
        - name: tf-cluster-agent
          mountPath: /opt/tf-cluster/agent
          readOnly: true
        {{- end }}
        {{- with $role.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    {{- include "tf-cluster.volumes" $ctx | nindent 4 }}
    {{- if $agent }}
    # What the agent tells the training container (files/tf_cluster_launcher/agent.py), and the
    # account's token, for the agent alone.
    - name: tf-cluster-agent
      emptyDir:
        medium: Memory
        sizeLimit: 1Mi
    - name: tf-cluster-token
      projected:
        sources:
          - serviceAccountToken:
              path: token
              expirationSeconds: 3607
          - configMap:
              name: kube-root-ca.crt
              items:
                - key: ca.crt
                  path: ca.crt
          - downwardAPI:
              items:
                - path: namespace
                  fieldRef:
                    fieldPath: metadata.namespace
    {{- end }}
    {{- with $role.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/* A role's init containers, as a JSON list: its sidecars first, as Kubernetes native sidecars
     (`restartPolicy: Always`: started before the rest, stopped once the training container ends),
     then the chart's `packages` (_packages.tpl), then its init containers, in the order given.
     One without a securityContext gets the training
     container's (`securityContext`), so the pod stays within Pod Security `restricted`.
     Usage: include "tf-cluster.initContainers" (dict "context" $ "role" $role) */}}
{{- define "tf-cluster.initContainers" -}}
{{- $secure := .context.Values.securityContext -}}
{{- $out := list -}}
{{- range $c := default list .role.sidecars -}}
{{- $c = merge (dict "restartPolicy" "Always") (deepCopy $c) -}}
{{- if not (hasKey $c "securityContext") -}}{{- $_ := set $c "securityContext" $secure -}}{{- end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- /* after the role's sidecars (a network proxy pip may need), before its init containers */ -}}
{{- $out = concat $out (include "tf-cluster.packagesContainer" (dict "context" .context "image" .role.image "for" "training") | fromYamlArray) -}}
{{- range $c := default list .role.initContainers -}}
{{- $c = deepCopy $c -}}
{{- if not (hasKey $c "securityContext") -}}{{- $_ := set $c "securityContext" $secure -}}{{- end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The `prometheus.io/*` annotations that let an annotation-driven Prometheus scrape a task's
     exporter: with metrics.enabled and metrics.annotations, when no PodMonitor renders
     (tf-cluster.monitoring.renders); the pod's own podAnnotations win a clash. JSON map.
     A PodMonitor appearing (`auto`, the Operator installed later) drops them: a new pod template,
     so new Job names on the next upgrade. */}}
{{- define "tf-cluster.scrapeAnnotations" -}}
{{- $m := .Values.metrics -}}
{{- $out := dict -}}
{{- if and $m.enabled $m.annotations (not (include "tf-cluster.monitoring.renders" (dict "context" . "object" "podMonitor"))) -}}
{{- $out = dict "prometheus.io/scrape" "true" "prometheus.io/port" (toString $m.port) "prometheus.io/path" "/metrics" -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* A training container's resources: the role's, its GPUs as limits and requests, and
     `resourceDefaults.training` requests where neither a request nor a limit is set.
     Usage: include "tf-cluster.containerResources" (dict "context" $ "role" $role) | fromJson */}}
{{- define "tf-cluster.containerResources" -}}
{{- $resources := deepCopy (default dict .role.resources) -}}
{{- with .role.gpus }}
{{- $_ := set $resources "limits" (merge (default dict $resources.limits) .) }}
{{- $_ := set $resources "requests" (merge (default dict $resources.requests) .) }}
{{- end }}
{{- include "tf-cluster.withDefaultRequests" (dict "resources" $resources "defaults" .context.Values.resourceDefaults.training) -}}
{{- end -}}

{{/* `resources` with a request for each key of `defaults` (cpu, memory) that has none: the
     limit when one is set (what Kubernetes would request, written out), else the default.
     Usage: include "tf-cluster.withDefaultRequests" (dict "resources" $r "defaults" $d) | fromJson */}}
{{- define "tf-cluster.withDefaultRequests" -}}
{{- $out := deepCopy (default dict .resources) -}}
{{- $requests := deepCopy (default dict $out.requests) -}}
{{- $limits := default dict $out.limits -}}
{{- range $key, $value := (default dict .defaults) -}}
{{- if not (hasKey $requests $key) -}}
{{- if hasKey $limits $key -}}
{{- $_ := set $requests $key (get $limits $key) -}}
{{- else if $value -}}
{{- $_ := set $requests $key $value -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $requests -}}
{{- $_ := set $out "requests" $requests -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Whether a role's pods need the API (they stop with the leader, fence, or watch their peers):
     then the tf-cluster-agent sidecar does that work, with the token.
     Usage: include "tf-cluster.hasAgent" (dict "context" $ "role" "worker") */}}
{{- define "tf-cluster.hasAgent" -}}
{{- if or (include "tf-cluster.stopsWithLeader" .) (include "tf-cluster.fences" .context) (include "tf-cluster.watchesPeers" .context) (include "tf-cluster.relaxesGang" .) -}}true{{- end -}}
{{- end -}}

{{/* The tf-cluster-agent container: a native sidecar (Kubernetes 1.29+: `restartPolicy: Always`
     in initContainers, started first, stopped once the training container ends) running the
     launcher's agent (files/tf_cluster_launcher/agent.py): the leader watch, the peer wait through
     the API, the fence and the Events. It alone mounts the account's token; it tells the training
     container what it learns through /opt/tf-cluster/agent, which that container mounts read-only.
     Usage: include "tf-cluster.agentContainer" (dict "context" $ "role" "worker" "spec" $role) */}}
{{- define "tf-cluster.agentContainer" -}}
{{- $v := .context.Values -}}
- name: tf-cluster-agent
  {{- include "tf-cluster.image" (dict "context" .context "override" .spec.image) | nindent 2 }}
  restartPolicy: Always
  command:
    - {{ $v.launcher.python }}
    - /opt/tf-cluster/launcher/launcher.py
    - --agent
  env:
    {{- include "tf-cluster.env" (merge (dict "chartOnly" true) .) | nindent 4 }}
  envFrom:
    {{- include "tf-cluster.runEnvFrom" .context | nindent 4 }}
  {{- with $v.launcher.agent.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "tf-cluster.launcherMounts" . | nindent 4 }}
    - name: tf-cluster-agent
      mountPath: /opt/tf-cluster/agent
    - name: tf-cluster-token
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
{{- end -}}

{{/* The training container's working directory: `workingDir`, else /tmp with TensorFlow's official
     image (its WORKDIR `/` is read-only here), else none (the image's own).
     Usage: include "tf-cluster.workingDir" (dict "context" $ "image" $role.image) */}}
{{- define "tf-cluster.workingDir" -}}
{{- $image := merge (deepCopy (default dict .image)) (deepCopy .context.Values.image) -}}
{{- if .context.Values.workingDir -}}
{{- .context.Values.workingDir -}}
{{- else if eq $image.repository "docker.io/tensorflow/tensorflow" -}}
/tmp
{{- end -}}
{{- end -}}
