{{/*
All-or-nothing scheduling (values `scheduling`): which gang mechanism the release uses,
the gang's name and size, and what each gang pod carries to join it. podgroup.yaml
renders the group object; _pod.tpl calls "tf-cluster.inGang", "gangPodMeta" and
"gangSchedulerName"; _validate.tpl checks "gangRoleSettings".
*/}}

{{/* The gang mechanism: "native" (Kubernetes' PodGroup, scheduling.k8s.io/v1beta1),
     "coscheduling", "volcano", or "" (none). */}}
{{- define "tf-cluster.gang" -}}
{{- $s := .Values.scheduling -}}
{{- if $s.podGroup -}}
{{- $s.podGroup -}}
{{- else if eq (toString $s.gang) "true" -}}
native
{{- else if and (eq (toString $s.gang) "auto") (.Capabilities.APIVersions.Has "scheduling.k8s.io/v1beta1/PodGroup") -}}
native
{{- end -}}
{{- end -}}

{{/* The gang's name: one group per run, `<fullname>[-<run>]` (a new run gets a new group,
     so the group's immutable fields never block an upgrade). */}}
{{- define "tf-cluster.podGroupName" -}}
{{- $suffix := include "tf-cluster.runSuffix" . -}}
{{- if $suffix -}}
{{- printf "%s-%s" (include "tf-cluster.fullname" .) $suffix -}}
{{- else -}}
{{- include "tf-cluster.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* The gang's size: the pods of the Jobs of the roles with the inGang trait (an interactive
     coordinator, the notebook, is not in the gang: it is not a Job's pod). */}}
{{- define "tf-cluster.gangSize" -}}
{{- $ctx := . -}}
{{- $n := 0 -}}
{{- range $role := splitList " " (include "tf-cluster.rolesWith" (dict "context" $ctx "trait" "inGang")) -}}
{{- $n = add $n (include "tf-cluster.jobReplicas" (dict "context" $ctx "role" $role)) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{/* The native PodGroup's disruption mode: "all" or "single" (values scheduling.disruptionMode). */}}
{{- define "tf-cluster.disruptionMode" -}}
{{- $m := .Values.scheduling.disruptionMode -}}
{{- if ne $m "auto" -}}
{{- $m -}}
{{- else if eq .Values.strategy "multiWorkerMirrored" -}}
all
{{- else -}}
single
{{- end -}}
{{- end -}}

{{/* "true" when a role's pods join the gang. Usage: include "tf-cluster.inGang" (dict "context" $ "role" "worker") */}}
{{- define "tf-cluster.inGang" -}}
{{- if include "tf-cluster.gang" .context -}}
{{- $traits := include "tf-cluster.traits" . | fromJson -}}
{{- if $traits.inGang -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the role's pods are in a gang whose finished tasks lower it: a finished task's
     agent lowers the group's size to 1, so that a task replaced once another has finished is
     placed at all (files/tf_cluster_launcher/gang.py).
     Usage: include "tf-cluster.relaxesGang" (dict "context" $ "role" "worker") */}}
{{- define "tf-cluster.relaxesGang" -}}
{{- if and (include "tf-cluster.anyRelaxesGang" .context) (include "tf-cluster.inGang" .) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the gang's finished tasks lower it: Kubernetes' own gang or scheduler-plugins'
     coscheduling (both count no finished pod toward the group's size; Volcano counts a job's
     Succeeded tasks), of more than one task (the Role then may read and patch the run's PodGroup). */}}
{{- define "tf-cluster.anyRelaxesGang" -}}
{{- if and (has (include "tf-cluster.gang" .) (list "native" "coscheduling")) (gt (int (include "tf-cluster.gangSize" .)) 1) -}}true{{- end -}}
{{- end -}}

{{/* The API (group/version) of the gang's PodGroup; "" without a gang. */}}
{{- define "tf-cluster.podGroupApi" -}}
{{- get (dict "native" "scheduling.k8s.io/v1beta1" "coscheduling" "scheduling.x-k8s.io/v1alpha1" "volcano" "scheduling.volcano.sh/v1beta1") (include "tf-cluster.gang" .) -}}
{{- end -}}

{{/* The scheduler a gang pod uses when its role names none: the gang scheduler's. */}}
{{- define "tf-cluster.gangSchedulerName" -}}
{{- $gang := include "tf-cluster.gang" . -}}
{{- if eq $gang "coscheduling" -}}scheduler-plugins-scheduler
{{- else if eq $gang "volcano" -}}volcano
{{- end -}}
{{- end -}}

{{/* Pod metadata that joins a gang scheduler's PodGroup (labels or annotations), as JSON
     {"labels": {...}, "annotations": {...}}. Usage: as "tf-cluster.inGang". */}}
{{- define "tf-cluster.gangPodMeta" -}}
{{- $out := dict "labels" dict "annotations" dict -}}
{{- if include "tf-cluster.inGang" . -}}
{{- $gang := include "tf-cluster.gang" .context -}}
{{- $name := include "tf-cluster.podGroupName" .context -}}
{{- if eq $gang "coscheduling" -}}
{{- $_ := set $out.labels "scheduling.x-k8s.io/pod-group" $name -}}
{{- else if eq $gang "volcano" -}}
{{- $_ := set $out.annotations "scheduling.k8s.io/group-name" $name -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The gang roles' settings that must agree (the scheduler refuses a group whose pods differ
     in scheduler or priority), as JSON {"priorityClassName": {role: ...}, "schedulerName": {...}}
     over the present gang roles. */}}
{{- define "tf-cluster.gangRoleSettings" -}}
{{- $ctx := . -}}
{{- $out := dict "priorityClassName" dict "schedulerName" dict -}}
{{- range $role := splitList " " (include "tf-cluster.rolesWith" (dict "context" $ctx "trait" "inGang")) -}}
{{- $r := dict "context" $ctx "role" $role -}}
{{- if gt (int (include "tf-cluster.jobReplicas" $r)) 0 -}}
{{- $spec := include "tf-cluster.role" $r | fromJson -}}
{{- $_ := set $out.priorityClassName $role (default "" $spec.priorityClassName) -}}
{{- $_ := set $out.schedulerName $role (default "" $spec.schedulerName) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The gang's priority class: the one its pods share ("" = the cluster's default). */}}
{{- define "tf-cluster.gangPriorityClassName" -}}
{{- $settings := include "tf-cluster.gangRoleSettings" . | fromJson -}}
{{- values $settings.priorityClassName | uniq | first | default "" -}}
{{- end -}}

{{/* Do the launchers wait for their peers' pods through the API (a cluster of more than one task,
     with the Role that lets them watch pods)? Without it they wait on DNS alone. */}}
{{- define "tf-cluster.watchesPeers" -}}
{{- if and .Values.rbac.create (gt (int (include "tf-cluster.trainingTaskCount" .)) 1) -}}true{{- end -}}
{{- end -}}

{{/* Does a task wait for several peers (the ParameterServer chief for all, every task of a custom
     strategy; a MultiWorkerMirrored task waits for the leader alone)? It learns them from the
     headless Service's EndpointSlices (files/launcher.py wait_for_peer_pods), not their pods. */}}
{{- define "tf-cluster.watchesPeerEndpoints" -}}
{{- $chiefWaits := and (eq .Values.strategy "parameterServer") (not (include "tf-cluster.coordinatorInNotebook" .)) -}}
{{- if and (include "tf-cluster.watchesPeers" .) (or $chiefWaits (eq .Values.strategy "custom")) -}}true{{- end -}}
{{- end -}}

{{/* Does the launcher fence pods stranded on a lost node (nodeLoss.fence, with the Role it needs)? */}}
{{- define "tf-cluster.fences" -}}
{{- if and .Values.nodeLoss.fence .Values.rbac.create -}}true{{- end -}}
{{- end -}}

{{/* "true" when the role's Job retries the launcher's exit 6 without counting (its
     podFailurePolicy, _job.tpl), else "": the ParameterServer coordinator with the fence (it
     restarts for a lost peer), ParameterServer workers (for a replaced ps), MultiWorkerMirrored
     chiefs and workers (for a new leader), every role with the self-fence. The launcher reads the answer (TF_CLUSTER_RESTARTS): a program's own exit
     6 is reported as 1 there, so that it cannot be retried forever.
     Usage: include "tf-cluster.restartsUncounted" (dict "context" $ "role" "chief") */}}
{{- define "tf-cluster.restartsUncounted" -}}
{{- $v := .context.Values -}}
{{- $coordinator := and (eq $v.strategy "parameterServer") (eq .role "chief") (include "tf-cluster.fences" .context) -}}
{{- $collective := and (eq $v.strategy "multiWorkerMirrored") (has .role (list "chief" "worker")) -}}
{{- $server := and (eq $v.strategy "parameterServer") (eq .role "worker") -}}
{{- $selfFences := ne (include "tf-cluster.selfFenceSeconds" .context) "0" -}}
{{- if or $coordinator $collective $server $selfFences -}}true{{- end -}}
{{- end -}}

{{/* The self-fence's bound in seconds (nodeLoss.selfFenceSeconds; files/tf_cluster_launcher/selffence.py),
     "0" when off: with no fence, nothing starts a replacement a cut-off task could run beside. */}}
{{- define "tf-cluster.selfFenceSeconds" -}}
{{- if include "tf-cluster.fences" . -}}{{ int .Values.nodeLoss.selfFenceSeconds }}{{- else -}}0{{- end -}}
{{- end -}}

{{/* A role's tolerations, as a JSON list: its own, then the lost-node ones of
     nodeLoss.tolerationSeconds unless the role tolerates those keys itself.
     Usage: include "tf-cluster.tolerations" (dict "context" $ "role" $role) | fromJsonArray */}}
{{- define "tf-cluster.tolerations" -}}
{{- $own := default list .role.tolerations -}}
{{- $out := $own -}}
{{- $seconds := .context.Values.nodeLoss.tolerationSeconds -}}
{{- if not (kindIs "invalid" $seconds) -}}
{{- range $key := list "node.kubernetes.io/not-ready" "node.kubernetes.io/unreachable" -}}
{{- $has := false -}}
{{- range $own -}}{{- if eq (default "" .key) $key -}}{{- $has = true -}}{{- end -}}{{- end -}}
{{- if not $has -}}
{{- $out = append $out (dict "key" $key "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" (int $seconds)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* A pod's affinity, as JSON: its own (`role.affinity`), with scheduling.singleNode's required
     pod affinity to the release's pods on one node added.
     Usage: include "tf-cluster.affinity" (dict "context" $ "affinity" $role.affinity) | fromJson */}}
{{- define "tf-cluster.affinity" -}}
{{- $aff := deepCopy (default dict .affinity) -}}
{{- if .context.Values.scheduling.singleNode -}}
{{- $pa := default dict $aff.podAffinity -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (dict "app.kubernetes.io/instance" .context.Release.Name)) -}}
{{- $_ := set $pa "requiredDuringSchedulingIgnoredDuringExecution" (append (default list $pa.requiredDuringSchedulingIgnoredDuringExecution) $term) -}}
{{- $_ := set $aff "podAffinity" $pa -}}
{{- end -}}
{{- toJson $aff -}}
{{- end -}}

{{/* The labels a role's pods carry, as JSON: the pod template's, and the Job controller's job
     name; the labels whose value differs from pod to pod (the completion index, the Job's uid)
     are left out (see "tf-cluster.selectorMatches"). Usage: as "tf-cluster.inGang". */}}
{{- define "tf-cluster.podLabels" -}}
{{- $ctx := .context -}}
{{- $role := include "tf-cluster.role" . | fromJson -}}
{{- $out := include "tf-cluster.componentSelectorLabels" (dict "context" $ctx "component" .role) | fromYaml -}}
{{- $_ := set $out "tf-cluster.io/run" (default "none" (include "tf-cluster.runSuffix" $ctx)) -}}
{{- $out = merge $out (default dict $role.podLabels) (include "tf-cluster.gangPodMeta" . | fromJson).labels -}}
{{- $job := include "tf-cluster.jobName" . -}}
{{- $_ := set $out "batch.kubernetes.io/job-name" $job -}}
{{- $_ := set $out "job-name" $job -}}
{{- toJson $out -}}
{{- end -}}

{{/* Whether a LabelSelector matches the pods of one role: "yes" (every pod), "no" (none), or
     "some" (it names a label the Job controller sets per pod: the completion index, the uid).
     Usage: include "tf-cluster.selectorMatches" (dict "selector" $sel "labels" $podLabels) */}}
{{- define "tf-cluster.selectorMatches" -}}
{{- $perPod := list "batch.kubernetes.io/job-completion-index" "batch.kubernetes.io/controller-uid" "controller-uid" -}}
{{- $labels := .labels -}}
{{- $result := "yes" -}}
{{- $reqs := list -}}
{{- range $k, $v := default dict .selector.matchLabels -}}
{{- $reqs = append $reqs (dict "key" $k "operator" "In" "values" (list $v)) -}}
{{- end -}}
{{- range $req := concat $reqs (default list .selector.matchExpressions) -}}
{{- $values := list -}}
{{- range $x := default list $req.values -}}{{- $values = append $values (toString $x) -}}{{- end -}}
{{- $has := hasKey $labels $req.key -}}
{{- $value := toString (get $labels $req.key) -}}
{{- if has $req.key $perPod -}}
{{- if eq $req.operator "DoesNotExist" -}}{{- $result = "no" -}}
{{- else if and (ne $req.operator "Exists") (eq $result "yes") -}}{{- $result = "some" -}}
{{- end -}}
{{- else if eq $req.operator "In" -}}{{- if not (and $has (has $value $values)) -}}{{- $result = "no" -}}{{- end -}}
{{- else if eq $req.operator "NotIn" -}}{{- if and $has (has $value $values) -}}{{- $result = "no" -}}{{- end -}}
{{- else if eq $req.operator "Exists" -}}{{- if not $has -}}{{- $result = "no" -}}{{- end -}}
{{- else if eq $req.operator "DoesNotExist" -}}{{- if $has -}}{{- $result = "no" -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $result -}}
{{- end -}}
