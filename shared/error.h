/* The project's one error type: a gRPC status code and a one-line message.
 *
 * Functions that can fail take `cs_error **err` last, return -1 (or NULL) and fill *err.
 * An error already set is never overwritten: the first, most specific cause wins. The edge
 * (an RPC handler) turns it into the call's status and logs it once. */
#pragma once

#include <stddef.h>

#include <grpc/status.h>

typedef struct cs_error {
        grpc_status_code code;
        char *msg;
} cs_error;

/* Sets *err (if err is non-NULL and *err is still NULL). Always returns -1. */
int cs_error_set(cs_error **err, grpc_status_code code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Like cs_error_set, with the code chosen from errnum (ENOENT -> NOT_FOUND, EACCES/EPERM ->
 * PERMISSION_DENIED, EEXIST -> ALREADY_EXISTS, ENOSPC/EMFILE/... -> RESOURCE_EXHAUSTED,
 * EINVAL/ENAMETOOLONG/ELOOP -> INVALID_ARGUMENT, others -> INTERNAL) and ": strerror" appended. */
int cs_error_errno(cs_error **err, int errnum, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Prepends context ("what: ") to an existing error's message. Returns -1. */
int cs_error_prefix(cs_error **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

grpc_status_code cs_errno_to_status(int errnum);

/* The canonical name of a status code ("NOT_FOUND"). */
const char *cs_status_name(grpc_status_code code);

void cs_error_free(cs_error *err);
static inline void cs_error_freep(cs_error **err)
{
        cs_error_free(*err);
        *err = NULL;
}
#define _cleanup_error_ __attribute__((cleanup(cs_error_freep)))
