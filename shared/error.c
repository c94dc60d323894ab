#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static int error_setv(cs_error **err, grpc_status_code code, const char *suffix, const char *fmt,
                      va_list ap)
{
        char *msg = NULL;

        if (!err || *err)
                return -1;
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        if (msg && suffix) {
                char *full = cs_xasprintf("%s: %s", msg, suffix);
                free(msg);
                msg = full;
        }
        *err = cs_xcalloc(1, sizeof(**err));
        (*err)->code = code;
        (*err)->msg = msg ? msg : cs_xstrdup("(no message: out of memory)");
        return -1;
}

int cs_error_set(cs_error **err, grpc_status_code code, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        error_setv(err, code, NULL, fmt, ap);
        va_end(ap);
        return -1;
}

grpc_status_code cs_errno_to_status(int errnum)
{
        switch (errnum) {
        case ENOENT:
        case ESRCH:
                return GRPC_STATUS_NOT_FOUND;
        case EACCES:
        case EPERM:
        case EXDEV:
                return GRPC_STATUS_PERMISSION_DENIED;
        case EEXIST:
                return GRPC_STATUS_ALREADY_EXISTS;
        case ENOSPC:
        case EDQUOT:
        case EMFILE:
        case ENFILE:
        case ENOMEM:
        case EFBIG:
                return GRPC_STATUS_RESOURCE_EXHAUSTED;
        case EINVAL:
        case ENAMETOOLONG:
        case ELOOP:
        case ENOTDIR:
        case EISDIR:
        case ENXIO:
                return GRPC_STATUS_INVALID_ARGUMENT;
        case ETIMEDOUT:
                return GRPC_STATUS_DEADLINE_EXCEEDED;
        case ECANCELED:
                return GRPC_STATUS_CANCELLED;
        case EAGAIN:
        case ECONNREFUSED:
        case ECONNRESET:
        case EHOSTUNREACH:
                return GRPC_STATUS_UNAVAILABLE;
        default:
                return GRPC_STATUS_INTERNAL;
        }
}

int cs_error_errno(cs_error **err, int errnum, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        error_setv(err, cs_errno_to_status(errnum), strerror(errnum), fmt, ap);
        va_end(ap);
        return -1;
}

int cs_error_prefix(cs_error **err, const char *fmt, ...)
{
        char *prefix = NULL;
        char *msg;
        va_list ap;

        if (!err || !*err)
                return -1;
        va_start(ap, fmt);
        if (vasprintf(&prefix, fmt, ap) < 0)
                prefix = NULL;
        va_end(ap);
        if (!prefix)
                return -1;
        msg = cs_xasprintf("%s: %s", prefix, (*err)->msg);
        free(prefix);
        free((*err)->msg);
        (*err)->msg = msg;
        return -1;
}

const char *cs_status_name(grpc_status_code code)
{
        static const char *const names[] = {
                [GRPC_STATUS_OK] = "OK",
                [GRPC_STATUS_CANCELLED] = "CANCELLED",
                [GRPC_STATUS_UNKNOWN] = "UNKNOWN",
                [GRPC_STATUS_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
                [GRPC_STATUS_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
                [GRPC_STATUS_NOT_FOUND] = "NOT_FOUND",
                [GRPC_STATUS_ALREADY_EXISTS] = "ALREADY_EXISTS",
                [GRPC_STATUS_PERMISSION_DENIED] = "PERMISSION_DENIED",
                [GRPC_STATUS_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
                [GRPC_STATUS_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
                [GRPC_STATUS_ABORTED] = "ABORTED",
                [GRPC_STATUS_OUT_OF_RANGE] = "OUT_OF_RANGE",
                [GRPC_STATUS_UNIMPLEMENTED] = "UNIMPLEMENTED",
                [GRPC_STATUS_INTERNAL] = "INTERNAL",
                [GRPC_STATUS_UNAVAILABLE] = "UNAVAILABLE",
                [GRPC_STATUS_DATA_LOSS] = "DATA_LOSS",
                [GRPC_STATUS_UNAUTHENTICATED] = "UNAUTHENTICATED",
        };

        if ((unsigned)code < ARRAY_SIZE(names) && names[code])
                return names[code];
        return "UNKNOWN";
}

void cs_error_free(cs_error *err)
{
        if (!err)
                return;
        free(err->msg);
        free(err);
}
