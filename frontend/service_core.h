/* The frontend's request logic without protobuf: each compute.v1.ComputeService method's
 * checks (INVALID_ARGUMENT with the messages the API documents, in the order it documents)
 * and its scheduler call. service.c turns protobuf into these arguments and the results back
 * into protobuf; a unit test calls these with a fake scheduler behind svc->sched.
 *
 * Per-tenant fair share: each method takes one unit of svc->tenant_share for the tenant the
 * call is about (CreateSandbox: its tenant_id; the others: the tenant that owns the sandbox,
 * as the scheduler's tenant_of knows it) after its argument checks and before the scheduler
 * is asked; a tenant over its share gets RESOURCE_EXHAUSTED. The unary methods give it back
 * before they return; the *_route methods hand it to the caller inside *ret, given back by
 * fe_route_release with the route. A sandbox the scheduler does not know yet counts against
 * no tenant (the peer share and the global cap still bound it).
 *
 * Owns nothing: every string is borrowed for the call, and what the scheduler returns
 * (*ret views and routes) is the caller's, as the scheduler ops say. Thread-safe as the
 * scheduler is. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "listing.h"
#include "scheduler.h"
#include "service.h"

/* CreateSandbox: tenant_id and session_id checked (1..CS_ID_MAX printable ASCII, no
 * spaces), the workspace size, the network (cs_netpolicy_parse), max_runtime not negative, an
 * empty image replaced by svc->default_image; then the scheduler's create. */
int fe_service_create(const frontend_service *svc, const fe_spec *spec, const fe_ctx *ctx,
                      fe_view *ret, cs_error **err);

/* DescribeSandbox and DestroySandbox: id must be a UUID. */
int fe_service_describe(const frontend_service *svc, const char *id, const fe_ctx *ctx,
                        fe_view *ret, cs_error **err);
int fe_service_destroy(const frontend_service *svc, const char *id, const fe_ctx *ctx, fe_view *ret,
                       cs_error **err);

/* ListSandboxes: tenant_id checked as CreateSandbox checks it, status a known value,
 * page_token one this frontend gave for that tenant and status (listing.h); the tenant's
 * share taken; then the scheduler's list, one page of fe_list_page_size(page_size) views into
 * *ret (the caller's to fe_view_list_clear) and the token of the next page into next_token
 * ("" on the last page). */
int fe_service_list(const frontend_service *svc, const char *tenant_id, fe_status status,
                    uint32_t page_size, const char *page_token, const fe_ctx *ctx,
                    fe_view_list *ret, char next_token[static FE_LIST_TOKEN_MAX + 1],
                    cs_error **err);

/* How long the sandbox of v has been up at now_ms (wall clock): until its destruction when
 * it has one; 0 when the clock says it has not started. */
int64_t fe_view_uptime_ms(const fe_view *v, int64_t now_ms);

/* ExecCommand: id a UUID, command not empty, timeout not negative; then the route. */
int fe_service_exec_route(const frontend_service *svc, const char *id, const char *command,
                          int64_t timeout_ms, const fe_ctx *ctx, fe_route *ret, cs_error **err);

/* ReadFile: offset and max_bytes not negative, id a UUID, path not empty; then the route. */
int fe_service_read_route(const frontend_service *svc, const char *id, const char *path,
                          int64_t offset, int64_t max_bytes, const fe_ctx *ctx, fe_route *ret,
                          cs_error **err);

/* WriteFile: data_len within RPC_DATA_MAX_BYTES (RESOURCE_EXHAUSTED), id a UUID, path not
 * empty; then the route. */
int fe_service_write_route(const frontend_service *svc, const char *id, const char *path,
                           size_t data_len, const fe_ctx *ctx, fe_route *ret, cs_error **err);

/* ListFiles: id a UUID (an empty path lists the workspace root); then the route. */
int fe_service_list_route(const frontend_service *svc, const char *id, const char *path,
                          const fe_ctx *ctx, fe_route *ret, cs_error **err);
