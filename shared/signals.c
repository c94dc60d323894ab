#include "signals.h"

#include <pthread.h>

static void shutdown_set(sigset_t *set)
{
        sigemptyset(set);
        sigaddset(set, SIGINT);
        sigaddset(set, SIGTERM);
}

void cs_signals_block(void)
{
        sigset_t set;

        /* A shell starts background jobs with SIGINT ignored; an ignored signal is discarded
         * even while blocked, so sigwait() would never see it. Restore the default first. */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        shutdown_set(&set);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        signal(SIGPIPE, SIG_IGN);
}

int cs_signals_wait(void)
{
        sigset_t set;
        int sig = 0;

        shutdown_set(&set);
        while (sigwait(&set, &sig) != 0)
                ;
        return sig;
}
