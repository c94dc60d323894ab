/* ListSandboxes' pure parts, shared by both backends and unit-tested alone
 * (tests/unit/test_listing.c): the page token, the order and the page a backend cuts from its
 * candidates, and the cleaning of a status_reason for a tenant's eyes. No state, no locks, no
 * I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "scheduler.h"

/* ListSandboxesRequest.page_size: 0 means the default; above the cap means the cap. */
#define FE_LIST_DEFAULT_PAGE 100
#define FE_LIST_MAX_PAGE     1000

/* The longest page token this frontend gives (a longer one is refused unread). */
#define FE_LIST_TOKEN_MAX 128

/* status_reason's bound, in bytes of UTF-8 (the API documents it). */
#define FE_REASON_MAX 512

/* The page size a request asks for, defaulted and capped. */
size_t fe_list_page_size(uint32_t requested);

/* The token that resumes a listing of (tenant, status) after the sandbox (created_ms, id):
 * base64 of "1:<created_ms>:<id>:<check>", check a hash of the tenant and status, so a token
 * given back with another tenant or status is told apart (it is not a secret: the tenant
 * comes from the request, never from the token). ret holds FE_LIST_TOKEN_MAX + 1 bytes. */
void fe_list_token_encode(const char *tenant, fe_status status, int64_t created_ms, const char *id,
                          char ret[static FE_LIST_TOKEN_MAX + 1]);

/* Reads a token back into the cursor (*ret_created_ms, ret_id a UUID). "" is the start
 * (ret_id ""). INVALID_ARGUMENT when it is not one this frontend gave for (tenant, status). */
int fe_list_token_decode(const char *token, const char *tenant, fe_status status,
                         int64_t *ret_created_ms, char ret_id[static 37], cs_error **err);

/* Whether view v comes after the cursor (created_ms, id) in the listing order:
 * created_at_ms, then id. id "" is before everything. */
bool fe_list_after(const fe_view *v, int64_t created_ms, const char *id);

/* Cuts the page of q from the candidates in *l (every one of the tenant and status, in any
 * order): sorts them, drops those up to the cursor and beyond q->limit (freeing them), and
 * sets l->more when some were beyond it. */
void fe_list_select(fe_view_list *l, const fe_list_query *q);

/* A reason as a tenant may read it (malloc'd; NULL for NULL or ""): valid UTF-8 (a bad byte
 * becomes '?'), no control characters, every absolute path replaced by "<path>", text from
 * the container runtime (runsc, its gofer, shims) replaced by a sentence that says only that
 * the runtime failed, at most FE_REASON_MAX bytes (cut at a character, ending "..."). */
char *fe_reason_clean(const char *in);
