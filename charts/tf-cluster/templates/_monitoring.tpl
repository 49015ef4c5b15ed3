{{/*
The monitoring objects of `metrics` (podmonitor.yaml, prometheusrule.yaml,
dashboard-configmap.yaml): when each renders. The exporter itself (the launcher's
`metrics.port`) and its scrape annotations are the pod's (_pod.tpl).
*/}}

{{/*
"true" when the Prometheus Operator object `metrics.<object>` (podMonitor, prometheusRule)
renders: metrics.enabled, and its `enabled` is true, or `auto` and the cluster serves
monitoring.coreos.com/v1 (Helm's .Capabilities; `helm template` has it with
`--api-versions monitoring.coreos.com/v1`). An explicit `true` without the exporter fails.
Usage: include "tf-cluster.monitoring.renders" (dict "context" $ "object" "podMonitor")
*/}}
{{- define "tf-cluster.monitoring.renders" -}}
{{- if not (and (hasKey . "context") (hasKey . "object")) -}}
{{- fail "tf-cluster.monitoring.renders: pass (dict \"context\" $ \"object\" \"podMonitor\"|\"prometheusRule\")" -}}
{{- end -}}
{{- $metrics := .context.Values.metrics -}}
{{- $setting := toString (get (index $metrics .object) "enabled") -}}
{{- if and (eq $setting "true") (not $metrics.enabled) -}}
{{- fail (printf "metrics.%s.enabled=true needs metrics.enabled=true (the tasks' exporter it is about); set metrics.enabled=true, or metrics.%s.enabled=false" .object .object) -}}
{{- end -}}
{{- if $metrics.enabled -}}
{{- if or (eq $setting "true") (and (eq $setting "auto") (.context.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the Grafana dashboard ConfigMap renders (metrics.dashboard.enabled; it fails without the exporter). */}}
{{- define "tf-cluster.monitoring.dashboard" -}}
{{- if .Values.metrics.dashboard.enabled -}}
{{- if not .Values.metrics.enabled -}}
{{- fail "metrics.dashboard.enabled=true needs metrics.enabled=true (the dashboard shows the tasks' exported series); set metrics.enabled=true, or metrics.dashboard.enabled=false" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* Labels of a monitoring object: the chart's (component `metrics`) and the value's extra ones
     (the chart's win a clash: its selectors and `helm` need them as they are).
     Usage: include "tf-cluster.monitoring.labels" (dict "context" $ "extra" .Values.metrics.podMonitor.labels) */}}
{{- define "tf-cluster.monitoring.labels" -}}
{{- if not (and (hasKey . "context") (hasKey . "extra")) -}}
{{- fail "tf-cluster.monitoring.labels: pass (dict \"context\" $ \"extra\" LABELS)" -}}
{{- end -}}
{{- $labels := include "tf-cluster.componentLabels" (dict "context" .context "component" "metrics") | fromYaml -}}
{{- toYaml (merge $labels (deepCopy (default dict .extra))) -}}
{{- end -}}
