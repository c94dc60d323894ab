/* Where the resident exec path lives inside a sandbox, in both modes: the node agent's local
 * bundles (nodeagent/runtime_runsc.c) and the frontend's kube pod template
 * (frontend/kube_objects.c) mount compute-init and the spawner's socket directory here, and
 * compute-init's default socket is CS_SPAWNER_SOCKET (docs/nodeagent.md, "compute-init"). */
#pragma once

#define CS_SPAWNER_BIN_DIR "/.compute/bin"
#define CS_SPAWNER_BIN     CS_SPAWNER_BIN_DIR "/compute-init"
#define CS_SPAWNER_DIR     "/.compute/run"
#define CS_SPAWNER_SOCKET  CS_SPAWNER_DIR "/spawner.sock"
