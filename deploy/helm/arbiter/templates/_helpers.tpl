{{/*
Names and labels shared by the templates. Object names are PREFIX-COMPONENT,
PREFIX being fullnameOverride or the release name.
*/}}

{{- define "arbiter.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "arbiter.arbiterd" -}}
{{- include "arbiter.fullname" . }}-arbiterd
{{- end -}}

{{/* The headless Service that gives each arbiterd replica a DNS name. */}}
{{- define "arbiter.arbiterd.peers" -}}
{{- include "arbiter.fullname" . }}-arbiterd-peers
{{- end -}}

{{- define "arbiter.controller" -}}
{{- include "arbiter.fullname" . }}-kube
{{- end -}}

{{- define "arbiter.image" -}}
{{- .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{/* Labels every object carries, with its component's selector labels. */}}
{{- define "arbiter.labels" -}}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: arbiter
{{- end -}}

{{- define "arbiter.arbiterd.selectorLabels" -}}
app.kubernetes.io/name: arbiterd
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "arbiter.arbiterd.labels" -}}
{{ include "arbiter.labels" . }}
{{ include "arbiter.arbiterd.selectorLabels" . }}
{{- end -}}

{{- define "arbiter.controller.selectorLabels" -}}
app.kubernetes.io/name: arbiter-kube
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "arbiter.controller.labels" -}}
{{ include "arbiter.labels" . }}
{{ include "arbiter.controller.selectorLabels" . }}
{{- end -}}

{{/* The Secret and key holding the DSN. */}}
{{- define "arbiter.dsnSecret" -}}
{{- if .Values.arbiterd.database.dsn -}}
{{- include "arbiter.arbiterd" . }}-db
{{- else -}}
{{- required "set arbiterd.database.dsn or arbiterd.database.existingSecret" .Values.arbiterd.database.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "arbiter.dsnKey" -}}
{{- if .Values.arbiterd.database.dsn -}}
dsn
{{- else -}}
{{- .Values.arbiterd.database.secretKey -}}
{{- end -}}
{{- end -}}

{{/* The Secret of the webhooks' certificate; empty: the gRPC server's. */}}
{{- define "arbiter.webhookSecret" -}}
{{- if .Values.webhook.certManager.enabled -}}
{{- include "arbiter.arbiterd" . }}-webhook-tls
{{- else -}}
{{- .Values.webhook.tlsSecretName -}}
{{- end -}}
{{- end -}}

{{/* arbiterd's gRPC address for in-cluster clients. */}}
{{- define "arbiter.endpoint" -}}
{{- if .Values.controller.endpoint -}}
{{- .Values.controller.endpoint -}}
{{- else -}}
{{- include "arbiter.arbiterd" . }}.{{ .Release.Namespace }}.svc:{{ .Values.arbiterd.service.grpcPort }}
{{- end -}}
{{- end -}}

{{/* The locked-down security context of every container. */}}
{{- define "arbiter.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "arbiter.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The webhooks' shared settings: which namespaces they skip. */}}
{{- define "arbiter.webhookNamespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: ["kube-system", {{ .Release.Namespace | quote }}{{ range .Values.webhook.excludeNamespaces }}, {{ . | quote }}{{ end }}]
    - key: arbiter.dev/webhook
      operator: NotIn
      values: ["skip"]
{{- end -}}
