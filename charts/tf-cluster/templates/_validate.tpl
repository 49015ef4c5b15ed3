{{/*
Render-time validation: the rules the schema cannot say. Every message names the
value and says what to do. validate.yaml includes it, so it runs on every render
and nothing renders on failure (Helm renders every template before it prints any).
*/}}
{{- define "tf-cluster.validate" -}}
{{- $v := .Values -}}
{{- $ctx := . -}}
{{- range $row := include "tf-cluster.roleTable" . | fromJsonArray -}}
{{- $n := int (include "tf-cluster.replicas" (dict "context" $ctx "role" $row.name)) -}}
{{- if and (gt (int $row.maxReplicas) 0) (gt $n (int $row.maxReplicas)) -}}
{{- fail (printf "roles.%s.replicas=%d: %s" $row.name $n $row.tooMany) -}}
{{- end -}}
{{- end -}}
{{- $chief := int (include "tf-cluster.replicas" (dict "context" . "role" "chief")) -}}
{{- $worker := int (include "tf-cluster.replicas" (dict "context" . "role" "worker")) -}}
{{- $ps := int (include "tf-cluster.replicas" (dict "context" . "role" "ps")) -}}
{{- if eq (int (include "tf-cluster.trainingTaskCount" .)) 0 -}}
{{- fail "roles: no training task (roles.chief, roles.worker and roles.ps all have replicas 0); set roles.worker.replicas (or roles.chief.replicas) to at least 1" -}}
{{- end -}}
{{- range $group := list "training" "tensorboard" -}}
{{- range $module, $_ := (index $v.packages $group) -}}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*([.][A-Za-z_][A-Za-z0-9_]*)*$" $module) -}}
{{- fail (printf "packages.%s: key %q is not a Python module name. Each key is the module the image is checked for (e.g. tf_keras), its value the pip requirement that provides it (e.g. tf-keras==2.21.0)" $group $module) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $leader := include "tf-cluster.leaderRole" . -}}
{{- if eq (int (include "tf-cluster.replicas" (dict "context" . "role" $leader))) 0 -}}
{{- fail "roles: no chief and no worker; the run ends when the leading Job (the chief's, else the workers') ends. Set roles.worker.replicas (or roles.chief.replicas) to at least 1" -}}
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
{{- if and $v.scheduling.podGroup (eq (toString $v.scheduling.gang) "true") -}}
{{- fail (printf "scheduling.gang=true and scheduling.podGroup=%s: one gang mechanism per release; set scheduling.gang to auto (the %s PodGroup then takes its place) or scheduling.podGroup to \"\"" $v.scheduling.podGroup $v.scheduling.podGroup) -}}
{{- end -}}
{{- if include "tf-cluster.gang" . -}}
{{- $settings := include "tf-cluster.gangRoleSettings" . | fromJson -}}
{{- range $key := list "priorityClassName" "schedulerName" -}}
{{- $byRole := get $settings $key -}}
{{- if gt (len (values $byRole | uniq)) 1 -}}
{{- $shown := list -}}
{{- range $role := keys $byRole | sortAlpha -}}{{- $shown = append $shown (printf "roles.%s.%s=%q" $role $key (get $byRole $role)) -}}{{- end -}}
{{- fail (printf "scheduling: the gang's pods differ in %s (%s); the scheduler refuses a group whose pods do: set roleDefaults.%s for all of them, or turn the gang off (scheduling.gang=false, scheduling.podGroup=\"\")" $key (join ", " $shown) $key) -}}
{{- end -}}
{{- end -}}
{{- include "tf-cluster.validateGangAffinity" . -}}
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
{{- $n := int (include "tf-cluster.replicas" (dict "context" $ctx "role" $role)) -}}
{{- if gt $n 0 -}}
{{- $host := printf "%s-%d" (include "tf-cluster.jobName" (dict "context" $ctx "role" $role)) (sub $n 1) -}}
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
{{- /* A claim the release creates, mounted read-write by several pods, must be shareable across nodes. */ -}}
{{- $tasks := 0 -}}
{{- range $role := splitList " " (include "tf-cluster.roles" .) -}}
{{- $tasks = add $tasks (int (include "tf-cluster.replicas" (dict "context" $ctx "role" $role))) -}}
{{- end -}}
{{- range $vol := splitList " " (include "tf-cluster.storageVolumes" .) -}}
{{- $cfg := index $v.storage $vol -}}
{{- $modes := default list $cfg.accessModes -}}
{{- $shared := or (has "ReadWriteMany" $modes) (and $cfg.readOnly (has "ReadOnlyMany" $modes)) -}}
{{- $pods := $tasks -}}
{{- if and $v.tensorboard.enabled (eq $vol "logs") -}}{{- $pods = add1 $pods -}}{{- end -}}
{{- if $v.notebook.enabled -}}{{- $pods = add1 $pods -}}{{- end -}}
{{- if and (eq $cfg.type "pvc") (not $shared) (gt (int $pods) 1) (not $v.scheduling.singleNode) -}}
{{- fail (printf "storage.%s.accessModes=%s: %d pods of this release mount the claim, and a %s volume is mounted read-write on one node only. On a cluster of several nodes the pods placed elsewhere never start (Multi-Attach errors, or Pending on a volume node affinity conflict), or a node-local class silently pins every task to one node. Set storage.%s.accessModes to [ReadWriteMany] with a class that provides it (NFS, EFS, CephFS, Filestore, Azure Files: storage.%s.storageClass), or set scheduling.singleNode=true to place every pod of the release on one node on purpose." $vol (toJson $modes) (int $pods) (join "/" $modes) $vol $vol) -}}
{{- end -}}
{{- end -}}
{{- if and $v.tensorboard.enabled (eq $v.storage.logs.type "none") -}}
{{- fail "tensorboard.enabled=true needs a logs volume: set storage.logs.type to pvc or existingClaim" -}}
{{- end -}}
{{- if $v.notebook.coordinator -}}
{{- if not $v.notebook.enabled -}}
{{- fail "notebook.coordinator=true needs the notebook: set notebook.enabled=true (its kernel is then the chief)" -}}
{{- end -}}
{{- if ne $v.strategy "parameterServer" -}}
{{- fail (printf "notebook.coordinator=true with strategy %s: only a parameterServer cluster has a coordinator a notebook can be (its ps and worker servers wait for it); set strategy: parameterServer, or notebook.coordinator=false" $v.strategy) -}}
{{- end -}}
{{- end -}}
{{- if and $v.notebook.enabled $v.notebook.ingress.enabled (ne $v.notebook.ingress.path "/") (hasSuffix "/" $v.notebook.ingress.path) -}}
{{- fail (printf "notebook.ingress.path=%q: leave off the trailing '/' (e.g. /jupyter)" $v.notebook.ingress.path) -}}
{{- end -}}
{{- if and $v.metrics.enabled (eq (int $v.metrics.port) (int $v.port)) -}}
{{- fail (printf "metrics.port=%d is TensorFlow's port (port=%d): the launcher's exporter and the task's TensorFlow server would both listen on it in every pod; set metrics.port to a free port (default 9464), or metrics.enabled=false" (int $v.metrics.port) (int $v.port)) -}}
{{- end -}}
{{- include "tf-cluster.validateKubernetes" . -}}
{{- include "tf-cluster.tfConfigSizeCheck" . -}}
{{- end -}}

