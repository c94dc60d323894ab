/* Usage metrics as a JSON object with the common.v1.UsageMetrics field names: how the node
 * agent keeps them in its records and how the kube scheduler keeps a destroyed sandbox's
 * final usage on its PVC. */
#pragma once

#include <jansson.h>

#include "usage.h"

/* A new JSON object {"cpu_ms": ..., ...}. */
json_t *usage_to_json(const usage_metrics *u);

/* Reads what usage_to_json wrote; missing, non-integer or negative fields are 0, and so is
 * everything when j is NULL or not an object. */
void usage_from_json(json_t *j, usage_metrics *ret);
