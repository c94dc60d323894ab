/* The /metrics endpoint (metrics_http.h) on libmicrohttpd. We make and bind the listening
 * socket ourselves (one address parser for "host:port", port 0 reported back) and hand it to
 * libmicrohttpd, which runs every connection from one internal polling thread: scrapes are
 * serialised, a slow reader only holds its own connection (non-blocking writes) until the
 * idle timeout. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <openssl/crypto.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "metrics_http.h"
#include "util.h"

#define METRICS_MAX_CONNECTIONS 16
#define METRICS_MAX_PER_IP      8
#define METRICS_MEMORY_PER_CONN (32 * 1024) /* request line and headers must fit */
#define METRICS_IDLE_TIMEOUT_S  10

struct cs_metrics_server {
        struct MHD_Daemon *mhd;
        int fd;
        int port;
        cs_metrics_collect_fn collect;
        void *userdata;
        char *authorization; /* "Bearer TOKEN", or NULL */
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *text,
                             const char *allow, const char *authenticate)
{
        struct MHD_Response *r =
                MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
        enum MHD_Result ret;

        if (!r)
                return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
        if (allow)
                MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
        if (authenticate)
                MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, authenticate);
        ret = MHD_queue_response(c, status, r);
        MHD_destroy_response(r);
        return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
        cs_metrics_server *s = cls;
        struct MHD_Response *r;
        cs_mpage page = { 0 };
        enum MHD_Result ret;

        (void)version;
        (void)upload_data;
        (void)con_cls;
        if (s->authorization) {
                const char *got = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                              MHD_HTTP_HEADER_AUTHORIZATION);
                size_t want = strlen(s->authorization);

                /* Constant time in the token: the length is not secret. */
                if (!got || strlen(got) != want || CRYPTO_memcmp(got, s->authorization, want))
                        return reply(c, MHD_HTTP_UNAUTHORIZED, "a bearer token is required\n", NULL,
                                     "Bearer realm=\"metrics\"");
        }
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
                return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n", "GET, HEAD",
                             NULL);
        /* A GET with a body: answering on the first call tells libmicrohttpd not to read it
         * (it closes the connection after the answer). */
        *upload_data_size = 0;
        if (strcmp(url, "/metrics") != 0)
                return reply(c, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n",
                             NULL, NULL);
        s->collect(&page, s->userdata);
        r = MHD_create_response_from_buffer(page.len, page.text ? page.text : (void *)"",
                                            page.text ? MHD_RESPMEM_MUST_FREE
                                                      : MHD_RESPMEM_PERSISTENT);
        if (!r) {
                cs_mpage_free(&page);
                return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                "text/plain; version=0.0.4; charset=utf-8");
        ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r); /* frees page.text with the response */
        return ret;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
        char buf[512];

        (void)cls;
        vsnprintf(buf, sizeof(buf), fmt, ap);
        buf[strcspn(buf, "\n")] = '\0';
        log_debug("metrics: %s", buf);
}

/* A bound, listening socket for "host:port" ("[v6]:port"; an empty host: every address). */
static int listen_on(const char *addr, int *ret_port, cs_error **err)
{
        _cleanup_free_ char *host = NULL;
        const char *colon = strrchr(addr, ':');
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
                                  .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV };
        struct addrinfo *ai = NULL;
        struct sockaddr_storage sa;
        socklen_t sl = sizeof(sa);
        int fd, one = 1, r;

        if (!colon || !colon[1])
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "metrics address '%s' is not host:port", addr);
        host = cs_xasprintf("%.*s", (int)(colon - addr), addr);
        if (host[0] == '[' && host[strlen(host) - 1] == ']') {
                memmove(host, host + 1, strlen(host));
                host[strlen(host) - 1] = '\0';
        }
        r = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai);
        if (r != 0)
                return cs_error_set(err, GRPC_STATUS_INVALID_ARGUMENT,
                                    "metrics address '%s': %s (a numeric host:port)", addr,
                                    gai_strerror(r));
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
                r = errno;
                if (fd >= 0)
                        close(fd);
                freeaddrinfo(ai);
                return cs_error_errno(err, r, "metrics: cannot listen on %s", addr);
        }
        freeaddrinfo(ai);
        *ret_port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                   : ((struct sockaddr_in *)&sa)->sin_port);
        return fd;
}

cs_metrics_server *cs_metrics_server_start(const char *listen, const char *token,
                                           cs_metrics_collect_fn collect, void *userdata,
                                           cs_error **err)
{
        cs_metrics_server *s = cs_xcalloc(1, sizeof(*s));

        s->authorization = token ? cs_xasprintf("Bearer %s", token) : NULL;
        s->collect = collect;
        s->userdata = userdata;
        s->fd = listen_on(listen, &s->port, err);
        if (s->fd < 0) {
                free(s->authorization);
                free(s);
                return NULL;
        }
        s->mhd = MHD_start_daemon(
                MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC, 0, NULL, NULL,
                on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET,
                s->fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_MAX_CONNECTIONS,
                MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)METRICS_MAX_PER_IP,
                MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)METRICS_MEMORY_PER_CONN,
                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_IDLE_TIMEOUT_S, MHD_OPTION_END);
        if (!s->mhd) {
                close(s->fd);
                free(s->authorization);
                free(s);
                cs_error_set(err, GRPC_STATUS_INTERNAL,
                             "metrics: cannot start the HTTP server on %s", listen);
                return NULL;
        }
        return s;
}

int cs_metrics_server_port(const cs_metrics_server *s)
{
        return s->port;
}

void cs_metrics_server_stop(cs_metrics_server *s)
{
        if (!s)
                return;
        /* Quiesced first: libmicrohttpd then leaves the listening socket to us, and we close
         * what we opened, once. */
        MHD_quiesce_daemon(s->mhd);
        MHD_stop_daemon(s->mhd);
        close(s->fd);
        if (s->authorization)
                explicit_bzero(s->authorization, strlen(s->authorization));
        free(s->authorization);
        free(s);
}
