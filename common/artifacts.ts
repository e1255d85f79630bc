// The artifact store's bound on a commit, shared by the control plane (which enforces it) and the
// CLI (which states it, and checks a directory against it before sending anything).

/**
 * The most files one commit may hold in the store. One artifact.acquire.v1 job carries a whole
 * commit, and its files field takes at most this many entries (ArtifactAcquire.files in
 * proto/modelforge/jobs/v1/jobs.proto), so every stored commit fits in one job. A model repository
 * holds a few dozen files; a large sharded one a few hundred. It also bounds the files of one
 * PutArtifactFiles call, so one call can ask about a whole commit.
 */
export const MAX_COMMIT_FILES = 1000;

/** Most bytes of data of one PutArtifactFiles call, all its files together (one chunk's worth). */
export const MAX_PUT_DATA_BYTES = 1024 * 1024;
