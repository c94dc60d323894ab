/* Shutdown signals, handled synchronously by the main thread. */
#pragma once

#include <signal.h>

/* Blocks SIGINT and SIGTERM (and ignores SIGPIPE) in the calling thread. Call it first in
 * main, before any thread starts, so that every thread inherits the mask and only the main
 * thread, in cs_signals_wait(), ever receives them. */
void cs_signals_block(void);

/* Waits for SIGINT or SIGTERM and returns its number. */
int cs_signals_wait(void);
