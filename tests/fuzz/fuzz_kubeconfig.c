/* libFuzzer target: the kubeconfig reader (frontend/kube_config.c: YAML to jansson, then the
 * kubeconfig schema) on untrusted text, as a mounted or hand-edited kubeconfig could hold.
 *
 * Input: the kubeconfig text. It is parsed for its current-context and for a context named
 * "fuzz"; a successful parse must name a server and a namespace. No file is read: parsing
 * only records the paths a kubeconfig names (kube_config_read_files is not called).
 *
 * Owns: nothing outside this file. Needs: frontend/kube_config.c shared/error.c
 * shared/util.c, jansson and libyaml (no curl, no gRPC library: only <grpc/status.h>). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube_config.h"

static void parse_one(const uint8_t *data, size_t size, const char *context)
{
        kube_config c = { 0 };
        cs_error *err = NULL;

        if (kube_config_parse("/nonexistent-fuzz/config", (const char *)data, size, context, &c,
                              &err) == 0) {
                if (err || !c.server || !c.ns || strncmp(c.server, "http", 4))
                        abort();
                if (c.token && !kube_token_valid(c.token))
                        abort();
        } else if (!err || !err->msg || c.server || c.ns) {
                abort(); /* a failure says why and leaves nothing behind */
        }
        cs_error_free(err);
        kube_config_clear(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        parse_one(data, size, NULL);
        parse_one(data, size, "fuzz");
        return 0;
}