{{/* With Kubernetes' own gang (the native PodGroup) the scheduler places the gang's pods in one
     cycle, in the queue's order (the order they were created: the chief's Job's, then the ps', then
     the workers', as Helm and Argo CD create Jobs by name; a Job creates index 0 first), and a
     required pod affinity term counts only the pods placed before it. So a term on pods of a role
     created later is never met and the release waits forever. Measured on the e2e node (1.37):
     the chief required beside worker 0, and a ps beside the workers, stayed Pending ("didn't match
     pod affinity rules", 600 s and 120 s); workers beside the chief, and beside worker 0, were
     placed (tests/e2e/cluster/test_gang.py shows the first). */}}
{{- define "tf-cluster.validateGangAffinity" -}}
{{- $ctx := . -}}
{{- if eq (include "tf-cluster.gang" .) "native" -}}
{{- $gang := list -}}
{{- range $role := splitList " " (include "tf-cluster.rolesWith" (dict "context" $ctx "trait" "inGang")) -}}
{{- $r := dict "context" $ctx "role" $role -}}
{{- $n := int (include "tf-cluster.jobReplicas" $r) -}}
{{- if gt $n 0 -}}
{{- $gang = append $gang (dict "role" $role "labels" (include "tf-cluster.podLabels" $r | fromJson)) -}}
{{- end -}}
{{- end -}}
{{- range $member := $gang -}}
{{- $spec := include "tf-cluster.role" (dict "context" $ctx "role" $member.role) | fromJson -}}
{{- $aff := include "tf-cluster.affinity" (dict "context" $ctx "affinity" $spec.affinity) | fromJson -}}
{{- range $i, $term := (default dict $aff.podAffinity).requiredDuringSchedulingIgnoredDuringExecution -}}
{{- $here := or (empty $term.namespaces) (has $ctx.Release.Namespace $term.namespaces) (hasKey $term "namespaceSelector") -}}
{{- if and $here (hasKey $term "labelSelector") (kindIs "map" $term.labelSelector) -}}
{{- $self := include "tf-cluster.selectorMatches" (dict "selector" $term.labelSelector "labels" $member.labels) -}}
{{- if ne $self "yes" -}}
{{- range $other := $gang -}}
{{- $m := include "tf-cluster.selectorMatches" (dict "selector" $term.labelSelector "labels" $other.labels) -}}
{{- if and (ne $m "no") (gt $other.role $member.role) -}}
{{- fail (printf "roles.%s.affinity (or roleDefaults.affinity): podAffinity.requiredDuringSchedulingIgnoredDuringExecution[%d] (labelSelector %s) selects %s pods of this release's gang, which are created after the %s pods. With the gang on (scheduling.gang: Kubernetes' PodGroup) the scheduler places the gang's pods in one cycle, in the order they were created (chief, ps, workers), and a required affinity counts only the pods placed before it: the %s pods would never be placed and the release would wait forever. Make that term preferredDuringSchedulingIgnoredDuringExecution, require it the other way round (roles.%s beside the %s pods), or set scheduling.gang=false" $member.role (int $i) (toJson $term.labelSelector) $other.role $member.role $member.role $other.role $member.role) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
