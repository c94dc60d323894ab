#include "health.h"

#include <poll.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"

/* The health method table entry points at this; one server per process needs one. */
typedef struct health_ctx {
        rpc_server *srv;
        const char *const *services;
        bool (*probe)(void *arg);
        void *probe_arg;
} health_ctx;

static health_ctx health;

static bool service_known(const char *const *services, const char *name)
{
        if (name[0] == '\0')
                return true;
        for (; services && *services; services++) {
                if (strcmp(*services, name) == 0)
                        return true;
        }
        return false;
}

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus serving_status;

/* The status of a known service now. */
static serving_status status_now(const health_ctx *ctx)
{
        return rpc_server_shutting_down(ctx->srv) || (ctx->probe && !ctx->probe(ctx->probe_arg))
                       ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                       : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
}

static int health_check(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                        void *userdata, cs_error **err)
{
        const Grpc__Health__V1__HealthCheckRequest *req = (const void *)req_msg;
        Grpc__Health__V1__HealthCheckResponse *resp = (void *)resp_msg;
        health_ctx *ctx = userdata;

        /* Probes check every few seconds: their access-log lines are debug, not info. */
        rpc_call_set_access_level(call, CS_LOG_DEBUG);
        if (!service_known(ctx->services, req->service))
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "unknown service '%s'",
                                    req->service);
        resp->status = status_now(ctx);
        return 0;
}

/* How often Watch looks at the status (the probe has no change notification). */
#define WATCH_PERIOD_MS 100

/* Watch: the current status at once, then each change, until the client cancels (or the
 * deadline passes). An unknown service is SERVICE_UNKNOWN, and stays so. Once the server
 * shuts down, NOT_SERVING is sent and the stream ends with OK, so a watcher does not hold the
 * shutdown for its grace period. Holds no resource but its call (one of --max-calls). */
static int health_watch(rpc_call *call, const ProtobufCMessage *req_msg, void *userdata,
                        cs_error **err)
{
        const Grpc__Health__V1__HealthCheckRequest *req = (const void *)req_msg;
        health_ctx *ctx = userdata;
        bool known = service_known(ctx->services, req->service);
        int last = -1;

        for (;;) {
                Grpc__Health__V1__HealthCheckResponse resp =
                        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
                struct pollfd pfd = { .fd = rpc_call_cancel_fd(call), .events = POLLIN };

                resp.status =
                        known ? status_now(ctx)
                              : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
                if ((int)resp.status != last) {
                        if (rpc_call_send(call, &resp.base, err) < 0)
                                return -1;
                        last = (int)resp.status;
                }
                if (rpc_server_shutting_down(ctx->srv))
                        return 0;
                if (rpc_call_cancelled(call) ||
                    (poll(&pfd, 1, WATCH_PERIOD_MS) > 0 && rpc_call_cancelled(call)))
                        return cs_error_set(err, rpc_call_cancel_status(call), "watch ended");
        }
}

static const rpc_method health_watch_method = {
        .path = "/grpc.health.v1.Health/Watch",
        .request = &grpc__health__v1__health_check_request__descriptor,
        .response = &grpc__health__v1__health_check_response__descriptor,
        .stream = health_watch,
        .userdata = &health,
};

static const rpc_method health_check_method = {
        .path = "/grpc.health.v1.Health/Check",
        .request = &grpc__health__v1__health_check_request__descriptor,
        .response = &grpc__health__v1__health_check_response__descriptor,
        .unary = health_check,
        .userdata = &health,
};

int cs_health_register(rpc_server *srv, const char *const *services, cs_error **err)
{
        health.srv = srv;
        health.services = services;
        if (rpc_server_add_method(srv, &health_check_method, err) < 0)
                return -1;
        return rpc_server_add_method(srv, &health_watch_method, err);
}

void cs_health_set_probe(bool (*probe)(void *arg), void *arg)
{
        health.probe_arg = arg;
        health.probe = probe;
}
