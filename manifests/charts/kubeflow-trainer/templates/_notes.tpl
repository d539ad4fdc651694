{{- /* The install's notes (NOTES.txt), a named template so tests/deploy/test_chart.py can render
them: `helm template` leaves NOTES.txt out. */ -}}
{{- define "trainer.notes" -}}
Kubeflow Trainer (trainer-py {{ .Chart.AppVersion }}) is installed in namespace {{ .Release.Namespace }}.
It needs JobSet v0.12.0 in the cluster (this chart does not install it).

  kubectl -n {{ .Release.Namespace }} rollout status deployment/{{ include "trainer.name" . }}
{{- $wanted := include "trainer.runtimesWanted" . | trim }}
{{- if $wanted }}

Built-in ClusterTrainingRuntimes, applied by the hook Job {{ include "trainer.installerName" . }}-install: {{ splitList "\n" $wanted | join ", " }}.
{{- end }}
{{- if .Values.jobset.install }}

WARNING: jobset.install=true is ignored: this chart does not install JobSet. Install JobSet
v0.12.0 first (docs/install.md).
{{- end }}
{{- if and .Values.dataCache.enabled .Values.dataCache.lws.install }}

WARNING: dataCache.lws.install=true is ignored: LeaderWorkerSet is not installed, and this
project's data cache (torch-distributed-with-cache) does not need it.
{{- end }}
{{- $installer := .Values.runtimes.installer }}
{{- $defaultImage := dict "registry" "docker.io" "repository" "alpine" "tag" "3.21" }}
{{- if ne (toJson $installer.image) (toJson $defaultImage) }}

WARNING: runtimes.installer.image is ignored: the runtimes installer runs `trainer runtimes` in
the controller's image ({{ include "trainer.image" . }}).
{{- end }}
{{- end }}
