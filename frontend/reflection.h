/* gRPC server reflection (grpc.reflection.v1 and v1alpha ServerReflectionInfo) from a
 * FileDescriptorSet, so that generic tools (grpcurl list / describe, grpcui, Postman) work
 * against the public port without the protos.
 *
 * The set is the one the build generates and embeds (proto/CMakeLists.txt:
 * cs_reflection_descriptors): every served service with all its imports. It is indexed once
 * at start; the handler only looks names up and answers with slices of the embedded bytes. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "rpc.h"

/* Bounds of one reflection stream: a request is a name or two (grpcurl's longest are well
 * under 1 KiB), and a tool asks a few dozen of them; past these the stream fails with
 * RESOURCE_EXHAUSTED. A tool asks its questions at once: a stream that asks nothing for
 * CS_REFLECTION_IDLE_MS ends with DEADLINE_EXCEEDED, so that idle streams cannot hold the
 * call slots (--max-calls). */
#define CS_REFLECTION_MAX_REQUEST_BYTES       (16 * 1024)
#define CS_REFLECTION_MAX_REQUESTS_PER_STREAM 1024
#define CS_REFLECTION_IDLE_MS                 60000

typedef struct cs_reflection cs_reflection;

/* The embedded descriptor set of the frontend (generated at build time). */
extern const unsigned char cs_reflection_descriptors[];
extern const size_t cs_reflection_descriptors_len;

/* Indexes the FileDescriptorSet set[0..len): file names, every symbol (messages, fields,
 * oneofs, enums, enum values, services, methods, extensions), extensions by extendee and
 * number, and the services. The bytes are borrowed and must outlive the index (static data).
 * NULL with INTERNAL in *err when the set does not decode or a file imports one it lacks. */
cs_reflection *cs_reflection_new(const uint8_t *set, size_t len, cs_error **err);

/* NULL is accepted. The server the index was registered on must be freed first. */
void cs_reflection_free(cs_reflection *r);

/* Registers grpc.reflection.v1 and grpc.reflection.v1alpha ServerReflectionInfo on srv. */
int cs_reflection_register(rpc_server *srv, cs_reflection *r, cs_error **err);

/* Lookups, for the handler and the unit test: the index of the file of that name, of the file
 * that declares the fully-qualified symbol, or of the file that declares extension `number`
 * of `type` (no leading dot in names); -1 when there is none. */
ssize_t cs_reflection_file_by_name(const cs_reflection *r, const char *name);
ssize_t cs_reflection_file_by_symbol(const cs_reflection *r, const char *symbol);
ssize_t cs_reflection_file_by_extension(const cs_reflection *r, const char *type, int32_t number);

/* The number of services, and the name of the i-th (sorted). */
size_t cs_reflection_n_services(const cs_reflection *r);
const char *cs_reflection_service(const cs_reflection *r, size_t i);
