/* The /metrics endpoint: a small HTTP/1.1 server (libmicrohttpd, one internal thread) that
 * answers GET and HEAD /metrics with the page a collector writes at scrape time, 404 for other
 * paths, 405 for other methods. Bounded: connections at once, memory per connection (larger
 * request headers are refused by libmicrohttpd), an idle timeout for slow clients; one scrape
 * at a time runs the collector. Library code: errors come back as cs_error. */
#pragma once

#include "error.h"
#include "metrics.h"

typedef struct cs_metrics_server cs_metrics_server;

/* Writes the whole page into p (which starts empty); runs on the server's thread. */
typedef void (*cs_metrics_collect_fn)(cs_mpage *p, void *userdata);

/* Listens on listen ("host:port", IPv4 or [IPv6]; port 0 picks a free one) and serves until
 * cs_metrics_server_stop. token (copied; NULL: none): every request must carry
 * "Authorization: Bearer TOKEN", or gets 401 whatever it asks. */
cs_metrics_server *cs_metrics_server_start(const char *listen, const char *token,
                                           cs_metrics_collect_fn collect, void *userdata,
                                           cs_error **err);
/* The port it listens on (useful after port 0). */
int cs_metrics_server_port(const cs_metrics_server *s);
/* Stops serving, closes every connection, frees s. NULL: nothing. */
void cs_metrics_server_stop(cs_metrics_server *s);
