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
