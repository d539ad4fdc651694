{{- /* The install's notes (NOTES.txt), a named template so tests/deploy/test_chart.py can render
them: `helm template` leaves NOTES.txt out. */ -}}
{{- define "trainer.notes" -}}
Kubeflow Trainer (trainer-py {{ .Chart.AppVersion }}) is installed in namespace {{ .Release.Namespace }}.
It needs JobSet v0.12.0 in the cluster (this chart does not install it).

  kubectl -n {{ .Release.Namespace }} rollout status deployment/{{ include "trainer.name" . }}
{{- $wanted := include "trainer.runtimesWanted" . | trim }}
{{- if $wanted }}
{{- if include "trainer.runtimesServed" . }}

Built-in ClusterTrainingRuntimes of this release: {{ splitList "\n" $wanted | join ", " }}.
{{- else }}

WARNING: the built-in ClusterTrainingRuntimes were NOT installed: the ClusterTrainingRuntime
API was not served when Helm rendered this release (this install creates its CRD), and Helm
cannot create objects of an API it has not seen. Install them now with:

  helm upgrade {{ .Release.Name }} <this chart> --namespace {{ .Release.Namespace }} --reuse-values
{{- end }}
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
{{- if or (ne (toJson $installer.image) (toJson $defaultImage)) $installer.imagePullSecrets $installer.resources $installer.nodeSelector $installer.affinity $installer.tolerations }}

WARNING: runtimes.installer is ignored: no installer Job runs here; the runtimes are objects
of this release.
{{- end }}
{{- end }}
