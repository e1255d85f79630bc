// The bounds of every request field, in one table keyed by the field's full proto name. Fields not
// listed get the defaults below by kind. Every number here is written in the field's comment in
// proto/ (the contract), so a client knows it without reading this file; keep the two in step.

export interface FieldRule {
  /** Strings: the most bytes of UTF-8. Bytes fields: the most bytes. Map fields: per value. */
  maxBytes?: number;
  /** Strings may carry line breaks and tabs (PEM); every other control character is still refused. */
  multiline?: boolean;
  /** Strings: a UUID in canonical 8-4-4-4-12 hex form when not empty. */
  uuid?: boolean;
  /** Repeated and map fields: the most entries. */
  maxCount?: number;
  /** Map fields: the most bytes of UTF-8 in a key. */
  maxKeyBytes?: number;
  /** Numeric fields (floating point and unsigned integers): the smallest and largest value accepted. */
  range?: readonly [number, number];
}

/** Defaults by kind; a table entry overrides only what it names. */
export const defaultRules = {
  string: { maxBytes: 256 },
  bytes: { maxBytes: 64 * 1024 },
  list: { maxCount: 100 },
  /** Label maps: keys and values bounded like Kubernetes label names and annotations' prefixes. */
  map: { maxCount: 64, maxKeyBytes: 63, maxBytes: 253 },
} as const satisfies Record<string, FieldRule>;

const uuid: FieldRule = { uuid: true, maxBytes: 36 };
const name: FieldRule = { maxBytes: 128 };
const reason: FieldRule = { maxBytes: 1024 };
const pem: FieldRule = { maxBytes: 16 * 1024, multiline: true };
const pageToken: FieldRule = { maxBytes: 512 };
const shortId: FieldRule = { maxBytes: 64 };
const version: FieldRule = { maxBytes: 64 };
const contentType: FieldRule = { maxBytes: 128 };
const mountPath: FieldRule = { maxBytes: 1024 };
/** The 4 MiB a deployment.invoke.v1 payload may carry. */
const payload: FieldRule = { maxBytes: 4 * 1024 * 1024 };
/** Capability names: the closed set of the contract is checked by the handlers. */
const capabilities: FieldRule = { maxCount: 64, maxBytes: 64 };
const artifacts: FieldRule = { maxCount: 1000 };
const resolvedPath: FieldRule = { maxBytes: 4096 };
/** GPU counts and layers a runtime profile may ask for. */
const gpuCount: FieldRule = { range: [0, 64] };
const gpuLayers: FieldRule = { range: [0, 1024] };
const gpuMemory: FieldRule = { range: [0, 2 ** 50] };

