{{/* Names and labels. */}}
{{- define "tcp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tcp.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tcp.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tcp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: toolcall-processor
{{- end -}}

{{- define "tcp.selector" -}}
app.kubernetes.io/name: {{ include "tcp.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tcp.image" -}}
{{- $img := .image -}}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{- define "tcp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tcp.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "tcp.toolsConfigMap" -}}
{{- default (printf "%s-tools" (include "tcp.fullname" .)) .Values.tools.existingConfigMap -}}
{{- end -}}

{{/*
Replicas never exceed partitions: a worker without a partition is never ready (/readyz means
"partitions assigned and restored"), and an executor without a dispatch partition idles.
*/}}
{{- define "tcp.checks" -}}
{{- if gt (int .Values.worker.replicas) (int .Values.topics.partitions) -}}
{{- fail (printf "worker.replicas (%d) must not exceed topics.partitions (%d): a worker without a partition stays unready and idle" (int .Values.worker.replicas) (int .Values.topics.partitions)) -}}
{{- end -}}
{{- if and .Values.executor.enabled (gt (int .Values.executor.replicas) (int .Values.topics.partitions)) -}}
{{- fail (printf "executor.replicas (%d) must not exceed topics.partitions (%d)" (int .Values.executor.replicas) (int .Values.topics.partitions)) -}}
{{- end -}}
{{- if and (not .Values.keyring.existingSecret) (not .Values.keyring.allowUnsignedOperatorCommands) -}}
{{- fail "keyring.existingSecret is required: operator commands are signed (set keyring.allowUnsignedOperatorCommands=true only for a throwaway test cluster)" -}}
{{- end -}}
{{- if and .Values.kafka.sasl.enabled (not .Values.kafka.sasl.existingSecret) -}}
{{- fail "kafka.sasl.existingSecret is required when kafka.sasl.enabled" -}}
{{- end -}}
{{- end -}}

{{/* The Kafka connection and topic environment shared by every container. */}}
{{- define "tcp.kafkaEnv" -}}
- name: PROCESSOR_BOOTSTRAP_SERVERS
  value: {{ required "kafka.bootstrapServers is required" .Values.kafka.bootstrapServers | quote }}
- name: PROCESSOR_TOPIC_PREFIX
  value: {{ .Values.kafka.topicPrefix | quote }}
- name: PROCESSOR_SECURITY_PROTOCOL
  value: {{ .Values.kafka.securityProtocol | quote }}
{{- with .Values.kafka.sasl }}
{{- if .enabled }}
- name: PROCESSOR_SASL_MECHANISM
  value: {{ .mechanism | quote }}
{{- if .username }}
- name: PROCESSOR_SASL_USERNAME
  value: {{ .username | quote }}
{{- end }}
{{- if eq .mechanism "OAUTHBEARER" }}
- name: PROCESSOR_SASL_OAUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .tokenKey }}
{{- else }}
- name: PROCESSOR_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .passwordKey }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.kafka.tls }}
{{- if .enabled }}
- name: PROCESSOR_SSL_CAFILE
  value: /etc/toolcall/tls/{{ .caKey }}
{{- if .certKey }}
- name: PROCESSOR_SSL_CERTFILE
  value: /etc/toolcall/tls/{{ .certKey }}
- name: PROCESSOR_SSL_KEYFILE
  value: /etc/toolcall/tls/{{ .keyKey }}
{{- end }}
{{- if .keyPasswordKey }}
- name: PROCESSOR_SSL_KEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .keyPasswordKey }}
{{- end }}
{{- end }}
{{- end }}
- name: PROCESSOR_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end -}}

{{/* Volumes every pod mounts: /tmp (read-only root), TLS material, keyring, tools. */}}
{{- define "tcp.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
- name: tools
  configMap:
    name: {{ include "tcp.toolsConfigMap" . }}
{{- if .Values.keyring.existingSecret }}
- name: keyring
  secret:
    secretName: {{ .Values.keyring.existingSecret }}
{{- end }}
{{- if .Values.kafka.tls.enabled }}
- name: tls
  secret:
    secretName: {{ required "kafka.tls.existingSecret is required when kafka.tls.enabled" .Values.kafka.tls.existingSecret }}
{{- end }}
{{- end -}}

{{- define "tcp.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: tools
  mountPath: /etc/toolcall/tools
  readOnly: true
{{- if .Values.keyring.existingSecret }}
- name: keyring
  mountPath: /etc/toolcall/keyring
  readOnly: true
{{- end }}
{{- if .Values.kafka.tls.enabled }}
- name: tls
  mountPath: /etc/toolcall/tls
  readOnly: true
{{- end }}
{{- end -}}
