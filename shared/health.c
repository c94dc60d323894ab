#include "health.h"

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

static int health_check(rpc_call *call, const ProtobufCMessage *req_msg, ProtobufCMessage *resp_msg,
                        void *userdata, cs_error **err)
{
        const Grpc__Health__V1__HealthCheckRequest *req = (const void *)req_msg;
        Grpc__Health__V1__HealthCheckResponse *resp = (void *)resp_msg;
        health_ctx *ctx = userdata;

        (void)call;
        if (!service_known(ctx->services, req->service))
                return cs_error_set(err, GRPC_STATUS_NOT_FOUND, "unknown service '%s'",
                                    req->service);
        resp->status =
                rpc_server_shutting_down(ctx->srv) || (ctx->probe && !ctx->probe(ctx->probe_arg))
                        ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                        : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        return 0;
}

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
        return rpc_server_add_method(srv, &health_check_method, err);
}

void cs_health_set_probe(bool (*probe)(void *arg), void *arg)
{
        health.probe_arg = arg;
        health.probe = probe;
}
