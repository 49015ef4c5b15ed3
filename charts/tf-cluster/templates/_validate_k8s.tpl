{{/*
Render-time checks of what the Kubernetes API server would refuse (or accept and then break):
names at every suffix the chart adds, Job fields against each other, mount paths, resource
requests against limits, port ranges, and pod labels the chart's selectors own. The schema holds
the patterns (label keys and values, DNS names, paths); these are the rules across values.
Every message names the value and says what to do. _validate.tpl includes it.
*/}}
{{- define "tf-cluster.validateKubernetes" -}}
{{- $v := .Values -}}
{{- $ctx := . -}}
{{- $fullname := include "tf-cluster.fullname" . -}}

{{- /* The chart grants its Roles to the release's own account, or to a named one the values accept. */ -}}
{{- $grants := list -}}
{{- if and $v.rbac.create (or (include "tf-cluster.anyStopsWithLeader" .) $v.tests.enabled (include "tf-cluster.fences" .) (include "tf-cluster.watchesPeers" .)) -}}
{{- $grants = append $grants (printf "the launcher's Role (list and watch pods and EndpointSlices, get the leading Job, create Events%s)" (ternary ", patch pods/status: the fence" "" (not (empty (include "tf-cluster.fences" .))))) -}}
{{- end -}}
{{- if and $v.rbac.create $v.notebook.enabled -}}
{{- $grants = append $grants "the notebook's Role (its token Secret)" -}}
{{- end -}}
{{- if and $grants (not $v.serviceAccount.create) (not $v.serviceAccount.shareGrants) -}}
{{- if $v.serviceAccount.name -}}
{{- fail (printf "serviceAccount.create=false with serviceAccount.name=%q: rbac.create would grant that account, which this chart does not own, %s, and every pod running as it would hold those rights. Set serviceAccount.shareGrants=true to accept that, or serviceAccount.create=true (the release's own account), or rbac.create=false and grant the account yourself" $v.serviceAccount.name (join " and " $grants)) -}}
{{- else -}}
{{- fail (printf "serviceAccount.create=false with no serviceAccount.name: the pods would run as the namespace's `default` account, and rbac.create would grant it %s: every pod of the namespace that runs as `default` would hold those rights. Set serviceAccount.create=true (the release's own account), or name an account you manage (serviceAccount.name) and set serviceAccount.shareGrants=true, or set rbac.create=false" (join " and " $grants)) -}}
{{- end -}}
{{- end -}}

{{- /* Service names are DNS-1035 labels: 63 characters at most, with the chart's suffixes. */ -}}
{{- $services := list -}}
{{- if $v.tensorboard.enabled -}}{{- $services = append $services (list (printf "%s-tensorboard" $fullname) "tensorboard.enabled") -}}{{- end -}}
{{- if $v.notebook.enabled -}}{{- $services = append $services (list (printf "%s-notebook" $fullname) "notebook.enabled") -}}{{- end -}}
{{- range $s := $services -}}
{{- $name := index $s 0 -}}
{{- if gt (len $name) 63 -}}
{{- fail (printf "Service name %q (%s) is %d characters, over the 63 allowed in a DNS label: shorten the release name or set fullnameOverride (now %q, %d characters) to at most %d characters" $name (index $s 1) (len $name) $fullname (len $fullname) (sub (len $fullname) (sub (len $name) 63))) -}}
{{- end -}}
{{- end -}}