export const fieldRules: Readonly<Record<string, FieldRule>> = {
  // modelforge.agent.v1
  "modelforge.agent.v1.EnrollRequest.token": { maxBytes: 128 },
  "modelforge.agent.v1.DownloadArtifactFileRequest.path": { maxBytes: 1024 },
  "modelforge.agent.v1.EnrollRequest.csr_pem": pem,
  "modelforge.agent.v1.EnrollRequest.node_name": name,
  "modelforge.agent.v1.EnrollRequest.agent_version": version,
  "modelforge.agent.v1.RenewCredentialRequest.csr_pem": pem,
  "modelforge.agent.v1.HeartbeatRequest.agent_version": version,
  "modelforge.agent.v1.HeartbeatRequest.capabilities": capabilities,
  "modelforge.agent.v1.HeartbeatRequest.replica_loads": { maxCount: 256 },
  "modelforge.agent.v1.ReplicaLoad.deployment_id": shortId,
  "modelforge.agent.v1.InventoryReport.gpus": { maxCount: 64 },
  "modelforge.agent.v1.InventoryReport.gpu_collection_error": reason,
  "modelforge.agent.v1.ReportJobProgressRequest.job_id": uuid,
  "modelforge.agent.v1.CompleteJobRequest.job_id": uuid,
  "modelforge.agent.v1.FailJobRequest.job_id": uuid,
  "modelforge.agent.v1.Hello.agent_version": version,
  "modelforge.agent.v1.Hello.capabilities": capabilities,
  "modelforge.agent.v1.Hello.running_job_ids": { ...uuid, maxCount: 4096 },
  "modelforge.agent.v1.Hello.held_deployments": { maxCount: 256 },
  "modelforge.agent.v1.HeldDeployments.deployments": { maxCount: 256 },
  "modelforge.agent.v1.Hello.engines": { maxCount: 16, maxBytes: 64 },
  "modelforge.agent.v1.Hello.embedding_engines": { maxCount: 16, maxBytes: 64 },
  "modelforge.agent.v1.HeldDeployment.deployment_id": shortId,
  "modelforge.agent.v1.HeldDeployment.runtime_id": name,
  "modelforge.agent.v1.InvokeAnswer.content_type": contentType,
  "modelforge.agent.v1.InvokeAnswer.payload": payload,
  "modelforge.agent.v1.DeploymentLogLines.lines": { maxCount: 1000 },

  // modelforge.common.v1
  "modelforge.common.v1.HostInfo.hostname": { maxBytes: 253 },
  "modelforge.common.v1.HostInfo.os_name": name,
  "modelforge.common.v1.HostInfo.os_version": name,
  "modelforge.common.v1.HostInfo.kernel": name,
  "modelforge.common.v1.HostInfo.architecture": { maxBytes: 32 },
  "modelforge.common.v1.HostInfo.cpu_model": name,
  // Container hosts mount a file system per pod volume: room for many.
  "modelforge.common.v1.HostInfo.disks": { maxCount: 1024 },
  "modelforge.common.v1.Disk.mount": mountPath,
  "modelforge.common.v1.Disk.filesystem": shortId,
  "modelforge.common.v1.GpuInfo.uuid": shortId,
  "modelforge.common.v1.GpuInfo.pci_bus_id": { maxBytes: 32 },
  "modelforge.common.v1.GpuInfo.model": name,
  "modelforge.common.v1.GpuInfo.driver_version": version,
  "modelforge.common.v1.GpuInfo.vendor": shortId,
  "modelforge.common.v1.Telemetry.mounts": { maxCount: 1024 },
  "modelforge.common.v1.Telemetry.gpus": { maxCount: 64 },
  "modelforge.common.v1.Telemetry.cpu_utilization_percent": { range: [0, 100] },
  "modelforge.common.v1.Telemetry.load_average_1m": { range: [0, 1_000_000] },
  "modelforge.common.v1.Telemetry.load_average_5m": { range: [0, 1_000_000] },
  "modelforge.common.v1.Telemetry.load_average_15m": { range: [0, 1_000_000] },
  "modelforge.common.v1.MountUsage.mount": mountPath,
  "modelforge.common.v1.GpuTelemetry.uuid": shortId,

  // modelforge.jobs.v1
  "modelforge.jobs.v1.ArtifactFile.path": { maxBytes: 1024 },
  "modelforge.admin.v1.UploadArtifactChunkRequest.path": { maxBytes: 1024 },
  "modelforge.admin.v1.UploadArtifactChunkRequest.data": { maxBytes: 1024 * 1024 },
  "modelforge.admin.v1.DeleteArtifactFilesRequest.path": { maxBytes: 1024 },
  "modelforge.admin.v1.PutArtifactFilesRequest.files": artifacts,
  "modelforge.admin.v1.PutArtifactFile.path": { maxBytes: 1024 },
  "modelforge.admin.v1.PutArtifactFile.data": { maxBytes: 1024 * 1024 },
  "modelforge.jobs.v1.ArtifactFile.sha256": shortId,
  "modelforge.jobs.v1.ArtifactAcquire.repository": { maxBytes: 256 },
  "modelforge.jobs.v1.ArtifactAcquire.commit": shortId,
  "modelforge.jobs.v1.ArtifactAcquire.files": artifacts,
  "modelforge.jobs.v1.ArtifactAcquire.target_root": resolvedPath,
  "modelforge.jobs.v1.ResolvedArtifact.path": resolvedPath,
  "modelforge.jobs.v1.ResolvedArtifact.sha256": shortId,
  "modelforge.jobs.v1.RuntimeProbe.runtime_profile": name,
  "modelforge.jobs.v1.RuntimeProbe.runtime_environment": name,
  "modelforge.jobs.v1.RuntimeProbe.artifacts": artifacts,
  "modelforge.jobs.v1.RuntimeProbe.probe_input_id": name,
  "modelforge.jobs.v1.RuntimeProbe.model_file": resolvedPath,
  "modelforge.jobs.v1.RuntimeHealth.runtime_id": shortId,
  "modelforge.jobs.v1.RuntimeUnload.runtime_id": shortId,
  "modelforge.jobs.v1.DeploymentLoad.deployment_id": shortId,
  "modelforge.jobs.v1.DeploymentLoad.runtime_profile": name,
  "modelforge.jobs.v1.DeploymentLoad.artifacts": artifacts,
  "modelforge.jobs.v1.DeploymentLoad.model_file": resolvedPath,
  "modelforge.jobs.v1.DeploymentLoad.gpus": { maxCount: 64 },
  "modelforge.jobs.v1.AssignedGpu.uuid": shortId,
  "modelforge.jobs.v1.DeploymentInvoke.deployment_id": shortId,
  "modelforge.jobs.v1.DeploymentInvoke.request_id": name,
  "modelforge.jobs.v1.DeploymentInvoke.content_type": contentType,
  "modelforge.jobs.v1.DeploymentInvoke.payload": payload,
  "modelforge.jobs.v1.DeploymentHealth.deployment_id": shortId,
  "modelforge.jobs.v1.DeploymentDrain.deployment_id": shortId,
  "modelforge.jobs.v1.DeploymentUnload.deployment_id": shortId,
  "modelforge.jobs.v1.ArtifactAcquireResult.path": resolvedPath,
  "modelforge.jobs.v1.ArtifactAcquireResult.files": artifacts,
  "modelforge.jobs.v1.RuntimeProbeResult.runtime_id": shortId,
  "modelforge.jobs.v1.HealthResult.detail": reason,
  "modelforge.jobs.v1.DeploymentLoadResult.runtime_id": shortId,
  "modelforge.jobs.v1.DeploymentInvokeResult.content_type": contentType,
  "modelforge.jobs.v1.DeploymentInvokeResult.payload": payload,
  "modelforge.jobs.v1.JobFailure.message": reason,
  "modelforge.jobs.v1.JobProgress.message": { maxBytes: 256 },

  // modelforge.admin.v1
  "modelforge.admin.v1.CreateEnrollmentTokenRequest.node_name": name,
  "modelforge.admin.v1.CreateEnrollmentTokenRequest.node_id": uuid,
  "modelforge.admin.v1.ListEnrollmentTokensRequest.page_token": pageToken,
  "modelforge.admin.v1.RevokeEnrollmentTokenRequest.id": uuid,
  "modelforge.admin.v1.ListNodesRequest.liveness": { maxCount: 16 },
  "modelforge.admin.v1.ListNodesRequest.page_token": pageToken,
  "modelforge.admin.v1.GetNodeRequest.node_id": uuid,
  "modelforge.admin.v1.WatchNodesRequest.liveness": { maxCount: 16 },
  "modelforge.admin.v1.UpdateNodeRequest.node_id": uuid,
  "modelforge.admin.v1.UpdateNodeRequest.name": name,
  "modelforge.admin.v1.DisableNodeRequest.node_id": uuid,
  "modelforge.admin.v1.DisableNodeRequest.reason": reason,
  "modelforge.admin.v1.EnableNodeRequest.node_id": uuid,
  "modelforge.admin.v1.RotateNodeCredentialRequest.node_id": uuid,
  "modelforge.admin.v1.RevokeNodeCredentialRequest.node_id": uuid,
  "modelforge.admin.v1.RevokeNodeCredentialRequest.serial": shortId,
  "modelforge.admin.v1.RevokeNodeCredentialRequest.reason": reason,
  "modelforge.admin.v1.PreviewDecommissionRequest.node_id": uuid,
  "modelforge.admin.v1.DecommissionNodeRequest.node_id": uuid,
  "modelforge.admin.v1.DecommissionNodeRequest.reason": reason,
  "modelforge.admin.v1.CreateJobRequest.node_id": uuid,
  "modelforge.admin.v1.CreateJobRequest.ordering_key": name,
  "modelforge.admin.v1.GetJobRequest.job_id": uuid,
  "modelforge.admin.v1.ListJobsRequest.node_id": uuid,
  "modelforge.admin.v1.ListJobsRequest.states": { maxCount: 16 },
  "modelforge.admin.v1.ListJobsRequest.ordering_key": name,
  "modelforge.admin.v1.ListJobsRequest.page_token": pageToken,
  "modelforge.admin.v1.CancelJobRequest.job_id": uuid,
  "modelforge.admin.v1.CancelJobRequest.reason": reason,
  "modelforge.admin.v1.ListAuditEventsRequest.page_token": pageToken,
  "modelforge.admin.v1.ListAuditEventsRequest.action": shortId,
  "modelforge.admin.v1.ListAuditEventsRequest.target_id": name,
  "modelforge.admin.v1.ListAuditEventsRequest.actor": name,
  "modelforge.admin.v1.CreateRuntimeProfileRequest.name": shortId,
  "modelforge.admin.v1.CreateRuntimeProfileRequest.gpu_layers": gpuLayers,
  "modelforge.admin.v1.CreateRuntimeProfileRequest.gpu_count": gpuCount,
  "modelforge.admin.v1.CreateRuntimeProfileRequest.gpu_memory_bytes": gpuMemory,
  "modelforge.admin.v1.CreateDeploymentRequest.name": shortId,
  "modelforge.admin.v1.CreateDeploymentRequest.node_id": uuid,
  "modelforge.admin.v1.CreateDeploymentRequest.runtime_profile": shortId,
  "modelforge.admin.v1.CreateDeploymentRequest.commit": shortId,
  "modelforge.admin.v1.CreateDeploymentRequest.target_root": resolvedPath,
  "modelforge.admin.v1.CreateDeploymentRequest.model_file": { maxBytes: 1024 },
  "modelforge.admin.v1.GetDeploymentRequest.deployment": shortId,
  "modelforge.admin.v1.UpdateDeploymentRevisionRequest.deployment": shortId,
  "modelforge.admin.v1.UpdateDeploymentRevisionRequest.commit": shortId,
  "modelforge.admin.v1.UpdateDeploymentRevisionRequest.runtime_profile": shortId,
  "modelforge.admin.v1.UpdateDeploymentRevisionRequest.model_file": { maxBytes: 1024 },
  "modelforge.admin.v1.ScaleDeploymentRequest.deployment": shortId,
  "modelforge.admin.v1.StartDeploymentRequest.deployment": shortId,
  "modelforge.admin.v1.DrainDeploymentRequest.deployment": shortId,
  "modelforge.admin.v1.UnloadDeploymentRequest.deployment": shortId,
  "modelforge.admin.v1.DeleteDeploymentRequest.deployment": shortId,
  "modelforge.admin.v1.CreateServiceKeyRequest.name": shortId,
  "modelforge.admin.v1.CreateServiceKeyRequest.deployments": { maxCount: 100, maxBytes: 64 },
  "modelforge.admin.v1.ListServiceKeysRequest.page_token": pageToken,
  "modelforge.admin.v1.RevokeServiceKeyRequest.id": uuid,
  "modelforge.admin.v1.UpdateServiceKeyLimitsRequest.id": uuid,
  "modelforge.admin.v1.GetUsageRequest.key_id": uuid,
  "modelforge.admin.v1.GetUsageRequest.deployment": shortId,
  "modelforge.admin.v1.RevokeServiceKeyRequest.reason": reason,
  "modelforge.admin.v1.WatchDeploymentLogsRequest.deployment_id": shortId,
  "modelforge.admin.v1.WatchDeploymentLogsRequest.node_id": uuid,
  "modelforge.admin.v1.CheckDeploymentHealthRequest.deployment": shortId,
  "modelforge.admin.v1.RegisterNodeRequest.name": name,

  // modelforge.deployment.v1
  "modelforge.deployment.v1.InvokeRequest.deployment_id": shortId,
  "modelforge.deployment.v1.InvokeRequest.content_type": contentType,
  "modelforge.deployment.v1.InvokeRequest.payload": payload,
  "modelforge.deployment.v1.ListDeploymentsRequest.page_token": pageToken,
  "modelforge.deployment.v1.InvokeStreamRequest.deployment_id": shortId,
  "modelforge.deployment.v1.InvokeStreamRequest.content_type": contentType,
  "modelforge.deployment.v1.InvokeStreamRequest.payload": payload,
  "modelforge.deployment.v1.RuntimeLogLine.text": { maxBytes: 4096, multiline: true },

  // google.protobuf
  "google.protobuf.FieldMask.paths": { maxCount: 16, maxBytes: 64 },
};
