{{- /*
Names, labels and values shared by the templates. With the chart's default values every object
is the one `trainer manifests` renders from trainer/deploy/templates (tests/deploy/test_chart.py
compares them): the names are that install's fixed names, whatever the release is called.
*/ -}}

{{- define "trainer.name" -}}kubeflow-trainer-controller-manager{{- end }}

{{- define "trainer.configMap" -}}kubeflow-trainer-config{{- end }}

{{- /* The Kubeflow Trainer release whose API this project serves, which the Kubeflow SDK reads
from the public ConfigMap (docs/configuration.md, "The public ConfigMap"). */ -}}
{{- define "trainer.release" -}}2.3.0{{- end }}

{{- /* Values this chart cannot honour stop the render, naming the key (README.md). */ -}}
{{- define "trainer.refuse" -}}
{{- if .Values.nameOverride }}
{{- fail "nameOverride: must be empty: this chart's object names are fixed (the controller patches its webhook configurations by name; RBAC grants its Lease and Secret by name)" }}
{{- end }}
{{- if .Values.fullnameOverride }}
{{- fail "fullnameOverride: must be empty: this chart's object names are fixed (the controller patches its webhook configurations by name; RBAC grants its Lease and Secret by name)" }}
{{- end }}
{{- $lease := .Values.manager.config.leaderElection.resourceNamespace }}
{{- if and $lease (ne $lease .Release.Namespace) }}
{{- fail (printf "manager.config.leaderElection.resourceNamespace: %q: the chart's Role grants the Lease in the release namespace %q only; leave it empty" $lease .Release.Namespace) }}
{{- end }}
{{- end }}

{{- /* Every object's labels: the install's own, then commonLabels. */ -}}
{{- define "trainer.labels" -}}
{{- $labels := dict "app.kubernetes.io/name" "kubeflow-trainer" "app.kubernetes.io/part-of" "trainer" }}
{{- toYaml (merge (deepCopy .Values.commonLabels) $labels) }}
{{- end }}

{{- /* The controller pods' selector. */ -}}
{{- define "trainer.selector" -}}
{{- toYaml (merge (deepCopy .Values.manager.selectorLabels) (dict "app.kubernetes.io/component" "controller-manager")) }}
{{- end }}

{{- define "trainer.serviceName" -}}
{{- .Values.manager.config.certManagement.webhookServiceName | default (include "trainer.name" .) }}
{{- end }}

{{- define "trainer.secretName" -}}
{{- .Values.manager.config.certManagement.webhookSecretName | default "kubeflow-trainer-webhook-cert" }}
{{- end }}

{{- define "trainer.leaseName" -}}
{{- .Values.manager.config.leaderElection.resourceName | default "trainer.kubeflow.org" }}
{{- end }}

{{- /* An image reference from {registry, repository, tag}: "registry/" only when a registry is
given, ":tag" only when there is a tag (the tag, else the default passed in). */ -}}
{{- define "trainer.imageRef" -}}
{{- $image := index . 0 }}
{{- $tag := $image.tag | default (index . 1) }}
{{- if $image.registry }}{{ $image.registry }}/{{ end }}{{ $image.repository }}{{ if $tag }}:{{ $tag }}{{ end }}
{{- end }}

{{- define "trainer.image" -}}
{{- include "trainer.imageRef" (list .Values.image .Chart.AppVersion) }}
{{- end }}

{{- /* The port of a bind address (":8443", "127.0.0.1:8443"); empty for "0" (turned off). */ -}}
{{- define "trainer.port" -}}
{{- if ne (toString .) "0" }}{{ regexFind "[0-9]+$" (toString .) }}{{ end }}
{{- end }}

{{- /* The runtimes installer's objects (runtimes.yaml, runtimes-installer.yaml). */ -}}
{{- define "trainer.runtimesConfigMap" -}}kubeflow-trainer-runtimes{{- end }}
{{- define "trainer.installerName" -}}kubeflow-trainer-runtimes-installer{{- end }}
