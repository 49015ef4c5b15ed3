{{/*
Roles as data. files/roles.yaml is the one table of roles and their traits;
everything below derives from it, and every template ranges over it.
*/}}

{{/* The role table as a JSON list of rows (name + traits), in rendering order. */}}
{{- define "tf-cluster.roleTable" -}}
{{- .Files.Get "files/roles.yaml" | fromYamlArray | toJson -}}
{{- end -}}

{{/* One row of the role table, as JSON. Usage: include "tf-cluster.traits" (dict "context" $ "role" "worker") */}}
{{- define "tf-cluster.traits" -}}
{{- if not (and (hasKey . "context") (hasKey . "role")) -}}
{{- fail "tf-cluster.traits: pass (dict \"context\" $ \"role\" ROLE)" -}}
{{- end -}}
{{- $found := dict -}}
{{- range $row := include "tf-cluster.roleTable" .context | fromJsonArray -}}
{{- if eq $row.name $.role -}}{{- $found = $row -}}{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "tf-cluster.traits: %q is not a role of files/roles.yaml" .role) -}}
{{- end -}}
{{- toJson $found -}}
{{- end -}}

{{/* Number of tasks of a role. Usage: include "tf-cluster.replicas" (dict "context" $ "role" "worker") */}}
{{- define "tf-cluster.replicas" -}}
{{- $role := index .context.Values.roles .role | default dict -}}
{{- int (default 0 $role.replicas) -}}
{{- end -}}

{{/*
A role's effective settings, as JSON: `roles.<role>` over `roleDefaults`. For each
key of roleDefaults the role's own value wins when it is set (not empty); maps are
merged key by key, the role's keys winning. Usage:
  $spec := include "tf-cluster.role" (dict "context" $ "role" "worker") | fromJson
*/}}
{{- define "tf-cluster.role" -}}
{{- $own := index .context.Values.roles .role | default dict -}}
{{- $out := deepCopy $own -}}
{{- range $key, $default := .context.Values.roleDefaults -}}
{{- $mine := get $own $key -}}
{{- if and (kindIs "map" $default) (kindIs "map" $mine) -}}
{{- $_ := set $out $key (mergeOverwrite (deepCopy $default) (deepCopy $mine)) -}}
{{- else if empty $mine -}}
{{- $_ := set $out $key $default -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* "true" when the notebook's kernel is the cluster's chief (notebook.coordinator): the chief then
     has no Job; its address is the notebook pod's, and the servers watch its heartbeat instead. */}}
{{- define "tf-cluster.coordinatorInNotebook" -}}
{{- if and .Values.notebook.enabled .Values.notebook.coordinator -}}true{{- end -}}
{{- end -}}

{{/* Pods of a role's Job: its replicas, but 0 for the chief when the notebook's kernel is the
     chief. Usage: include "tf-cluster.jobReplicas" (dict "context" $ "role" "chief") */}}
{{- define "tf-cluster.jobReplicas" -}}
{{- if and (eq .role "chief") (include "tf-cluster.coordinatorInNotebook" .context) -}}0
{{- else -}}{{- include "tf-cluster.replicas" . -}}{{- end -}}
{{- end -}}

{{/* Names of the roles with a trait set, space-separated, e.g. the training roles:
     include "tf-cluster.rolesWith" (dict "context" $ "trait" "inCluster") */}}
{{- define "tf-cluster.rolesWith" -}}
{{- $out := list -}}
{{- range $row := include "tf-cluster.roleTable" .context | fromJsonArray -}}
{{- if index $row $.trait -}}{{- $out = append $out $row.name -}}{{- end -}}
{{- end -}}
{{- join " " $out -}}
{{- end -}}

{{/* Names of every role, space-separated, in table order (every row has a name). */}}
{{- define "tf-cluster.roles" -}}
{{- include "tf-cluster.rolesWith" (dict "context" . "trait" "name") -}}
{{- end -}}

{{/* Number of tasks of the roles with a trait set:
     include "tf-cluster.taskCount" (dict "context" $ "trait" "inGang") */}}
{{- define "tf-cluster.taskCount" -}}
{{- $ctx := .context -}}
{{- $n := 0 -}}
{{- range $role := splitList " " (include "tf-cluster.rolesWith" .) -}}
{{- $n = add $n (include "tf-cluster.replicas" (dict "context" $ctx "role" $role)) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{/* Number of tasks of the roles in TF_CONFIG's cluster. */}}
{{- define "tf-cluster.trainingTaskCount" -}}
{{- include "tf-cluster.taskCount" (dict "context" . "trait" "inCluster") -}}
{{- end -}}

{{/* The leading Job's role: the first present role that may lead (chief, else worker).
     Stopping roles watch it; the run ends with it. */}}
{{- define "tf-cluster.leaderRole" -}}
{{- $ctx := . -}}
{{- $leader := "" -}}
{{- $last := "" -}}
{{- range $role := splitList " " (include "tf-cluster.rolesWith" (dict "context" $ctx "trait" "mayLead")) -}}
{{- $last = $role -}}
{{- if and (not $leader) (gt (int (include "tf-cluster.replicas" (dict "context" $ctx "role" $role))) 0) -}}
{{- $leader = $role -}}
{{- end -}}
{{- end -}}
{{- default $last $leader -}}
{{- end -}}

{{/* "true" when this role's launcher stops it once the leading Job has finished. */}}
{{- define "tf-cluster.stopsWithLeader" -}}
{{- $ctx := .context -}}
{{- if ne .role (include "tf-cluster.leaderRole" $ctx) -}}
{{- $traits := include "tf-cluster.traits" . | fromJson -}}
{{- if has $ctx.Values.strategy $traits.stopsWithLeader -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" if any present role stops with the leader (then the chart needs RBAC). */}}
{{- define "tf-cluster.anyStopsWithLeader" -}}
{{- $ctx := . -}}
{{- range $role := splitList " " (include "tf-cluster.roles" .) -}}
{{- $r := dict "context" $ctx "role" $role -}}
{{- if and (gt (int (include "tf-cluster.replicas" $r)) 0) (include "tf-cluster.stopsWithLeader" $r) -}}true{{- end -}}
{{- end -}}
{{- end -}}