{{- /* Per role: Job fields that depend on each other, pod labels, resources. */ -}}
{{- $owned := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" -}}
{{- range $role := splitList " " (include "tf-cluster.roles" .) -}}
{{- $r := dict "context" $ctx "role" $role -}}
{{- $n := int (include "tf-cluster.jobReplicas" $r) -}}
{{- if gt $n 0 -}}
{{- $policy := include "tf-cluster.jobPolicy" $r | fromJson -}}
{{- if and (not (kindIs "invalid" $policy.maxFailedIndexes)) (gt (int $policy.maxFailedIndexes) $n) -}}
{{- fail (printf "job.maxFailedIndexes=%d (or jobPolicies.%s.maxFailedIndexes) is above the %s Job's completions (%d tasks): Kubernetes refuses the Job. Set it to at most %d, or leave it empty" (int $policy.maxFailedIndexes) $role $role $n $n) -}}
{{- end -}}
{{- range $code := default list $policy.restartExitCodes -}}
{{- if has $code (default list $policy.nonRetryableExitCodes) -}}
{{- fail (printf "exit code %d is in both job.restartExitCodes and job.nonRetryableExitCodes (or jobPolicies.%s's): a code either restarts the task without counting or fails the Job at once. Remove it from one of them" (int $code) $role) -}}
{{- end -}}
{{- if ge (int $code) 128 -}}
{{- fail (printf "job.restartExitCodes (or jobPolicies.%s.restartExitCodes) has %d: codes from 128 are a signal's (128+n: 137 a SIGKILL or the OOM killer, 143 the launcher's kill after launcher.stopGraceSeconds), not a program asking for a restart, and an eviction is already retried without counting. Use a code below 128 that your program exits with after saving (TensorFlow's is 42)" $role (int $code)) -}}
{{- end -}}
{{- if has (int $code) (list 3 4 5 6) -}}
{{- fail (printf "job.restartExitCodes (or jobPolicies.%s.restartExitCodes) has %d, one of the launcher's own exit codes (3: the leading Job failed, 4: peers never resolved, 5: a task that could never end, 6: the coordinator reconnects): restarting on it would loop or hide a failure. Remove it" $role (int $code)) -}}
{{- end -}}
{{- end -}}
{{- if gt (int $v.launcher.stopGraceSeconds) (int $policy.terminationGracePeriodSeconds) -}}
{{- fail (printf "launcher.stopGraceSeconds=%d is above the %s pods' terminationGracePeriodSeconds (%d, job or jobPolicies.%s): the kubelet kills the pod before the program's grace ends, so it never saves. Lower launcher.stopGraceSeconds or raise job.terminationGracePeriodSeconds" (int $v.launcher.stopGraceSeconds) $role (int $policy.terminationGracePeriodSeconds) $role) -}}
{{- end -}}
{{- $spec := include "tf-cluster.role" $r | fromJson -}}
{{- range $key := keys (default dict $spec.podLabels) | sortAlpha -}}
{{- if or (has $key $owned) (hasPrefix "tf-cluster.io/" $key) (hasPrefix "batch.kubernetes.io/" $key) -}}
{{- fail (printf "roles.%s.podLabels (or roleDefaults.podLabels) sets %q, a label the chart owns: its Service, NetworkPolicy and peers select the release's pods by it, so the pods would leave their own cluster. Use another key" $role $key) -}}
{{- end -}}
{{- end -}}
{{- include "tf-cluster.requestsWithinLimits" (dict "where" (printf "roles.%s.resources (or roleDefaults.resources)" $role) "resources" $spec.resources) -}}
{{- include "tf-cluster.checkPodExtensions" (dict "context" $ctx "role" $role "spec" $spec) -}}
{{- end -}}
{{- end -}}
{{- if $v.tensorboard.enabled -}}
{{- include "tf-cluster.requestsWithinLimits" (dict "where" "tensorboard.resources" "resources" $v.tensorboard.resources) -}}
{{- end -}}
{{- if $v.notebook.enabled -}}
{{- include "tf-cluster.requestsWithinLimits" (dict "where" "notebook.resources" "resources" $v.notebook.resources) -}}
{{- $svc := $v.notebook.service -}}
{{- if and (eq $svc.type "NodePort") $svc.nodePort (or (lt (int $svc.nodePort) 30000) (gt (int $svc.nodePort) 32767)) -}}
{{- fail (printf "notebook.service.nodePort=%d is outside the API server's default NodePort range 30000-32767: pick a port in it, or leave it empty for one the cluster assigns" (int $svc.nodePort)) -}}
{{- end -}}
{{- end -}}
{{- include "tf-cluster.requestsWithinLimits" (dict "where" "tests.resources" "resources" $v.tests.resources) -}}

{{- end -}}

{{/*
A role's pod extensions (extraVolumes, extraVolumeMounts, initContainers, sidecars) against the
chart's own volumes, mounts and containers, and the training container's mounts against each
other: one volume per path, none under a read-only one.
Usage: include "tf-cluster.checkPodExtensions" (dict "context" $ "role" "worker" "spec" $roleSpec)
*/}}
{{- define "tf-cluster.checkPodExtensions" -}}
{{- $v := .context.Values -}}
{{- $role := .role -}}
{{- $spec := .spec -}}
{{- $where := printf "roles.%s (or roleDefaults)" $role -}}
{{- $chartVolumes := list "tmp" "launcher" "launcher-package" "trainers" "packages" "data" "checkpoints" "logs" "code" "dshm" "tf-cluster-agent" "tf-cluster-token" -}}
{{- $volumes := $chartVolumes -}}
{{- range $vol := default list $spec.extraVolumes -}}
{{- if has $vol.name $volumes -}}
{{- fail (printf "%s.extraVolumes: a volume named %q is already in the pod%s; give it another name" $where $vol.name (ternary " (one of the chart's own: tmp, launcher, trainers, packages, data, checkpoints, logs, code, dshm, tf-cluster-agent, tf-cluster-token)" "" (has $vol.name $chartVolumes))) -}}
{{- end -}}
{{- $volumes = append $volumes $vol.name -}}
{{- end -}}
{{- range $m := default list $spec.extraVolumeMounts -}}
{{- if not (has $m.name $volumes) -}}
{{- fail (printf "%s.extraVolumeMounts: mount of %q at %q names no volume of the pod; add it to extraVolumes (or mount one of the chart's)" $where $m.name $m.mountPath) -}}
{{- end -}}
{{- end -}}
{{- $containers := list "tensorflow" "tf-cluster-agent" "packages" -}}
{{- range $kind := list "sidecars" "initContainers" -}}
{{- range $c := default list (get $spec $kind) -}}
{{- if has $c.name $containers -}}
{{- fail (printf "%s.%s: a container named %q is already in the pod%s; give it another name" $where $kind $c.name (get (dict "tensorflow" " (the training container)" "tf-cluster-agent" " (the chart's agent, which holds the token)" "packages" " (the chart's, which adds what the image lacks)") $c.name)) -}}
{{- end -}}
{{- $containers = append $containers $c.name -}}
{{- if and (eq $kind "sidecars") $c.restartPolicy (ne $c.restartPolicy "Always") -}}
{{- fail (printf "%s.sidecars[%s].restartPolicy=%q: a sidecar runs as a native sidecar (restartPolicy Always, set for you); put a container that must run to completion first under initContainers" $where $c.name $c.restartPolicy) -}}
{{- end -}}
{{- if and (eq $kind "initContainers") (eq (toString $c.restartPolicy) "Always") -}}
{{- fail (printf "%s.initContainers[%s].restartPolicy=Always: that is a sidecar; list it under sidecars" $where $c.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $mounts := list (dict "path" "/tmp" "value" "the chart's /tmp" "ro" false) (dict "path" "/opt/tf-cluster/launcher" "value" "the chart's launcher" "ro" true) (dict "path" "/opt/tf-cluster/trainers" "value" "the chart's example trainers" "ro" true) (dict "path" "/opt/tf-cluster/packages" "value" "the chart's packages" "ro" true) (dict "path" "/opt/tf-cluster/agent" "value" "the chart's agent files" "ro" true) -}}
{{- range $vol := splitList " " (include "tf-cluster.storageVolumes" .context) -}}
{{- $cfg := index $v.storage $vol -}}
{{- if ne $cfg.type "none" -}}
{{- $mounts = append $mounts (dict "path" $cfg.mountPath "value" (printf "storage.%s.mountPath=%q" $vol $cfg.mountPath) "ro" (not (not $cfg.readOnly))) -}}
{{- end -}}
{{- end -}}
{{- if or $v.code.files $v.code.existingConfigMap -}}
{{- $mounts = append $mounts (dict "path" $v.code.mountPath "value" (printf "code.mountPath=%q" $v.code.mountPath) "ro" true) -}}
{{- end -}}
{{- if $v.shmSize -}}
{{- $mounts = append $mounts (dict "path" "/dev/shm" "value" "the chart's /dev/shm (shmSize)" "ro" false) -}}
{{- end -}}
{{- range $m := default list $spec.extraVolumeMounts -}}
{{- $mounts = append $mounts (dict "path" $m.mountPath "value" (printf "%s.extraVolumeMounts[%s].mountPath=%q" $where $m.name $m.mountPath) "ro" (not (not $m.readOnly))) -}}
{{- end -}}
{{- range $i, $a := $mounts -}}
{{- range $j, $b := $mounts -}}
{{- if lt $i $j -}}
{{- $pa := trimSuffix "/" $a.path | default "/" -}}
{{- $pb := trimSuffix "/" $b.path | default "/" -}}
{{- if eq $pa $pb -}}
{{- fail (printf "%s and %s mount two volumes at one path %q of the training container: Kubernetes refuses the pod. Give %s another path" $b.value $a.value $pa $b.value) -}}
{{- end -}}
{{- range $pair := list (list $a $pa $b $pb) (list $b $pb $a $pa) -}}
{{- $outer := index $pair 0 -}}{{- $inner := index $pair 2 -}}
{{- if and $outer.ro (hasPrefix (printf "%s/" (index $pair 1)) (index $pair 3)) -}}
{{- fail (printf "%s is under %s, a read-only mount: the container cannot start (its mount point cannot be made there). Choose a path outside %q" $inner.value $outer.value (index $pair 1)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Fails when a request is above its limit for the same resource (Kubernetes refuses the pod).
Quantities are compared as numbers: 500m, 2, 1.5Gi, 1e3, 512Mi ...
Usage: include "tf-cluster.requestsWithinLimits" (dict "where" "roles.worker.resources" "resources" $resources)
*/}}
{{- define "tf-cluster.requestsWithinLimits" -}}
{{- $res := default dict .resources -}}
{{- $limits := default dict $res.limits -}}
{{- range $name, $request := default dict $res.requests -}}
{{- if hasKey $limits $name -}}
{{- $limit := get $limits $name -}}
{{- if gt (float64 (include "tf-cluster.quantity" $request)) (float64 (include "tf-cluster.quantity" $limit)) -}}
{{- fail (printf "%s: requests.%s=%v is above limits.%s=%v; Kubernetes refuses the pod. Lower the request or raise the limit" $.where $name $request $name $limit) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A Kubernetes quantity as a plain number (float). Usage: include "tf-cluster.quantity" "1.5Gi" */}}
{{- define "tf-cluster.quantity" -}}
{{- $s := toString . -}}
{{- $num := regexFind "^[0-9.]+([eE][-+]?[0-9]+)?" $s -}}
{{- $suffix := trimPrefix $num $s -}}
{{- $scale := dict "" 1.0 "m" 0.001 "k" 1000.0 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- if not (hasKey $scale $suffix) -}}
{{- fail (printf "%q is not a Kubernetes quantity (e.g. 500m, 2, 1.5Gi)" $s) -}}
{{- end -}}
{{- mulf (float64 $num) (get $scale $suffix) -}}
{{- end -}}
