/* Kubernetes client configuration as data: the kubeconfig reader (a small YAML-to-jansson
 * reader under it) and the struct both it and the in-cluster loader (kube_client.c) fill.
 *
 * Owns: kube_config, kube_blob, kube_yaml_parse, the kubeconfig schema checks and the one
 * base64 decoder of the kube client. Touches: nothing but its arguments, and the files a
 * kubeconfig names, read only by kube_config_read_files. Pure otherwise (no curl, no
 * network, no global state), so it is unit-tested and fuzzed on text buffers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "error.h"

/* Caps on what the files may hold: a kubeconfig, a certificate, a key, a token file. */
#define KUBE_MAX_CONFIG (4u << 20)
/* YAML nodes after alias expansion (no billion laughs), and nesting. */
#define KUBE_MAX_YAML_NODES 100000
#define KUBE_MAX_YAML_DEPTH 64

/* Bytes owned by whoever holds the struct (a PEM blob, wiped when freed: keys are secret). */
typedef struct kube_blob {
        char *data;
        size_t len; /* 0: not set */
} kube_blob;

/* Wipes and frees b's bytes; b is then empty. Accepts an empty blob. */
void kube_blob_free(kube_blob *b);

/* A PEM the configuration gives: inline (pem set, path NULL) or as a file still to be read
 * (path set; kube_config_read_files fills pem). label names it in messages
 * ('cluster "c": certificate-authority'). All three owned by the struct. */
typedef struct kube_pem {
        kube_blob pem;
        char *path;
        char *label;
} kube_pem;

/* What a client needs to reach and authenticate to one API server. Every pointer is owned
 * by the struct (kube_config_clear frees them); NULL or an empty blob means "not given". */
typedef struct kube_config {
        char *server; /* "https://host:port", no trailing '/' */
        char *ns;     /* the namespace; "default" when the configuration names none */
        bool insecure;
        kube_pem ca, cert, key;
        char *token;      /* a fixed bearer token (no control characters) */
        char *token_path; /* a token file, re-read when it changes; wins over token */
} kube_config;

void kube_config_clear(kube_config *c);

/* Standard (or URL-safe) base64 (shared/base64.h), whitespace ignored, padding optional, into ret
 * (NUL terminated past len; the caller frees it with kube_blob_free). -1 if malformed or empty. */
int kube_base64_decode(const char *s, kube_blob *ret);

/* The first YAML (so also JSON) document of buf[0..len) as a jansson value (a new
 * reference). Plain true/false/null scalars become JSON booleans and null, every other
 * scalar a string. NULL with *err (INVALID_ARGUMENT, "kubeconfig <source>: ...") for
 * malformed YAML, an empty document, nesting over KUBE_MAX_YAML_DEPTH, more than
 * KUBE_MAX_YAML_NODES nodes after aliases, a non-scalar key or text that is not UTF-8.
 * source names the buffer in messages only. */
json_t *kube_yaml_parse(const char *source, const char *buf, size_t len, cs_error **err);

/* Parses the kubeconfig text buf[0..len) and selects context (NULL or "": current-context):
 * its cluster (server, certificate-authority(-data), insecure-skip-tls-verify), namespace and
 * user (token, tokenFile, client-certificate(-data), client-key(-data)). Exec and
 * auth-provider plugins, basic auth, impersonation, tls-server-name and proxy-url are
 * refused. source is the kubeconfig's path: it names it in messages and relative file
 * paths are resolved against its directory, but no file is read (see
 * kube_config_read_files). 0 with *ret filled, or -1 with *err (INVALID_ARGUMENT naming
 * the field) and *ret left empty. *ret must be zeroed (or cleared) before. */
int kube_config_parse(const char *source, const char *buf, size_t len, const char *context,
                      kube_config *ret, cs_error **err);

/* Reads the PEM files c names (ca, cert, key with a path) into their blobs, each capped at
 * KUBE_MAX_CONFIG. source names the kubeconfig in messages. 0, or -1 with *err (from
 * errno: NOT_FOUND for a missing file; INVALID_ARGUMENT for an empty one). */
int kube_config_read_files(kube_config *c, const char *source, cs_error **err);

/* A bearer token goes into a header line: false if t holds a control character (header
 * injection). */
bool kube_token_valid(const char *t);
